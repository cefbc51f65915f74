package tokenize

import (
	"fmt"
	"sync/atomic"
)

// Packing limits of mergeTable: a slot holds the pair (two ids of
// mergeIDBits each) and rank+1 (mergeRankBits) in one uint64.
const (
	mergeIDBits   = 21
	mergeRankBits = 64 - 2*mergeIDBits
	// maxMergeID bounds every vocabulary id (2,097,151; the largest
	// current vocabularies hold ~262k tokens).
	maxMergeID = 1<<mergeIDBits - 1
	// maxMergeRank bounds the ranks (4,194,301), below noMerge.
	maxMergeRank = 1<<mergeRankBits - 3
	rankMask     = 1<<mergeRankBits - 1
	// noMerge is the rank of a pair that has no merge, above every rank;
	// noMerge+1 is rankMask, so a pair cache slot holds rank+1 for both.
	noMerge = int32(rankMask - 1)
)

// mergeTable maps a pair of adjacent token ids to its merge: an
// open-addressed table with linear probing, one uint64 a slot holding the
// packed pair and its rank, so a lookup touches one cache line of a table
// half the size of a Go map of the same merges (and no map directory). The
// merged token's id is found by rank, only when a merge is applied.
//
// In front of it sits a pair cache (cachedRank), a two-way set-associative
// table of the answers, merges and no-merges, last asked for: text uses a
// few thousand pairs over and over, and packed eight to a cache line they
// stay in the CPU's caches, where the table's slots, one line each, do not.
type mergeTable struct {
	slots []uint64 // pair<<mergeRankBits | rank+1; 0 is empty
	shift uint     // 64 - log2(len(slots))
	ids   []int32  // merged token id by rank; nil when idBase gives them
	// idBase, when not -1, is the id of rank 0's merge, and every rank r
	// merges into idBase+r (GPT-2-style vocabularies number their merged
	// tokens in merge order: Qwen's do), so no id is looked up.
	idBase int32
	// cache is the pair cache: pair<<mergeRankBits | rank+1 (noMerge
	// included), emptyPairSlot when empty, in sets of two slots (an even
	// slot and the next, in one cache line). Every goroutine shares it, so
	// it stays warm across requests: a slot is loaded and stored whole and
	// holds its full pair, so a slot replaced meanwhile, or a pair held
	// twice or in neither slot while another goroutine fills the set,
	// cannot give a wrong answer.
	cache      []atomic.Uint64
	cacheShift uint // 64 - log2(len(cache))
}

// pairCacheMaxBits bounds the pair cache at 2^16 slots of 8 bytes (512 KiB,
// within a core's L2 cache). On never-seen words (BenchmarkEncodeNewWords)
// it missed on ~6 % of lookups, where the 4,096 slots a goroutine had
// before missed on 20 %; 2^14 and 2^15 slots measured slower. Of the
// lookups a join makes in Qwen3 on made-up words, 5.4 % missed when it was
// direct-mapped and 2.3 % with sets of two (0.6 % with 2^20 slots: pairs
// never seen).
const pairCacheMaxBits = 16

const (
	// emptyPairSlot holds the pair (maxMergeID, maxMergeID), which no two
	// vocabulary ids make.
	emptyPairSlot = ^uint64(0)
)

// newMergeTable sizes a table for n merges: at least 1.5 slots a merge,
// so probes stay short (a miss ends at the first empty slot), and a pair
// cache of a quarter as many slots, at most 2^pairCacheMaxBits.
func newMergeTable(n int) *mergeTable {
	size, bits := 8, uint(3)
	for size < n+n/2 {
		size, bits = size*2, bits+1
	}
	cacheBits := min(max(bits, 5)-2, pairCacheMaxBits)
	t := &mergeTable{slots: make([]uint64, size), shift: 64 - bits, ids: make([]int32, n), idBase: -1,
		cache: make([]atomic.Uint64, 1<<cacheBits), cacheShift: 64 - cacheBits}
	for i := range t.cache {
		t.cache[i].Store(emptyPairSlot)
	}
	return t
}

func packPair(a, b int32) uint64 { return uint64(a)<<mergeIDBits | uint64(b) }

func (t *mergeTable) home(pair uint64) uint64 { return (pair * 0x9E3779B97F4A7C15) >> t.shift }

// add records the merge of a and b into id at rank; a later rank for the
// same pair replaces an earlier one, as the Rust library's merge map does.
// a, b and id are vocabulary ids, checked by buildBPE to be below maxMergeID.
func (t *mergeTable) add(a, b, id int, rank int) error {
	if rank > maxMergeRank {
		return fmt.Errorf("%w: more than %d merges", ErrUnsupported, maxMergeRank)
	}
	pair := packPair(int32(a), int32(b))
	mask := uint64(len(t.slots) - 1)
	for h := t.home(pair); ; h = (h + 1) & mask {
		if e := t.slots[h]; e == 0 || e>>mergeRankBits == pair {
			t.slots[h] = pair<<mergeRankBits | uint64(rank+1)
			t.ids[rank] = int32(id)
			return nil
		}
	}
}

// numberedInOrder sets idBase when every merge's id is its rank plus that
// of rank 0, and drops ids then. Called once, after the last add.
func (t *mergeTable) numberedInOrder() {
	if len(t.ids) == 0 {
		return
	}
	base := t.ids[0]
	for r, id := range t.ids {
		if id != base+int32(r) {
			return
		}
	}
	t.idBase, t.ids = base, nil
}

// merged returns the id of the token the merge of the given rank makes.
func (t *mergeTable) merged(rank int32) int32 {
	if t.idBase >= 0 {
		return t.idBase + rank
	}
	return t.ids[rank]
}

// rank returns the merge rank of the pair (a, b), noMerge when it has none.
// a and b are vocabulary ids, so below maxMergeID.
func (t *mergeTable) rank(a, b int32) int32 {
	pair := packPair(a, b)
	mask := uint64(len(t.slots) - 1)
	for h := t.home(pair); ; h = (h + 1) & mask {
		e := t.slots[h]
		if e == 0 {
			return noMerge
		}
		if e>>mergeRankBits == pair {
			return int32(e&rankMask) - 1
		}
	}
}

// cachedRank returns the pair cache's answer for (a, b): its rank,
// noMerge included, and true; false when the cache does not hold the pair
// (then ask fillRank). A pair may sit in either slot of its set, two
// slots of one cache line, both loaded. Small enough to inline, as a
// merge's hot path needs.
func (t *mergeTable) cachedRank(a, b int32) (int32, bool) {
	pair := packPair(a, b)
	i := (pair * 0x9E3779B97F4A7C15) >> t.cacheShift
	e0, e1 := t.cache[i&^1].Load(), t.cache[i|1].Load()
	if e0>>mergeRankBits == pair {
		e1 = e0
	}
	return int32(e1&rankMask) - 1, e1>>mergeRankBits == pair
}

// fillRank returns rank(a, b) and caches it in the first slot of the
// pair's set, moving the pair there to the second (whose pair leaves).
func (t *mergeTable) fillRank(a, b int32) int32 {
	r := t.rank(a, b)
	pair := packPair(a, b)
	i := (pair * 0x9E3779B97F4A7C15) >> t.cacheShift &^ 1
	set := t.cache[i : i+2 : i+2]
	set[1].Store(set[0].Load())
	set[0].Store(pair<<mergeRankBits | uint64(r+1))
	return r
}
