package routebench

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"
)

func TestPercentileIsNearestRank(t *testing.T) {
	r := &Result{}
	for i := 10; i >= 1; i-- { // unsorted on purpose
		r.TTFT = append(r.TTFT, time.Duration(i)*time.Millisecond)
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0, 1}, {0.1, 1}, {0.11, 2}, {0.5, 5}, {0.9, 9}, {0.91, 10}, {0.99, 10}, {1, 10}} {
		if got := r.Percentile(c.q); got != c.want*time.Millisecond {
			t.Errorf("p%g = %v, want %v", 100*c.q, got, c.want*time.Millisecond)
		}
	}
	if (&Result{}).Percentile(0.5) != 0 {
		t.Error("percentile of no samples is not 0")
	}
	if r.TTFT[0] != 10*time.Millisecond {
		t.Error("Percentile sorted the caller's samples in place")
	}
}

func TestSummarizeRatesAndBalance(t *testing.T) {
	samples := []Sample{
		{TTFT: 4 * time.Millisecond, PromptTokens: 40, CachedTokens: 16},
		{TTFT: 2 * time.Millisecond, PromptTokens: 60, CachedTokens: 9},
		{Err: errors.New("boom")},
	}
	r := Summarize("p", SharedPrefix, 2, samples)
	r.PerReplica = map[string]int{"a": 3, "b": 1, "c": 2}
	r.Elapsed = 2 * time.Second
	if r.Requests != 3 || r.Errors != 1 || r.HitRate() != 0.25 || len(r.TTFT) != 2 {
		t.Fatalf("summary %+v, hit %v", r, r.HitRate())
	}
	if r.Throughput() != 1 || r.Imbalance() != 1.5 {
		t.Fatalf("throughput %v (want 1), imbalance %v (want 1.5)", r.Throughput(), r.Imbalance())
	}
	if got := r.ReplicaCounts(); got[0] != 3 || got[1] != 1 || got[2] != 2 {
		t.Fatalf("counts %v in name order", got)
	}
	r.ReplicaOrder = []string{"c", "b", "a"}
	if got := r.ReplicaCounts(); got[0] != 2 || got[2] != 3 {
		t.Fatalf("counts %v in fleet order", got)
	}
	if FirstError(samples) == nil || FirstError(samples[:2]) != nil {
		t.Fatal("FirstError")
	}
}

func TestParseEngineMetricsSumsVLLMFamilies(t *testing.T) {
	text := `# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 300
vllm:prefix_cache_queries_total{engine="1",model_name="m"} 100
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 120
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 7
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 2
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 3
`
	c, err := parseEngineMetrics(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if c.PrefixQueries != 400 || c.PrefixHits != 120 || c.Requests != 7 || c.RunningWaiting != 5 {
		t.Fatalf("parsed %+v", c)
	}
	d := c.Sub(EngineCounters{PrefixQueries: 100, PrefixHits: 20, Requests: 2, RunningWaiting: 9})
	if d.PrefixQueries != 300 || d.PrefixHits != 100 || d.Requests != 5 || d.RunningWaiting != 5 {
		t.Fatalf("delta %+v", d)
	}
	if _, err := parseEngineMetrics(strings.NewReader("not { metrics")); err == nil {
		t.Fatal("garbage parsed")
	}
}

func sampleResults() []*Result {
	var out []*Result
	for i, pol := range []string{"round-robin", "kvroute-tokens", "a<b"} {
		for _, rate := range []float64{4, 8} {
			out = append(out, &Result{Policy: pol, Workload: SharedPrefix, Rate: rate, Requests: 2,
				PromptTokens: 100, CachedTokens: int64(10 * (i + 1)),
				TTFT:       []time.Duration{time.Duration(rate) * time.Millisecond * time.Duration(i+1), time.Millisecond},
				PerReplica: map[string]int{"r0": 1, "r1": 1}, Elapsed: time.Second})
		}
	}
	return out
}

func TestWriteMarkdownRows(t *testing.T) {
	var b bytes.Buffer
	rs := sampleResults()
	rs[3].Requests, rs[3].Errors, rs[3].Rejected = 5, 3, 2
	rs[3].Setup = "3 gateways"
	rs = append(rs, &Result{Policy: BoundPooled, Workload: SharedPrefix, Rate: 8, Bound: true, PromptTokens: 100, CachedTokens: 75})
	WriteMarkdown(&b, rs)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 2+7 {
		t.Fatalf("%d lines, want header, rule and 7 rows:\n%s", len(lines), b.String())
	}
	want := "| shared-prefix · 3 gateways | 8 | kvroute-tokens | 20.0 % | 1.0 ms | 16.0 ms | 16.0 ms | 2.0 | 1.00 | 3 | 2 |"
	if lines[5] != want {
		t.Fatalf("row\n%s\nwant\n%s", lines[5], want)
	}
	if want := "| shared-prefix | 8 | *bound: pooled cache* | 75.0 % | — | — | — | — | — | — | — |"; lines[8] != want {
		t.Fatalf("bound row\n%s\nwant\n%s", lines[8], want)
	}
	for _, l := range lines {
		if strings.Count(l, "|") != 12 {
			t.Fatalf("row with a wrong column count: %s", l)
		}
	}
}

// svgTokens parses a chart with encoding/xml, failing the test when it is
// not well-formed XML.
func svgTokens(t *testing.T, r io.Reader) []xml.Token {
	t.Helper()
	dec := xml.NewDecoder(r)
	var out []xml.Token
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v", err)
		}
		out = append(out, xml.CopyToken(tok))
	}
}

