package routing

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/kvroute/kvroute/blockhash"
	"github.com/kvroute/kvroute/index"
	"github.com/kvroute/kvroute/internal/routetest"
)

var costOpts = RouterOptions{PrefillTokensPerSecond: 10000, ForeignRequestTokens: 1000,
	KVUsageCeiling: 0.9, KVFullPenalty: 0.5, PlacementSlack: 0.5}

func TestCostIsSecondsToFirstToken(t *testing.T) {
	r := &Router{}
	r.SetOptions(costOpts)
	cases := []struct {
		name     string
		st       index.ReplicaState
		rate     float64
		uncached float64
		want     float64
	}{
		{"idle, own prefill only", index.ReplicaState{}, 10000, 5000, 0.5},
		{"learned rate doubles speed", index.ReplicaState{}, 20000, 5000, 0.25},
		{"own queued prefill ahead", index.ReplicaState{PendingTokens: 10000}, 10000, 5000, 1.5},
		{"own in flight without queued prefill costs nothing", index.ReplicaState{InFlight: 4}, 10000, 0, 0},
		{"foreign waiting at the configured size", index.ReplicaState{Load: index.Load{Waiting: 3}}, 10000, 0, 0.3},
		{"foreign waiting at the learned mean", index.ReplicaState{Load: index.Load{Waiting: 3}, MeanPromptTokens: 2000}, 10000, 0, 0.6},
		{"scraped queue that is our own is not counted twice",
			index.ReplicaState{Load: index.Load{Running: 2, Waiting: 1}, InFlight: 3, InFlightAtLoad: 3}, 10000, 0, 0},
		{"foreign running costs nothing", index.ReplicaState{Load: index.Load{Running: 5}}, 10000, 0, 0},
		{"full KV costs a penalty", index.ReplicaState{Load: index.Load{KVUsage: 0.95}}, 10000, 1000, 0.6},
		{"KV at the ceiling costs nothing", index.ReplicaState{Load: index.Load{KVUsage: 0.9}}, 10000, 1000, 0.1},
		{"negative uncached is none", index.ReplicaState{}, 10000, -50, 0},
		{"NaN load never wins", index.ReplicaState{Load: index.Load{Waiting: math.NaN()}}, 10000, 0, math.Inf(1)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := r.cost(&candidate{state: c.st, rate: c.rate}, c.uncached)
			if math.Abs(got-c.want) > 1e-9 && !(math.IsInf(c.want, 1) && math.IsInf(got, 1)) {
				t.Fatalf("cost = %g s, want %g s", got, c.want)
			}
		})
	}
}

// TestCachedDocumentOutweighsAShortQueue puts in
// numbers: a holder with a few queued requests still wins a long document,
// because the prefill it saves is worth more seconds than the queue costs;
// a holder with a long prefill queue does not.
func TestCachedDocumentOutweighsAShortQueue(t *testing.T) {
	r := &Router{}
	r.SetOptions(costOpts)
	const prompt = 4000 // tokens; 0.4 s of prefill at 10k tokens/s
	holder := &candidate{state: index.ReplicaState{InFlight: 4, PendingTokens: 500}, rate: 10000}
	idle := &candidate{state: index.ReplicaState{}, rate: 10000}
	if h, i := r.cost(holder, 100), r.cost(idle, prompt); h >= i {
		t.Fatalf("holder %g s >= idle %g s: the load term outweighs a cached document", h, i)
	}
	busy := &candidate{state: index.ReplicaState{PendingTokens: 20000}, rate: 10000}
	if b, i := r.cost(busy, 100), r.cost(idle, prompt); b <= i {
		t.Fatalf("holder with 2 s of queued prefill %g s <= idle %g s", b, i)
	}
}

// TestFullCacheIsNotIneligible: every replica at 100 % KV usage still
// serves (no request rejected while an engine is up).
func TestFullCacheIsNotIneligible(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	for _, ep := range h.eps {
		h.ix.SetLoad(ep.Replica, index.Load{KVUsage: 1, Running: 8, Waiting: 4}, h.clock())
	}
	for i := 0; i < 5; i++ {
		d := h.router.Decide("/v1/completions", completion(fmt.Sprintf("%s %d", sharedPrefix, i)), nil)
		if d.Endpoint == nil || d.Outcome == OutcomeRejected {
			t.Fatalf("request %d with every KV cache full: %s %s (status %d)", i, d.Outcome, d.Reason, d.Status)
		}
		h.router.Begin(&d)
		h.router.End(&d)
	}
}

