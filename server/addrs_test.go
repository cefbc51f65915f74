package server

import "net"

// AdminAddr is the admin HTTP listener's address, nil when listen.admin is "".
func (s *Server) AdminAddr() net.Addr {
	if s.adminLn == nil {
		return nil
	}
	return s.adminLn.Addr()
}

// MeshAddr is the peer mesh's listener address ("" without a mesh).
func (s *Server) MeshAddr() string {
	if s.mesh == nil {
		return ""
	}
	return s.mesh.Addr()
}