// TestWriteSVGIsWellFormedXML parses the chart with encoding/xml and checks
// one polyline and legend entry per policy, with escaped text.
func TestWriteSVGIsWellFormedXML(t *testing.T) {
	var b bytes.Buffer
	WriteSVG(&b, `TTFT & "rate" <x>`, sampleResults())
	var polylines, circles int
	var texts []string
	root := ""
	for _, tok := range svgTokens(t, &b) {
		switch e := tok.(type) {
		case xml.StartElement:
			if root == "" {
				root = e.Name.Local
				if e.Name.Space != "http://www.w3.org/2000/svg" {
					t.Fatalf("namespace %q", e.Name.Space)
				}
			}
			switch e.Name.Local {
			case "polyline":
				polylines++
				for _, a := range e.Attr {
					if a.Name.Local == "points" && len(strings.Fields(a.Value)) != 2 {
						t.Fatalf("polyline with %q, want 2 points", a.Value)
					}
				}
			case "circle":
				circles++
			}
		case xml.CharData:
			texts = append(texts, string(e))
		}
	}
	if root != "svg" || polylines != 3 || circles != 6 {
		t.Fatalf("root %q, %d polylines, %d points", root, polylines, circles)
	}
	all := strings.Join(texts, "|")
	for _, want := range []string{`TTFT & "rate" <x>`, "round-robin", "a<b", "request rate (req/s)"} {
		if !strings.Contains(all, want) {
			t.Fatalf("text %q missing from %q", want, all)
		}
	}
}

func TestWriteDemoTable(t *testing.T) {
	rs := sampleResults()[:2]
	rs[0].ReplicaOrder = []string{"r0", "r1"}
	rs[0].EngineQueriedTokens, rs[0].EngineHitTokens = 200, 50
	var b bytes.Buffer
	WriteDemoTable(&b, rs)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "(r0 r1)") {
		t.Fatalf("table:\n%s", b.String())
	}
	if f := strings.Fields(lines[1]); f[0] != "round-robin" || f[1] != "25.0" || f[3] != "1.0" || f[5] != "4.0" || f[len(f)-3] != "0" {
		t.Fatalf("row %q", lines[1])
	}
}

func TestCheckGoalsOfIssue14(t *testing.T) {
	mk := func(pol, kind string, rate float64, cached int64, p90 time.Duration) *Result {
		return &Result{Policy: pol, Workload: kind, Rate: rate, Requests: 10, PromptTokens: 100, CachedTokens: cached, TTFT: []time.Duration{p90}}
	}
	rejected := mk(PolicyKVRouteTokens, Eviction, 20, 55, 20*time.Millisecond)
	rejected.Rejected, rejected.Decisions = 3, map[string]int{"prefix/hit": 8, "rejected/no_eligible_replica": 2}
	upstream503 := mk(PolicyKVRouteTokens, NoSharing, 10, 0, 104*time.Millisecond) // 1.04×: met
	upstream503.Rejected = 1                                                       // a 503 from the gateway, not kvroute's decision: no goal missed
	rs := []*Result{
		mk(PolicyRoundRobin, NoSharing, 10, 0, 100*time.Millisecond),
		upstream503,
		mk(PolicyRoundRobin, NoSharing, 20, 0, 100*time.Millisecond),
		mk(PolicyKVRouteTokens, NoSharing, 20, 0, 110*time.Millisecond), // 1.10×: not met
		mk(PolicyApproxPrefix, Eviction, 10, 10, 50*time.Millisecond),   // lower rate: no comparison
		mk(PolicyKVRouteTokens, Eviction, 10, 15, 50*time.Millisecond),
		mk(PolicyApproxPrefix, Eviction, 20, 40, 45*time.Millisecond),
		rejected, // 45/20 = 2.25× met; 55-40 = 15 points met; rejections: not met
		{Policy: BoundPooled, Workload: Eviction, Rate: 20, Bound: true},
	}
	goals := CheckGoals(rs, PolicyKVRouteTokens)
	var got []string
	for _, g := range goals {
		got = append(got, fmt.Sprint(g.Met))
	}
	// no-sharing 10 and 20: p90; eviction 20: p90, hit rate; then
	// rejections per section: no-sharing, eviction.
	if want := "true false true true true false"; strings.Join(got, " ") != want {
		t.Fatalf("verdicts %s, want %s: %+v", strings.Join(got, " "), want, goals)
	}
	var b bytes.Buffer
	WriteGoals(&b, PolicyKVRouteTokens, goals)
	for _, want := range []string{"no-sharing 20 req/s: TTFT p90 ≤ 1.05× round-robin's: NOT met — 110.0 ms vs 100.0 ms (1.10×)",
		"eviction, every rate: no request rejected by kvroute: NOT met — 2 of 20 rejected by kvroute (decisions rejected/*); 3 answered 503 in all",
		"eviction 20 req/s: token hit rate ≥ approx-prefix's + 10 points: met — 55.0 % vs 40.0 % (+15.0 points)"} {
		if !strings.Contains(b.String(), want) {
			t.Fatalf("goals lack %q:\n%s", want, b.String())
		}
	}
	if CheckGoals(rs, PolicyKVRouteEngine) != nil {
		t.Fatal("goals for a policy that did not run")
	}
}