// homeOf is the endpoint a prompt nobody holds goes to on an idle fleet
// whose caches have been written alike: its rendezvous winner.
func (h *harness) homeOf(prompt string) Endpoint {
	h.t.Helper()
	d := h.router.Decide("/v1/completions", completion(prompt), nil)
	if d.Endpoint == nil {
		h.t.Fatalf("no endpoint for a prompt on an idle fleet: %+v", d)
	}
	return *d.Endpoint
}

// write books tokens uncached tokens begun and ended on replica: its cache
// written that much lately, nothing left queued.
func (h *harness) write(r index.Replica, tokens int) {
	h.ix.EndWork(r, h.ix.BeginWork(r, tokens, 10000))
}

// TestPlacementTakesTheLeastWrittenCache: a prompt nobody holds goes, among
// the replicas costing within placement_slack of the cheapest, to the one
// whose cache has been written least lately, even when that is not its
// rendezvous home; a replica beyond the bound (a long queue) is not a
// target however little it has been written.
func TestPlacementTakesTheLeastWrittenCache(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	doc := "a document nobody holds " + strings.Repeat(sharedPrefix+" ", 4)
	home := h.homeOf(doc)
	// The home has been written most, another replica least.
	var least Endpoint
	for i, ep := range h.eps {
		switch {
		case ep.Address == home.Address:
			h.write(ep.Replica, 50000)
		case least.Address == "":
			least = ep
		default:
			h.write(ep.Replica, 20000+i)
		}
	}
	x := h.router.Explain("/v1/completions", completion(doc), "")
	if got := h.route(completion(doc)); got != least.Address {
		t.Fatalf("placed on %s, want %s, whose cache was written least lately (home %s): %+v", got, least.Address, home.Address, x)
	}
	if x.Pick != least.Name || !(x.SlackBound > 0) {
		t.Fatalf("explanation: pick %s, slack bound %v", x.Pick, x.SlackBound)
	}
	for _, c := range x.Candidates {
		if !c.WithinSlack || c.TurnoverTokens != c.RecentUncachedTokens+c.UncachedTokens {
			t.Fatalf("idle candidate %+v: want within the slack, turnover = recent + uncached", c)
		}
	}
	// Far beyond the bound: 10 s of queued prefill on the least written one.
	for _, ep := range h.eps {
		h.ix.Clear(ep.Replica) // the placed document's speculative blocks
	}
	h.ix.BeginWork(least.Replica, 100000, 10000)
	x = h.router.Explain("/v1/completions", completion(doc), "")
	if x.Pick == least.Name {
		t.Fatalf("placed on %s with 10 s of queued prefill: %+v", least.Name, x)
	}
	for _, c := range x.Candidates {
		if c.Name == least.Name && c.WithinSlack {
			t.Fatalf("a replica 10 s behind is within the slack bound %v: %+v", x.SlackBound, c)
		}
	}
}

// TestAPoolRateJudgesEveryReplica: a replica whose learned prefill rate is
// low (a few noisy samples) is not priced as slower than its peers, so an
// idle fleet's new document can still go to it when its cache was written
// least. Priced at its own rate it would cost twice as much, never be the
// cheapest, never be given a request and never learn better.
func TestAPoolRateJudgesEveryReplica(t *testing.T) {
	h := newHarness(t, harnessOptions{slack: ptr(0.0)})
	at := h.clock()
	rates := []float64{10000, 10000, 5000}
	for i, ep := range h.eps {
		h.ix.SetLoad(ep.Replica, index.Load{PromptTokens: 1000, PrefillSeconds: 1, PrefillCount: 10}, at)
		h.ix.SetLoad(ep.Replica, index.Load{PromptTokens: 1000 + rates[i], PrefillSeconds: 2, PrefillCount: 20}, at)
		if i < 2 {
			h.write(ep.Replica, 4000)
		}
	}
	slow := h.eps[2]
	doc := "a new document " + strings.Repeat(sharedPrefix+" ", 4)
	x := h.router.Explain("/v1/completions", completion(doc), "")
	if x.Pick != slow.Name {
		t.Fatalf("new document went to %s, want %s, idle and written least: %+v", x.Pick, slow.Name, x)
	}
	for _, c := range x.Candidates {
		if math.Abs(float64(c.PrefillRate)-25000.0/3) > 1e-6 {
			t.Fatalf("%s priced at %v tokens/s, want the pool's mean %v", c.Name, c.PrefillRate, 25000.0/3)
		}
	}
}

