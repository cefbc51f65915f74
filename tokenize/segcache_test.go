package tokenize

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/kvroute/kvroute/internal/testdata"
)

// withTinySegmentCache returns a copy of t whose segment cache takes every
// segment (even one byte long) within budgetBytes.
func withTinySegmentCache(t *Tokenizer, budgetBytes int) *Tokenizer {
	c := *t
	c.segments = newSegmentCache(budgetBytes)
	c.segments.minBytes = 1
	return &c
}

func segmentEntries(c *segmentCache) (entries, bytes int) {
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.RLock()
		entries += len(s.m)
		bytes += s.bytes
		s.mu.RUnlock()
	}
	return entries, bytes
}

// TestSegmentCacheKeepsGoldenIDs runs every golden case of the 8 real
// tokenizers, the chat goldens and the synthetic tokenizers (Metaspace
// prepend_scheme "first" reads the at-start flag) through the segment
// cache twice: the first pass fills it, the second is served from it.
func TestSegmentCacheKeepsGoldenIDs(t *testing.T) {
	type check struct {
		text    string
		special bool
		want    []int
	}
	run := func(t *testing.T, tok *Tokenizer, checks []check) {
		cached := withTinySegmentCache(tok, DefaultSegmentCacheBytes)
		for pass := range 2 {
			for _, c := range checks {
				if got := cached.Encode(c.text, c.special); !slices.Equal(got, c.want) {
					t.Fatalf("pass %d special=%v %q:\n got %v\nwant %v", pass, c.special, c.text, got, c.want)
				}
			}
			if n, _ := segmentEntries(cached.segments); n == 0 && pass == 0 {
				t.Fatal("segment cache unused")
			}
		}
	}
	for _, name := range tokenizerNames {
		t.Run(name, func(t *testing.T) {
			var checks []check
			for _, c := range readGolden(t, name) {
				checks = append(checks, check{c.Text, true, c.WithSpecial}, check{c.Text, false, c.NoSpecial})
			}
			run(t, loadTokenizer(t, name, true), checks)
		})
	}
	t.Run("chat", func(t *testing.T) {
		convs := testdata.ChatGoldens(t)
		byModel := map[string][]check{}
		for _, c := range convs {
			if c.Text != nil {
				byModel[c.Model] = append(byModel[c.Model], check{*c.Text, false, c.IDs})
			}
		}
		for model, checks := range byModel {
			run(t, loadTokenizer(t, model, false), checks)
		}
	})
	t.Run("synthetic", func(t *testing.T) {
		for _, g := range loadSynthetic(t) {
			var checks []check
			for _, c := range g.cases {
				checks = append(checks, check{c.Text, true, c.WithSpecial}, check{c.Text, false, c.NoSpecial})
			}
			run(t, g.tok, checks)
		}
	})
}

// TestSegmentCacheSeparatesStartOfText: the same segment text encodes
// differently at offset 0 under Metaspace prepend_scheme "first"; the
// cache keys on that.
func TestSegmentCacheSeparatesStartOfText(t *testing.T) {
	doc := strings.Replace(string(miniTokenizerJSON(t)), `"pre_tokenizer":null`,
		`"pre_tokenizer":{"type":"Metaspace","replacement":"a","prepend_scheme":"first","split":false}`, 1)
	tok, err := Parse([]byte(doc), nil, Options{IgnoreClassRules: true})
	if err != nil {
		t.Fatal(err)
	}
	cached := withTinySegmentCache(tok, 1<<20)
	for range 2 {
		for _, text := range []string{"b", "<s>b", "b</s>b"} {
			if got, want := cached.Encode(text, false), withoutSegmentCache(tok).Encode(text, false); !slices.Equal(got, want) {
				t.Fatalf("%q: cached %v, uncached %v", text, got, want)
			}
		}
	}
	if got := cached.Encode("b", false); !slices.Equal(got, []int{7}) { // "ab": the prepended replacement merged
		t.Errorf("at start: got %v want [7]", got)
	}
	if got := cached.Encode("<s>b", false); !slices.Equal(got, []int{1, 6}) {
		t.Errorf("after a special token: got %v want [1 6]", got)
	}
}

