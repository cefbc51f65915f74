package routing

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/kvroute/kvroute/blockhash"
	"github.com/kvroute/kvroute/index"
	"github.com/kvroute/kvroute/internal/routetest"
)

// TestExplainIsDecideWithoutBookkeeping: Explain weighs every endpoint as
// Decide does (same pick, cost and matched tokens on the same index), says
// why an unhealthy one was not weighed, and leaves no trace: no in-flight
// request, no queued prefill, no speculative blocks.
func TestExplainIsDecideWithoutBookkeeping(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	keys := h.keysOf(sharedPrefix, blockhash.RequestKeys{})
	h.ix.Store(h.eps[1].Replica, keys, index.TierGPU)
	h.ix.Store(h.eps[0].Replica, keys[:2], index.TierCPU)
	h.ix.SetHealthy(h.eps[2].Replica, false)
	for range 2 {
		h.ix.EndWork(h.eps[0].Replica, h.ix.BeginWork(h.eps[0].Replica, 250, 1e4))
	}
	body := []byte(`{"model":"qwen3","prompt":"` + sharedPrefix + `"}`)
	before := replicaStates(h)

	x := h.router.Explain("/v1/completions", body, "")
	for i, st := range replicaStates(h) {
		if st.InFlight != before[i].InFlight || st.PendingTokens != before[i].PendingTokens ||
			st.RecentTokens() > before[i].RecentTokens() {
			t.Fatalf("Explain left bookkeeping on %s: %+v, was %+v", h.eps[i].Name, st, before[i])
		}
	}
	// Nothing speculative: the one replica that held nothing still holds nothing.
	if m := h.ix.LookupRoute(h.pool, keys, nil); len(m) != 2 {
		t.Fatalf("after Explain %d replicas hold the prompt's first block, want 2: %+v", len(m), m)
	}
	d := h.router.Decide("/v1/completions", body, nil)
	if x.Pick != d.Endpoint.Name || x.PickAddress != d.Endpoint.Address || float64(x.Cost) != d.Cost ||
		x.MatchedTokens != d.MatchedTokens || x.Outcome != d.Outcome || x.Reason != d.Reason ||
		x.PromptTokens != d.PromptTokens || x.PromptBlocks != len(d.Keys) || x.Pool != "qwen" || x.BlockSize != testBlockSize {
		t.Fatalf("Explain %+v\nDecide %+v", x, d)
	}
	if len(x.Candidates) != len(h.eps) {
		t.Fatalf("%d candidates, want every endpoint (%d)", len(x.Candidates), len(h.eps))
	}
	c0, c1, c2 := x.Candidates[0], x.Candidates[1], x.Candidates[2]
	if c1.Name != h.eps[1].Name || !c1.Picked || !c1.Eligible || c1.MatchedBlocks != len(keys) || c1.GPUBlocks != len(keys) || float64(c1.Cost) != d.Cost {
		t.Fatalf("holder: %+v", c1)
	}
	if c0.MatchedBlocks != 2 || c0.CPUBlocks != 2 || c0.GPUBlocks != 0 || c0.WeightedBlocks != 1 || c0.Picked ||
		float64(c0.UncachedTokens) != float64(d.PromptTokens-testBlockSize) || !(c0.Cost > c1.Cost) ||
		!(c0.RecentUncachedTokens > 499 && c0.RecentUncachedTokens <= 500) || c0.TurnoverTokens != c0.RecentUncachedTokens+c0.UncachedTokens {
		t.Fatalf("CPU-tier holder: %+v (holder %+v)", c0, c1)
	}
	// The holder is the cheapest: it is within the slack bound, which is at
	// least its cost, and its turnover is this request's uncached tokens.
	if !c1.WithinSlack || c1.RecentUncachedTokens != 0 || c1.TurnoverTokens != c1.UncachedTokens || x.SlackBound < x.Cost {
		t.Fatalf("holder's turnover: %+v, slack bound %v", c1, x.SlackBound)
	}
	if c2.Eligible || c2.Healthy || c2.Ineligible != IneligibleUnhealthy || c2.Weighed {
		t.Fatalf("unhealthy endpoint: %+v", c2)
	}
	js, err := json.Marshal(x)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(js), "careful assistant") {
		t.Fatalf("explanation carries prompt text: %s", js)
	}
}

