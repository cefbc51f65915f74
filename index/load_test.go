package index

import (
	"math"
	"testing"
	"time"
)

// TestRecentTokensDecay: every request begun counts its uncached tokens,
// ended or not (a request of none counts nothing), and the sum decays with
// time constant RecentTokensTau.
func TestRecentTokensDecay(t *testing.T) {
	f := newFixture(t, 2, Options{})
	a, b := f.r[0], f.r[1]
	recent := func(r Replica) float64 {
		st, _ := f.ix.Replica(r)
		return st.RecentTokens()
	}
	f.ix.EndWork(a, f.ix.BeginWork(a, 100, 1000))
	f.ix.BeginWork(a, 300, 1000)
	f.ix.BeginWork(a, 0, 0)
	if got := recent(a); got != 400 {
		t.Fatalf("recent %g after 100 and 300 uncached tokens, want 400", got)
	}
	if got := recent(b); got != 0 {
		t.Fatalf("recent %g on a replica given nothing, want 0", got)
	}
	f.clock.Advance(RecentTokensTau)
	if got, want := recent(a), 400/math.E; math.Abs(got-want) > 1e-9 {
		t.Fatalf("recent %g one time constant later, want %g", got, want)
	}
	f.ix.BeginWork(a, 50, 1000)
	if got, want := recent(a), 50+400/math.E; math.Abs(got-want) > 1e-9 {
		t.Fatalf("recent %g after 50 more, want %g", got, want)
	}
}

func TestPrefillQueueDrainsAndEnds(t *testing.T) {
	f := newFixture(t, 1, Options{})
	a := f.r[0]
	t1 := f.ix.BeginWork(a, 3000, 1000)
	t2 := f.ix.BeginWork(a, 2000, 1000)
	pending := func(rate float64) float64 {
		st, _ := f.ix.ReplicaAt(a, rate, f.ix.Now())
		return st.PendingTokens
	}
	if p := pending(1000); p != 5000 {
		t.Fatalf("pending %g, want 5000", p)
	}
	f.clock.Advance(2 * time.Second)
	if p := pending(1000); p != 3000 {
		t.Fatalf("after 2 s at 1000 tokens/s pending %g, want 3000", p)
	}
	// The first request's stream ended early (the engine was faster): its
	// own 3000 are done, the second's 2000 remain.
	f.ix.EndWork(a, t1)
	if p := pending(1000); p != 2000 {
		t.Fatalf("after the first request ended pending %g, want 2000", p)
	}
	f.clock.Advance(time.Hour)
	if p := pending(1000); p != 0 {
		t.Fatalf("an hour later pending %g, want 0 (never negative)", p)
	}
	f.ix.EndWork(a, t2)
	if st, _ := f.ix.Replica(a); st.InFlight != 0 || st.PendingTokens != 0 {
		t.Fatalf("after both ended: %+v", st)
	}
}

func TestSetLoadLearnsPrefillRateAndForeignQueue(t *testing.T) {
	f := newFixture(t, 1, Options{})
	a := f.r[0]
	at := f.clock.Now()
	f.ix.BeginWork(a, 100, 1000)
	f.ix.SetLoad(a, Load{Running: 2, Waiting: 3, PromptTokens: 1000, CachedTokens: 0, PrefillSeconds: 1, PrefillCount: 1}, at)
	st, _ := f.ix.Replica(a)
	if st.PrefillRate != 0 {
		t.Fatalf("rate learned from one scrape: %g", st.PrefillRate)
	}
	// 1 of the engine's 5 requests is this router's own, in flight at the scrape.
	if st.InFlightAtLoad != 1 || st.Load.Running != 2 || st.Load.Waiting != 3 {
		t.Fatalf("in flight at load %d, running %g, waiting %g; want 1, 2, 3", st.InFlightAtLoad, st.Load.Running, st.Load.Waiting)
	}
	// +12,000 prompt tokens, 2,000 of them cached, over 2 s of prefill in 4 requests.
	f.ix.SetLoad(a, Load{PromptTokens: 13000, CachedTokens: 2000, PrefillSeconds: 3, PrefillCount: 5}, at)
	st, _ = f.ix.Replica(a)
	if st.PrefillRate != 5000 || st.MeanPromptTokens != 2500 {
		t.Fatalf("learned rate %g tokens/s, mean %g tokens; want 5000 and 2500", st.PrefillRate, st.MeanPromptTokens)
	}
	// Hostile or reset counters teach nothing.
	for _, l := range []Load{
		{PromptTokens: 0, PrefillSeconds: 0, PrefillCount: 0},                         // reset
		{PromptTokens: math.NaN(), PrefillSeconds: 10, PrefillCount: 10},              // NaN
		{PromptTokens: math.Inf(1), PrefillSeconds: 10, PrefillCount: 10},             // Inf
		{PromptTokens: 1e18, CachedTokens: 0, PrefillSeconds: 1e-12, PrefillCount: 1}, // absurd rate
	} {
		f.ix.SetLoad(a, l, at)
	}
	st, _ = f.ix.Replica(a)
	if st.PrefillRate != 5000 {
		t.Fatalf("bad counters moved the learned rate to %g", st.PrefillRate)
	}
}

// TestTouchKeepsHitBlocksAlive: a block stored once and hit ever since must
// outlive the TTL; one nobody touches expires; Touch by a non-holder does
// not make it a holder.
func TestTouchKeepsHitBlocksAlive(t *testing.T) {
	f := newFixture(t, 2, Options{TTL: time.Minute})
	a, b := f.r[0], f.r[1]
	hot, cold := keys(0, 2), keys(100, 2)
	f.ix.Store(a, hot, TierGPU)
	f.ix.Store(a, cold, TierGPU)
	for range 5 {
		f.clock.Advance(40 * time.Second)
		f.ix.Touch(a, hot)
		f.ix.Touch(b, cold)
	}
	equalRuns(t, f.ix.LookupRoute(f.pool, hot, nil), map[ReplicaID]int{a.ID: 2})
	equalRuns(t, f.ix.LookupRoute(f.pool, cold, nil), map[ReplicaID]int{})
}

