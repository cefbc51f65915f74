package index

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// heapAfterGC is the live heap once garbage is collected.
func heapAfterGC() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// randomKeys returns n distinct-looking keys (a multiplicative sequence).
func randomKeys(n int) []BlockKey {
	ks := make([]BlockKey, n)
	for i := range ks {
		ks[i] = BlockKey(uint64(i+1) * 0x9E3779B97F4A7C15)
	}
	return ks
}

// samplePeak samples ix's counted total from another goroutine until the
// returned func is called, which reports the highest sample.
func samplePeak(ix *Index) (stop func() int64) {
	var peak atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			peak.Store(max(peak.Load(), ix.TotalEntries()))
			select {
			case <-done:
				return
			default:
				runtime.Gosched()
			}
		}
	}()
	return func() int64 {
		close(done)
		wg.Wait()
		return peak.Load()
	}
}

// One Store far larger than the cap (an engine event of a million hashes)
// must not go in whole before eviction: the counted total stays within the
// cap's slack at every moment, and the heap the index keeps stays bounded by
// the cap, not by the event.
func TestCapHoldsWithinOneHugeStore(t *testing.T) {
	const capEntries, stored = 10_000, 1_000_000
	ks := randomKeys(stored)
	before := heapAfterGC()
	f := newFixture(t, 2, Options{MaxEntries: capEntries})

	peak := samplePeak(f.ix)
	f.ix.Store(f.r[0], ks, TierGPU)
	f.ix.StoreSpeculative(f.r[1], ks)

	line := int64(capEntries + capEntries/capSlack)
	if p := peak(); p > line {
		t.Fatalf("counted entries reached %d during the store, cap %d (+slack %d)", p, capEntries, line)
	}
	if got := f.ix.TotalEntries(); got > line {
		t.Fatalf("counted entries %d after the store, cap %d", got, capEntries)
	}
	// The newest blocks survive; the first ones were evicted.
	if ms := f.ix.LookupRoute(f.pool, ks[stored-1:], nil); len(ms) == 0 {
		t.Fatal("the newest block was evicted")
	}
	if ms := f.ix.LookupRoute(f.pool, ks[:1], nil); len(ms) != 0 {
		t.Fatal("the first block of the event survived a million later ones")
	}
	// 10k entries take well under 4 MB; the whole event would take ~45 MB.
	if grew := int64(heapAfterGC()) - int64(before); grew > 4<<20 {
		t.Fatalf("index keeps %d MB for a cap of %d entries", grew>>20, capEntries)
	}
	runtime.KeepAlive(ks)
}

// Speculative entries count toward the cap.
func TestSpeculativeEntriesCountTowardCap(t *testing.T) {
	f := newFixture(t, 2, Options{MaxEntries: 1000})
	f.ix.Store(f.r[0], keys(0, 600), TierGPU)
	f.ix.StoreSpeculative(f.r[1], keys(600, 1200))
	if got := f.ix.TotalEntries(); got > 1000+1000/capSlack {
		t.Fatalf("counted entries %d with 600 blocks + 600 speculative, cap 1000", got)
	}
	if got := f.ix.Entries(f.pool); got >= 600 {
		t.Fatalf("block entries %d: nothing evicted for the speculative ones", got)
	}
	f.clock.Advance(3 * time.Second)
	f.ix.SweepExpired()
	if got, want := f.ix.TotalEntries(), f.ix.Entries(f.pool); got != want {
		t.Fatalf("counted %d after speculative entries expired, block entries %d", got, want)
	}
}

// Aliases accounted by ingest count toward the cap: block entries make room.
func TestAccountedAliasesCountTowardCap(t *testing.T) {
	f := newFixture(t, 1, Options{MaxEntries: 1000})
	f.ix.Store(f.r[0], keys(0, 900), TierGPU)
	f.ix.AccountAliases(900)
	if got := f.ix.TotalEntries(); got > 1000+1000/capSlack {
		t.Fatalf("counted entries %d, cap 1000", got)
	}
	if got := f.ix.Entries(f.pool); got > 200 {
		t.Fatalf("block entries %d beside 900 aliases, cap 1000", got)
	}
	f.ix.AccountAliases(-900)
	if got, want := f.ix.TotalEntries(), f.ix.Entries(f.pool); got != want {
		t.Fatalf("counted %d after aliases went, block entries %d", got, want)
	}
}