// TestALongHeldPrefixKeepsItsRequest: the holder of most of a prompt keeps
// it although its cache is written far faster than the others': the
// others' cost (the whole prompt's prefill) is beyond the slack bound.
func TestALongHeldPrefixKeepsItsRequest(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	doc := strings.Repeat(sharedPrefix+" ", 8)
	h.ix.Store(h.eps[1].Replica, h.keysOf(doc, blockhash.RequestKeys{}), index.TierGPU)
	h.write(h.eps[1].Replica, 1000000)
	if got := h.route(completion(doc + " one more question")); got != h.eps[1].Address {
		t.Fatalf("went to %s, want the holder %s", got, h.eps[1].Address)
	}
}

// TestIdleReplicasWithSlightlyDifferentRatesAreTied: an idle fleet whose
// learned prefill rates differ by a few percent (identical engines measured
// with noise) must not send every new document to the fastest-looking one.
// The fastest already holds a document and has nothing queued; a new
// document goes to another idle replica within 20 % of its cost, not onto
// it (real-socket shared-prefix at 8 req/s: 18 of 32 requests on
// one replica).
func TestIdleReplicasWithSlightlyDifferentRatesAreTied(t *testing.T) {
	h := newHarness(t, harnessOptions{slack: ptr(0.0)})
	at := h.clock()
	for i, ep := range h.eps {
		// Two scrapes 1 s of prefill apart: rates 10,000, 10,300, 10,600 tokens/s.
		rate := 10000 * (1 + 0.03*float64(i))
		h.ix.SetLoad(ep.Replica, index.Load{PromptTokens: 1000, PrefillSeconds: 1, PrefillCount: 10}, at)
		h.ix.SetLoad(ep.Replica, index.Load{PromptTokens: 1000 + rate, PrefillSeconds: 2, PrefillCount: 20}, at)
		if st, _ := h.ix.Replica(ep.Replica); st.PrefillRate != rate {
			t.Fatalf("%s learned %g tokens/s, want %g", ep.Name, st.PrefillRate, rate)
		}
	}
	fastest := h.eps[len(h.eps)-1]
	held := make([]index.BlockKey, 40)
	for i := range held {
		held[i] = index.BlockKey(0xF00D000 + i)
	}
	h.ix.Store(fastest.Replica, held, index.TierGPU)
	doc := "a new document " + strings.Repeat(sharedPrefix+" ", 4)
	if got := h.route(completion(doc)); got == fastest.Address {
		t.Fatalf("a new document went to the fastest-looking idle replica, which holds %d blocks while the others hold none", len(held))
	}
}

// TestDecideIDsIsDecide: the fleet simulator's entry point takes the same
// path as a parsed /v1/completions body of token ids.
func TestDecideIDsIsDecide(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	ids := routetest.WordTokenizer{}.Encode(sharedPrefix, true)
	h.ix.Store(h.eps[2].Replica, h.keysOf(sharedPrefix, blockhash.RequestKeys{}), index.TierGPU)
	var body strings.Builder
	body.WriteString(`{"model":"qwen3","prompt":[`)
	for i, id := range ids {
		if i > 0 {
			body.WriteByte(',')
		}
		fmt.Fprint(&body, id)
	}
	body.WriteString(`]}`)
	a := h.router.Decide("/v1/completions", []byte(body.String()), nil)
	b := h.router.DecideIDs("qwen3", ids)
	if a.Endpoint == nil || b.Endpoint == nil || a.Endpoint.Address != h.eps[2].Address || b.Endpoint.Address != a.Endpoint.Address ||
		a.MatchedTokens != b.MatchedTokens || a.Outcome != b.Outcome || len(a.Keys) != len(b.Keys) {
		t.Fatalf("Decide %+v\nDecideIDs %+v", a, b)
	}
	if d := h.router.DecideIDs("nope", ids); d.Outcome != OutcomeRejected || d.Status != 404 {
		t.Fatalf("unknown model: %+v", d)
	}
}

