package tokenize

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/kvroute/kvroute/internal/testdata"
)

// TestRecentWordsAreExact: a recent-word slot answers only for the word and
// the word cache it was filled from, and keeps nothing that does not fit.
func TestRecentWordsAreExact(t *testing.T) {
	if size := unsafe.Sizeof(recentWord{}); size != 48 {
		t.Errorf("recentWord is %d bytes, want 48", size)
	}
	key := func(w string) shortWord {
		k, ok := shortWordOf(w)
		if !ok {
			t.Fatalf("no key for %q", w)
		}
		return k
	}
	c1, c2 := newWordCache(), newWordCache()
	var sl recentWord
	if _, ok := sl.appendGet(nil, c1, key("a")); ok {
		t.Fatal("an empty slot answered")
	}
	sl.put(c1, key("hello"), []int{7, 8})
	if got, ok := sl.appendGet([]int{1}, c1, key("hello")); !ok || !slices.Equal(got, []int{1, 7, 8}) {
		t.Fatalf("hit = %v, %v", got, ok)
	}
	for _, miss := range []struct {
		c *wordCache
		w string
	}{{c2, "hello"}, {c1, "hell"}, {c1, "hellp"}, {c1, "hello "}, {c1, "jello"}, {c1, "hel\x00lo"}} {
		if _, ok := sl.appendGet(nil, miss.c, key(miss.w)); ok {
			t.Errorf("slot for %q answered %q (cache %d)", "hello", miss.w, miss.c.id)
		}
	}
	sl.put(c1, key("many"), []int{1, 2, 3, 4, 5, 6, 7})
	if _, ok := sl.appendGet(nil, c1, key("hello")); !ok {
		t.Error("ids that do not fit replaced the slot")
	}
	for _, w := range []string{"", strings.Repeat("x", recentWordBytes+1)} {
		if _, ok := shortWordOf(w); ok {
			t.Errorf("a key for a word of %d bytes", len(w))
		}
	}
}

// TestShortWordKeysAreExact: two words of at most recentWordBytes bytes
// have equal keys only when they are equal — every pair of words of every
// length up to it over a small alphabet, and random ones over all bytes.
func TestShortWordKeysAreExact(t *testing.T) {
	seen := map[shortWord]string{}
	add := func(w string) {
		k, ok := shortWordOf(w)
		if !ok {
			t.Fatalf("no key for %q", w)
		}
		if prev, dup := seen[k]; dup && prev != w {
			t.Fatalf("%q and %q share a key", prev, w)
		}
		seen[k] = w
	}
	var gen func(prefix string, n int)
	gen = func(prefix string, n int) {
		if len(prefix) == n {
			add(prefix)
			return
		}
		for _, c := range "ab" {
			gen(prefix+string(c), n)
		}
	}
	for n := 1; n <= recentWordBytes; n++ {
		gen("", n)
	}
	r := rand.New(rand.NewPCG(7, 8))
	for range 200000 {
		b := make([]byte, 1+r.IntN(recentWordBytes))
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		add(string(b))
	}
}

// TestEncodeAgreesWithAndWithoutRecentWords: encoding through a scratch
// whose recent words are filled gives the ids of a fresh tokenizer.
func TestEncodeAgreesWithAndWithoutRecentWords(t *testing.T) {
	tok, err := Load(testdata.TokenizerDir(t, "qwen3")) // its own: the test replaces its word cache
	if err != nil {
		t.Fatal(err)
	}
	text := "The cache holds the words the cache saw; the words repeat, and repeat again: 1234 ünïcödé words."
	first := tok.Encode(text, false)
	for range 3 {
		if again := tok.Encode(text, false); !slices.Equal(again, first) {
			t.Fatalf("warm encode %v, cold %v", again, first)
		}
	}
	tok.model.cache = newWordCache() // a replaced cache: recent words must not answer for it
	if again := tok.Encode(text, false); !slices.Equal(again, first) {
		t.Fatalf("after the cache was replaced %v, want %v", again, first)
	}
}

