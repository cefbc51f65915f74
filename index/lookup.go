package index

import (
	"math/bits"
	"time"
)

// Match is one replica's cached prefix for a request.
type Match struct {
	Replica ReplicaID
	// Blocks is the number of contiguous blocks from block 0 the replica
	// holds in any tier (or speculatively): vLLM reuses only such a prefix.
	Blocks int
	// GPUBlocks counts those of Blocks held on GPU (speculative counts as GPU).
	GPUBlocks int
	// Weighted is GPUBlocks + CPUTierWeight × (Blocks − GPUBlocks).
	Weighted float64
}

// Lookup batches: LookupRoute locks the shards of firstLookupBatch keys,
// reads those keys' holders in order, then does the same for twice as many
// keys at each step up to maxLookupBatch. A lock and unlock are two atomic
// read-modify-writes, each a full memory barrier, and were about 40 % of a
// lookup's time with a lock per key (docs/PERFORMANCE.md); a batch of 128
// keys meets about 56 of the 64 shards. Batches start small so that a
// prompt with no cached prefix locks few shards. Within a batch the walk
// stops at the first block no remaining replica holds: reading each shard's
// keys together instead (one lock at a time) read on to the batch's end,
// about a third of a typical walk's keys, each a cache miss in a large
// index (a decision's user turn).
const (
	firstLookupBatch = 8
	maxLookupBatch   = 128
)

// LookupRoute returns, for every replica of pool that holds keys[0], the
// length of its contiguous run of keys from block 0. It appends to dst[:0]
// and allocates nothing when dst has room for the pool's replicas. The walk
// stops at the first block no remaining replica holds.
func (ix *Index) LookupRoute(pool PoolID, keys []BlockKey, dst []Match) []Match {
	dst = dst[:0]
	p := ix.pool(pool)
	if p == nil || len(keys) == 0 {
		return dst
	}
	start := time.Now()
	now := ix.nowTick()
	var runEnd [MaxReplicas]int32  // blocks held when the replica dropped out
	var cpuOnly [MaxReplicas]int32 // CPU-only blocks within the run
	var active uint64
	n := 0
	for from, size := 0, firstLookupBatch; from < len(keys); from, size = from+size, min(2*size, maxLookupBatch) {
		batch := keys[from:min(from+size, len(keys))]
		active, n = p.walkBatch(batch, from, now, ix.ttlTicks, active, n, &runEnd, &cpuOnly)
		if active == 0 {
			break
		}
	}
	for s := active; s != 0; s &= s - 1 {
		runEnd[bits.TrailingZeros64(s)] = int32(n)
	}
	var holders0 uint64
	for id := range runEnd {
		if runEnd[id] > 0 {
			holders0 |= 1 << id
		}
	}
	for s := holders0; s != 0; s &= s - 1 {
		id := bits.TrailingZeros64(s)
		blocks, cpu := int(runEnd[id]), int(cpuOnly[id])
		dst = append(dst, Match{
			Replica:   ReplicaID(id),
			Blocks:    blocks,
			GPUBlocks: blocks - cpu,
			Weighted:  float64(blocks-cpu) + ix.opts.CPUTierWeight*float64(cpu),
		})
	}
	p.m.observeLookup(len(dst) > 0, time.Since(start))
	return dst
}

// walkBatch goes on LookupRoute's walk over batch, whose first key is
// keys[from], from the replicas still active and the blocks n walked so
// far; it returns them updated. It holds the batch's shard locks and
// releases them on every exit, a panic included.
func (p *pool) walkBatch(batch []BlockKey, from int, now, ttl uint32, active uint64, n int, runEnd, cpuOnly *[MaxReplicas]int32) (uint64, int) {
	locked := p.lockShards(batch)
	defer p.unlockShards(locked)
	for j, k := range batch {
		held, cpu := p.shardOf(k).holdersLocked(k, now, ttl)
		i := from + j
		if i == 0 {
			active = held
		}
		if out := active &^ held; out != 0 {
			for s := out; s != 0; s &= s - 1 {
				runEnd[bits.TrailingZeros64(s)] = int32(i)
			}
			active &= held
		}
		if active == 0 {
			break
		}
		n = i + 1
		if c := cpu & active; c != 0 {
			for s := c; s != 0; s &= s - 1 {
				cpuOnly[bits.TrailingZeros64(s)]++
			}
		}
	}
	return active, n
}

// lockShards locks the shards of keys, in shard order, and returns them as
// a bit set for unlockShards. It is the only place that holds more than one
// shard lock at a time; every other holder takes one and releases it before
// the next, so the order cannot deadlock.
func (p *pool) lockShards(keys []BlockKey) uint64 {
	var set uint64
	for _, k := range keys {
		set |= 1 << shardIndex(k)
	}
	for sh := set; sh != 0; sh &= sh - 1 {
		p.shards[bits.TrailingZeros64(sh)].mu.Lock()
	}
	return set
}

// unlockShards unlocks the shards lockShards locked.
func (p *pool) unlockShards(set uint64) {
	for sh := set; sh != 0; sh &= sh - 1 {
		p.shards[bits.TrailingZeros64(sh)].mu.Unlock()
	}
}

// holdersLocked returns who holds k now (any tier, incl. speculative) and,
// of those, who holds it only in the CPU tier. The shard lock is held.
func (s *shard) holdersLocked(k BlockKey, now, ttl uint32) (held, cpuOnly uint64) {
	pe, ok := s.m.Get(uint64(k))
	if e := pe.entry(); ok && !stale(now, e.tick(), ttl) {
		held = e.held
		if e.seen&cpuFlag != 0 {
			ts := s.tiers[k]
			cpuOnly = ts.cpu &^ ts.gpu
		}
	}
	if s.spec.Len() > 0 {
		if pe, ok := s.spec.Get(uint64(k)); ok && pe.seen >= now { // seen: expiry tick
			se := pe.entry()
			held |= se.held
			cpuOnly &^= se.held
		}
	}
	return held, cpuOnly
}

// Holds reports whether r's replica holds block k in the index now: its
// entry lists r (any tier) and is fresh. Speculative holdings do not count.
func (ix *Index) Holds(r Replica, k BlockKey) bool {
	p := ix.pool(r.Pool)
	if p == nil || p.live(r) == nil {
		return false
	}
	return p.shardOf(k).holds(k, uint64(1)<<r.ID, ix.nowTick(), ix.ttlTicks)
}

// holds reports whether k's fresh entry has bit set. It takes the shard
// lock and releases it on every exit, a panic included.
func (s *shard) holds(k BlockKey, bit uint64, now, ttl uint32) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	pe, ok := s.m.Get(uint64(k))
	e := pe.entry()
	return ok && e.held&bit != 0 && !stale(now, e.tick(), ttl)
}
