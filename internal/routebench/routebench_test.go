package routebench

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestGenerateIsDeterministicAndShaped(t *testing.T) {
	p := WorkloadParams{Kind: SharedPrefix, Groups: 3, UsersPerGroup: 4, PrefixWords: 50, QuestionWords: 5, Rate: 10, Requests: 40, MaxTokens: 4, Seed: 7}
	a, err := Generate(p)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Generate(p)
	if len(a) != 40 || a[39].Prompt != b[39].Prompt || a[39].At != b[39].At {
		t.Fatal("same seed, different workload")
	}
	for i := 1; i < len(a); i++ {
		if a[i].At < a[i-1].At {
			t.Fatal("arrivals out of order")
		}
		doc := a[i].Prompt[:strings.Index(a[i].Prompt, "\n")]
		if !strings.HasPrefix(doc, "Document ") || len(strings.Fields(doc)) != 52 {
			t.Fatalf("shared prefix malformed: %q", doc)
		}
	}
	// Mean inter-arrival near 1/rate (40 samples: within a factor of 2).
	if mean := a[39].At / 40; mean < 50*time.Millisecond || mean > 200*time.Millisecond {
		t.Fatalf("mean inter-arrival %v for rate 10/s", mean)
	}
	turns, _ := Generate(WorkloadParams{Kind: MultiTurn, Groups: 1, PrefixWords: 5, QuestionWords: 3, Rate: 1, Requests: 3})
	if !strings.HasPrefix(turns[2].Prompt, turns[1].Prompt) || !strings.HasPrefix(turns[1].Prompt, turns[0].Prompt) {
		t.Fatal("multi-turn prompts do not grow from their history")
	}
	if _, err := Generate(WorkloadParams{Kind: "nope", Rate: 1, Requests: 1}); err == nil {
		t.Fatal("unknown kind accepted")
	}
}

func TestApproxPrefixFollowsItsHistory(t *testing.T) {
	p := &ApproxPrefix{ChunkChars: 8, CharsPerToken: 4, LoadWeight: 1, Capacity: 100}
	doc := strings.Repeat("abcdefgh", 20)
	first := p.Pick(doc+"q1", FleetView{InFlight: []int{0, 0, 0}})
	// Same document again, others idle, the first one mildly busy: history wins.
	if got := p.Pick(doc+"q2", FleetView{InFlight: []int{1, 1, 1}}); got != first {
		t.Fatalf("picked %d, want %d (holds the prefix)", got, first)
	}
	// LRU capacity bounds memory.
	small := &ApproxPrefix{ChunkChars: 8, CharsPerToken: 4, Capacity: 3}
	small.Pick(doc, FleetView{InFlight: []int{0}})
	if n := small.lrus[0].Len(); n != 3 || len(small.sets[0]) != 3 {
		t.Fatalf("LRU holds %d (%d), want 3", n, len(small.sets[0]))
	}
}

func TestStatsAndReports(t *testing.T) {
	r := &Result{Policy: "x", Workload: SharedPrefix, Rate: 2, Requests: 4, PromptTokens: 100, CachedTokens: 25,
		TTFT:       []time.Duration{4 * time.Millisecond, 1 * time.Millisecond, 3 * time.Millisecond, 2 * time.Millisecond},
		PerReplica: map[string]int{"a": 3, "b": 1}, Elapsed: 2 * time.Second}
	if r.HitRate() != 0.25 || r.Percentile(0.5) != 2*time.Millisecond || r.Percentile(0.99) != 4*time.Millisecond ||
		r.Imbalance() != 1.5 || r.Throughput() != 2 {
		t.Fatalf("stats wrong: hit %v p50 %v p99 %v imb %v thr %v", r.HitRate(), r.Percentile(0.5), r.Percentile(0.99), r.Imbalance(), r.Throughput())
	}
	var md, svg bytes.Buffer
	WriteMarkdown(&md, []*Result{r})
	if !strings.Contains(md.String(), "| shared-prefix | 2 | x | 25.0 % | 2.0 ms |") {
		t.Fatalf("markdown row: %s", md.String())
	}
	r2 := *r
	r2.Rate = 4
	WriteSVG(&svg, "t <x>", []*Result{r, &r2})
	if !strings.HasPrefix(svg.String(), "<svg") || !strings.Contains(svg.String(), "t &lt;x&gt;") || !strings.Contains(svg.String(), "<polyline") {
		t.Fatalf("svg: %s", svg.String())
	}
}
