package tokenize

import (
	"encoding/binary"
	"encoding/json"
	"math/rand/v2"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/kvroute/kvroute/chattemplate"
	"github.com/kvroute/kvroute/internal/testdata"
)

// benchWords is a fixed vocabulary of common English words the benchmark
// prompt is built from.
var benchWords = strings.Fields(`the of and to a in is it you that he was for on are with as I his they
be at one have this from or had by hot word but what some we can out other were all there when up use
your how said an each she which do their time if will way about many then them write would like so these
her long make thing see him two has look more day could go come did number sound no most people my over
know water than call first who may down side been now find any new work part take get place made live
where after back little only round man year came show every good me give our under name very through
just form sentence great think say help low line differ turn cause much mean before move right boy old
too same tell does set three want air well also play small end put home read hand port large spell add
even land here must big high such follow act why ask men change went light kind off need house picture
try us again animal point mother world near build self earth father head stand own page should country
found answer school grow study still learn plant cover food sun four between state keep eye never last
let thought city tree cross farm hard start might story saw far sea draw left late run don't while press
close night real life few north open seem together next white children begin got walk example ease paper
group always music those both mark often letter until mile river car feet care second book carry took
science eat room friend began idea fish mountain stop once base hear horse cut sure watch color face wood
main enough plain girl usual young ready above ever red list though feel talk bird soon body dog family
direct pose leave song measure door product black short numeral class wind question happen complete ship
area half rock order fire south problem piece told knew pass since top whole king space heard best hour
better true during hundred five remember step early hold west ground interest reach fast verb sing listen
six table travel less morning ten simple several vowel toward war lay against pattern slow center love
person money serve appear road map rain rule govern pull cold notice voice unit power town fine certain
fly fall lead cry dark machine note wait plan figure star box noun field rest correct able pound done
beauty drive stood contain front teach week final gave green oh quick develop ocean warm free minute
strong special mind behind clear tail produce fact street inch multiply nothing course stay wheel full
force blue object decide surface deep moon island foot system busy test record boat common gold possible
plane stead dry wonder laugh thousand ago ran check game shape equate miss brought heat snow tire bring
yes distant fill east paint language among`)

// englishPrompt returns about n bytes of English-like prose, the same every
// call: sentences of 6–20 words drawn from benchWords by a fixed-seed PRNG,
// capitalised, with commas, the odd number or year, and a paragraph break
// every few sentences.
func englishPrompt(n int) string { return englishText(7, n) }

// englishText is englishPrompt with its own PRNG seed.
func englishText(seed uint64, n int) string {
	r := rand.New(rand.NewPCG(2024, seed))
	var b strings.Builder
	for b.Len() < n {
		words := 6 + r.IntN(15)
		for i := range words {
			w := benchWords[r.IntN(len(benchWords))]
			switch {
			case i == 0:
				w = strings.ToUpper(w[:1]) + w[1:]
			case r.IntN(25) == 0:
				w = strconv.Itoa(r.IntN(2100))
			}
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(w)
			if i < words-1 && r.IntN(9) == 0 {
				b.WriteByte(',')
			}
		}
		switch r.IntN(12) {
		case 0:
			b.WriteString("?")
		case 1:
			b.WriteString("!")
		default:
			b.WriteString(".")
		}
		if r.IntN(5) == 0 {
			b.WriteString("\n\n")
		} else {
			b.WriteByte(' ')
		}
	}
	return b.String()
}

// benchPromptBytes is the size of the benchmark prompt (~16 KB).
const benchPromptBytes = 16 << 10

var benchModels = []string{"llama3_1", "qwen3"}

// resetCaches empties the word and segment caches, as in a freshly loaded
// tokenizer.
func (t *Tokenizer) resetCaches() {
	t.model.cache = newWordCache()
	if t.segments != nil {
		t.segments = newSegmentCache(t.segments.shardBudget * segmentShards)
	}
}

// withoutSegmentCache returns a copy of t (sharing its word cache) that
// encodes every segment afresh.
func withoutSegmentCache(t *Tokenizer) *Tokenizer {
	c := *t
	c.segments = nil
	return &c
}

