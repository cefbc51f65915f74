package fleetsim

import (
	"math/rand/v2"
	"testing"
	"time"
)

func books(cached []int) *anchorBooks {
	return &anchorBooks{x: &exactIndex{blockSize: 64}, cached: cached, flights: map[int]flight{}, counts: map[string]int{}}
}

func TestStickyChoice(t *testing.T) {
	for _, c := range []struct {
		name         string
		cached, load []int
		want         int
		reason       string
	}{
		{"the least loaded of the longest holders", []int{0, 4, 4, 2}, []int{0, 20_000, 10_000, 0}, 2, "sticky"},
		{"a shorter holder is not affine", []int{0, 4, 3, 3}, []int{0, 30_000, 0, 0}, 1, "sticky"},
		{"saturated holders: the least loaded engine", []int{0, 4, 4, 2}, []int{5, 40_000, 32_768, 0}, 3, "saturated"},
		{"no holder: the least loaded engine", []int{0, 0, 0}, []int{9, 3, 7}, 1, "no-prefix"},
	} {
		p := &stickyPicker{anchorBooks: books(c.cached), threshold: 32_768, load: c.load}
		if got := p.choose(); got != c.want || p.counts[c.reason] != 1 {
			t.Errorf("%s: engine %d (counts %v), want %d (%s)", c.name, got, p.counts, c.want, c.reason)
		}
	}
}

func TestDynamoChoice(t *testing.T) {
	// A 10-block prompt. Costs at weight 1: engine 0 holds it all but has
	// 100 active blocks (0 + 100); engine 1 holds nothing, idle (10 + 10);
	// engine 2 holds half, 20 active (5 + 25). At weight 10 prefill
	// dominates: 100, 110, 75.
	for _, c := range []struct {
		weight float64
		want   int
	}{{1, 1}, {10, 2}} {
		p := &dynamoPicker{anchorBooks: books([]int{10, 0, 5}), weight: c.weight,
			prefill: []int{0, 0, 0}, active: []int{100, 0, 20}, costs: make([]float64, 3), probs: make([]float64, 3)}
		if got := p.choose(640); got != c.want {
			t.Errorf("weight %g: engine %d (costs %v), want %d", c.weight, got, p.costs, c.want)
		}
	}
	// Prefill tokens queued at a worker count as its prefill blocks.
	p := &dynamoPicker{anchorBooks: books([]int{0, 0}), weight: 1, prefill: []int{6400, 0}, active: []int{0, 50},
		costs: make([]float64, 2), probs: make([]float64, 2)}
	if got := p.choose(640); got != 1 {
		t.Errorf("100 queued prefill blocks against 50 active: engine %d (costs %v), want 1", got, p.costs)
	}
	// Temperature: softmax over costs scaled to 0..1 — the cheapest worker
	// most often, the dearest sometimes.
	p = &dynamoPicker{anchorBooks: books([]int{10, 0, 5}), weight: 1, temperature: 0.5,
		prefill: []int{0, 0, 0}, active: []int{100, 0, 20}, costs: make([]float64, 3), probs: make([]float64, 3),
		rng: rand.New(rand.NewPCG(1, 2))}
	n := make([]int, 3)
	for range 3000 {
		n[p.choose(640)]++
	}
	// Scaled costs 1, 0, 0.125: weights e^-2, 1, e^-0.25 → ≈ 6 %, 50 %, 44 %.
	if n[1] < 1300 || n[1] > 1700 || n[0] < 100 || n[0] > 300 || n[2] < 1150 {
		t.Errorf("draws %v, want ≈ 6 %% / 50 %% / 44 %% of 3000", n)
	}
}

// TestAnchorsReadTheExactIndex replays two requests with the same long
// prefix a second apart: fed by kvroute's index (the engines' KV events),
// both anchors send the second to the engine holding the prefix.
func TestAnchorsReadTheExactIndex(t *testing.T) {
	prefix := appendBlock(nil, 7, 512)
	src := SliceSource{
		{At: 0, Tokens: append(append([]int(nil), prefix...), appendBlock(nil, 8, 64)...), MaxTokens: 4},
		{At: time.Second, Tokens: append(append([]int(nil), prefix...), appendBlock(nil, 9, 64)...), MaxTokens: 4},
	}
	o := benchmarkFleet(100 * time.Millisecond)
	for _, pol := range []string{PolicyLLMDSticky, PolicyDynamoKV} {
		r, err := Run(src, pol, o)
		if err != nil {
			t.Fatal(err)
		}
		if r.HitTokens < 512 || r.Decisions["expected cached tokens"] < 512 {
			t.Errorf("%s: %d tokens hit, index promised %d; want the 512-token prefix", pol, r.HitTokens, r.Decisions["expected cached tokens"])
		}
	}
}