// TestWordCachePrefetchAnyHash: prefetch takes any hash, on an empty cache
// and on a filled one, and changes nothing a lookup returns.
func TestWordCachePrefetchAnyHash(t *testing.T) {
	c := newWordCache()
	for _, h := range []uint64{0, 1, ^uint64(0), 0x9E3779B97F4A7C15} {
		c.prefetch(h)
	}
	words := []string{"alpha", "beta", "gamma", "delta"}
	for i, w := range words {
		c.put(w, c.hash(w), []int{i, i + 1})
	}
	for i, w := range words {
		c.prefetch(c.hash(w))
		c.prefetch(c.hash(w) ^ 0x5555)
		got, ok := c.appendGet(nil, w, c.hash(w))
		if !ok || len(got) != 2 || got[0] != i || got[1] != i+1 {
			t.Fatalf("%s: %v %v after prefetch", w, got, ok)
		}
	}
}

// Since the encoder caches a word as it merges it (appendGetOrMerge), a
// plain get and put are only the tests': they fill and read a cache with
// ids of their choosing.

// appendGet appends the cached ids of w (hashed to h) to dst; false when w
// is not cached.
func (c *wordCache) appendGet(dst []int, w string, h uint64) ([]int, bool) {
	s, h, tag := c.locate(h)
	s.mu.Lock()
	i, ok := s.find(w, h, tag)
	if ok {
		dst = s.appendIDs(dst, i)
	}
	s.mu.Unlock()
	return dst, ok
}

// put caches ids as the encoding of w (hashed to h, at most
// maxCachedWordBytes bytes).
func (c *wordCache) put(w string, h uint64, ids []int) {
	s, h, tag := c.locate(h)
	s.mu.Lock()
	defer s.mu.Unlock()
	if i, ok := s.find(w, h, tag); !ok {
		c.insert(s, w, h, tag, i, ids)
	}
}

// TestDoorkeeperAdmitsOnTheSecondSighting: the shared word cache merges a
// word it has not been asked for without caching it, caches it the second
// time, and answers the same ids all three times.
func TestDoorkeeperAdmitsOnTheSecondSighting(t *testing.T) {
	b := *loadTokenizer(t, "qwen3", true).model
	b.cache = newWordCache()
	st := getScratch()
	defer putScratch(st)
	cached := func() (n int) {
		for i := range b.cache.shards {
			n += b.cache.shards[i].n
		}
		return n
	}
	for _, w := range []string{" kranlomp", " hello", "zentwirl"} {
		h := b.cache.hash(w)
		want := b.merge(nil, w, st)
		before := cached()
		for sighting, wantCached := range []int{before, before + 1, before + 1} {
			got := b.cache.appendGetOrMerge(nil, w, h, &b, st)
			if !slices.Equal(got, want) {
				t.Fatalf("%q sighting %d: %v, want %v", w, sighting+1, got, want)
			}
			if n := cached(); n != wantCached {
				t.Fatalf("%q sighting %d: %d words cached, want %d", w, sighting+1, n, wantCached)
			}
		}
	}
}

// TestDoorkeeperClearsAtItsLimit: the limit-th first sighting clears every
// bit, so a word seen before the clear is a first sighting again.
func TestDoorkeeperClearsAtItsLimit(t *testing.T) {
	var d doorkeeper
	const limit = 8
	h := func(i uint64) uint64 { return i << (64 - doorBitsLog) } // bit i
	if d.admit(h(0), limit) || !d.admit(h(0), limit) {
		t.Fatal("bit 0: want a first sighting, then a second")
	}
	for i := uint64(1); i < limit-1; i++ {
		if d.admit(h(i), limit) {
			t.Fatalf("bit %d set before its first sighting", i)
		}
	}
	if !d.admit(h(0), limit) {
		t.Fatal("bit 0 cleared before the limit")
	}
	d.admit(h(limit-1), limit) // the limit-th: clears
	for i := range uint64(limit - 1) {
		if d.admit(h(i), limit) {
			t.Fatalf("bit %d still set after the clear", i)
		}
	}
	if got := d.marks.Load(); got != limit-1 {
		t.Fatalf("%d marks after the clear and %d first sightings, want %d", got, limit-1, limit-1)
	}
}