// Go maps never shrink: after mass eviction the index rebuilds its maps so
// the memory goes back.
func TestMapsShrinkAfterMassEviction(t *testing.T) {
	const n = 400_000
	ks := randomKeys(n)
	before := heapAfterGC()
	f := newFixture(t, 1, Options{MaxEntries: 2 * n, TTL: time.Minute})
	f.ix.Store(f.r[0], ks, TierGPU)
	f.ix.StoreSpeculative(f.r[0], ks)
	full := int64(heapAfterGC()) - int64(before)
	f.clock.Advance(2 * time.Minute)
	f.ix.SweepExpired()
	if got := f.ix.TotalEntries(); got != 0 {
		t.Fatalf("%d entries after everything expired", got)
	}
	left := int64(heapAfterGC()) - int64(before)
	if left > full/8 {
		t.Fatalf("index keeps %d kB after expiring everything (%d kB full)", left>>10, full>>10)
	}
	// The same after Clear.
	f.ix.Store(f.r[0], ks, TierGPU)
	f.ix.Clear(f.r[0])
	if left := int64(heapAfterGC()) - int64(before); left > full/8 {
		t.Fatalf("index keeps %d kB after Clear (%d kB full)", left>>10, full>>10)
	}
	runtime.KeepAlive(ks)
	runtime.KeepAlive(f)
}

// Concurrent writers (one applier per engine rank) each publish their
// additions at least every writeCommitEvery entries, so together they pass
// the synchronous-eviction line by at most that many each.
func TestCapHoldsUnderConcurrentHugeStores(t *testing.T) {
	const capEntries, writers, each = 10_000, 8, 100_000
	f := newFixture(t, writers, Options{MaxEntries: capEntries})
	peak := samplePeak(f.ix)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ks := make([]BlockKey, each)
			for i := range ks {
				ks[i] = BlockKey(uint64(w*each+i+1) * 0x9E3779B97F4A7C15)
			}
			f.ix.Store(f.r[w], ks, TierGPU)
		}()
	}
	wg.Wait()
	line := int64(capEntries + capEntries/capSlack)
	if p := peak(); p > line+writers*writeCommitEvery {
		t.Fatalf("counted entries reached %d with %d concurrent writers, line %d", p, writers, line)
	}
}

// OnEvict hears every block entry evicted at the cap or past the TTL, with
// the replicas that held it, and nothing of removals or clears; Holds
// follows.
func TestOnEvictReportsWhatWent(t *testing.T) {
	f := newFixture(t, 2, Options{MaxEntries: 1000, TTL: time.Minute})
	var mu sync.Mutex
	heard := map[BlockKey]uint64{}
	f.ix.OnEvict(func(pool PoolID, ev *Evicted) {
		if pool != f.pool || len(ev.Keys) != len(ev.Held) {
			t.Errorf("pool %d, %d keys, %d holder sets", pool, len(ev.Keys), len(ev.Held))
		}
		mu.Lock()
		defer mu.Unlock()
		for i, k := range ev.Keys {
			heard[k] |= ev.Held[i]
		}
	})
	f.ix.Store(f.r[0], keys(0, 10), TierGPU)
	f.ix.Store(f.r[1], keys(5, 10), TierGPU)
	f.ix.Remove(f.r[0], keys(0, 2), TierGPU)
	f.ix.Clear(f.r[1])
	if len(heard) != 0 || !f.ix.Holds(f.r[0], keys(5, 6)[0]) || f.ix.Holds(f.r[1], keys(5, 6)[0]) || f.ix.Holds(f.r[0], keys(0, 1)[0]) {
		t.Fatalf("removals and clears reported %v, or Holds wrong", heard)
	}
	f.clock.Advance(2 * time.Minute)              // keys 2..9 expire
	f.ix.Store(f.r[1], keys(2000, 3100), TierGPU) // past the cap and its slack: evicts
	if f.ix.Holds(f.r[0], keys(5, 6)[0]) {
		t.Fatal("Holds reports an expired entry")
	}
	f.ix.SweepExpired()
	for _, k := range keys(2, 10) {
		if heard[k] != 1<<f.r[0].ID {
			t.Fatalf("expired key %d heard with holders %b", k, heard[k])
		}
	}
	capped := 0
	for _, k := range keys(2000, 3100) {
		if h, ok := heard[k]; ok {
			if h != 1<<f.r[1].ID {
				t.Fatalf("evicted key %d heard with holders %b", k, h)
			}
			if f.ix.Holds(f.r[1], k) {
				t.Fatalf("key %d reported evicted and still held", k)
			}
			capped++
		}
	}
	if capped == 0 || int64(capped) != 1100-f.ix.Entries(f.pool) {
		t.Fatalf("%d evicted keys heard; %d entries left of 1,100 stored", capped, f.ix.Entries(f.pool))
	}
}
