package server

import (
	"fmt"
	"strings"

	"github.com/cespare/xxhash/v2"

	"github.com/kvroute/kvroute/config"
	"github.com/kvroute/kvroute/mesh"
	"github.com/kvroute/kvroute/routing"
)

// buildMesh joins the router to the peer mesh when peers.listen is set
// (nil otherwise).
func (s *Server) buildMesh(cfg *config.Config) (*mesh.Mesh, error) {
	p := cfg.Peers
	if p.Listen == "" {
		mesh.NewMetrics(s.reg) // the series exist, at zero, either way
		return nil, nil
	}
	o := mesh.Options{
		Listen: p.Listen, Addresses: p.Addresses, Insecure: p.Insecure, Layout: meshLayout(cfg),
		HeartbeatInterval: p.HeartbeatInterval.Std(), PeerTimeout: p.PeerTimeout.Std(), RequestTimeout: p.RequestTimeout.Std(),
		MaxRequests: p.MaxRequests, MaxMessageBytes: p.MaxMessageBytes, Pools: meshPools(cfg),
		Index: s.ix, SpeculativeTTL: cfg.Index.SpeculativeTTL.Std(), Logger: s.log, Registerer: s.reg,
	}
	if p.Insecure {
		s.log.Warn("peer mesh in plaintext (peers.insecure): anyone who reaches peers.listen reads every routed block key and can book work on this kvroute's engines",
			"listen", p.Listen)
	} else {
		t := p.TLS
		o.TLS = &mesh.TLSFiles{CertFile: resolve(s.baseDir, t.CertFile), KeyFile: resolve(s.baseDir, t.KeyFile), CAFile: resolve(s.baseDir, t.CAFile),
			AllowedNames: t.AllowedNames, ServerName: t.ServerName}
	}
	m, err := mesh.New(o, s.router)
	if err != nil {
		return nil, err
	}
	s.router.SetSharer(m)
	return m, nil
}

// meshPools bounds a peer's booking per pool: the tokens and the full
// blocks of the longest prompt this kvroute would route itself.
func meshPools(cfg *config.Config) map[string]mesh.PoolBounds {
	b := map[string]mesh.PoolBounds{}
	for _, p := range cfg.Pools {
		b[p.Name] = mesh.PoolBounds{MaxTokens: cfg.Routing.MaxPromptTokens, MaxKeys: cfg.Routing.MaxPromptTokens / max(1, p.BlockSize)}
	}
	return b
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
