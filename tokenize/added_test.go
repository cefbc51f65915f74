package tokenize

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestAddedSplitJumpMatchesByteScan checks that split's IndexByte jump (all
// tokens start with one byte) finds exactly what the byte-by-byte scan
// finds, with single_word, lstrip and rstrip tokens and near misses.
func TestAddedSplitJumpMatchesByteScan(t *testing.T) {
	tokens := []addedToken{
		{id: 1, content: "<|im_start|>"}, {id: 2, content: "<|im_end|>"},
		{id: 3, content: "<think>", singleWord: true}, {id: 4, content: "</think>", lstrip: true},
		{id: 5, content: "<tool_call>", rstrip: true}, {id: 6, content: "<|im"}, {id: 7, content: "<"},
	}
	jump := newAddedMatcher(tokens)
	if jump.only != '<' {
		t.Fatalf("only = %d, want '<'", jump.only)
	}
	scan := newAddedMatcher(tokens)
	scan.only = -1
	pieces := []string{"<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "<|im", "<|i", "<", "</", "a", " ", "\n", "word", "é", "<<"}
	rng := rand.New(rand.NewPCG(1, 2))
	type part struct{ start, end, id int }
	collect := func(m *addedMatcher, s string) (out []part) {
		m.split(s, func(start, end, id int) { out = append(out, part{start, end, id}) })
		return out
	}
	for range 20000 {
		var s []byte
		for range rng.IntN(12) {
			s = append(s, pieces[rng.IntN(len(pieces))]...)
		}
		if got, want := collect(jump, string(s)), collect(scan, string(s)); !slices.Equal(got, want) {
			t.Fatalf("split(%q) = %v, byte scan %v", s, got, want)
		}
	}
	if two := newAddedMatcher([]addedToken{{id: 1, content: "<a>"}, {id: 2, content: "[b]"}}); two.only != -1 {
		t.Fatalf("two first bytes: only = %d, want -1", two.only)
	}
}
