package routing

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/kvroute/kvroute/blockhash"
	"github.com/kvroute/kvroute/index"
	"github.com/kvroute/kvroute/internal/routetest"
)

var costOpts = RouterOptions{PrefillTokensPerSecond: 10000, ForeignRequestTokens: 1000, DecodeInterference: 0.002,
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
		{"own in flight decoding", index.ReplicaState{InFlight: 4}, 10000, 0, 0.008},
		{"foreign waiting at the configured size", index.ReplicaState{Load: index.Load{Waiting: 3}}, 10000, 0, 0.3},
		{"foreign waiting at the learned mean", index.ReplicaState{Load: index.Load{Waiting: 3}, MeanPromptTokens: 2000}, 10000, 0, 0.6},
		{"scraped queue that is our own is not counted twice",
			index.ReplicaState{Load: index.Load{Running: 2, Waiting: 1}, InFlight: 3, InFlightAtLoad: 3}, 10000, 0, 0.006},
		{"foreign running decode", index.ReplicaState{Load: index.Load{Running: 5}}, 10000, 0, 0.010},
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

// TestCachedDocumentOutweighsAShortQueue is hypothesis (a) of issue 14 in
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
// serves (issue 14: no request rejected while an engine is up).
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

// TestPlacementIsStickyWithinTheLoadBound: a prompt nobody holds goes to its
// rendezvous replica while that one is within placement_slack of the
// cheapest, and to the cheapest once it is not.
func TestPlacementIsStickyWithinTheLoadBound(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	doc := "an evicted document " + strings.Repeat(sharedPrefix+" ", 4)
	first := h.route(completion(doc))
	var home Endpoint
	for _, ep := range h.eps {
		if ep.Address == first {
			home = ep
		}
	}
	h.ix.Clear(home.Replica) // forget the speculative entries: evicted everywhere
	// A little own queue (well within half the prompt's prefill time): stays.
	tk := h.ix.BeginWork(home.Replica, 2, 10000)
	if got := h.route(completion(doc)); got != first {
		t.Fatalf("re-placed on %s, want its rendezvous home %s", got, first)
	}
	h.ix.EndWork(home.Replica, tk)
	h.ix.Clear(home.Replica)
	// Far beyond the bound: the cheapest wins.
	h.ix.BeginWork(home.Replica, 100000, 10000)
	if got := h.route(completion(doc)); got == first {
		t.Fatal("placed on its rendezvous home with 10 s of queued prefill")
	}
}

// TestPlacementSkipsAReplicaHoldingMoreThanItsShare: sticky placement is
// bounded by cache occupancy too. A prompt's rendezvous home that holds far
// more blocks than the least occupied replica would evict to take it while
// another has room (issue 14: at light load, documents hashed onto one
// replica evicted each other); once the caches are even again, the prompt
// goes home again.
func TestPlacementSkipsAReplicaHoldingMoreThanItsShare(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	doc := "a document nobody holds " + strings.Repeat(sharedPrefix+" ", 4)
	first := h.route(completion(doc))
	var home Endpoint
	for _, ep := range h.eps {
		if ep.Address == first {
			home = ep
		}
	}
	h.ix.Clear(home.Replica)
	// Other documents fill the home: far more than the mean of the fleet.
	other := make([]index.BlockKey, 400)
	for i := range other {
		other[i] = index.BlockKey(0xD0C0000 + i)
	}
	h.ix.Store(home.Replica, other, index.TierGPU)
	if got := h.route(completion(doc)); got == first {
		t.Fatalf("placed on its rendezvous home holding %d blocks while the others hold none", len(other))
	}
	for _, ep := range h.eps {
		h.ix.Clear(ep.Replica)
	}
	if got := h.route(completion(doc)); got != first {
		t.Fatalf("placed on %s once every cache is empty, want its rendezvous home %s", got, first)
	}
}

// TestIdleReplicasWithSlightlyDifferentRatesAreTied: an idle fleet whose
// learned prefill rates differ by a few percent (identical engines measured
// with noise) must not send every new document to the fastest-looking one.
// The fastest already holds a document and has nothing queued; a new
// document goes to another idle replica within 20 % of its cost, not onto
// it (issue 14, real-socket shared-prefix at 8 req/s: 18 of 32 requests on
// one replica).
func TestIdleReplicasWithSlightlyDifferentRatesAreTied(t *testing.T) {
	h := newHarness(t, harnessOptions{strictPlacement: true})
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

// TestForeignRunningShareDrainsSinceTheScrape: with foreign_running_share,
// each running request another router sent costs that share of the mean
// uncached prompt as queued prefill, drained at the prefill rate since the
// scrape that saw it; at 0 (the default) running foreign requests cost no
// prefill, as before.
func TestForeignRunningShareDrainsSinceTheScrape(t *testing.T) {
	r := &Router{}
	opts := costOpts
	opts.DecodeInterference = 0
	scrape := time.Unix(100, 0)
	// 3 running, 1 of them this router's: 2 foreign, mean 2,000 tokens.
	st := index.ReplicaState{Load: index.Load{Running: 3}, InFlight: 1, InFlightAtLoad: 1, MeanPromptTokens: 2000, LoadAt: scrape}
	for _, c := range []struct {
		share float64
		age   time.Duration
		want  float64 // seconds at 10,000 tokens/s, no uncached tokens of its own
	}{
		{0, 0, 0},
		{0.5, 0, 0.2},                      // 2 × 2,000 × 0.5 = 2,000 tokens
		{0.5, 50 * time.Millisecond, 0.15}, // 500 tokens drained
		{0.5, 500 * time.Millisecond, 0},   // all of it
		{1, 100 * time.Millisecond, 0.3},   // 4,000 − 1,000
	} {
		opts.ForeignRunningShare = c.share
		r.SetOptions(opts)
		s := st
		s.At = scrape.Add(c.age)
		if got := r.cost(&candidate{state: s, rate: 10000}, 0); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("share %g, scrape %v old: cost %g s, want %g s", c.share, c.age, got, c.want)
		}
	}
	// Waiting foreign requests are not drained: whole until the next scrape.
	opts.ForeignRunningShare = 0.5
	r.SetOptions(opts)
	w := index.ReplicaState{Load: index.Load{Waiting: 1}, MeanPromptTokens: 2000, LoadAt: scrape, At: scrape.Add(time.Second)}
	if got := r.cost(&candidate{state: w, rate: 10000}, 0); math.Abs(got-0.2) > 1e-9 {
		t.Errorf("foreign waiting request: cost %g s, want 0.2 s", got)
	}
}

// TestNewConversationsSpreadOverTheWholeFleet: every new conversation
// starts with the fleet's system prompt. A replica that has not been given
// one yet lacks that prefix, but it costs within 20 % of the holders (the
// system prompt is short beside the conversation) and it is idle, so it
// takes the next new conversation: were it excluded it would never get one
// (in the simulator, 7 of 16 engines got no request). Among the replicas that
// hold the prefix, the one given the fewest requests lately wins.
func TestNewConversationsSpreadOverTheWholeFleet(t *testing.T) {
	h := newHarness(t, harnessOptions{strictPlacement: true})
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
	// One more to each of the first two replicas: the third, given the
	// fewest requests lately, takes the next new conversation.
	for _, ep := range h.eps[:2] {
		h.ix.EndWork(ep.Replica, h.ix.BeginWork(ep.Replica, 0, 10000))
	}
	if dest := h.route(conversation(len(h.eps))); dest != h.eps[2].Address {
		t.Fatalf("new conversation went to %s, want %s (fewest requests lately)", dest, h.eps[2].Address)
	}
}
