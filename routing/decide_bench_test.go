package routing

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/kvroute/kvroute/chattemplate"
	"github.com/kvroute/kvroute/index"
	"github.com/kvroute/kvroute/internal/routetest"
	"github.com/kvroute/kvroute/internal/testdata"
)

// chatWorkload is a Qwen3 pool of 8 replicas and the chat requests of
// routetest.ChatWorkload; replica r3 holds the shared system prompt.
type chatWorkload struct {
	*routetest.ChatWorkload
	router *Router
}

func newChatWorkload(b *testing.B, tokens int) *chatWorkload {
	w := &chatWorkload{ChatWorkload: routetest.NewChatWorkload(tokens)}
	opts := benchRouterOptions
	opts.PlacementSlack = 0.5
	router, ix, eps := qwenRouter(b, 8, opts)
	w.router = router
	ix.Store(eps[3].Replica, w.SystemKeys(b, tokens), index.TierGPU)
	return w
}

// benchRouterOptions are the router options the benchmarks share.
var benchRouterOptions = RouterOptions{PrefillTokensPerSecond: 10000, ForeignRequestTokens: 1024, KVUsageCeiling: 0.98, KVFullPenalty: 0.5, FailOpen: true}

// qwenRouter is a router with opts over one pool "qwen" (the real Qwen3
// tokenizer and chat template, 16-token blocks) of n replicas r0, r1, …
func qwenRouter(b *testing.B, n int, opts RouterOptions) (*Router, *index.Index, []Endpoint) {
	tok, ct := routetest.LoadQwen(b)
	ix := index.New(index.Options{TTL: time.Hour, MaxEntries: 1 << 22, CPUTierWeight: 0.5, SpeculativeTTL: 2 * time.Second})
	pid, _ := ix.AddPool("qwen")
	var eps []Endpoint
	for i := range n {
		r, _ := ix.AddReplica(pid, fmt.Sprint("r", i))
		eps = append(eps, Endpoint{Replica: r, Name: fmt.Sprint("r", i), Address: fmt.Sprintf("127.0.0.1:%d", 8001+i), DPSize: 1})
	}
	router, err := NewRouter(ix, []PoolConfig{{Name: "qwen", ID: pid, Models: []string{"qwen3"}, Tokenizer: tok, Chat: routetest.TemplateChat{CT: ct},
		Keys: routetest.PoolKeys(b, "qwen", 16), Endpoints: eps}}, opts)
	if err != nil {
		b.Fatal(err)
	}
	return router, ix, eps
}

// benchDecide measures the in-process decision — body bytes → destination:
// parse, render, tokenize, hash, lookup, choose, speculative store — for
// requests that each carry a never-seen user turn, and reports p50/p99.
// setup, when given, prepares the workload's router first.
func benchDecide(b *testing.B, tokens int, setup ...func(*chatWorkload)) {
	w := newChatWorkload(b, tokens)
	for _, f := range setup {
		f(w)
	}
	var lat, cpu []time.Duration
	var matched int
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		body := w.Body(i)
		b.StartTimer()
		c0 := routetest.ProcessCPU()
		d, took := w.decide(body)
		lat = append(lat, took)
		cpu = append(cpu, routetest.ProcessCPU()-c0)
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

// BenchmarkDecide_Chat2k: target p50 ≤ 100 µs (docs/PERFORMANCE.md, Targets).
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
		c0 := routetest.ProcessCPU()
		d, took := w.decide(body)
		lat = append(lat, took)
		cpu = append(cpu, routetest.ProcessCPU()-c0)
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

// BenchmarkDecide_Chat8kCold: target p50 ≤ 1 ms (docs/PERFORMANCE.md, Targets).
func BenchmarkDecide_Chat8kCold(b *testing.B) { benchDecideCold(b, 8000) }

// BenchmarkDecide_Chat100kCold: 100k tokens, nothing cached (report).
func BenchmarkDecide_Chat100kCold(b *testing.B) { benchDecideCold(b, 100000) }

// BenchmarkParseRequest_2kChat is the field scan of a 2k-token chat body
// (the part of the decision before the chat template).
func BenchmarkParseRequest_2kChat(b *testing.B) {
	benchChatBody(b, func(body []byte) error {
		_, err := ParseRequest("/v1/chat/completions", body, Limits{})
		return err
	})
}

// BenchmarkRenderChat_2k is the chat half of a 2k-token decision: the body
// decoded for Qwen3's chat template and rendered.
func BenchmarkRenderChat_2k(b *testing.B) {
	_, ct := routetest.LoadQwen(b)
	var text []byte // reused, as the router reuses its buffers
	benchChatBody(b, func(body []byte) (err error) {
		text, err = (routetest.TemplateChat{CT: ct}).AppendChat(text[:0], body)
		return err
	})
}

// BenchmarkChatDecode_2k is the chat body decoded into template values
// (chattemplate.ParseChatRequest), without rendering.
func BenchmarkChatDecode_2k(b *testing.B) {
	benchChatBody(b, func(body []byte) error {
		_, err := chattemplate.ParseChatRequest(body)
		return err
	})
}

// benchChatBody runs op on a 2k-token chat body each iteration and reports
// bytes, allocations and CPU per op.
func benchChatBody(b *testing.B, op func(body []byte) error) {
	body := routetest.NewChatWorkload(2000).Body(1)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	cpu0 := routetest.ProcessCPU()
	for b.Loop() {
		if err := op(body); err != nil {
			b.Fatal(err)
		}
	}
	routetest.CPUPerOp(b, cpu0)
}
