package routebench

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/kvroute/kvroute/blockhash"
	"github.com/kvroute/kvroute/internal/testdata"
	"github.com/kvroute/kvroute/tokenize"
)

// smallBench is a 2-engine fleet small enough for a few seconds per phase.
func smallBench(t *testing.T, policies []string, ws ...WorkloadParams) BenchOptions {
	return BenchOptions{
		TokenizerDir: testdata.TokenizerDir(t, "qwen3"), Model: "qwen3", Replicas: 2, NumBlocks: 64, BlockSize: 16, MaxNumSeqs: 4,
		Prefill: 20 * time.Microsecond, Decode: time.Millisecond, Seed: "0", Workloads: ws,
		Rates: []float64{20}, PhaseDuration: time.Second, MinRequests: 16, LoadWeight: 256, Policies: policies,
		Gateways: 1, RestartAt: 1.0 / 3, JoinAt: 0.5,
	}
}

func byLabelPolicy(results []*Result) map[string]map[string]*Result {
	out := map[string]map[string]*Result{}
	for _, r := range results {
		if out[r.Label()] == nil {
			out[r.Label()] = map[string]*Result{}
		}
		out[r.Label()][r.Policy] = r
	}
	return out
}

// TestChatEvictionAndTenantsEndToEnd runs the three new workloads through
// real sockets: chat bodies rendered by the engines with Qwen3's template,
// Zipf documents larger than the fleet, and salted/adapter requests. The
// ceilings encode every request offline; their prompt-token totals equal what
// the engines reported, so the offline encoding (template, special tokens) is
// the engines' own.
func TestChatEvictionAndTenantsEndToEnd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	o := smallBench(t, []string{PolicyApproxPrefix, PolicyKVRouteTokens, PolicyGreedy},
		WorkloadParams{Kind: Chat, Groups: 3, PrefixWords: 120, QuestionWords: 10, MaxTokens: 2, Seed: 1},
		WorkloadParams{Kind: Eviction, Groups: 8, PrefixWords: 500, QuestionWords: 6, ZipfS: 0.5, MaxTokens: 2, Seed: 2},
		WorkloadParams{Kind: Tenants, Groups: 2, PrefixWords: 150, QuestionWords: 6, Tenants: 1, Adapters: 1, MaxTokens: 2, Seed: 3})
	results, err := RunBench(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	got := byLabelPolicy(results)
	for _, kind := range []string{Chat, Eviction, Tenants} {
		rs := got[kind]
		inf, pooled := rs[BoundInfinite], rs[BoundPooled]
		if len(rs) != 5 || inf == nil || pooled == nil {
			t.Fatalf("%s: results %v", kind, rs)
		}
		if pooled.HitRate() > inf.HitRate() || inf.HitRate() == 0 {
			t.Fatalf("%s: pooled %.3f above infinite %.3f, or no reuse at all", kind, pooled.HitRate(), inf.HitRate())
		}
		for _, p := range o.Policies {
			r := rs[p]
			if r.Errors != 0 || r.Requests != 20 {
				t.Fatalf("%s %s: %d errors of %d", kind, p, r.Errors, r.Requests)
			}
			if r.PromptTokens != inf.PromptTokens {
				t.Fatalf("%s %s: engines saw %d prompt tokens, the offline encoding %d", kind, p, r.PromptTokens, inf.PromptTokens)
			}
			if r.EngineQueriedTokens != r.PromptTokens || r.EngineHitTokens != r.CachedTokens {
				t.Fatalf("%s %s: usage %d/%d, engine metrics %d/%d", kind, p, r.CachedTokens, r.PromptTokens, r.EngineHitTokens, r.EngineQueriedTokens)
			}
			if r.CachedTokens == 0 || r.HitRate() > inf.HitRate() {
				t.Fatalf("%s %s: hit rate %.3f (infinite-cache bound %.3f)", kind, p, r.HitRate(), inf.HitRate())
			}
			t.Logf("%s %s: hit rate %.1f %% (pooled bound %.1f %%, infinite %.1f %%), p90 %v", kind, p, 100*r.HitRate(),
				100*pooled.HitRate(), 100*inf.HitRate(), r.Percentile(0.9))
		}
	}
	// The eviction workload exceeds the fleet: the ceilings say so.
	// The eviction workload exceeds the fleet: the ceilings say so, and the
	// pooled cache evicts.
	e := got[Eviction]
	if inf := e[BoundInfinite]; inf.SharedBlocks <= 2*63 || inf.SharedBlocks >= inf.WorkingSetBlocks || e[BoundPooled].HitRate() >= inf.HitRate() {
		t.Fatalf("eviction shares %d of %d blocks (fleet: 126); pooled %.3f, infinite %.3f", inf.SharedBlocks, inf.WorkingSetBlocks,
			e[BoundPooled].HitRate(), inf.HitRate())
	}
}

