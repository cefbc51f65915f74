package routing

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kvroute/kvroute/blockhash"
	"github.com/kvroute/kvroute/index"
)

// A request prepared while one replica held nothing of it and decided after
// that replica stored its prompt goes there: the decision reads the index
// when it is made, not when the request arrived.
func TestDecidePreparedBindsLate(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	doc := strings.Repeat("a long shared document that some replica will hold ", 20)
	pr := h.router.Prepare("/v1/completions", completion(doc), nil)
	if pr.Pool() != "qwen" || pr.PromptTokens() == 0 || pr.Reason() != "" {
		t.Fatalf("prepared pool %q tokens %d reason %q", pr.Pool(), pr.PromptTokens(), pr.Reason())
	}
	h.ix.Store(h.eps[2].Replica, h.keysOf(doc, blockhash.RequestKeys{}), index.TierGPU)
	d := h.router.DecidePrepared(&pr, nil)
	if d.Endpoint == nil || d.Endpoint.Address != h.eps[2].Address || d.Outcome != OutcomePrefix {
		t.Fatalf("decided %+v, want the replica that stored the prompt since", d)
	}
}

// Decide is Prepare then DecidePrepared, and a Prepared holds its body's
// share of the decision budget until it is decided or discarded.
func TestPreparedHoldsTheDecideBudget(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	body := completion(sharedPrefix)
	o := h.router.Options()
	o.MaxBytesInFlight = int64(len(body))
	h.router.SetOptions(o)
	a := h.router.Prepare("/v1/completions", body, nil)
	if a.Bytes() != len(body) {
		t.Fatalf("holds %d bytes, want %d", a.Bytes(), len(body))
	}
	if d := h.router.Decide("/v1/completions", body, nil); d.Reason != ReasonDecideBudget {
		t.Fatalf("while one waits: reason %q, want %q", d.Reason, ReasonDecideBudget)
	}
	a.Discard()
	a.Discard() // twice is harmless
	b := h.router.Prepare("/v1/completions", body, nil)
	if b.Reason() != "" {
		t.Fatalf("after discard: reason %q", b.Reason())
	}
	if d := h.router.DecidePrepared(&b, nil); d.Endpoint == nil || b.Bytes() != 0 {
		t.Fatalf("decided %+v, still holds %d", d, b.Bytes())
	}
	if d := h.router.Decide("/v1/completions", body, nil); d.Reason == ReasonDecideBudget {
		t.Fatal("budget not released by DecidePrepared")
	}
}

func TestSaturated(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	set := func(ttft time.Duration, waiting float64) {
		o := h.router.Options()
		o.Flow.SaturationTTFT, o.Flow.SaturationWaiting = ttft, waiting
		h.router.SetOptions(o)
	}
	set(time.Second, 5)
	if h.router.Saturated("qwen", nil) {
		t.Fatal("idle fleet saturated")
	}
	if h.router.Saturated("nope", nil) {
		t.Fatal("unknown pool saturated")
	}
	// 1.5 s of prefill queued on every replica (10,000 tokens/s).
	var ds []Decision
	for _, ep := range h.eps {
		d := Decision{Pool: "qwen", Endpoint: &ep, PromptTokens: 15000}
		h.router.BeginLoad(&d)
		ds = append(ds, d)
	}
	if !h.router.Saturated("qwen", nil) {
		t.Fatal("every replica 1.5 s behind a 1 s bound: not saturated")
	}
	// A request whose prompt one replica holds is predicted no faster
	// there: the queue ahead is already over the bound.
	if pr := h.router.Prepare("/v1/completions", completion(sharedPrefix), nil); !h.router.SaturatedFor(&pr) {
		t.Fatal("SaturatedFor disagrees with Saturated on a saturated fleet")
	}
	// Only the subset's replicas count.
	h.router.End(&ds[0])
	if h.router.Saturated("qwen", nil) {
		t.Fatal("a replica freed: still saturated")
	}
	if !h.router.Saturated("qwen", map[string]bool{h.eps[1].Address: true, h.eps[2].Address: true}) {
		t.Fatal("the busy subset is not saturated")
	}
	// The free replica is within the bound for no prompt of its own, but
	// not for a prompt of 1.2 s of prefill that it does not hold.
	long := strings.Repeat("word ", 12000)
	if pr := h.router.Prepare("/v1/completions", completion(long), nil); !h.router.SaturatedFor(&pr) {
		t.Fatal("a 1.2 s prefill fits nowhere under a 1 s bound: not saturated for it")
	} else {
		pr.Discard()
	}
	// The waiting bound alone.
	set(0, 5)
	for _, d := range ds[1:] {
		h.router.End(&d)
	}
	for _, ep := range h.eps {
		h.ix.SetLoad(ep.Replica, index.Load{Waiting: 6}, h.clock())
	}
	if !h.router.Saturated("qwen", nil) {
		t.Fatal("every replica with 6 waiting over a bound of 5: not saturated")
	}
	set(0, 0)
	if h.router.Saturated("qwen", nil) {
		t.Fatal("both tests off: saturated")
	}
}

