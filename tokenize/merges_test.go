package tokenize

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestMergeTableEqualsMap fills a mergeTable and a Go map with the same
// random merges (duplicate pairs included: the later rank wins, as in the
// Rust library) and asks both for those pairs and for pairs without a merge.
func TestMergeTableEqualsMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	type pair struct{ a, b int32 }
	type merge struct{ rank, id int32 }
	const n = 20000
	want := map[pair]merge{}
	tab := newMergeTable(n)
	for rank := range n {
		p := pair{int32(rng.IntN(300)), int32(rng.IntN(300))}
		switch rank {
		case 0:
			p = pair{0, 0} // packs to 0, the empty slot's value
		case 1:
			p = pair{maxMergeID - 1, maxMergeID - 1}
		}
		id := int32(rng.IntN(maxMergeID))
		if err := tab.add(int(p.a), int(p.b), int(id), rank); err != nil {
			t.Fatal(err)
		}
		want[p] = merge{int32(rank), id}
	}
	for a := int32(0); a < 310; a++ {
		for b := int32(0); b < 310; b++ {
			m, ok := want[pair{a, b}]
			r := tab.rank(a, b)
			if !ok {
				if r != noMerge {
					t.Fatalf("(%d, %d): rank %d, want no merge", a, b, r)
				}
				continue
			}
			if r != m.rank || tab.merged(r) != m.id {
				t.Fatalf("(%d, %d): rank %d id %d, want %d %d", a, b, r, tab.merged(r), m.rank, m.id)
			}
		}
	}
	if r := tab.rank(maxMergeID-1, maxMergeID-1); r != want[pair{maxMergeID - 1, maxMergeID - 1}].rank {
		t.Errorf("largest ids: rank %d", r)
	}
}

// TestMergedIDsInRankOrderNeedNoTable: merged ids numbered in merge order
// are computed from the rank; any other numbering keeps the ids table.
func TestMergedIDsInRankOrderNeedNoTable(t *testing.T) {
	for _, swap := range []bool{false, true} {
		tab := newMergeTable(100)
		for rank := range 100 {
			id := 500 + rank
			if swap && rank >= 98 {
				id = 500 + 197 - rank // ranks 98 and 99 trade ids
			}
			if err := tab.add(rank, rank+1, id, rank); err != nil {
				t.Fatal(err)
			}
		}
		tab.numberedInOrder()
		if inOrder := tab.ids == nil; inOrder == swap {
			t.Errorf("swap %v: ids table dropped %v", swap, inOrder)
		}
		for rank := range int32(100) {
			want := 500 + rank
			if swap && rank >= 98 {
				want = 500 + 197 - rank
			}
			if got := tab.merged(tab.rank(rank, rank+1)); got != want {
				t.Errorf("swap %v: rank %d merges into %d, want %d", swap, rank, got, want)
			}
		}
	}
	// Both ways are in the golden tests: Qwen3 numbers its merges in
	// order, Llama 3 does not.
	if tok := loadTokenizer(t, "qwen3", true); tok.model.merges.ids != nil {
		t.Error("qwen3: merged ids not found in rank order")
	}
	if tok := loadTokenizer(t, "llama3_1", true); tok.model.merges.ids == nil {
		t.Error("llama3_1: merged ids found in rank order")
	}
}