// TestThreeGatewaysEndToEnd puts three gateways in front of one fleet: three
// approx-prefix instances and three kvroute servers, each with its own state.
// Every kvroute decides a third of the requests.
func TestThreeGatewaysEndToEnd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	o := smallBench(t, []string{PolicyApproxPrefix, PolicyKVRouteTokens},
		WorkloadParams{Kind: SharedPrefix, Groups: 3, UsersPerGroup: 3, PrefixWords: 200, QuestionWords: 6, MaxTokens: 2, Seed: 4})
	o.Gateways, o.MinRequests = 3, 21
	results, err := RunBench(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	rs := byLabelPolicy(results)["shared-prefix · 3 gateways"]
	if rs == nil {
		t.Fatalf("no section for 3 gateways: %v", byLabelPolicy(results))
	}
	for _, p := range o.Policies {
		if r := rs[p]; r.Errors != 0 || r.Requests != 21 {
			t.Fatalf("%s: %d errors of %d (the first: %s)", p, r.Errors, r.Requests, r.FirstError)
		}
	}
	kv := rs[PolicyKVRouteTokens]
	total := 0
	for _, n := range kv.Decisions {
		total += n
	}
	if total != 21 {
		t.Fatalf("the three kvroutes decided %d requests, want 21: %v", total, kv.Decisions)
	}
}

// TestChurnEndToEnd restarts engine 0 (cache gone, same addresses) a third
// into the phase and starts engine 2, configured in kvroute from the start
// but down until then, halfway. Under round-robin both get traffic
// afterwards; under kvroute no request goes to the restarted engine for
// blocks it no longer holds (the churn goal, docs/BENCHMARKS.md).
func TestChurnEndToEnd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	o := smallBench(t, []string{PolicyRoundRobin, PolicyKVRouteTokens},
		WorkloadParams{Kind: SharedPrefix, Groups: 3, UsersPerGroup: 3, PrefixWords: 200, QuestionWords: 6, MaxTokens: 2, Seed: 5})
	o.Churn, o.PhaseDuration = true, 3*time.Second
	results, err := RunBench(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		if r.Bound {
			continue
		}
		c := r.Churn
		if c == nil || c.Restarted != "vllm-0" || c.Joined != "vllm-2" {
			t.Fatalf("%s: churn %+v", r.Policy, c)
		}
		if r.PerReplica["vllm-2"] != c.ToJoined {
			t.Fatalf("%s: joined engine got %d by the churn log, %d by the engine's counters", r.Policy, c.ToJoined, r.PerReplica["vllm-2"])
		}
		// Round-robin shows the harness's restart and join work: both
		// engines serve afterwards. A cache-aware router may rightly leave an
		// empty engine idle while a holder has room (this light load); what
		// it must never do is route to it for blocks it lost.
		if r.Policy == PolicyRoundRobin && (c.ToJoined == 0 || c.ToRestarted == 0) {
			t.Fatalf("%s: joined engine got %d (per replica %v), restarted %d after its restart", r.Policy, c.ToJoined, r.PerReplica, c.ToRestarted)
		}
		if c.StaleRouted != 0 {
			t.Errorf("%s: %d requests routed to the restarted engine for blocks it no longer holds", r.Policy, c.StaleRouted)
		}
		if r.Requests-r.Errors < r.Requests*3/4 {
			t.Fatalf("%s: %d of %d failed", r.Policy, r.Errors, r.Requests)
		}
		t.Logf("%s: %d errors (%d rejected); churn %+v", r.Policy, r.Errors, r.Rejected, *c)
	}
}

// TestGreedySeesWhatTheEnginesHold: the greedy policy asks the engine's real
// cache with the request as the gateway sees it; a base-model request names
// the model, which must not be taken for an adapter (it was, and the policy
// saw no cached tokens anywhere — checked that this test failed then).
func TestGreedySeesWhatTheEnginesHold(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	o := smallBench(t, nil)
	tok, err := tokenize.Load(o.TokenizerDir)
	if err != nil {
		t.Fatal(err)
	}
	fleet, err := StartEmuFleet(ctx, EmuFleetOptions{Replicas: 2, Model: "qwen3", Tokenizer: tok, BlockSize: 16, NumBlocks: 64,
		HashAlgo: blockhash.SHA256, Seed: "0", LoRAAdapters: []string{AdapterName(0)}, PrefillPerToken: time.Microsecond, DecodePerToken: time.Microsecond})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	d := &Driver{Model: "qwen3"}
	base := Request{Prompt: strings.Repeat("cache block token route prefix ", 20), MaxTokens: 1}
	adapter := base
	adapter.Model = AdapterName(0)
	for _, r := range []Request{base, adapter} {
		// Serve each on replica 1 directly.
		if s := d.send(ctx, "http://"+fleet.HTTP.Addrs[1], 0, r); s.Err != nil {
			t.Fatal(s.Err)
		}
	}
	g := fleet.Greedy(256)
	for _, r := range []Request{base, adapter} {
		_, body := RequestBody("qwen3", r)
		var fields struct{ Model string }
		_ = json.Unmarshal(body, &fields)
		pr := PickRequest{Model: fields.Model, Prompt: r.Prompt, Body: body}
		ids := g.Encode(pr)
		if got := g.CachedTokens(1, ids, pr.Model, ""); got < len(ids)-32 {
			t.Fatalf("model %q: replica 1 holds %d of %d tokens by the greedy policy's look", pr.Model, got, len(ids))
		}
		if got := g.CachedTokens(0, ids, pr.Model, ""); got != 0 {
			t.Fatalf("model %q: replica 0 holds %d tokens", pr.Model, got)
		}
		if got := g.Pick(pr, FleetView{InFlight: []int{0, 0}}); got != 1 {
			t.Fatalf("model %q: picked %d, want 1", pr.Model, got)
		}
	}
}
