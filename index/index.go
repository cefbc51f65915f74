// Package index is kvroute's CacheIndex: for each pool (a model served by a set
// of vLLM replicas sharing one block-key space), which replicas hold which KV
// blocks, in which tier, and how loaded each replica is.
//
// It is pure domain code: block keys are opaque 64-bit values and replicas are
// small integers. Lookups and writes lock one shard per key, briefly; writes touch one shard
// at a time. Memory is bounded by a TTL on entries not refreshed and a hard cap
// on entries, least recently refreshed evicted first.
package index

import (
	"context"
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvroute/kvroute/internal/engine"
)

// BlockKey is one full KV block's 64-bit key (vLLM's event hash in engine
// mode, kvroute's chained key in tokens mode).
type BlockKey uint64

// PoolID names a pool inside one Index.
type PoolID uint16

// ReplicaID is a replica's number inside its pool, below MaxReplicas. A vLLM
// server with data-parallel ranks has one ReplicaID per rank.
type ReplicaID uint8

// MaxReplicas is the most replicas (ranks) one pool holds: holder sets are
// 64-bit (engine.MaxRanks).
const MaxReplicas = engine.MaxRanks

// Replica identifies one replica (rank) of one pool. Gen tells the
// occupants of a reused ReplicaID apart: a handle of a removed replica (held
// by a decision still in flight, or a subscriber stopping) names a
// generation the slot no longer has, and every write through it is ignored.
type Replica struct {
	Pool PoolID
	ID   ReplicaID
	Gen  uint32
}

// Tier is where a replica holds a block.
type Tier uint8

// Tiers. GPU blocks are reused directly; CPU-offloaded blocks must be loaded
// back first, so they count for less in LookupRoute.
const (
	TierGPU Tier = iota
	TierCPU
)

// String names the tier for logs.
func (t Tier) String() string {
	if t == TierCPU {
		return "cpu"
	}
	return "gpu"
}

// Options configures an Index. Values are taken as given: the defaults live
// in package config, which fills them (docs/CONFIG.md, index.*).
type Options struct {
	// TTL drops entries not refreshed by a Store for this long; must be positive.
	TTL time.Duration
	// MaxEntries caps the entries held across all pools; must be positive:
	// block entries, speculative entries and aliases kept for the index
	// (AccountAliases). Enforced per block as entries are added.
	MaxEntries int
	// CPUTierWeight is what a CPU-only block counts for in Match.Weighted (0..1).
	CPUTierWeight float64
	// SpeculativeTTL is how long StoreSpeculative entries live; 0 disables them.
	SpeculativeTTL time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Registerer receives the index metrics; nil registers none.
	Registerer prometheus.Registerer
}

// ErrTooManyReplicas is returned by AddReplica when a pool is full.
var ErrTooManyReplicas = fmt.Errorf("index: pool already has %d replicas", MaxReplicas)

// tick is the index's clock unit for freshness: 100 ms since the index started.
const tick = 100 * time.Millisecond

// Index is the CacheIndex. All methods are safe for concurrent use.
type Index struct {
	opts        Options
	now         func() time.Time
	epoch       time.Time
	ttlTicks    uint32
	specTicks   uint32
	maxEntries  int64
	entries     atomic.Int64 // counted toward maxEntries: block + speculative entries + aliases
	aliases     atomic.Int64 // of which aliases (AccountAliases)
	evictSignal chan struct{}
	evictMu     sync.Mutex // one eviction pass at a time

	poolsMu sync.Mutex // serialises AddPool
	pools   atomic.Pointer[[]*pool]
	metrics *metrics
	onEvict atomic.Pointer[func(PoolID, *Evicted)] // OnEvict
	// loadHook, when set, hears of every load or health update (SetLoadHook).
	loadHook atomic.Pointer[func(PoolID)]
}

