package tokenize

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/kvroute/kvroute/internal/testdata"
)

// TestSyntheticTokenizersMatchRustLibrary covers components the eight real
// tokenizers do not use (Metaspace, Digits, Lowercase, Strip, NFKC/NFD,
// regex Replace, every Split behavior with and without invert, ByteLevel
// with its GPT-2 regex and prefix space, lstrip/rstrip/single_word and
// normalized added tokens, unk with and without fuse_unk). The files in
// testdata/synthetic are small hand-made tokenizer.json files; golden.json
// holds the ids the Hugging Face Rust library (npm tokenizers@0.23.2)
// produced for inputs.json with each of them.
func TestSyntheticTokenizersMatchRustLibrary(t *testing.T) {
	for name, g := range loadSynthetic(t) {
		t.Run(name, func(t *testing.T) {
			for _, c := range g.cases {
				if got := g.tok.Encode(c.Text, true); !slices.Equal(got, c.WithSpecial) {
					t.Errorf("%q with special:\n got %v\nwant %v", c.Text, got, c.WithSpecial)
				}
				if got := g.tok.Encode(c.Text, false); !slices.Equal(got, c.NoSpecial) {
					t.Errorf("%q:\n got %v\nwant %v", c.Text, got, c.NoSpecial)
				}
			}
		})
	}
}

// synthetic is one tokenizer of testdata/synthetic with the Rust library's
// ids for it.
type synthetic struct {
	tok   *Tokenizer
	cases []goldenCase
}

