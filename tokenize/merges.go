package tokenize

import "fmt"

// Packing limits of mergeTable: a slot holds the pair (two ids of
// mergeIDBits each) and rank+1 (mergeRankBits) in one uint64.
const (
	mergeIDBits   = 21
	mergeRankBits = 64 - 2*mergeIDBits
	// maxMergeID bounds every vocabulary id (2,097,151; the largest
	// current vocabularies hold ~262k tokens).
	maxMergeID = 1<<mergeIDBits - 1
	// maxMergeRank bounds the ranks (4,194,301): rank+1 stays below
	// rankMask, which pairCache keeps for "no merge".
	maxMergeRank = 1<<mergeRankBits - 3
	rankMask     = 1<<mergeRankBits - 1
)

// mergeTable maps a pair of adjacent token ids to its merge: an
// open-addressed table with linear probing, one uint64 a slot holding the
// packed pair and its rank, so a lookup touches one cache line of a table
// half the size of a Go map of the same merges (and no map directory). The
// merged token's id is looked up by rank, only when a merge is applied.
type mergeTable struct {
	slots []uint64 // pair<<mergeRankBits | rank+1; 0 is empty
	shift uint     // 64 - log2(len(slots))
	ids   []int32  // merged token id by rank
}

// newMergeTable sizes a table for n merges: at least 1.5 slots a merge,
// so probes stay short (a miss ends at the first empty slot).
func newMergeTable(n int) *mergeTable {
	size, bits := 8, uint(3)
	for size < n+n/2 {
		size, bits = size*2, bits+1
	}
	return &mergeTable{slots: make([]uint64, size), shift: 64 - bits, ids: make([]int32, n)}
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
