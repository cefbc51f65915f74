package server

import (
	"fmt"
	"strings"

	"github.com/cespare/xxhash/v2"

	"github.com/kvroute/kvroute/config"
	"github.com/kvroute/kvroute/mesh"
	"github.com/kvroute/kvroute/routing"
)

// panicMesh is kvroute_panics_total's component for the peer mesh.
const panicMesh = "peer_mesh"

// buildMesh joins the router to the peer mesh when peers.listen is set
// (nil otherwise).
func (s *Server) buildMesh(cfg *config.Config) (*mesh.Mesh, error) {
	p := cfg.Peers
	if p.Listen == "" {
		mesh.NewMetrics(s.reg) // the series exist, at zero, either way
		return nil, nil
	}
	m, err := mesh.New(mesh.Options{
		Listen: p.Listen, Addresses: p.Addresses, Layout: meshLayout(cfg),
		HeartbeatInterval: p.HeartbeatInterval.Std(), PeerTimeout: p.PeerTimeout.Std(), RequestTimeout: p.RequestTimeout.Std(),
		MaxRequests: p.MaxRequests, MaxMessageBytes: p.MaxMessageBytes, Logger: s.log, Registerer: s.reg,
	}, s.router)
	if err != nil {
		return nil, err
	}
	s.router.SetSharer(m)
	return m, nil
}

// meshLayout fingerprints what a peer's pool and endpoint names and block
// keys mean: each pool's name, key mode, block size and hash scheme. Peers
// with another fingerprint ignore each other's messages.
func meshLayout(cfg *config.Config) uint64 {
	var b strings.Builder
	for _, p := range cfg.Pools {
		seed := "<unset>"
		if p.Hash.Seed != nil {
			seed = *p.Hash.Seed
		}
		fmt.Fprintf(&b, "%q %q %d %q %q\n", p.Name, p.Keys, p.BlockSize, p.Hash.Algorithm, seed)
	}
	return xxhash.Sum64String(b.String())
}

var _ mesh.Books = (*routing.Router)(nil)

// closeMesh releases the mesh's socket when New fails after building it.
func (s *Server) closeMesh() {
	if s.mesh != nil {
		s.mesh.Close()
	}
}

// MeshAddr is the peer mesh's PUB address ("" without a mesh).
func (s *Server) MeshAddr() string {
	if s.mesh == nil {
		return ""
	}
	return s.mesh.Addr()
}