// Below the pool's top priority a replica is busy past
// LowPrioritySaturationTTFT; priority 0 is the top until a higher priority
// is configured or seen, so requests without an objective are not held
// back for a band nobody uses.
func TestBandSaturated(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	o := h.router.Options()
	o.Flow.SaturationTTFT, o.Flow.LowPrioritySaturationTTFT, o.Flow.SaturationWaiting = time.Second, 100*time.Millisecond, 0
	h.router.SetOptions(o)
	// 0.5 s of prefill queued on every replica (10,000 tokens/s).
	for _, ep := range h.eps {
		d := Decision{Pool: "qwen", Endpoint: &ep, PromptTokens: 5000}
		h.router.BeginLoad(&d)
	}
	if h.router.BandSaturated("qwen", nil, 0) {
		t.Fatal("no priority above 0 configured or seen: priority 0 held back")
	}
	if !h.router.BandSaturated("qwen", nil, -1) {
		t.Fatal("a negative priority is below the top, 0, yet not held back")
	}
	h.router.NoteFlowPriority("qwen", 3)
	h.router.NoteFlowPriority("qwen", 1) // the top stays 3
	if !h.router.BandSaturated("qwen", nil, 0) || !h.router.BandSaturated("qwen", nil, 2) {
		t.Fatal("below a seen priority 3, 0.5 s queued over a 100 ms bound: not saturated")
	}
	if h.router.BandSaturated("qwen", nil, 3) || h.router.BandSaturated("qwen", nil, 4) {
		t.Fatal("the top band held back at the lower bound")
	}
	// Configured objectives raise the top too, and a lower bound that is
	// not lower, or zero, changes nothing.
	h2 := newHarness(t, harnessOptions{})
	o = h2.router.Options()
	o.Flow.SaturationTTFT, o.Flow.LowPrioritySaturationTTFT, o.Flow.SaturationWaiting = time.Second, 100*time.Millisecond, 0
	o.Flow.Objectives = map[string]int{"interactive": 5, "batch": -1}
	h2.router.SetOptions(o)
	for _, ep := range h2.eps {
		d := Decision{Pool: "qwen", Endpoint: &ep, PromptTokens: 5000}
		h2.router.BeginLoad(&d)
	}
	if !h2.router.BandSaturated("qwen", nil, 0) || h2.router.BandSaturated("qwen", nil, 5) {
		t.Fatal("a configured priority 5 does not hold priority 0 back")
	}
	for _, low := range []time.Duration{0, 2 * time.Second} {
		o.Flow.LowPrioritySaturationTTFT = low
		h2.router.SetOptions(o)
		if h2.router.BandSaturated("qwen", nil, 0) {
			t.Fatalf("low_priority_saturation_ttft %v held priority 0 back", low)
		}
	}
}

