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

// Lookup batches: LookupRoute reads the holders of firstLookupBatch keys,
// then of twice as many at each step up to maxLookupBatch, locking each shard
// once per batch for all of the batch's keys it holds. A lock and unlock are
// two atomic read-modify-writes, each a full memory barrier, and were about
// 40 % of a lookup's time with a lock per key (docs/PERFORMANCE.md); a
// batch of 128 keys meets about 56 of the 64 shards. Batches start small so
// that a prompt with no cached prefix reads few keys past its first.
const (
	firstLookupBatch = 8
	maxLookupBatch   = 128 // below noKey: batch positions fit a uint8
)

// LookupRoute returns, for every replica of pool that holds keys[0], the
// length of its contiguous run of keys from block 0. It appends to dst[:0]
// and allocates nothing when dst has room for the pool's replicas. The walk
// stops at the first block no remaining replica holds; it reads keys in
// batches (firstLookupBatch), so it may have read a few past that block.
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
	var held, cpu [maxLookupBatch]uint64
walk:
	for from, size := 0, firstLookupBatch; from < len(keys); from, size = from+size, min(2*size, maxLookupBatch) {
		batch := keys[from:min(from+size, len(keys))]
		p.holders(batch, now, ix.ttlTicks, held[:len(batch)], cpu[:len(batch)])
		for j := range batch {
			i := from + j
			if i == 0 {
				active = held[j]
			}
			if out := active &^ held[j]; out != 0 {
				for s := out; s != 0; s &= s - 1 {
					runEnd[bits.TrailingZeros64(s)] = int32(i)
				}
				active &= held[j]
			}
			if active == 0 {
				break walk
			}
			n = i + 1
			if c := cpu[j] & active; c != 0 {
				for s := c; s != 0; s &= s - 1 {
					cpuOnly[bits.TrailingZeros64(s)]++
				}
			}
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

// noKey ends a shard's list of batch positions in holders.
const noKey = 255

// holders sets held[j] to who holds keys[j] now (any tier, incl.
// speculative) and cpuOnly[j] to those of them who hold it only in the CPU
// tier, for at most maxLookupBatch keys. It locks each shard once, for all
// of its keys: it first chains each shard's positions (first[s], then
// next[j]) and walks the shards present in shard order.
func (p *pool) holders(keys []BlockKey, now, ttl uint32, held, cpuOnly []uint64) {
	var present uint64 // shards with keys
	var first [numShards]uint8
	var next [maxLookupBatch]uint8
	for j, k := range keys {
		si := shardIndex(k)
		next[j] = noKey
		if present&(1<<si) != 0 {
			next[j] = first[si]
		}
		first[si] = uint8(j)
		present |= 1 << si
	}
	for sh := present; sh != 0; sh &= sh - 1 {
		si := bits.TrailingZeros64(sh)
		s := &p.shards[si]
		s.mu.Lock()
		for j := first[si]; j != noKey; j = next[j] {
			held[j], cpuOnly[j] = s.holdersLocked(keys[j], now, ttl)
		}
		s.mu.Unlock()
	}
}

// holdersLocked returns who holds k now (any tier, incl. speculative) and,
// of those, who holds it only in the CPU tier. The shard lock is held.
func (s *shard) holdersLocked(k BlockKey, now, ttl uint32) (held, cpuOnly uint64) {
	pe, ok := s.m.Get(uint64(k))
	if e := pe.entry(); ok && now-e.tick() <= ttl {
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
