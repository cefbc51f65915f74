package index

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// lockFree reports whether every lock of the index can be taken within d:
// a panic that left one held would keep it forever.
func lockFree(ix *Index, d time.Duration) error {
	var locks []*sync.Mutex
	for _, p := range *ix.pools.Load() {
		for i := range p.shards {
			locks = append(locks, &p.shards[i].mu)
		}
		locks = append(locks, &p.replicasMu)
	}
	locks = append(locks, &ix.evictMu)
	deadline := time.Now().Add(d)
	for i, mu := range locks {
		for !mu.TryLock() {
			if time.Now().After(deadline) {
				return fmt.Errorf("lock %d of %d of the index is still held after %v", i, len(locks), d)
			}
			time.Sleep(time.Millisecond)
		}
		mu.Unlock()
	}
	return nil
}

// An entry refreshed after cap enforcement read the clock carries a later
// tick than the enforcement's now. A clock stepped back before enforcement
// makes every entry such an entry, deterministically: enforcement must
// neither index its histogram out of range nor evict those entries as old.
func TestCapEnforcementSkipsEntriesRefreshedAfterItsClock(t *testing.T) {
	f := newFixture(t, 2, Options{MaxEntries: 1_000})
	f.clock.Advance(10 * time.Second)
	f.ix.Store(f.r[0], randomKeys(1_000), TierGPU) // at the cap, not past it
	f.clock.Advance(-5 * time.Second)              // the writer's clock ran ahead of the enforcer's

	func() {
		defer func() {
			if v := recover(); v != nil {
				t.Fatalf("cap enforcement panicked: %v", v)
			}
		}()
		f.ix.enforceCap(500)
	}()
	if err := lockFree(f.ix, time.Second); err != nil {
		t.Fatal(err)
	}
	// Nothing is older than the enforcer's now, so nothing qualifies as
	// least recently refreshed this round; the next round (with a clock
	// past the entries) evicts.
	if got := f.ix.TotalEntries(); got != 1_000 {
		t.Errorf("entries after enforcement with a clock behind them: %d, want 1000", got)
	}
	f.clock.Advance(10 * time.Second)
	f.ix.enforceCap(500)
	if got := f.ix.TotalEntries(); got > 500 {
		t.Errorf("entries after enforcement with a clock past them: %d, want ≤ 500", got)
	}
}

// Entries a writer refreshed after a reader read the clock are fresh, not
// expired: LookupRoute still sees them held and SweepExpired keeps them.
func TestEntriesRefreshedAfterTheReadersClockAreFresh(t *testing.T) {
	f := newFixture(t, 1, Options{TTL: time.Minute})
	ks := keys(0, 8)
	f.clock.Advance(time.Hour)
	f.ix.Store(f.r[0], ks, TierGPU)
	f.clock.Advance(-time.Second)
	if m := f.ix.LookupRoute(f.pool, ks, nil); len(m) != 1 || m[0].Blocks != len(ks) {
		t.Errorf("lookup with a clock behind the entries: %+v, want all %d blocks held", m, len(ks))
	}
	f.ix.SweepExpired()
	if got := f.ix.TotalEntries(); got != int64(len(ks)) {
		t.Errorf("sweep with a clock behind the entries dropped them: %d left", got)
	}
}

// Several writers store, hold and touch at the entry cap while the clock
// moves on every read, so cap enforcement always races refreshes newer than
// its own clock. For seconds: no panic, every lock free afterwards, the
// count within the cap's slack, and lookups answering throughout.
func TestCapEnforcementUnderConcurrentWritersNeverLeavesALockHeld(t *testing.T) {
	const capEntries = 4_000
	var clock atomic.Int64
	clock.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Add(int64(40*time.Millisecond))) }
	ix := New(Options{TTL: time.Hour, MaxEntries: capEntries, SpeculativeTTL: 2 * time.Second, CPUTierWeight: 0.5, Now: now})
	pool, err := ix.AddPool("p")
	if err != nil {
		t.Fatal(err)
	}
	var rs []Replica
	for i := range 4 {
		r, err := ix.AddReplica(pool, fmt.Sprintf("r%d", i))
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	d := 3 * time.Second
	if testing.Short() {
		d = 500 * time.Millisecond
	}
	stop := make(chan struct{})
	var panics atomic.Int64
	var ops atomic.Int64
	var wg sync.WaitGroup
	worker := func(w int, step func(i int)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				if v := recover(); v != nil {
					panics.Add(1)
					t.Errorf("writer %d panicked: %v", w, v)
				}
			}()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				step(i)
				ops.Add(1)
			}
		}()
	}
	// Two engines flood new blocks; a router holds and touches a hot run
	// on the others; a sweeper and a reader run beside them.
	hot := keys(0, 64)
	for w := range 2 {
		worker(w, func(i int) {
			base := uint64(w+1)<<40 | uint64(i)*32
			ks := make([]BlockKey, 32)
			for j := range ks {
				ks[j] = BlockKey((base + uint64(j)) * 0x9E3779B97F4A7C15)
			}
			ix.Store(rs[w], ks, Tier(i%2))
			if i%7 == 0 {
				ix.Remove(rs[w], ks[:8], TierGPU)
			}
		})
	}
	worker(2, func(i int) { ix.Store(rs[2], hot, TierGPU); ix.Hold(rs[2], hot, i%len(hot)) })
	worker(3, func(i int) { ix.Touch(rs[2], hot); ix.Hold(rs[3], keys(100+i%1000, 132+i%1000), 0) })
	worker(4, func(int) { ix.SweepExpired(); ix.enforceCap(capEntries / 2) })
	worker(5, func(int) { ix.LookupRoute(pool, hot, nil) })
	time.Sleep(d)
	close(stop)
	waited := make(chan struct{})
	go func() { wg.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(10 * time.Second):
		t.Fatal("writers did not stop within 10 s: a lock is held")
	}
	if err := lockFree(ix, time.Second); err != nil {
		t.Fatal(err)
	}
	if panics.Load() != 0 {
		t.Fatalf("%d writers panicked", panics.Load())
	}
	if got, line := ix.TotalEntries(), ix.syncEvictLine()+6*writeCommitEvery; got > line {
		t.Errorf("entries %d past the synchronous-eviction line %d", got, line)
	}
	t.Logf("%d operations in %v", ops.Load(), d)
}