// ReservedReplicas keeps that many replicas free of lower-band requests
// while a higher band exists: the lower band is placed only on the replicas
// already holding one of its requests, and its saturation is checked over
// those alone, so a higher-band request finds a replica with no lower-band
// prefill ahead. With no band above priority 0, priority 0 uses them all.
func TestReservedReplicas(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	o := h.router.Options()
	o.Flow.Enabled = true
	o.Flow.SaturationTTFT, o.Flow.LowPrioritySaturationTTFT, o.Flow.SaturationWaiting = time.Second, 100*time.Millisecond, 0
	o.Flow.ReservedReplicas = 1
	h.router.SetOptions(o)
	// decide places a 400-word request of priority and keeps it in
	// flight (Begin, no End), returning its replica's address.
	var inFlight []Decision
	decide := func(priority int, i int) string {
		t.Helper()
		pr := h.router.Prepare("/v1/completions", completion(strings.Repeat(fmt.Sprintf("w%d ", i), 400)), nil)
		pr.SetPriority(priority)
		d := h.router.DecidePrepared(&pr, nil)
		if d.Endpoint == nil {
			t.Fatalf("priority %d: no endpoint (%s)", priority, d.Reason)
		}
		h.router.Begin(&d)
		inFlight = append(inFlight, d)
		return d.Endpoint.Address
	}
	endAll := func() {
		for i := range inFlight {
			h.router.End(&inFlight[i])
		}
		inFlight = inFlight[:0]
	}
	// No band above 0: priority 0 spreads over every replica.
	used := map[string]bool{}
	for i := range 9 {
		used[decide(0, i)] = true
	}
	if len(used) != len(h.eps) {
		t.Fatalf("no higher band: priority 0 used %d of %d replicas", len(used), len(h.eps))
	}
	endAll()
	h.router.NoteFlowPriority("qwen", 1)
	used = map[string]bool{}
	for i := range 9 {
		used[decide(0, i)] = true
	}
	if len(used) != len(h.eps)-1 {
		t.Fatalf("below a seen priority 1 with 1 replica reserved: priority 0 used %d of %d replicas", len(used), len(h.eps))
	}
	var free string
	for _, ep := range h.eps {
		if !used[ep.Address] {
			free = ep.Address
		}
	}
	// Past the 100 ms lower bound on both, while the reserved replica is
	// idle.
	for _, ep := range h.eps {
		if used[ep.Address] {
			d := Decision{Pool: "qwen", Endpoint: &ep, PromptTokens: 5000} // 0.5 s
			h.router.BeginLoad(&d)
			inFlight = append(inFlight, d)
		}
	}
	if !h.router.BandSaturated("qwen", nil, 0) {
		t.Fatal("every unreserved replica past the lower bound: priority 0 not held back")
	}
	if h.router.BandSaturated("qwen", nil, 1) {
		t.Fatal("the top band held back with a replica idle")
	}
	if got := decide(1, 100); got != free {
		t.Fatalf("priority 1 went to %s, not the reserved idle replica %s", got, free)
	}
	// All but one is the most reserved: a pool of three keeps two.
	endAll()
	o.Flow.ReservedReplicas = 10
	h.router.SetOptions(o)
	used = map[string]bool{}
	for i := range 6 {
		used[decide(0, i)] = true
	}
	if len(used) != 1 {
		t.Fatalf("reserved_replicas above the pool: priority 0 used %d replicas, want 1", len(used))
	}
	endAll()
}

// FlowStep sheds the expired, then releases by priority while the pool has
// room for the next request's band: a top-priority waiter leaves while a
// lower one stays behind the lower bound.
func TestFlowStep(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	o := h.router.Options()
	o.Flow.Enabled = true
	o.Flow.SaturationTTFT, o.Flow.LowPrioritySaturationTTFT, o.Flow.SaturationWaiting = time.Second, 100*time.Millisecond, 0
	h.router.SetOptions(o)
	h.router.NoteFlowPriority("qwen", 1)
	for _, ep := range h.eps {
		d := Decision{Pool: "qwen", Endpoint: &ep, PromptTokens: 5000} // 0.5 s each
		h.router.BeginLoad(&d)
	}
	q := NewFlowQueue[int](FlowLimits{TTL: time.Second})
	mustPush(t, q, t0, qi{Priority: 0, Value: 1})
	mustPush(t, q, t0, qi{Priority: 1, Value: 2})
	mustPush(t, q, t0.Add(-2*time.Second), qi{Priority: 1, Value: 3}) // expired at t0
	var released, shed []int
	FlowStep(h.router, "qwen", q, t0, func(it FlowItem[int]) { released = append(released, it.Value) },
		func(it FlowItem[int], reason string) {
			if reason != ShedTTL {
				t.Fatalf("shed %d for %q", it.Value, reason)
			}
			shed = append(shed, it.Value)
		})
	if fmt.Sprint(released, shed) != "[2] [3]" || q.Len() != 1 {
		t.Fatalf("released %v shed %v, %d left; want [2] [3], 1 left", released, shed, q.Len())
	}
	// Flow control off: everything leaves.
	o.Flow.Enabled = false
	h.router.SetOptions(o)
	released = nil
	FlowStep(h.router, "qwen", q, t0, func(it FlowItem[int]) { released = append(released, it.Value) }, func(FlowItem[int], string) {})
	if fmt.Sprint(released) != "[1]" || q.Len() != 0 {
		t.Fatalf("off: released %v, %d left", released, q.Len())
	}
}