func TestLoadRejectsVocabIDsTheMergeTableCannotHold(t *testing.T) {
	for _, id := range []string{"-1", "2097151", "3000000"} {
		js := `{"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":` + id + `},"merges":["a b"]}}`
		if _, err := Parse([]byte(js), nil, Options{}); !errors.Is(err, ErrUnsupported) {
			t.Errorf("vocab id %s: err %v, want ErrUnsupported", id, err)
		}
	}
	js := `{"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2097150},"merges":["a b"]}}`
	tok, err := Parse([]byte(js), nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := tok.Encode(strings.Repeat("ab", 3), false); len(got) != 3 || got[0] != 2097150 {
		t.Errorf("ids %v, want three of 2097150", got)
	}
}

// TestWordCacheFindsWordsAfterGrowing fills one cache past several slot
// table doublings and reads every word back with its ids.
func TestWordCacheFindsWordsAfterGrowing(t *testing.T) {
	c := newWordCache()
	const n = 20000 // ~312 a shard: five doublings from minShardSlots
	for i := range n {
		w := strings.Repeat("x", i%7) + string(rune('a'+i%26)) + strings.Repeat("y", i/26%40)
		c.put(w+"#"+string(rune(i)), c.hash(w+"#"+string(rune(i))), []int{i, i + 1})
	}
	for i := range n {
		w := strings.Repeat("x", i%7) + string(rune('a'+i%26)) + strings.Repeat("y", i/26%40) + "#" + string(rune(i))
		got, ok := c.appendGet(nil, w, c.hash(w))
		if !ok || len(got) != 2 || got[0] != i || got[1] != i+1 {
			t.Fatalf("word %d: %v %v", i, got, ok)
		}
	}
}

// Added tokens' ids are bounded as the vocabulary's are: the segment cache
// keeps ids as int32, and an id the bound admits comes back whole from it.
func TestLoadRejectsAddedTokenIDsOverTheBound(t *testing.T) {
	added := func(id string) string {
		return `{"added_tokens":[{"id":` + id + `,"content":"<x>","special":true}],` +
			`"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["a b"]}}`
	}
	for _, id := range []string{"2097151", "4294967296"} {
		if _, err := Parse([]byte(added(id)), nil, Options{}); !errors.Is(err, ErrUnsupported) {
			t.Errorf("added token id %s: err %v, want ErrUnsupported", id, err)
		}
	}
	tok, err := Parse([]byte(added("2097150")), nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	// The text after the added token is a cacheable segment; ask twice so
	// the second answer comes from the segment cache.
	text := "<x>" + strings.Repeat("ab", 40)
	for range 2 {
		if got := tok.Encode(text, false); len(got) != 41 || got[0] != 2097150 || got[1] != 2 {
			t.Fatalf("ids %v, want 2097150 then forty 2s", got)
		}
	}
}

// TestPairCacheSetHoldsTwoPairs: two pairs of one set are both cached; a
// third pushes out the one filled first, and every answer is the table's.
func TestPairCacheSetHoldsTwoPairs(t *testing.T) {
	tab := newMergeTable(1000)
	for rank := range 1000 {
		if err := tab.add(rank%40, rank/40, 5000+rank, rank); err != nil {
			t.Fatal(err)
		}
	}
	set := func(a, b int32) uint64 { return (packPair(a, b) * 0x9E3779B97F4A7C15) >> tab.cacheShift >> 1 }
	// Three pairs of one set, some with merges, some without.
	var same [][2]int32
	for a := int32(0); a < 60 && len(same) < 3; a++ {
		for b := int32(0); b < 60 && len(same) < 3; b++ {
			if len(same) == 0 || set(a, b) == set(same[0][0], same[0][1]) {
				same = append(same, [2]int32{a, b})
			}
		}
	}
	if len(same) < 3 {
		t.Fatal("no three pairs share a set")
	}
	cached := func(p [2]int32) bool {
		r, ok := tab.cachedRank(p[0], p[1])
		if ok && r != tab.rank(p[0], p[1]) {
			t.Fatalf("pair %v: cached rank %d, table %d", p, r, tab.rank(p[0], p[1]))
		}
		return ok
	}
	for i, p := range same {
		if cached(p) {
			t.Fatalf("pair %v cached before it was asked for", p)
		}
		if r := tab.fillRank(p[0], p[1]); r != tab.rank(p[0], p[1]) {
			t.Fatalf("pair %v: fillRank %d, table %d", p, r, tab.rank(p[0], p[1]))
		}
		for j, q := range same[:i+1] {
			if want := j >= i-1; cached(q) != want {
				t.Fatalf("after filling %d pairs of a set, pair %d cached: %v, want %v", i+1, j+1, !want, want)
			}
		}
	}
}