func reportTokens(b *testing.B, tokensPerOp int) {
	b.ReportMetric(float64(tokensPerOp)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
	b.ReportMetric(float64(tokensPerOp), "tokens/op")
}

// benchEncode runs encode on the 16 KB prompt for each benchmark model
// (segment cache off) and reports tokens/s.
func benchEncode(b *testing.B, encode func(b *testing.B, tok *Tokenizer, text string)) {
	text := englishPrompt(benchPromptBytes)
	for _, name := range benchModels {
		b.Run(name, func(b *testing.B) {
			tok := withoutSegmentCache(loadTokenizer(b, name, false))
			n := len(tok.Encode(text, true))
			b.SetBytes(int64(len(text)))
			b.ReportAllocs()
			b.ResetTimer()
			encode(b, tok, text)
			reportTokens(b, n)
		})
	}
}

// BenchmarkEncodeWarm encodes the same 16 KB prompt again and again: every
// word after the first call is a cache hit.
func BenchmarkEncodeWarm(b *testing.B) {
	benchEncode(b, func(b *testing.B, tok *Tokenizer, text string) {
		for b.Loop() {
			tok.Encode(text, true)
		}
	})
}

// BenchmarkEncodeCold encodes the prompt with an empty word cache each
// time, as the first call on a freshly loaded tokenizer does (the cache
// reset is outside the timer).
func BenchmarkEncodeCold(b *testing.B) {
	benchEncode(b, func(b *testing.B, tok *Tokenizer, text string) {
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			tok.resetCaches()
			b.StartTimer()
			tok.Encode(text, true)
		}
	})
}

// BenchmarkEncodeNewWords encodes 2,000 made-up words (~8k tokens), new
// text every call (built outside the timer), with the word and segment
// caches left as earlier calls filled them: the tokenizer's part of
// extproc's BenchmarkDecide_Chat8kCold. Reports the median call.
func BenchmarkEncodeNewWords(b *testing.B) {
	for _, name := range benchModels {
		b.Run(name, func(b *testing.B) {
			tok := loadTokenizer(b, name, false)
			var lat []time.Duration
			var ids []int
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				text := testdata.MadeUpProse(uint64(i), 2000)
				b.StartTimer()
				t0 := time.Now()
				ids = tok.AppendEncode(ids[:0], text, false)
				lat = append(lat, time.Since(t0))
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(len(ids)), "tokens/op")
		})
	}
}

// BenchmarkEncodeParallel is BenchmarkEncodeWarm on every core at once.
func BenchmarkEncodeParallel(b *testing.B) {
	benchEncode(b, func(b *testing.B, tok *Tokenizer, text string) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				tok.Encode(text, true)
			}
		})
	})
}

// BenchmarkLoad measures Load and the heap a loaded tokenizer keeps
// (HeapAlloc after GC, minus before; its word cache empty).
func BenchmarkLoad(b *testing.B) {
	for _, name := range benchModels {
		b.Run(name, func(b *testing.B) {
			dir := testdata.TokenizerDir(b, name)
			var ms runtime.MemStats
			var heapBytes float64
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				runtime.GC()
				runtime.ReadMemStats(&ms)
				before := ms.HeapAlloc
				b.StartTimer()
				tok, err := Load(dir)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				runtime.GC()
				runtime.ReadMemStats(&ms)
				heapBytes += float64(ms.HeapAlloc) - float64(before)
				runtime.KeepAlive(tok)
				b.StartTimer()
			}
			b.ReportMetric(heapBytes/float64(b.N)/(1<<20), "heap-MiB/model")
		})
	}
}

// BenchmarkGCCycle measures the CPU one garbage-collection cycle costs with
// a loaded tokenizer on the heap (runtime/metrics' GC CPU over forced
// cycles), against the same with nothing loaded: what every cycle of a
// server that holds the model pays to mark it.
func BenchmarkGCCycle(b *testing.B) {
	gcCPU := func() float64 {
		s := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}}
		metrics.Read(s)
		return s[0].Value.Float64()
	}
	for _, name := range append([]string{"none"}, benchModels...) {
		b.Run(name, func(b *testing.B) {
			var tok *Tokenizer
			if name != "none" {
				var err error
				if tok, err = Load(testdata.TokenizerDir(b, name)); err != nil {
					b.Fatal(err)
				}
			}
			runtime.GC()
			c0 := gcCPU()
			for b.Loop() {
				runtime.GC()
			}
			b.ReportMetric((gcCPU()-c0)/float64(b.N)*1e3, "gc-cpu-ms/cycle")
			runtime.KeepAlive(tok)
		})
	}
}