func TestProgressRedrawsOnATerminalOnly(t *testing.T) {
	var tty, plain bytes.Buffer
	for _, p := range []*Progress{{W: &tty, TTY: true}, {W: &plain, Every: time.Hour}} {
		p.Begin("phase", 3)
		p.Observe(1, 3, Sample{PromptTokens: 10, CachedTokens: 5})
		p.Observe(2, 3, Sample{Err: errors.New("x")})
		p.End()
	}
	if !strings.HasPrefix(tty.String(), "\r\033[K") || strings.Count(tty.String(), "\n") != 1 {
		t.Fatalf("terminal output %q", tty.String())
	}
	if strings.Contains(plain.String(), "\r") || strings.Count(plain.String(), "\n") != 2 {
		t.Fatalf("plain output %q: want the begin and end lines only", plain.String())
	}
	if !strings.Contains(plain.String(), "2/3") || !strings.Contains(plain.String(), "50.0 %") || !strings.Contains(plain.String(), "errors 1") {
		t.Fatalf("final line %q", plain.String())
	}
}

func TestCrossCheckComparesUsageWithEngineMetrics(t *testing.T) {
	r := &Result{PromptTokens: 100, CachedTokens: 40, EngineQueriedTokens: 100, EngineHitTokens: 40}
	if err := r.CrossCheck(); err != nil {
		t.Fatal(err)
	}
	r.EngineHitTokens = 32 // the engines saw fewer hits than the responses claim
	if err := r.CrossCheck(); err == nil || !strings.Contains(err.Error(), "40 of 100") || !strings.Contains(err.Error(), "32 of 100") {
		t.Fatalf("mismatch not reported: %v", err)
	}
	r.Errors = 1 // lost responses: not comparable
	if err := r.CrossCheck(); err != nil {
		t.Fatal(err)
	}
}

// TestWriteSVGAtOneRateIsABarChart: with a single rate a line chart is a few
// dots on an empty log plot; the chart is one labelled bar per policy.
func TestWriteSVGAtOneRateIsABarChart(t *testing.T) {
	var one []*Result
	for _, r := range sampleResults() {
		if r.Rate == 8 {
			one = append(one, r)
		}
	}
	var b bytes.Buffer
	WriteSVG(&b, "TTFT p90 — shared-prefix", one)
	var bars, circles int
	var texts []string
	for _, tok := range svgTokens(t, &b) {
		switch el := tok.(type) {
		case xml.StartElement:
			switch el.Name.Local {
			case "rect":
				bars++
			case "circle":
				circles++
			}
		case xml.CharData:
			if s := strings.TrimSpace(string(el)); s != "" {
				texts = append(texts, s)
			}
		}
	}
	all := strings.Join(texts, "|")
	// One background rect plus a bar per policy; each bar named and valued.
	if bars != 1+len(one) || circles != 0 || strings.Contains(all, "(log)") {
		t.Fatalf("%d rects, %d circles: %s", bars, circles, all)
	}
	for _, r := range one {
		if !strings.Contains(all, "|"+r.Policy+"|"+fmt.Sprintf("%.1f ms", float64(r.Percentile(0.9))/1e6)) {
			t.Errorf("no bar labelled %s: %s", r.Policy, all)
		}
	}
}