func TestSegmentCacheStaysBounded(t *testing.T) {
	tok := withTinySegmentCache(loadTokenizer(t, "qwen3", true), 64<<10)
	plain := withoutSegmentCache(tok)
	for i := range 2000 {
		text := fmt.Sprintf("<|im_start|>user\nmessage number %d with some words<|im_end|>", i%700)
		if got, want := tok.Encode(text, false), plain.Encode(text, false); !slices.Equal(got, want) {
			t.Fatalf("%q: cached %v, uncached %v", text, got, want)
		}
	}
	entries, bytes := segmentEntries(tok.segments)
	if entries == 0 || bytes > 64<<10 {
		t.Errorf("%d entries, %d bytes; bound %d", entries, bytes, 64<<10)
	}
	for i := range tok.segments.shards {
		s := &tok.segments.shards[i]
		live := 0
		for _, e := range s.ring {
			if e != nil {
				live++
				if s.m[e.key] != e {
					t.Fatalf("shard %d: ring entry %q not in the map", i, e.text)
				}
			}
		}
		if live != len(s.m) || s.bytes > tok.segments.shardBudget {
			t.Errorf("shard %d: %d in ring, %d in map, %d bytes of %d", i, live, len(s.m), s.bytes, tok.segments.shardBudget)
		}
	}
}

func TestSegmentCacheIsSafeForConcurrentUse(t *testing.T) {
	tok := withTinySegmentCache(loadTokenizer(t, "llama3_1", true), 32<<10) // small: evicts all the time
	encodeConcurrently(t, tok, readGolden(t, "llama3_1"), false)
}

func TestSegmentCacheOption(t *testing.T) {
	tj := miniTokenizerJSON(t)
	for _, c := range []struct {
		bytes int
		on    bool
	}{{0, true}, {1 << 20, true}, {-1, false}} {
		tok, err := Parse(tj, nil, Options{SegmentCacheBytes: c.bytes})
		if err != nil {
			t.Fatal(err)
		}
		if (tok.segments != nil) != c.on {
			t.Errorf("SegmentCacheBytes %d: cache on = %v", c.bytes, tok.segments != nil)
		}
	}
}

// TestSegmentCachePutOwnsTextAndIDs: put copies the segment's text and ids
// into one allocation (ids first, then the bytes) under the key get
// returned; the entry must equal the originals for every text length
// modulo 4, hit afterwards, and not change when the caller's buffers do.
func TestSegmentCachePutOwnsTextAndIDs(t *testing.T) {
	c := newSegmentCache(1 << 20)
	c.minBytes = 1
	for n := 1; n <= 9; n++ {
		for _, atStart := range []bool{false, true} {
			src := []byte(strings.Repeat("x", 100) + strings.Repeat("é", n)[:n]) // odd byte counts too
			wantText := string(src[100:])
			seg := unsafe.String(&src[100], len(src)-100) // aliases src, as a request's bytes would
			ids := []int{n, 1 << 20, 7, 2097150}[:1+n%4]
			want := slices.Clone(ids)
			if _, _, ok := c.get(seg, atStart); ok {
				t.Fatalf("n=%d: hit before put", n)
			}
			_, key, _ := c.get(seg, atStart)
			if key != c.key(seg, atStart) {
				t.Fatalf("n=%d: get returned key %x, want %x", n, key, c.key(seg, atStart))
			}
			c.put(key, seg, atStart, ids)
			for i := range src {
				src[i] = 'y'
			}
			ids[0] = -1
			got, _, ok := c.get(wantText, atStart)
			if !ok {
				t.Fatalf("n=%d atStart=%v: miss after put", n, atStart)
			}
			if len(got) != len(want) || cap(got) != len(want) {
				t.Fatalf("n=%d: ids len %d cap %d, want %d", n, len(got), cap(got), len(want))
			}
			for i := range want {
				if int(got[i]) != want[i] {
					t.Fatalf("n=%d: ids %v, want %v", n, got, want)
				}
			}
			e := c.shards[key%segmentShards].m[key]
			if e.text != wantText || e.cost != len(seg)+4*len(want)+segmentEntryOverhead {
				t.Fatalf("n=%d: entry text %q cost %d", n, e.text, e.cost)
			}
		}
	}
	if _, _, ok := c.get("never stored", false); ok {
		t.Fatal("hit for a segment never stored")
	}
}
