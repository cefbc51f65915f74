package tokenize

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/kvroute/kvroute/internal/testdata"
)

// tokenizerNames are the real tokenizers listed in testdata/README.md.
var tokenizerNames = testdata.TokenizerNames

// goldenCase is one entry of a tokenizer golden file.
type goldenCase = testdata.TokenizerCase

var (
	loadedMu sync.Mutex
	loaded   = map[string]*Tokenizer{}
)

// loadTokenizer loads (once per test binary) a real tokenizer, raw: with
// tokenizer.json's own post-processor, as the goldens were produced.
// Otherwise with transformers' class rules, as Load does: the raw
// tokenizer with the rules applied, which is how Parse builds it (loading
// once keeps the tests quick under -race).
func loadTokenizer(tb testing.TB, name string, raw bool) *Tokenizer {
	tb.Helper()
	dir := testdata.TokenizerDir(tb, name)
	key := fmt.Sprintf("%s/%v", name, raw)
	loadedMu.Lock()
	defer loadedMu.Unlock()
	if t, ok := loaded[key]; ok {
		return t
	}
	rawKey := fmt.Sprintf("%s/%v", name, true)
	base, ok := loaded[rawKey]
	if !ok {
		var err error
		if base, err = LoadWithOptions(dir, Options{IgnoreClassRules: true}); err != nil {
			tb.Fatalf("load %s: %v", name, err)
		}
		loaded[rawKey] = base
	}
	if raw {
		return base
	}
	t := *base
	t.segments = newSegmentCache(DefaultSegmentCacheBytes)
	if err := t.applyClassRules(); err != nil {
		tb.Fatalf("load %s: %v", name, err)
	}
	loaded[key] = &t
	return &t
}

func readGolden(tb testing.TB, name string) []goldenCase { return testdata.TokenizerGolden(tb, name) }

func TestEncodeMatchesGoldenIDs(t *testing.T) {
	for _, name := range tokenizerNames {
		t.Run(name, func(t *testing.T) {
			tok := loadTokenizer(t, name, true)
			fails := 0
			for i, c := range readGolden(t, name) {
				for _, special := range []bool{true, false} {
					want := c.NoSpecial
					if special {
						want = c.WithSpecial
					}
					got := tok.Encode(c.Text, special)
					if !slices.Equal(got, want) && fails < 5 {
						fails++
						t.Errorf("case %d special=%v %q:\n got %v\nwant %v", i, special, c.Text, got, want)
					}
				}
			}
		})
	}
}

func TestEncodeMatchesChatGolden(t *testing.T) {
	convs := testdata.ChatGoldens(t)
	for _, c := range convs {
		if c.Text == nil {
			continue // Jinja2 raised: no text to encode
		}
		t.Run(c.Model+"/"+c.Conv, func(t *testing.T) {
			tok := loadTokenizer(t, c.Model, false)
			if got := tok.Encode(*c.Text, false); !slices.Equal(got, c.IDs) {
				t.Errorf("%q:\n got %v\nwant %v", *c.Text, got, c.IDs)
			}
		})
	}
}
