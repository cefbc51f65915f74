package server

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"github.com/kvroute/kvroute/blockhash"
	"github.com/kvroute/kvroute/config"
	"github.com/kvroute/kvroute/extproc"
	"github.com/kvroute/kvroute/index"
)

// poolParts are what a pool needs beyond its config: its tokenizer and chat
// renderer (nil: route by load) and its block size source.
type poolParts struct {
	tokenizer extproc.Tokenizer
	chat      extproc.ChatRenderer
	blockSize func() int
}

// buildRouter turns the config's pools into the router's view: one endpoint
// per replica DP rank, found in the index by its RankName.
func buildRouter(cfg *config.Config, ix *index.Index, parts map[string]poolParts) (*extproc.Router, error) {
	var pools []extproc.PoolConfig
	for _, p := range cfg.Pools {
		pid, ok := ix.PoolByName(p.Name)
		if !ok {
			return nil, fmt.Errorf("pool %s is not in the index", p.Name)
		}
		byName := map[string]index.Replica{}
		for _, st := range ix.Replicas(pid) {
			byName[st.Name] = st.Replica
		}
		pc := extproc.PoolConfig{
			Name: p.Name, ID: pid, Models: p.Models, LoRAAdapters: p.LoRAAdapters,
			EngineKeys: p.IsEngineKeys(), Seed: p.Hash.Seed,
		}
		if pc.EngineKeys {
			algo, err := blockhash.ParseAlgorithm(p.Hash.Algorithm)
			if err != nil {
				return nil, fmt.Errorf("pool %s: %w", p.Name, err)
			}
			pc.Algorithm = algo
		}
		pp := parts[p.Name]
		pc.Tokenizer, pc.Chat = pp.tokenizer, pp.chat
		pc.BlockSize = pp.blockSize
		if pc.BlockSize == nil {
			bs := p.BlockSize
			pc.BlockSize = func() int { return bs }
		}
		for _, r := range p.Replicas {
			for rank := 0; rank < r.DataParallelSize; rank++ {
				rep, ok := byName[r.RankName(rank)]
				if !ok {
					return nil, fmt.Errorf("pool %s: replica %s is not in the index", p.Name, r.RankName(rank))
				}
				pc.Endpoints = append(pc.Endpoints, extproc.Endpoint{
					Replica: rep, Name: r.RankName(rank), Address: r.Address, DPRank: rank, DPSize: r.DataParallelSize,
				})
			}
		}
		pools = append(pools, pc)
	}
	return extproc.NewRouter(ix, pools, RouterOptions(cfg.Routing))
}

// RouterOptions maps the routing config onto the router's cost model.
func RouterOptions(r config.Routing) extproc.RouterOptions {
	return extproc.RouterOptions{
		PrefillTokensPerSecond: r.PrefillTokensPerSecond,
		ForeignRequestTokens:   r.ForeignRequestTokens,
		DecodeInterference:     r.DecodeInterference.Std().Seconds(),
		KVUsageCeiling:         r.KVUsageCeiling,
		KVFullPenalty:          r.KVFullPenalty.Std().Seconds(),
		PlacementSlack:         r.PlacementSlack,
		FailOpen:               r.FailOpenEnabled(),
	}
}

// serverTLS builds the ext_proc listener's TLS config (nil: plaintext); a
// client CA turns on mutual TLS.
func serverTLS(c config.TLS) (*tls.Config, error) {
	if c.CertFile == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("listen.tls: %w", err)
	}
	tc := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"}}
	if c.ClientCAFile != "" {
		pem, err := os.ReadFile(c.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("listen.tls.client_ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, errors.New("listen.tls.client_ca_file: no PEM certificates")
		}
		tc.ClientCAs, tc.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return tc, nil
}
