package tokenize

import (
	"slices"
	"strings"
	"testing"

	"github.com/kvroute/kvroute/internal/testdata"
)

// mergeSmallReference is the plain form of mergeSmall, without the shared
// pair cache: the same scan, each pair looked up in the merges table
// itself. It is the oracle the faster mergeSmall is checked against.
func (b *bpeModel) mergeSmallReference(syms []int32) []int32 {
	if len(syms) < 2 {
		return syms
	}
	var ranks []int32
	for i := 1; i < len(syms); i++ {
		ranks = append(ranks, b.merges.rank(syms[i-1], syms[i]))
	}
	for {
		best, bestRank := -1, noMerge
		for i, r := range ranks {
			if r < bestRank {
				best, bestRank = i, r
			}
		}
		if best < 0 {
			return syms
		}
		syms[best] = b.merges.merged(bestRank)
		copy(syms[best+1:], syms[best+2:])
		syms = syms[:len(syms)-1]
		copy(ranks[best:], ranks[best+1:])
		ranks = ranks[:len(ranks)-1]
		if best < len(ranks) {
			ranks[best] = b.merges.rank(syms[best], syms[best+1])
		}
		if best > 0 {
			ranks[best-1] = b.merges.rank(syms[best-1], syms[best])
		}
	}
}

// mergeModels are the models the merge oracles run on: byte-level with
// merged ids in rank order (qwen3), byte-level with ids looked up by rank
// (llama3_1), and characters with byte fallback (gemma3).
var mergeModels = []string{"qwen3", "llama3_1", "gemma3"}

// checkMergeSmall merges w's symbols with mergeSmall, the reference, the
// heap merge and merge, and fails when they differ.
func checkMergeSmall(t *testing.T, b *bpeModel, name, w string) {
	syms := b.initialSymbols(w, nil)
	if len(syms) == 0 || len(syms) > maxScanSymbols {
		return // merge is never asked for an empty word; long ones go to the heap
	}
	st := getScratch()
	defer putScratch(st)
	got := slices.Clone(b.mergeSmall(slices.Clone(syms), st))
	want := b.mergeSmallReference(slices.Clone(syms))
	heap := b.mergeHeap(slices.Clone(syms), st)
	if !slices.Equal(got, want) || !slices.Equal(got, heap) {
		t.Fatalf("%s %q: mergeSmall %v, reference %v, heap %v", name, w, got, want, heap)
	}
	// merge itself, which takes byte-level words' first ranks from the
	// byte-pair table.
	ids := b.merge(nil, w, st)
	if !slices.EqualFunc(ids, want, func(id int, w int32) bool { return id == int(w) }) {
		t.Fatalf("%s %q: merge %v, reference %v", name, w, ids, want)
	}
}

// TestMergeSmallMatchesReference runs the oracles on made-up and English
// words, every word twice (the second time from a filled pair cache).
func TestMergeSmallMatchesReference(t *testing.T) {
	words := append(strings.Fields(testdata.MadeUpProse(1, 3000)), benchWords...)
	for _, name := range mergeModels {
		b := loadTokenizer(t, name, true).model
		for range 2 {
			for _, w := range words {
				checkMergeSmall(t, b, name, w)
				checkMergeSmall(t, b, name, " "+w)
			}
		}
	}
}

// FuzzMergeSmallMatchesReference runs the oracles on arbitrary words.
func FuzzMergeSmallMatchesReference(f *testing.F) {
	for _, w := range []string{"", "hello", " kranlomp", "ababababab", "中文字", "▁▁x", "\xff\xfe", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"} {
		f.Add(w)
	}
	models := make([]*bpeModel, len(mergeModels))
	for i, name := range mergeModels {
		models[i] = loadTokenizer(f, name, true).model
	}
	f.Fuzz(func(t *testing.T, w string) {
		for i, b := range models {
			checkMergeSmall(t, b, mergeModels[i], w)
		}
	})
}