// TestExplainRejectionAndLoad: a request Decide rejects or routes by load
// is explained with its outcome, reason and status.
func TestExplainRejectionAndLoad(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	x := h.router.Explain("/v1/completions", []byte(`{"model":"secret-model-name","prompt":"x"}`), "")
	if x.Outcome != OutcomeRejected || x.Reason != ReasonUnknownModel || x.Status != 404 || x.Pick != "" || x.Candidates == nil {
		t.Fatalf("unknown model: %+v", x)
	}
	if strings.Contains(x.Error, "secret") {
		t.Fatalf("error quotes the model name: %q", x.Error)
	}
	x = h.router.Explain("/v1/completions", []byte(`{"model":"qwen3","prompt":"a fresh prompt nobody holds at all"}`), "")
	if x.Outcome != OutcomeLoad || x.Reason != ReasonNoHit || x.Pick == "" || len(x.Candidates) != len(h.eps) || x.PromptTokens == 0 {
		t.Fatalf("placement: %+v", x)
	}
	if m := h.ix.LookupRoute(h.pool, h.keysOf("a fresh prompt nobody holds at all", blockhash.RequestKeys{}), nil); len(m) != 0 {
		t.Fatalf("Explain stored speculative blocks: %+v", m)
	}
	for _, c := range x.Candidates {
		if !c.Weighed || c.MatchedBlocks != 0 || float64(c.UncachedTokens) != float64(x.PromptTokens) {
			t.Fatalf("placement candidate: %+v", c)
		}
	}
}

// TestFigureJSONCarriesInfinity: an infinite cost is null on the wire and
// +Inf again when read.
func TestFigureJSONCarriesInfinity(t *testing.T) {
	b, err := json.Marshal(struct{ C Figure }{Figure(math.Inf(1))})
	if err != nil || string(b) != `{"C":null}` {
		t.Fatalf("%s %v", b, err)
	}
	var v struct{ C Figure }
	if err := json.Unmarshal(b, &v); err != nil || !math.IsInf(float64(v.C), 1) {
		t.Fatalf("%v %v", v.C, err)
	}
}

func replicaStates(h *harness) []index.ReplicaState {
	var out []index.ReplicaState
	for _, ep := range h.eps {
		st, _ := h.ix.Replica(ep.Replica)
		out = append(out, st)
	}
	return out
}