// loadSynthetic loads every tokenizer golden.json has cases for.
func loadSynthetic(t *testing.T) map[string]synthetic {
	t.Helper()
	dir := filepath.Join("testdata", "synthetic")
	raw, err := os.ReadFile(filepath.Join(dir, "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var golden map[string]struct {
		Cases []goldenCase `json:"cases"`
	}
	if err := json.Unmarshal(raw, &golden); err != nil {
		t.Fatal(err)
	}
	if len(golden) < 10 {
		t.Fatalf("golden.json has only %d tokenizers", len(golden))
	}
	out := make(map[string]synthetic, len(golden))
	for name, g := range golden {
		tok, err := LoadWithOptions(filepath.Join(dir, name+".json"), Options{IgnoreClassRules: true})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out[name] = synthetic{tok, g.Cases}
	}
	return out
}

// TestClassRulesAddBOSLikeTransformers: transformers rebuilds the
// post-processor of LlamaTokenizerFast/GemmaTokenizerFast from
// add_bos_token/add_eos_token, so deepseek_v3 (LlamaTokenizerFast,
// add_bos_token true, no BOS in tokenizer.json) gets BOS, while the others
// encode exactly as tokenizer.json says.
func TestClassRulesAddBOSLikeTransformers(t *testing.T) {
	for _, name := range tokenizerNames {
		t.Run(name, func(t *testing.T) {
			tok := loadTokenizer(t, name, false)
			cases := readGolden(t, name)
			for i, c := range cases {
				want := c.WithSpecial
				if name == "deepseek_v3" {
					want = append([]int{0}, c.NoSpecial...) // <｜begin▁of▁sentence｜>
				}
				if got := tok.Encode(c.Text, true); !slices.Equal(got, want) {
					t.Fatalf("case %d %q:\n got %v\nwant %v", i, c.Text, got, want)
				}
				if got := tok.Encode(c.Text, false); !slices.Equal(got, c.NoSpecial) {
					t.Fatalf("case %d %q without special tokens:\n got %v\nwant %v", i, c.Text, got, c.NoSpecial)
				}
			}
			wantRule := map[string]bool{"deepseek_v3": true, "gemma3": true, "llama2": true}[name]
			if name == "deepseek_v3" {
				// Load itself, not the test's derived copy.
				loaded, err := Load(testdata.TokenizerDir(t, name))
				if err != nil {
					t.Fatal(err)
				}
				if got, want := loaded.Encode(cases[5].Text, true), append([]int{0}, cases[5].NoSpecial...); !slices.Equal(got, want) {
					t.Errorf("Load: %q: got %v want %v", cases[5].Text, got, want)
				}
			}
			if (tok.ClassRule() != "") != wantRule {
				t.Errorf("ClassRule() = %q, want a rule: %v", tok.ClassRule(), wantRule)
			}
		})
	}
}

func TestClassRuleAddEOSAndNoBOS(t *testing.T) {
	tj := miniTokenizerJSON(t)
	for _, c := range []struct {
		cfg  string
		want []int
	}{
		{`{"tokenizer_class": "LlamaTokenizerFast", "bos_token": "<s>", "eos_token": {"content": "</s>"}, "add_eos_token": true}`, []int{1, 5, 2}},
		{`{"tokenizer_class": "GemmaTokenizer", "bos_token": "<s>", "add_bos_token": false}`, []int{5}},
		{`{"tokenizer_class": "Qwen2TokenizerFast", "bos_token": null, "add_bos_token": true}`, []int{1, 5}}, // no rule: tokenizer.json's template
	} {
		tok, err := Parse(tj, []byte(c.cfg), Options{})
		if err != nil {
			t.Fatalf("%s: %v", c.cfg, err)
		}
		if got := tok.Encode("a", true); !slices.Equal(got, c.want) {
			t.Errorf("%s: got %v want %v", c.cfg, got, c.want)
		}
	}
	if _, err := Parse(tj, []byte(`{"tokenizer_class": "LlamaTokenizerFast", "bos_token": "<nope>"}`), Options{}); err == nil {
		t.Error("unknown bos_token accepted")
	}
}

// miniTokenizerJSON is a tiny valid tokenizer.json: vocab <unk> <s> </s> a b ab.
func miniTokenizerJSON(t testing.TB) []byte {
	t.Helper()
	return []byte(`{"added_tokens":[{"id":1,"content":"<s>","special":true},{"id":2,"content":"</s>","special":true}],
"normalizer":null,"pre_tokenizer":null,
"post_processor":{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>","type_id":0}},{"Sequence":{"id":"A","type_id":0}}],
 "special_tokens":{"<s>":{"id":"<s>","ids":[1],"tokens":["<s>"]}}},
"model":{"type":"BPE","dropout":null,"unk_token":"<unk>","fuse_unk":true,"byte_fallback":false,
 "vocab":{"<unk>":0,"<s>":1,"</s>":2,"a":5,"b":6,"ab":7},"merges":["a b"]}}`)
}

func TestConfigFields(t *testing.T) {
	tok := loadTokenizer(t, "deepseek_v3", false)
	c := tok.Config()
	if c.TokenizerClass != "LlamaTokenizerFast" || c.BOSToken != "<｜begin▁of▁sentence｜>" || c.EOSToken != "<｜end▁of▁sentence｜>" ||
		c.PadToken != "<｜end▁of▁sentence｜>" || c.UnkToken != "" || c.AddBOSToken == nil || !*c.AddBOSToken || c.AddEOSToken == nil || *c.AddEOSToken {
		t.Errorf("deepseek_v3 config: %+v", c)
	}
	tpl, err := c.ChatTemplates()
	if err != nil || !strings.Contains(tpl["default"], "<｜Assistant｜>") {
		t.Errorf("chat template: %v %.80q", err, tpl["default"])
	}
	q := loadTokenizer(t, "qwen3", false).Config()
	if q.BOSToken != "" || q.EOSToken != "<|im_end|>" || q.TokenizerClass != "Qwen2Tokenizer" || q.AddEOSToken != nil {
		t.Errorf("qwen3 config: %+v", q)
	}
	if g := loadTokenizer(t, "gpt4o", false).Config(); len(g.ChatTemplate) != 0 || g.UnkToken != "<|endoftext|>" {
		t.Errorf("gpt4o config: %+v", g)
	}
	list, err := parseConfig([]byte(`{"chat_template":[{"name":"default","template":"A"},{"name":"tool_use","template":"B"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if m, err := list.ChatTemplates(); err != nil || m["default"] != "A" || m["tool_use"] != "B" {
		t.Errorf("template list: %v %v", m, err)
	}
}

func TestLoadRejectsUnsupportedComponents(t *testing.T) {
	base := string(miniTokenizerJSON(t))
	for _, c := range []struct{ from, to, want string }{
		{`"type":"BPE"`, `"type":"WordPiece"`, `model type "WordPiece"`},
		{`"pre_tokenizer":null`, `"pre_tokenizer":{"type":"Whitespace"}`, `pre_tokenizer type "Whitespace"`},
		{`"normalizer":null`, `"normalizer":{"type":"BertNormalizer"}`, `normalizer type "BertNormalizer"`},
		{`"post_processor":{"type":"TemplateProcessing"`, `"post_processor":{"type":"RobertaProcessing"`, `post_processor type "RobertaProcessing"`},
		{`"dropout":null`, `"dropout":0.1`, `dropout`},
		{`"dropout":null`, `"dropout":null,"continuing_subword_prefix":"##"`, `continuing_subword_prefix`},
		{`"pre_tokenizer":null`, `"pre_tokenizer":{"type":"Split","pattern":{"Regex":"a"},"behavior":"Bogus"}`, `Split behavior "Bogus"`},
		{`"pre_tokenizer":null`, `"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"ByteLevel"},{"type":"Digits"}]}`, `ByteLevel pre-tokenizer before`},
	} {
		doc := strings.Replace(base, c.from, c.to, 1)
		_, err := Parse([]byte(doc), nil, Options{})
		if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want ErrUnsupported naming %s", c.to, err, c.want)
		}
	}
	for _, bad := range []struct{ from, to string }{
		{`"merges":["a b"]`, `"merges":["a c"]`},
		{`"merges":["a b"]`, `"merges":["a b c"]`},
		{`"unk_token":"<unk>"`, `"unk_token":"<none>"`},
		{`"ids":[1]`, `"ids":[1]},"x":{`},
	} {
		if _, err := Parse([]byte(strings.Replace(base, bad.from, bad.to, 1)), nil, Options{}); err == nil {
			t.Errorf("%s accepted", bad.to)
		}
	}
}

func TestEncodeIsSafeForConcurrentUse(t *testing.T) {
	encodeConcurrently(t, loadTokenizer(t, "llama3_1", true), readGolden(t, "llama3_1"), true)
}

// encodeConcurrently encodes the golden cases from 8 goroutines at once,
// each in its own order, and reports any ids that differ from the golden.
func encodeConcurrently(t *testing.T, tok *Tokenizer, cases []goldenCase, special bool) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for g := range 8 {
		wg.Go(func() {
			for round := range 3 {
				for i := range cases {
					c := cases[(i+g*7+round)%len(cases)]
					want := c.NoSpecial
					if special {
						want = c.WithSpecial
					}
					if got := tok.Encode(c.Text, special); !slices.Equal(got, want) {
						errs <- fmt.Sprintf("goroutine %d: %q: got %v", g, c.Text, got)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

func TestWordCacheStaysBounded(t *testing.T) {
	base := loadTokenizer(t, "qwen3", true)
	// A copy with a small cache: the bound logic is the same at any size.
	model := *base.model
	model.cache = newWordCache()
	model.cache.shardWords = 16
	tok := withoutSegmentCache(base)
	tok.model = &model
	// Letters-only words of 21 bytes: each is one pre-tokenized word,
	// longer than the scratch's recent words hold, so every sighting asks
	// the shared cache. A batch of cacheShards words is written twice in a
	// row, so each word's second sighting comes about one doorkeeper mark
	// of its shard after its first, well before the filter clears (every
	// 2*shardWords marks): nearly every word is admitted, whatever the
	// hash seed. Batches are encoded one by one, below the size at which
	// Encode hands words to a helper goroutine.
	word := func(i int) string {
		var w [5]byte
		for j := range w {
			w[len(w)-1-j] = byte('a' + i%26)
			i /= 26
		}
		return " kvroutecachebound" + string(w[:])
	}
	var all strings.Builder
	words := 3 * cacheShards * model.cache.shardWords
	for start := 0; start < words; start += cacheShards {
		var batch strings.Builder
		for i := start; i < start+cacheShards; i++ {
			batch.WriteString(word(i))
		}
		text := batch.String() + batch.String()
		all.WriteString(text)
		if got, want := tok.Encode(text, false), base.Encode(text, false); !slices.Equal(got, want) {
			t.Fatalf("small-cache encoding of batch %d differs", start/cacheShards)
		}
	}
	total := 0
	for i := range model.cache.shards {
		s := &model.cache.shards[i]
		s.mu.Lock()
		if s.n > model.cache.shardWords {
			t.Errorf("shard %d holds %d words, bound %d", i, s.n, model.cache.shardWords)
		}
		total += s.n
		s.mu.Unlock()
	}
	if total == 0 {
		t.Error("cache unused")
	}
	if got, want := tok.Encode(all.String(), false), base.Encode(all.String(), false); !slices.Equal(got, want) {
		t.Error("cached encoding differs")
	}
}

func TestEncodeReadsInvalidUTF8AsReplacementCharacter(t *testing.T) {
	tok := loadTokenizer(t, "llama3_1", true)
	if got, want := tok.Encode("a\xffb", false), tok.Encode("a\uFFFDb", false); !slices.Equal(got, want) {
		t.Errorf("got %v want %v", got, want)
	}
}

// TestLongWordsUseTheHeapMerge checks the heap merge (words over
// maxScanSymbols symbols) against the scanning merge on every long word it
// can build.
func TestLongWordsUseTheHeapMerge(t *testing.T) {
	tok := loadTokenizer(t, "gemma3", true)
	for _, w := range []string{strings.Repeat("ab", 100), strings.Repeat("▁▁x", 40), strings.Repeat("hello▁world▁", 20), strings.Repeat("中文", 60)} {
		st := getScratch()
		syms := tok.model.initialSymbols(w, nil)
		if len(syms) <= maxScanSymbols {
			t.Fatalf("%.20q: %d symbols, not a long word", w, len(syms))
		}
		small := tok.model.mergeSmall(slices.Clone(syms), st)
		heap := tok.model.mergeHeap(slices.Clone(syms), st)
		putScratch(st)
		if !slices.Equal(small, heap) {
			t.Errorf("%.20q: scan %v heap %v", w, small, heap)
		}
	}
}

func FuzzParse(f *testing.F) {
	base := miniTokenizerJSON(f)
	f.Add(base, []byte(`{"tokenizer_class":"LlamaTokenizerFast","bos_token":"<s>","eos_token":"</s>","add_eos_token":true}`))
	f.Add([]byte(strings.Replace(string(base), `"pre_tokenizer":null`,
		`"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"\\p{N}{1,3}"},"behavior":"Isolated","invert":false},{"type":"Metaspace","replacement":"▁","prepend_scheme":"first"},{"type":"Digits"}]}`, 1)),
		[]byte(`{"chat_template":[{"name":"x","template":"y"}],"bos_token":{"content":"<s>"}}`))
	f.Add([]byte(strings.Replace(string(base), `"normalizer":null`,
		`"normalizer":{"type":"Sequence","normalizers":[{"type":"NFKC"},{"type":"Replace","pattern":{"Regex":"\\s+"},"content":" "},{"type":"Prepend","prepend":"▁"},{"type":"Strip","strip_left":true}]}`, 1)),
		[]byte(`{}`))
	f.Add([]byte(`{"model":{"type":"BPE","vocab":{"a":0},"merges":[["a","a"]]}}`), []byte(`null`))
	f.Add([]byte(`{"added_tokens":[{"id":-1,"content":""}]}`), []byte(`{"bos_token":7}`))
	f.Fuzz(func(t *testing.T, tokJSON, cfgJSON []byte) {
		tok, err := Parse(tokJSON, cfgJSON, Options{})
		if err != nil {
			return
		}
		tok.Encode("a b ab <s> 12 x", true)
		tok.Encode(string(tokJSON[:min(len(tokJSON), 64)]), false)
		_, _ = tok.Config().ChatTemplates()
	})
}

// The pair cache answers as the merges table does for every merge of two
// models, once filled, and for pairs that have no merge.
func TestPairCacheAnswersAsTheTable(t *testing.T) {
	a := loadTokenizer(t, "qwen3", true)
	b := loadTokenizer(t, "llama3_1", true)
	pairs := func(m *bpeModel, yield func(x, y int32)) {
		for _, e := range m.merges.slots {
			if e != 0 {
				p := e >> mergeRankBits
				yield(int32(p>>mergeIDBits), int32(p&maxMergeID))
			}
		}
	}
	// check asks m's cache for (x, y), filling it on a miss, then again:
	// the second answer must come from the cache.
	check := func(m *bpeModel, x, y int32) int32 {
		want := m.merges.rank(x, y)
		r, ok := m.merges.cachedRank(x, y)
		if !ok {
			r = m.merges.fillRank(x, y)
		}
		r2, ok2 := m.merges.cachedRank(x, y)
		if r != want || r2 != want || !ok2 {
			t.Fatalf("pair (%d, %d): rank %d then %d (cached %v), table %d", x, y, r, r2, ok2, want)
		}
		return r
	}
	for _, m := range []*bpeModel{a.model, b.model} {
		n := 0
		pairs(m, func(x, y int32) {
			n++
			if check(m, x, y) == noMerge {
				t.Fatalf("pair (%d, %d) of the table: no merge", x, y)
			}
		})
		if n == 0 {
			t.Fatal("no merges")
		}
	}
	nomerge := 0
	pairs(a.model, func(x, y int32) {
		if check(b.model, x, y) == noMerge {
			nomerge++
		}
	})
	if nomerge == 0 {
		t.Fatal("every qwen3 pair merges in llama3_1: no no-merge answer tested")
	}
}
