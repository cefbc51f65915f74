package routing

import (
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
