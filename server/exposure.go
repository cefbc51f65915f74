package server

import "net"

// reachableBeyondHost reports whether a listener bound to addr accepts
// connections from other machines: an unspecified address (0.0.0.0, ::)
// or any address that is not loopback.
func reachableBeyondHost(addr net.Addr) bool {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok {
		return true
	}
	return !tcp.IP.IsLoopback()
}

// warnExposed logs, once at start, each listener other machines can reach
// in plaintext: anyone who reaches the ext_proc port can ask for routing
// decisions, and the admin port serves metrics and /debug/explain.
func (s *Server) warnExposed() {
	if !s.tls && reachableBeyondHost(s.grpcLn.Addr()) {
		s.log.Warn("ext_proc listener is reachable from other machines without TLS; set listen.tls (cert_file, key_file, client_ca_file for mTLS) or bind listen.extproc to 127.0.0.1 (docs/OPERATIONS.md)",
			"addr", s.grpcLn.Addr().String())
	}
	if s.adminLn != nil && reachableBeyondHost(s.adminLn.Addr()) {
		s.log.Warn("admin listener (metrics, /debug/*) is reachable from other machines without TLS or authentication; bind listen.admin to 127.0.0.1 or a private interface (docs/OPERATIONS.md)",
			"addr", s.adminLn.Addr().String())
	}
}
