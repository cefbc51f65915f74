package routing

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvroute/kvroute/blockhash"
	"github.com/kvroute/kvroute/index"
	"github.com/kvroute/kvroute/internal/routetest"
)

// TestFunnelSplitsPromptTokens: every routed prompt token lands in one
// outcome — new when nobody holds it, cached_predicted when the chosen
// replica does, given_up_for_load when only a busier one does — and the
// outcomes add up to the prompt tokens routed.
func TestFunnelSplitsPromptTokens(t *testing.T) {
	strict := 0.0
	h := newHarness(t, harnessOptions{slack: &strict})
	reg := prometheus.NewRegistry()
	f := NewFunnel(reg, []string{"qwen"})
	h.router.SetFunnel(f)
	routed := 0
	route := func(prompt string) Decision {
		t.Helper()
		d := h.router.Decide("/v1/completions", completion(prompt), nil)
		if d.Endpoint == nil {
			t.Fatalf("rejected: %s", d.Reason)
		}
		h.router.Begin(&d)
		h.router.End(&d)
		routed += d.PromptTokens
		return d
	}
	want := map[string]int64{}
	check := func(step string) {
		t.Helper()
		got := f.Totals("qwen")
		sum := got[TokensCachedPredicted] + got[TokensNew] + got[TokensGivenUpForLoad]
		byRank := map[string]int64{}
		for _, ep := range h.eps {
			for o, n := range f.RankTotals("qwen", ep.Name) {
				byRank[o] += n
			}
		}
		for _, o := range TokenOutcomes {
			if byRank[o] != got[o] {
				t.Errorf("%s: %s = %d over the ranks, %d for the pool", step, o, byRank[o], got[o])
			}
			if got[o] != want[o] {
				t.Errorf("%s: %s = %d, want %d (all %v)", step, o, got[o], want[o], got)
			}
			if m := testutil.ToFloat64(mustCounter(t, reg, o)); int64(m) != got[o] {
				t.Errorf("%s: metric %s = %v, totals %d", step, o, m, got[o])
			}
		}
		if sum != int64(routed) {
			t.Errorf("%s: outcomes add up to %d of %d prompt tokens routed", step, sum, routed)
		}
	}

	// Nobody holds it: every token is new.
	d := route(sharedPrefix + " first")
	want[TokensNew] += int64(d.PromptTokens)
	check("new prompt")

	// Only a loaded replica holds the second prompt's blocks.
	prompt := strings.Repeat("second conversation ", 10)
	keys := h.keysOf(prompt, blockhash.RequestKeys{})
	holder := h.eps[0]
	h.ix.Store(holder.Replica, keys, index.TierGPU)
	h.ix.SetLoad(holder.Replica, index.Load{KVUsage: 1, Running: 8, Waiting: 64}, h.clock())
	d = route(prompt)
	held := int64(len(keys) * testBlockSize)
	if d.Endpoint.Name == holder.Name {
		t.Fatalf("the loaded holder was chosen (cost %g)", d.Cost)
	}
	want[TokensGivenUpForLoad] += held
	want[TokensNew] += int64(d.PromptTokens) - held
	check("given up for load")

	// The holder idle again: its cached prefix is served as predicted.
	h.ix.SetLoad(holder.Replica, index.Load{}, h.clock())
	third := strings.Repeat("third conversation ", 10)
	keys = h.keysOf(third, blockhash.RequestKeys{})
	h.ix.Store(holder.Replica, keys, index.TierGPU)
	d = route(third)
	if d.Endpoint.Name != holder.Name {
		t.Fatalf("the idle holder was not chosen: %s (%s)", d.Endpoint.Name, d.Reason)
	}
	want[TokensCachedPredicted] += int64(d.MatchedTokens)
	want[TokensNew] += int64(d.PromptTokens - d.MatchedTokens)
	check("cached as predicted")
}

// TestFunnelCheckWindow: a rank's check window holds the engine-comparable
// cached tokens of the requests that began in it and ended before it
// closed — one block less for a fully cached prompt, as vLLM recomputes
// the last block — and nothing of a request that straddles two windows;
// the engine-side outcomes stay parts of what they re-label.
func TestFunnelCheckWindow(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	f := NewFunnel(prometheus.NewRegistry(), []string{"qwen"})
	h.router.SetFunnel(f)
	// A prompt that fills whole blocks, cached on one replica.
	prompt := strings.Repeat("check window ", 8)
	for len(h.keysOf(prompt, blockhash.RequestKeys{}))*testBlockSize != len(routetest.WordTokenizer{}.Encode(prompt, true)) {
		prompt += " window"
	}
	keys := h.keysOf(prompt, blockhash.RequestKeys{})
	holder := h.eps[0]
	h.ix.Store(holder.Replica, keys, index.TierGPU)
	f.NextWindow("qwen", holder.Name)
	d := h.router.Decide("/v1/completions", completion(prompt), nil)
	if d.Endpoint == nil || d.Endpoint.Name != holder.Name || d.MatchedTokens != d.PromptTokens {
		t.Fatalf("decision %+v: want the holder with the whole prompt matched", d)
	}
	h.router.Begin(&d)
	straddler := h.router.Decide("/v1/completions", completion(prompt), nil)
	h.router.Begin(&straddler)
	h.router.End(&d)
	wantEngine := int64(d.PromptTokens - testBlockSize)
	if got := f.NextWindow("qwen", holder.Name); got != wantEngine {
		t.Errorf("window: %d predicted cached tokens, want %d (a block less than the %d matched)", got, wantEngine, d.MatchedTokens)
	}
	h.router.End(&straddler)
	if got := f.NextWindow("qwen", holder.Name); got != 0 {
		t.Errorf("next window: %d tokens of a request begun in the window before, want 0", got)
	}
	if got := f.EngineCachedPredicted("qwen", holder.Name); got != 2*wantEngine {
		t.Errorf("engine-comparable predicted: %d, want %d", got, 2*wantEngine)
	}
	cp := f.RankTotals("qwen", holder.Name)[TokensCachedPredicted]
	if n := f.AddEngineOutcome("qwen", holder.Name, TokensStale, cp+100); n != cp {
		t.Errorf("stale over cached_predicted: counted %d, want the cap %d", n, cp)
	}
	if n := f.AddEngineOutcome("qwen", holder.Name, TokensCachedUnpredicted, 10); n != 0 {
		t.Errorf("cached_unpredicted with no new tokens routed: counted %d, want 0", n)
	}
}

func mustCounter(t *testing.T, reg *prometheus.Registry, outcome string) prometheus.Collector {
	t.Helper()
	return prometheus.CollectorFunc(func(ch chan<- prometheus.Metric) {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "outcome" && l.GetValue() == outcome {
						ch <- prometheus.MustNewConstMetric(prometheus.NewDesc("x", "x", nil, nil), prometheus.CounterValue, m.GetCounter().GetValue())
					}
				}
			}
		}
	})
}
