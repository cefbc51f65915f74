package server

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvroute/kvroute/config"
	"github.com/kvroute/kvroute/index"
)

// layout is the pool → replica → DP-rank structure of a config, resolved
// once, when the index is built: every rank's name and index handle, in
// config order. buildRouter reads it instead of walking the config and
// looking names up in the index. (ingest.New still resolves its own view
// from the config; handing it this layout is the next step.)
type layout []poolLayout

// poolLayout is one pool and its ranks.
type poolLayout struct {
	cfg   *config.Pool
	id    index.PoolID
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
		pl := poolLayout{cfg: p, id: pid}
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
