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
	for i, k := range keys {
		held, cpu := p.holders(k, now, ix.ttlTicks)
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

// holders returns who holds k now (any tier, incl. speculative) and, of
// those, who holds it only in the CPU tier.
func (p *pool) holders(k BlockKey, now, ttl uint32) (held, cpuOnly uint64) {
	s := p.shardOf(k)
	s.mu.Lock()
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
	s.mu.Unlock()
	return held, cpuOnly
}