// FuzzExplain: any body on any path is explained without a panic, the
// answer always encodes as JSON, and it never routes (nothing in flight).
func FuzzExplain(f *testing.F) {
	f.Add("/v1/completions", []byte(`{"model":"qwen3","prompt":"`+sharedPrefix+`"}`))
	f.Add("/v1/chat/completions", []byte(`{"model":"qwen3","messages":[{"role":"user","content":"hi"}]}`))
	f.Add("/v1/completions", []byte(`{"model":"sql-lora","prompt":[1,2,3,4,5,6,7,8,9]}`))
	f.Add("/x", []byte(`[`))
	ix := index.New(index.Options{TTL: time.Hour, MaxEntries: 1 << 16, CPUTierWeight: 0.5, SpeculativeTTL: time.Second})
	pid, err := ix.AddPool("qwen")
	if err != nil {
		f.Fatal(err)
	}
	var eps []Endpoint
	for i := range 3 {
		rp, err := ix.AddReplica(pid, fmt.Sprintf("vllm-%d", i))
		if err != nil {
			f.Fatal(err)
		}
		eps = append(eps, Endpoint{Replica: rp, Name: fmt.Sprintf("vllm-%d", i), Address: fmt.Sprintf("127.0.0.1:%d", 8001+i), DPSize: 1})
	}
	ix.SetHealthy(eps[2].Replica, false)
	r, err := NewRouter(ix, []PoolConfig{{
		Name: "qwen", ID: pid, Models: []string{"qwen3"}, LoRAAdapters: []string{"sql-lora"},
		Tokenizer: routetest.WordTokenizer{}, Chat: routetest.LineChat{}, Keys: routetest.PoolKeys(f, "qwen", testBlockSize), Endpoints: eps,
	}}, RouterOptions{PrefillTokensPerSecond: 10000, ForeignRequestTokens: 1024, PlacementSlack: 0.5, FailOpen: true})
	if err != nil {
		f.Fatal(err)
	}
	d := r.DecideIDs("qwen3", routetest.WordTokenizer{}.Encode(sharedPrefix, true))
	ix.Store(eps[0].Replica, d.Keys, index.TierGPU)
	f.Fuzz(func(t *testing.T, path string, body []byte) {
		x := r.Explain(path, body, "")
		if _, err := json.Marshal(x); err != nil {
			t.Fatalf("explanation does not encode: %v", err)
		}
		for _, ep := range eps {
			if st, _ := ix.Replica(ep.Replica); st.InFlight != 0 || st.PendingTokens != 0 {
				t.Fatalf("Explain routed to %s: %+v", ep.Name, st)
			}
		}
	})
}

// With flow control on, Explain and PoolStatus give the saturation test of
// a priority: below the pool's top one the lower bound
// (low_priority_saturation_ttft) and the reserved replicas apply, so a
// request without an objective is shown waiting while an interactive one
// is decided at once.
func TestExplainShowsTheBandTest(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	o := h.router.Options()
	o.Flow.Enabled = true
	o.Flow.SaturationTTFT, o.Flow.LowPrioritySaturationTTFT, o.Flow.SaturationWaiting = time.Second, 100*time.Millisecond, 0
	o.Flow.Objectives = map[string]int{"interactive": 5}
	o.Flow.ReservedReplicas = 1
	h.router.SetOptions(o)
	fc := NewFlowControl(h.router, nil, h.clock)
	for _, ep := range h.eps {
		d := Decision{Pool: "qwen", Endpoint: &ep, PromptTokens: 5000} // 0.5 s queued on each
		h.router.BeginLoad(&d)
	}
	body := completion("a fresh prompt")
	x := h.router.Explain("/v1/completions", body, "")
	if b := x.FlowBand; b == nil || b.Priority != 0 || b.SaturationTTFT != 0.1 || b.ReservedReplicas != 1 || !b.Saturated {
		t.Fatalf("no objective: band test %+v, want priority 0, 0.1 s, 1 reserved, saturated", b)
	}
	x = h.router.Explain("/v1/completions", body, "interactive")
	if b := x.FlowBand; b == nil || b.Priority != 5 || b.SaturationTTFT != 1 || b.ReservedReplicas != 0 || b.Saturated {
		t.Fatalf("interactive: band test %+v, want priority 5, 1 s, none reserved, not saturated", b)
	}
	s, _ := fc.PoolStatus("qwen")
	if s.Top != (BandTest{Priority: 5, SaturationTTFT: 1}) ||
		s.BelowTop != (BandTest{Priority: 4, SaturationTTFT: 0.1, ReservedReplicas: 1, Saturated: true}) {
		t.Fatalf("status: top %+v, below %+v", s.Top, s.BelowTop)
	}
	// Off: no band test, and nothing reserved in the decision.
	o.Flow.Enabled = false
	h.router.SetOptions(o)
	if x := h.router.Explain("/v1/completions", body, ""); x.FlowBand != nil || x.Flow == nil || x.Flow.Enabled {
		t.Fatalf("flow control off: flow %+v band %+v", x.Flow, x.FlowBand)
	}
}