// New builds an empty Index. Options out of range are a programming error
// (config validates the values it passes) and panic: the index must always
// be bounded.
func New(opts Options) *Index {
	switch {
	case opts.TTL <= 0:
		panic(fmt.Sprintf("index.New: TTL %s must be positive", opts.TTL))
	case opts.MaxEntries <= 0:
		panic(fmt.Sprintf("index.New: MaxEntries %d must be positive", opts.MaxEntries))
	case opts.CPUTierWeight < 0 || opts.CPUTierWeight > 1:
		panic(fmt.Sprintf("index.New: CPUTierWeight %g is not within 0..1", opts.CPUTierWeight))
	case opts.SpeculativeTTL < 0:
		panic(fmt.Sprintf("index.New: SpeculativeTTL %s is negative", opts.SpeculativeTTL))
	}
	specTicks := uint32(0) // speculative entries disabled
	if opts.SpeculativeTTL > 0 {
		specTicks = uint32(max(1, opts.SpeculativeTTL/tick))
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	ix := &Index{
		opts:        opts,
		now:         now,
		epoch:       now(),
		ttlTicks:    uint32(max(1, opts.TTL/tick)),
		specTicks:   specTicks,
		maxEntries:  int64(opts.MaxEntries),
		evictSignal: make(chan struct{}, 1),
	}
	ix.pools.Store(&[]*pool{})
	ix.metrics = newMetrics(ix, opts.Registerer)
	return ix
}

// Now is the index's clock (Options.Now, else time.Now).
func (ix *Index) Now() time.Time { return ix.now() }

// nowTick is the current time in ticks since the index started; never 0 so
// that a zero seen value is always stale.
func (ix *Index) nowTick() uint32 {
	d := ix.now().Sub(ix.epoch)
	if d < 0 {
		d = 0
	}
	return uint32(d/tick) + 1
}

// AddPool registers a pool by name, or returns the existing one's id.
func (ix *Index) AddPool(name string) (PoolID, error) {
	ix.poolsMu.Lock()
	defer ix.poolsMu.Unlock()
	old := *ix.pools.Load()
	for i, p := range old {
		if p.name == name {
			return PoolID(i), nil
		}
	}
	if len(old) >= 1<<16 {
		return 0, fmt.Errorf("index: too many pools")
	}
	p := newPool(name, ix.metrics)
	next := append(append([]*pool(nil), old...), p)
	ix.pools.Store(&next)
	return PoolID(len(next) - 1), nil
}

// PoolByName returns the id of a registered pool.
func (ix *Index) PoolByName(name string) (PoolID, bool) {
	for i, p := range *ix.pools.Load() {
		if p.name == name {
			return PoolID(i), true
		}
	}
	return 0, false
}

func (ix *Index) pool(id PoolID) *pool {
	ps := *ix.pools.Load()
	if int(id) >= len(ps) {
		return nil
	}
	return ps[id]
}

// AddReplica registers a replica (or DP rank) in a pool, or returns the
// existing one with that name.
func (ix *Index) AddReplica(pool PoolID, name string) (Replica, error) {
	p := ix.pool(pool)
	if p == nil {
		return Replica{}, fmt.Errorf("index: unknown pool %d", pool)
	}
	p.replicasMu.Lock()
	defer p.replicasMu.Unlock()
	free := -1
	for i := range p.replicas {
		rs := p.replicas[i].Load()
		if rs != nil && rs.name == name {
			return Replica{pool, ReplicaID(i), rs.gen}, nil
		}
		if rs == nil && free < 0 {
			free = i
		}
	}
	if free < 0 {
		return Replica{}, fmt.Errorf("%w: pool %q, replica %q", ErrTooManyReplicas, p.name, name)
	}
	rs := &replicaState{name: name, healthy: true, gen: p.gens[free]}
	p.replicas[free].Store(rs)
	return Replica{pool, ReplicaID(free), rs.gen}, nil
}

// RemoveReplica forgets a replica: its id is freed first (so no write lands
// on it any more), then its entries are cleared. A handle of another
// generation is ignored.
func (ix *Index) RemoveReplica(r Replica) {
	p := ix.pool(r.Pool)
	if p == nil || p.live(r) == nil {
		return
	}
	if p.retire(r) {
		ix.clearBit(p, r.ID)
	}
}

// retire frees r's slot for a new generation and reports whether r was
// live. It takes the replicas lock and releases it on every exit, a panic
// included.
func (p *pool) retire(r Replica) bool {
	p.replicasMu.Lock()
	defer p.replicasMu.Unlock()
	if p.live(r) == nil {
		return false
	}
	p.replicas[r.ID].Store(nil)
	p.gens[r.ID]++
	return true
}

// Run sweeps expired entries and enforces the entry cap until ctx is done.
// Block entries are swept every TTL/20 (at most 5 s); speculative entries,
// which every routed request writes and which live SpeculativeTTL (2 s by
// default), every SpeculativeTTL/2 when that is sooner. Swept at the block
// interval, the speculative tables held up to 3.5 times their live entries
// (2 s live, 5 s between sweeps): more memory, and at 32 ext_proc streams
// about 6 % more CPU a decision from the misses of their larger tables
// (docs/PERFORMANCE.md). A speculative sweep visits only those tables.
func (ix *Index) Run(ctx context.Context) {
	interval, specInterval := ix.sweepIntervals()
	t := time.NewTicker(specInterval)
	defer t.Stop()
	next := time.Now().Add(interval)
	for {
		select {
		case <-ctx.Done():
			return
		case at := <-t.C:
			if at.Before(next) {
				ix.sweepAllSpeculative()
				break
			}
			ix.SweepExpired()
			next = at.Add(interval)
		case <-ix.evictSignal:
		}
		ix.enforceCap(ix.maxEntries)
	}
}

// sweepIntervals are Run's intervals between sweeps of every table and
// between sweeps of the speculative tables alone.
func (ix *Index) sweepIntervals() (all, spec time.Duration) {
	all = min(max(ix.opts.TTL/20, tick), 5*time.Second)
	spec = all
	if ix.specTicks > 0 {
		spec = min(all, max(ix.opts.SpeculativeTTL/2, tick))
	}
	return all, spec
}

// Entries returns the number of block entries in a pool.
func (ix *Index) Entries(pool PoolID) int64 {
	p := ix.pool(pool)
	if p == nil {
		return 0
	}
	return p.entries.Load()
}

// TotalEntries returns the entries counted toward Options.MaxEntries across
// all pools: block entries, speculative entries and accounted aliases.
func (ix *Index) TotalEntries() int64 { return ix.entries.Load() }

// forEachBit calls f for every set bit of s, lowest first.
func forEachBit(s uint64, f func(ReplicaID)) {
	for s != 0 {
		i := bits.TrailingZeros64(s)
		f(ReplicaID(i))
		s &= s - 1
	}
}