// TestRemoveEndsSpeculation: a BlockRemoved for a block the router expected
// a replica to keep ends that speculation at once, not after
// SpeculativeTTL; another replica's speculation on it stays.
func TestRemoveEndsSpeculation(t *testing.T) {
	f := newFixture(t, 2, Options{SpeculativeTTL: 10 * time.Second})
	a, b := f.r[0], f.r[1]
	ks := keys(0, 3)
	f.ix.Store(a, ks, TierGPU)
	f.ix.StoreSpeculative(a, ks)
	f.ix.StoreSpeculative(b, ks[:1])
	f.ix.Remove(a, ks[1:], TierGPU) // the engine evicted blocks 1 and 2
	equalRuns(t, f.ix.LookupRoute(f.pool, ks, nil), map[ReplicaID]int{a.ID: 1, b.ID: 1})
}

// TestHoldRefreshesAMatchedRunOnceATick: a second Hold of the same matched
// run on the same replica within one tick leaves the run as the first left
// it (its entries already carry the tick) and still stores the blocks
// beyond it; in the next tick the run is refreshed again.
func TestHoldRefreshesAMatchedRunOnceATick(t *testing.T) {
	f := newFixture(t, 1, Options{SpeculativeTTL: 10 * time.Second})
	a := f.r[0]
	p := f.ix.pool(f.pool)
	ks := keys(0, 4)
	f.ix.Store(a, ks[:2], TierGPU)
	f.ix.Hold(a, ks[:3], 2)          // refreshes blocks 0 and 1, speculates on 2
	f.ix.Remove(a, ks[1:2], TierGPU) // the engine evicts block 1 within the tick
	f.ix.Hold(a, ks, 2)
	if got := p.specs.Load(); got != 2 {
		t.Fatalf("%d speculative entries, want 2 (blocks 2 and 3; the run was held this tick)", got)
	}
	f.clock.Advance(tick)
	f.ix.Hold(a, ks, 2)
	if got := p.specs.Load(); got != 3 {
		t.Fatalf("%d speculative entries in the next tick, want 3 (block 1, no longer held, speculated)", got)
	}
	equalRuns(t, f.ix.LookupRoute(f.pool, ks, nil), map[ReplicaID]int{a.ID: 4})
}

// TestHoldTouchesWhatIsHeldAndSpeculatesTheRest: for a routed request, the
// matched blocks its replica holds in the block table are refreshed there
// (no speculative entry), and every other key — the new blocks, matched
// ones held only speculatively, or claimed by a replica that does not hold
// them — is stored speculative.
func TestHoldTouchesWhatIsHeldAndSpeculatesTheRest(t *testing.T) {
	f := newFixture(t, 2, Options{TTL: 10 * time.Minute, SpeculativeTTL: 10 * time.Second})
	a, b := f.r[0], f.r[1]
	p := f.ix.pool(f.pool)
	ks := keys(0, 4)
	f.ix.Store(a, ks[:2], TierGPU)
	f.clock.Advance(9 * time.Minute)
	f.ix.Hold(a, ks, 2)
	if got := p.specs.Load(); got != 2 {
		t.Fatalf("%d speculative entries, want 2 (the two new blocks only)", got)
	}
	equalRuns(t, f.ix.LookupRoute(f.pool, ks, nil), map[ReplicaID]int{a.ID: 4})
	// Matched but held only speculatively: refreshed as speculative.
	f.ix.Hold(a, ks, 4)
	if got := p.specs.Load(); got != 2 {
		t.Fatalf("%d speculative entries after a second request, want 2", got)
	}
	// A replica claimed to match blocks it does not hold speculates on all.
	f.ix.Hold(b, ks, 2)
	if got := p.specs.Load(); got != 4 {
		t.Fatalf("%d speculative entries after b, want 4", got)
	}
	// The stored blocks were refreshed 9 minutes in: 2 minutes past their
	// TTL from the store they are still held; the speculation has expired.
	f.clock.Advance(2 * time.Minute)
	equalRuns(t, f.ix.LookupRoute(f.pool, ks, nil), map[ReplicaID]int{a.ID: 2})
	// Out of range matched counts are clamped.
	f.ix.Hold(a, ks, 99)
	f.ix.Hold(a, ks, -1)
}

// TestLoadHook: every load and health update calls the hook with the
// replica's pool; nil removes it.
func TestLoadHook(t *testing.T) {
	f := newFixture(t, 1, Options{})
	a := f.r[0]
	var got []PoolID
	f.ix.SetLoadHook(func(p PoolID) { got = append(got, p) })
	f.ix.SetLoad(a, Load{Waiting: 3}, f.clock.Now())
	f.ix.SetHealthy(a, false)
	f.ix.SetLoad(Replica{Pool: a.Pool, ID: a.ID + 7}, Load{}, f.clock.Now()) // unknown replica: no call
	if len(got) != 2 || got[0] != a.Pool || got[1] != a.Pool {
		t.Fatalf("hook calls %v, want two for pool %v", got, a.Pool)
	}
	f.ix.SetLoadHook(nil)
	f.ix.SetLoad(a, Load{}, f.clock.Now())
	if len(got) != 2 {
		t.Fatalf("hook called after removal: %v", got)
	}
}