// chatSession renders, with the model's own chat template, the requests of
// one conversation of the given number of turns: request k holds a ~2 KB
// system prompt, the k-1 earlier exchanges (user ~300–700 B, assistant
// ~800 B) and the k-th user message, with the generation prompt.
func chatSession(tb testing.TB, tok *Tokenizer, turns int) []string {
	tb.Helper()
	cfg := tok.Config()
	specials := chattemplate.Specials{BOS: cfg.BOSToken, EOS: cfg.EOSToken, Unk: cfg.UnkToken, Pad: cfg.PadToken}
	ct, err := chattemplate.NewChatTemplates("", cfg.ChatTemplate, specials, nil)
	if err != nil {
		tb.Fatal(err)
	}
	type message struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	msgs := []message{{"system", englishText(100, 2000)}}
	var texts []string
	for k := range turns {
		msgs = append(msgs, message{"user", englishText(200+uint64(k), 300+(k%5)*100)})
		body, err := json.Marshal(map[string]any{"model": "m", "messages": msgs})
		if err != nil {
			tb.Fatal(err)
		}
		req, err := chattemplate.ParseChatRequest(body)
		if err != nil {
			tb.Fatal(err)
		}
		text, err := ct.RenderRequest(req)
		if err != nil {
			tb.Fatal(err)
		}
		texts = append(texts, text)
		msgs = append(msgs, message{"assistant", englishText(300+uint64(k), 800)})
	}
	return texts
}

// BenchmarkChat20Turns encodes the 20 requests of a 20-turn conversation
// (each resends the whole history) with a warm word cache, with and
// without the segment cache; the segment cache starts empty each session.
// tokens/s counts the tokens of all 20 prompts.
func BenchmarkChat20Turns(b *testing.B) {
	for _, name := range benchModels {
		for _, segments := range []bool{true, false} {
			mode := "segment-cache"
			if !segments {
				mode = "no-segment-cache"
			}
			b.Run(name+"/"+mode, func(b *testing.B) {
				shared := loadTokenizer(b, name, false)
				texts := chatSession(b, shared, 20)
				tok := withoutSegmentCache(shared)
				total := 0
				for _, text := range texts {
					total += len(tok.Encode(text, false))
				}
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if segments {
						b.StopTimer()
						tok.segments = newSegmentCache(DefaultSegmentCacheBytes)
						b.StartTimer()
					}
					for _, text := range texts {
						tok.Encode(text, false)
					}
				}
				reportTokens(b, total)
			})
		}
	}
}

// BenchmarkPreTokenize splits the 16 KB English prompt into words with each
// benchmark model's pre-tokenizer (the first step of a warm encode).
func BenchmarkPreTokenize(b *testing.B) {
	text := englishPrompt(benchPromptBytes)
	for _, name := range benchModels {
		b.Run(name, func(b *testing.B) {
			tok := loadTokenizer(b, name, false)
			st := getScratch()
			defer putScratch(st)
			b.SetBytes(int64(len(text)))
			var n int
			for b.Loop() {
				words := tok.preTokenizer.split(st.words[:0], piece{text, true}, st)
				n = len(words)
				st.words = words[:0]
			}
			b.ReportMetric(float64(n), "words/op")
		})
	}
}

// BenchmarkMergeNewWords is BPE alone (mergeSmall or mergeHeap, no word
// cache) on the words of 16 made-up texts of 2,000 words each, the words of
// BenchmarkEncodeNewWords; it reports the time a word.
func BenchmarkMergeNewWords(b *testing.B) {
	for _, name := range benchModels {
		b.Run(name, func(b *testing.B) {
			tok := loadTokenizer(b, name, false)
			st := getScratch()
			defer putScratch(st)
			var words []string
			for seed := range uint64(16) {
				for _, w := range tok.preTokenizer.split(nil, piece{testdata.MadeUpProse(seed, 2000), true}, st) {
					words = append(words, w.s)
				}
			}
			var ids []int
			i := 0
			for b.Loop() {
				ids = tok.model.merge(ids[:0], words[i%len(words)], st)
				i++
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/word")
		})
	}
}

// BenchmarkSegmentCacheMissPut is the segment cache's part of encoding a
// new 2 KB user turn (~500 ids): a get that misses, then the put of the
// turn's text and ids, with the default budget (evicting once full).
func BenchmarkSegmentCacheMissPut(b *testing.B) {
	c := newSegmentCache(DefaultSegmentCacheBytes)
	text := []byte(englishPrompt(2 << 10))
	ids := make([]int, 500)
	for i := range ids {
		ids[i] = i * 37 % 151000
	}
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		binary.LittleEndian.PutUint64(text, uint64(i)) // a turn never seen before
		seg := unsafe.String(&text[0], len(text))
		if _, key, ok := c.get(seg, false); !ok {
			c.put(key, seg, false, ids)
		} else {
			b.Fatal("hit")
		}
	}
}
