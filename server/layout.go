package server

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvroute/kvroute/blockhash"
	"github.com/kvroute/kvroute/config"
	"github.com/kvroute/kvroute/index"
	"github.com/kvroute/kvroute/ingest"
	"github.com/kvroute/kvroute/routing"
)

// layout is the pool → replica → DP-rank structure of a config, resolved
// once, when the index is built: every rank's name and index handle, in
// config order. buildRouter and ingestPools read it instead of walking the
// config and looking names up in the index.
type layout []poolLayout

// poolLayout is one pool and its ranks.
type poolLayout struct {
	cfg *config.Pool
	id  index.PoolID
	// keys owns the pool's block size (configured or learned) and key
	// builders; ingest and the router share it.
	keys  *blockhash.PoolKeys
	ranks []rankLayout
}

// rankLayout is one routable engine: data-parallel rank `rank` of a replica.
type rankLayout struct {
	cfg  *config.Replica
	rank int
	name string // cfg.RankName(rank): its name in the index, logs and metrics
	r    index.Replica
}

// buildIndex creates the index and registers every pool and replica rank of
// cfg in it, returning the resolved layout.
func buildIndex(cfg *config.Config, reg prometheus.Registerer) (*index.Index, layout, error) {
	ix := index.New(index.Options{
		TTL:            cfg.Index.TTL.Std(),
		MaxEntries:     cfg.Index.MaxEntries,
		CPUTierWeight:  cfg.Index.CPUTierWeight,
		SpeculativeTTL: cfg.Index.SpeculativeTTL.Std(),
		Registerer:     reg,
	})
	var lay layout
	for i := range cfg.Pools {
		p := &cfg.Pools[i]
		pid, err := ix.AddPool(p.Name)
		if err != nil {
			return nil, nil, fmt.Errorf("pools[%d]: %w", i, err)
		}
		keys, err := poolKeys(p)
		if err != nil {
			return nil, nil, fmt.Errorf("pools[%d]: %w", i, err)
		}
		pl := poolLayout{cfg: p, id: pid, keys: keys}
		for j := range p.Replicas {
			rc := &p.Replicas[j]
			for rank := range rc.DataParallelSize {
				name := rc.RankName(rank)
				r, err := ix.AddReplica(pid, name)
				if err != nil {
					return nil, nil, fmt.Errorf("pools[%d].replicas[%d]: %w", i, j, err)
				}
				pl.ranks = append(pl.ranks, rankLayout{cfg: rc, rank: rank, name: name, r: r})
			}
		}
		lay = append(lay, pl)
	}
	return ix, lay, nil
}

// poolKeys creates the pool's key owner. An algorithm name that does not
// parse is an error in engine-key mode; otherwise it only leaves the pool
// without a self-check (config validation rejects it anyway).
func poolKeys(p *config.Pool) (*blockhash.PoolKeys, error) {
	c := blockhash.PoolKeysConfig{Pool: p.Name, EngineKeys: p.IsEngineKeys(), Seed: p.Hash.Seed, BlockSize: p.BlockSize}
	algo, err := blockhash.ParseAlgorithm(p.Hash.Algorithm)
	switch {
	case err == nil:
		c.Algorithm = algo
	case c.EngineKeys:
		return nil, fmt.Errorf("pool %s: %w", p.Name, err)
	}
	return blockhash.NewPoolKeys(c)
}

// ingestSettings is the config's ingest section as ingest takes it.
func ingestSettings(c config.Ingest) ingest.Settings {
	return ingest.Settings{
		Bind:                c.Bind,
		QueueSize:           c.QueueSize,
		ReconnectMaxBackoff: c.ReconnectMaxBackoff.Std(),
		ScrapeInterval:      c.ScrapeInterval.Std(),
		HealthInterval:      c.HealthInterval.Std(),
		StallTimeout:        c.StallTimeout.Std(),
		ScrapeTimeout:       c.ScrapeTimeout.Std(),
		MaxMessageBytes:     int64(c.MaxMessageBytes),
	}
}

// ingestPools is the layout as ingest takes it.
func (lay layout) ingestPools() []ingest.Pool {
	out := make([]ingest.Pool, 0, len(lay))
	for _, pl := range lay {
		p := pl.cfg
		ip := ingest.Pool{Name: p.Name, ID: pl.id, Models: p.Models, LoRAAdapters: p.LoRAAdapters, Keys: pl.keys}
		for _, rl := range pl.ranks {
			ip.Ranks = append(ip.Ranks, rl.ingestRank())
		}
		out = append(out, ip)
	}
	return out
}

// ingestRank is the rank as ingest takes it.
func (rl rankLayout) ingestRank() ingest.Rank {
	rc := rl.cfg
	return ingest.Rank{
		Replica: rl.r, Name: rl.name, ReplicaName: rc.Name, Address: rc.Address,
		DPRank: rl.rank, DPSize: rc.DataParallelSize,
		Events: rc.Events, Replay: rc.Replay, Topic: rc.Topic, Metrics: rc.Metrics,
	}
}

// endpoint is the rank as the router takes it.
func (rl rankLayout) endpoint() routing.Endpoint {
	return routing.Endpoint{Replica: rl.r, Name: rl.name, Address: rl.cfg.Address, DPRank: rl.rank, DPSize: rl.cfg.DataParallelSize}
}