// TestNewConversationsSpreadOverTheWholeFleet: every new conversation
// starts with the fleet's system prompt. A replica that has not been given
// one yet lacks that prefix, but at a placement_slack of 0.2 (the default)
// it costs within the slack of the holders — the system prompt is short
// beside the conversation — so it competes, and the replica whose cache was
// written least lately takes the conversation: the holder, written most,
// does not take them all (at slack 0 the holder took every new conversation
// of the Mooncake trace with spread arrivals: 22.0 % hits against 26.1 %).
func TestNewConversationsSpreadOverTheWholeFleet(t *testing.T) {
	h := newHarness(t, harnessOptions{slack: ptr(0.2)})
	conversation := func(i int) []byte {
		var b strings.Builder
		b.WriteString(sharedPrefix)
		for w := range 200 {
			fmt.Fprintf(&b, " c%dw%d", i, w)
		}
		return completion(b.String())
	}
	got := map[string]int{}
	for i := range len(h.eps) {
		dest := h.route(conversation(i))
		got[dest]++
	}
	if len(got) != len(h.eps) {
		t.Fatalf("%d new conversations went to %d of %d idle replicas: %v", len(h.eps), len(got), len(h.eps), got)
	}
	// More written to the first two replicas: the third takes the next.
	for _, ep := range h.eps[:2] {
		h.write(ep.Replica, 100)
	}
	if dest := h.route(conversation(len(h.eps))); dest != h.eps[2].Address {
		t.Fatalf("new conversation went to %s, want %s (its cache written least lately)", dest, h.eps[2].Address)
	}
}

func ptr[T any](v T) *T { return &v }

// TestAHolderKeepsAnUncachedPrefillOffTheFleet: a holder of part of a prompt
// whose queue costs this request more than the part it holds saves (the
// idle replica reaches the first token sooner) still gets the request,
// while its queue is shorter than the prefill the idle replica would add:
// the price counts the uncached tokens' prefill seconds as well as this
// request's wait.
func TestAHolderKeepsAnUncachedPrefillOffTheFleet(t *testing.T) {
	h := newHarness(t, harnessOptions{slack: ptr(0.0)})
	doc := strings.Repeat(sharedPrefix+" ", 8)
	holder := h.eps[1]
	h.ix.Store(holder.Replica, h.keysOf(doc, blockhash.RequestKeys{}), index.TierGPU)
	req := completion(doc + " " + strings.Repeat("another question ", 40))
	x := h.router.Explain("/v1/completions", req, "")
	held := 0.0
	for _, c := range x.Candidates {
		if c.Name == holder.Name {
			held = float64(x.PromptTokens) - float64(c.UncachedTokens)
		}
	}
	if held <= 0 {
		t.Fatalf("holder holds nothing of the prompt: %+v", x)
	}
	h.ix.BeginWork(holder.Replica, int(1.5*held), 10000)
	x = h.router.Explain("/v1/completions", req, "")
	var holderTTFT, idleTTFT float64
	for _, c := range x.Candidates {
		ttft := float64(c.Cost - c.FleetSeconds)
		if c.Name == holder.Name {
			holderTTFT = ttft
		} else if idleTTFT == 0 || ttft < idleTTFT {
			idleTTFT = ttft
		}
	}
	if holderTTFT <= idleTTFT {
		t.Fatalf("holder's time to first token %g s <= idle %g s: the queue does not outweigh the held part", holderTTFT, idleTTFT)
	}
	if x.Pick != holder.Name {
		t.Fatalf("went to %s, want the holder %s (queue 1.5 × its held %g tokens): %+v", x.Pick, holder.Name, held, x.Candidates)
	}
}
