package index

import "testing"

// TestStoreCountsPromisedBlocksComputedAgain: a block a request in flight
// was predicted to hit, removed with its event and stored again, counts as
// stored again when that request is the earliest in flight containing it;
// not when an earlier request that was not promised it computed it, nor
// once the promise ended, nor on another replica, nor for blocks beyond the
// promised run.
func TestStoreCountsPromisedBlocksComputedAgain(t *testing.T) {
	f := newFixture(t, 2, Options{})
	a, b := f.r[0], f.r[1]
	prompt := keys(0, 6)
	f.ix.Store(a, prompt[:4], TierGPU)

	// A request promised blocks 0..3; the engine evicts 2 and 3 and
	// computes them again for it.
	ta := f.ix.Promise(a, prompt, 4)
	if ta == 0 {
		t.Fatal("promise not tracked")
	}
	f.ix.Remove(a, prompt[2:4], TierGPU)
	if n := f.ix.Store(b, prompt[2:4], TierGPU); n != 0 {
		t.Errorf("another replica stored them: %d stored again, want 0", n)
	}
	if n := f.ix.Store(a, prompt[2:6], TierGPU); n != 2 {
		t.Errorf("promised blocks computed again: %d stored again, want 2", n)
	}
	f.ix.Remove(a, prompt[4:6], TierGPU)
	if n := f.ix.Store(a, prompt[4:6], TierGPU); n != 0 {
		t.Errorf("blocks the request was not promised: %d stored again, want 0", n)
	}

	// An earlier request in flight that was not promised block 3 (routed
	// when the index lacked it) computes it: the later, promised one hits it.
	early := f.ix.Promise(a, prompt, 2)
	late := f.ix.Promise(a, prompt, 4)
	f.ix.Unpromise(a, ta)
	f.ix.Remove(a, prompt[3:4], TierGPU)
	if n := f.ix.Store(a, prompt[3:4], TierGPU); n != 0 {
		t.Errorf("computed for the earlier, unpromised request: %d stored again, want 0", n)
	}
	// Once the earlier one ended, the promised one is the first in flight.
	f.ix.Unpromise(a, early)
	f.ix.Remove(a, prompt[3:4], TierGPU)
	if n := f.ix.Store(a, prompt[3:4], TierGPU); n != 1 {
		t.Errorf("computed for the promised request: %d stored again, want 1", n)
	}
	// A cleared cache counts as removed.
	f.ix.Clear(a)
	if n := f.ix.Store(a, prompt[:4], TierGPU); n != 4 {
		t.Errorf("after a clear: %d stored again, want 4", n)
	}
	f.ix.Unpromise(a, late)
	f.ix.Remove(a, prompt[:4], TierGPU)
	if n := f.ix.Store(a, prompt[:4], TierGPU); n != 0 {
		t.Errorf("no request in flight: %d stored again, want 0", n)
	}
	ps := &f.ix.replicaState(a).promised
	if len(ps.flights) != 0 || len(ps.keys) != 0 || len(ps.removed) != 0 || ps.promisedKeys.Load() != 0 || ps.removedKeys.Load() != 0 {
		t.Errorf("after every promise ended: %d flights, %d keys, %d removed, %d promised left",
			len(ps.flights), len(ps.keys), len(ps.removed), ps.promisedKeys.Load())
	}
}

// TestPromisesStayBounded: past MaxPromisedBlocks keys or MaxPromiseFlights
// requests a replica's promises track nothing more.
func TestPromisesStayBounded(t *testing.T) {
	f := newFixture(t, 1, Options{})
	a := f.r[0]
	if tk := f.ix.Promise(a, keys(0, MaxPromisedBlocks+1), MaxPromisedBlocks+1); tk != 0 {
		t.Errorf("a request promised %d keys was tracked", MaxPromisedBlocks+1)
	}
	one := keys(0, 1)
	for i := range MaxPromiseFlights {
		if f.ix.Promise(a, one, 1) == 0 {
			t.Fatalf("request %d not tracked", i)
		}
	}
	if tk := f.ix.Promise(a, one, 1); tk != 0 {
		t.Errorf("request %d tracked", MaxPromiseFlights+1)
	}
	if ps := &f.ix.replicaState(a).promised; len(ps.keys) != 1 || len(ps.flights) != MaxPromiseFlights {
		t.Errorf("%d keys and %d flights tracked", len(ps.keys), len(ps.flights))
	}
}
