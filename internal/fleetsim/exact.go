package fleetsim

import (
	"fmt"
	"time"

	"github.com/kvroute/kvroute/blockhash"
	"github.com/kvroute/kvroute/config"
	"github.com/kvroute/kvroute/index"
	"github.com/kvroute/kvroute/ingest"
)

// exactIndex is kvroute's own index of the engines' caches: its config
// parsed as `kvroute serve` parses it, the index on the virtual clock, one
// ingest Applier per engine fed every step's KV events. kvroute routes on
// it, and so do the anchors' policies (llm-d-sticky, dynamo-kv): every
// cache-aware policy sees the same truth.
type exactIndex struct {
	ix        *index.Index
	pool      index.PoolID
	replicas  []index.Replica // by engine
	appliers  []*ingest.Applier
	keys      *blockhash.PoolKeys
	blockSize int
	// clock is the virtual time the index and appliers read (set by the
	// owner before it routes or applies); the anchors keep it in now.
	clock func() time.Time
	now   time.Time
}

func newExactIndex(engines int, o Options) (*exactIndex, *config.Config, error) {
	cfg, err := config.Parse([]byte(kvrouteYAML(engines, o.BlockSize, o.RoutingYAML, o.ParityYAML, o.IndexTTL)))
	if err != nil {
		return nil, nil, fmt.Errorf("kvroute config: %w", err)
	}
	x := &exactIndex{clock: func() time.Time { return epoch }, now: epoch}
	now := func() time.Time { return x.clock() }
	x.ix = index.New(index.Options{
		TTL: cfg.Index.TTL.Std(), MaxEntries: cfg.Index.MaxEntries, CPUTierWeight: cfg.Index.CPUTierWeight,
		SpeculativeTTL: cfg.Index.SpeculativeTTL.Std(), Now: now,
	})
	pc := &cfg.Pools[0]
	if x.pool, err = x.ix.AddPool(pc.Name); err != nil {
		return nil, nil, err
	}
	algo, err := blockhash.ParseAlgorithm(pc.Hash.Algorithm)
	if err != nil {
		return nil, nil, err
	}
	// One key owner for the pool, shared by the appliers and the router, as
	// server wires them.
	x.keys, err = blockhash.NewPoolKeys(blockhash.PoolKeysConfig{Pool: pc.Name, EngineKeys: true,
		Algorithm: algo, Seed: pc.Hash.Seed, BlockSize: pc.BlockSize})
	if err != nil {
		return nil, nil, err
	}
	ip := ingest.Pool{Name: pc.Name, ID: x.pool, Models: pc.Models, Keys: x.keys}
	for _, rc := range pc.Replicas {
		r, err := x.ix.AddReplica(x.pool, rc.Name)
		if err != nil {
			return nil, nil, err
		}
		a, err := ingest.NewApplier(x.ix, ip, ingest.Rank{Replica: r, Name: rc.Name, ReplicaName: rc.Name, Address: rc.Address, DPSize: 1}, now)
		if err != nil {
			return nil, nil, err
		}
		x.replicas = append(x.replicas, r)
		x.appliers = append(x.appliers, a)
	}
	x.blockSize = pc.BlockSize
	return x, cfg, nil
}

// cachedBlocks writes into dst, per engine, how many leading blocks of the
// prompt the index says it holds (any tier), and returns the prompt's
// whole blocks.
func (x *exactIndex) cachedBlocks(tokens []int, dst []int, keys []index.BlockKey, matches []index.Match) (int, []index.BlockKey, []index.Match, error) {
	clear(dst)
	ks, err := x.keys.KeySet()
	if err != nil {
		return 0, keys, matches, err
	}
	var raw []uint64
	raw, err = blockhash.AppendEventKeys(ks.Engine, make([]uint64, 0, len(tokens)/ks.BlockSize), tokens, blockhash.RequestKeys{})
	if err != nil {
		return 0, keys, matches, err
	}
	keys = keys[:0]
	for _, v := range raw {
		keys = append(keys, index.BlockKey(v))
	}
	matches = x.ix.LookupRoute(x.pool, keys, matches[:0])
	for _, m := range matches {
		for e, r := range x.replicas {
			if r.ID == m.Replica {
				dst[e] = m.Blocks
			}
		}
	}
	return len(keys), keys, matches, nil
}
