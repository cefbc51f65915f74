package routebench

import (
	"strings"
	"testing"
	"time"
)

func TestStickyChoiceSkipsDownEngines(t *testing.T) {
	up := func(i int) bool { return i != 1 }
	// Engine 1 holds the longest prefix but is down: the affinity goes to
	// the longest holder that is up.
	if e, why := StickyChoice([]int{0, 6, 4, 4}, []int{0, 0, 9, 3}, up, 100, 0); e != 3 || why != StickyHeld {
		t.Fatalf("engine %d (%s), want 3 (sticky)", e, why)
	}
	if e, why := StickyChoice([]int{0, 0}, []int{0, 0}, func(int) bool { return false }, 100, 0); e != -1 || why != StickyNoPrefix {
		t.Fatalf("all down: engine %d (%s), want -1", e, why)
	}
}

func TestStickyThreshold(t *testing.T) {
	if n := StickyThreshold(800*time.Millisecond, 50*time.Microsecond); n != 16000 {
		t.Fatalf("0.8 s at 50 µs a token: %d tokens, want 16000", n)
	}
}

func TestTraceWorkloadKeepsTheTracesSharing(t *testing.T) {
	tr := &TraceReplay{BlockWords: 5,
		At:     []time.Duration{0, time.Second, 3 * time.Second},
		Blocks: [][]int64{{1, 2, 3}, {1, 2, 4, 5}, {9}}}
	reqs, err := Generate(WorkloadParams{Kind: Trace, Trace: tr, Rate: 2, Requests: 3, MaxTokens: 4})
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 3 {
		t.Fatalf("%d requests", len(reqs))
	}
	// Mean rate 2 req/s: 2 gaps over 3 s recorded become 1 s.
	if reqs[2].At != time.Second || reqs[1].At != time.Second/3 {
		t.Fatalf("arrivals %v, %v", reqs[1].At, reqs[2].At)
	}
	a, b, c := strings.Fields(reqs[0].Prompt), strings.Fields(reqs[1].Prompt), strings.Fields(reqs[2].Prompt)
	if len(a) != 15 || len(b) != 20 || len(c) != 5 {
		t.Fatalf("words %d, %d, %d; want 5 per block", len(a), len(b), len(c))
	}
	if strings.Join(a[:10], " ") != strings.Join(b[:10], " ") || strings.Join(a[10:], " ") == strings.Join(b[10:15], " ") {
		t.Fatal("requests sharing two blocks must share exactly their text")
	}
	again, _ := Generate(WorkloadParams{Kind: Trace, Trace: tr, Rate: 2, Requests: 3, MaxTokens: 4})
	if again[1].Prompt != reqs[1].Prompt {
		t.Fatal("a block's text must not depend on the run")
	}
}
