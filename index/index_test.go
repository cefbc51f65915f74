package index

import (
	"context"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// fakeClock is a settable clock for TTL tests.
type fakeClock struct{ t atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.t.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}
func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.t.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.t.Add(int64(d)) }

func keys(from, to int) []BlockKey {
	var ks []BlockKey
	for i := from; i < to; i++ {
		ks = append(ks, BlockKey(1000+i))
	}
	return ks
}

type fixture struct {
	ix    *Index
	clock *fakeClock
	pool  PoolID
	r     []Replica
}

func newFixture(t testing.TB, replicas int, opts Options) *fixture {
	t.Helper()
	f := &fixture{clock: newFakeClock()}
	opts.Now = f.clock.Now
	// The tests' baseline is config's defaults; a test sets what it varies.
	if opts.TTL == 0 {
		opts.TTL = 10 * time.Minute
	}
	if opts.MaxEntries == 0 {
		opts.MaxEntries = 20_000_000
	}
	if opts.CPUTierWeight == 0 {
		opts.CPUTierWeight = 0.5
	}
	if opts.SpeculativeTTL == 0 {
		opts.SpeculativeTTL = 2 * time.Second
	}
	f.ix = New(opts)
	var err error
	if f.pool, err = f.ix.AddPool("p"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < replicas; i++ {
		r, err := f.ix.AddReplica(f.pool, "r"+string(rune('a'+i%26))+string(rune('0'+i/26)))
		if err != nil {
			t.Fatal(err)
		}
		f.r = append(f.r, r)
	}
	return f
}

// runs turns a lookup result into replica → blocks for comparison.
func runs(ms []Match) map[ReplicaID]int {
	out := map[ReplicaID]int{}
	for _, m := range ms {
		out[m.Replica] = m.Blocks
	}
	return out
}

func equalRuns(t *testing.T, got []Match, want map[ReplicaID]int) {
	t.Helper()
	g := runs(got)
	if len(g) != len(want) {
		t.Fatalf("lookup = %v, want %v", g, want)
	}
	for id, n := range want {
		if g[id] != n {
			t.Fatalf("lookup = %v, want %v", g, want)
		}
	}
}

func TestLookupRouteCountsOnlyContiguousPrefix(t *testing.T) {
	f := newFixture(t, 4, Options{})
	a, b, c, d := f.r[0], f.r[1], f.r[2], f.r[3]
	f.ix.Store(a, keys(0, 10), TierGPU)
	f.ix.Store(b, keys(0, 5), TierGPU)
	f.ix.Store(b, keys(6, 10), TierGPU) // gap at block 5: run stops at 5
	f.ix.Store(c, keys(1, 10), TierGPU) // no block 0: no match at all
	f.ix.Store(d, keys(0, 1), TierGPU)
	equalRuns(t, f.ix.LookupRoute(f.pool, keys(0, 10), nil), map[ReplicaID]int{a.ID: 10, b.ID: 5, d.ID: 1})
	// A longer request than anyone holds: runs end where holdings end.
	equalRuns(t, f.ix.LookupRoute(f.pool, keys(0, 20), nil), map[ReplicaID]int{a.ID: 10, b.ID: 5, d.ID: 1})
	// A request starting elsewhere matches nobody's block 0.
	equalRuns(t, f.ix.LookupRoute(f.pool, keys(1, 10), nil), map[ReplicaID]int{c.ID: 9, a.ID: 9, b.ID: 4})
	equalRuns(t, f.ix.LookupRoute(f.pool, keys(50, 60), nil), map[ReplicaID]int{})
	equalRuns(t, f.ix.LookupRoute(f.pool, nil, nil), map[ReplicaID]int{})
}

// Runs of every length up to a prompt's, so that replicas drop out on, next
// to and between the boundaries of LookupRoute's batches (of 8, 16, 32, 64,
// 128 keys), with CPU-tier and speculative blocks mixed in: each replica's
// match is what its holdings say, block by block.
func TestLookupRouteMatchesEveryRunLengthAcrossBatches(t *testing.T) {
	const promptLen = 300
	f := newFixture(t, MaxReplicas, Options{})
	rng := rand.New(rand.NewPCG(11, 12))
	prompt := make([]BlockKey, promptLen)
	for i := range prompt {
		prompt[i] = BlockKey(rng.Uint64())
	}
	for round := range 40 {
		for _, r := range f.r { // fresh holdings each round
			f.ix.Clear(r)
		}
		want := map[ReplicaID]Match{}
		for i, r := range f.r {
			run := rng.IntN(promptLen + 1)
			if round == 0 {
				run = []int{0, 1, 7, 8, 9, 23, 24, 25, 55, 56, 57, 119, 120, 121, 247, 248, 249, promptLen}[i%18]
			}
			gpu := 0
			for b := range run {
				switch {
				case b%7 == i%7:
					f.ix.Store(r, prompt[b:b+1], TierCPU)
				case b%5 == i%5:
					f.ix.StoreSpeculative(r, prompt[b:b+1]) // counts as GPU
					gpu++
				default:
					f.ix.Store(r, prompt[b:b+1], TierGPU)
					gpu++
				}
			}
			if run+1 < promptLen {
				f.ix.Store(r, prompt[run+1:], TierGPU) // after a gap: not matched
			}
			if run > 0 {
				want[r.ID] = Match{r.ID, run, gpu, float64(gpu) + 0.5*float64(run-gpu)}
			}
		}
		got := f.ix.LookupRoute(f.pool, prompt, nil)
		if len(got) != len(want) {
			t.Fatalf("round %d: %d matches, want %d", round, len(got), len(want))
		}
		for _, m := range got {
			if m != want[m.Replica] {
				t.Fatalf("round %d: replica %d matched %+v, want %+v", round, m.Replica, m, want[m.Replica])
			}
		}
	}
}

func TestLookupRouteWeighsGPUAboveCPU(t *testing.T) {
	f := newFixture(t, 3, Options{CPUTierWeight: 0.25})
	a, b, c := f.r[0], f.r[1], f.r[2]
	f.ix.Store(a, keys(0, 4), TierGPU)
	f.ix.Store(b, keys(0, 4), TierCPU)
	f.ix.Store(c, keys(0, 2), TierGPU)
	f.ix.Store(c, keys(2, 4), TierCPU)
	f.ix.Store(c, keys(2, 3), TierGPU) // block 2 on both tiers: counts as GPU
	got := map[ReplicaID]Match{}
	for _, m := range f.ix.LookupRoute(f.pool, keys(0, 4), nil) {
		got[m.Replica] = m
	}
	want := map[ReplicaID]Match{
		a.ID: {a.ID, 4, 4, 4},
		b.ID: {b.ID, 4, 0, 1},
		c.ID: {c.ID, 4, 3, 3.25},
	}
	for id, w := range want {
		if got[id] != w {
			t.Errorf("replica %d: got %+v, want %+v", id, got[id], w)
		}
	}
	// Dropping B's CPU copy removes B; dropping C's GPU copy of block 2 leaves its CPU copy.
	f.ix.Remove(b, keys(0, 4), TierCPU)
	f.ix.Remove(c, keys(2, 3), TierGPU)
	ms := f.ix.LookupRoute(f.pool, keys(0, 4), nil)
	equalRuns(t, ms, map[ReplicaID]int{a.ID: 4, c.ID: 4})
	for _, m := range ms {
		if m.Replica == c.ID && m.GPUBlocks != 2 {
			t.Errorf("C GPU blocks = %d, want 2", m.GPUBlocks)
		}
	}
	// Removing a GPU copy that is only on CPU does nothing.
	f.ix.Remove(c, keys(3, 4), TierGPU)
	equalRuns(t, f.ix.LookupRoute(f.pool, keys(0, 4), nil), map[ReplicaID]int{a.ID: 4, c.ID: 4})
}

func TestStoreAndRemoveAreIdempotent(t *testing.T) {
	f := newFixture(t, 2, Options{})
	a, b := f.r[0], f.r[1]
	for i := 0; i < 3; i++ {
		f.ix.Store(a, keys(0, 8), TierGPU)
	}
	f.ix.Store(b, keys(0, 4), TierGPU)
	if got := f.ix.Entries(f.pool); got != 8 {
		t.Fatalf("entries = %d, want 8", got)
	}
	if st, _ := f.ix.Replica(a); st.Blocks != 8 {
		t.Fatalf("a blocks = %d, want 8", st.Blocks)
	}
	for i := 0; i < 3; i++ {
		f.ix.Remove(a, keys(2, 8), TierGPU)
	}
	f.ix.Remove(a, keys(100, 110), TierGPU) // never stored
	if got := f.ix.Entries(f.pool); got != 4 {
		t.Fatalf("entries = %d, want 4", got)
	}
	if st, _ := f.ix.Replica(a); st.Blocks != 2 {
		t.Fatalf("a blocks = %d, want 2", st.Blocks)
	}
	equalRuns(t, f.ix.LookupRoute(f.pool, keys(0, 8), nil), map[ReplicaID]int{a.ID: 2, b.ID: 4})
}

func TestEntriesExpireAfterTTLUnlessRefreshed(t *testing.T) {
	reg := prometheus.NewRegistry()
	f := newFixture(t, 2, Options{TTL: time.Minute, Registerer: reg})
	a, b := f.r[0], f.r[1]
	f.ix.Store(a, keys(0, 4), TierGPU)
	f.ix.Store(b, keys(0, 4), TierGPU)
	f.clock.Advance(40 * time.Second)
	f.ix.Store(b, keys(0, 4), TierGPU) // refresh
	f.clock.Advance(40 * time.Second)
	// 80 s after A's store: stale even before a sweep. B refreshed 40 s ago.
	// Freshness is per block entry: B's refresh keeps the blocks, and the
	// holder set with them.
	if ms := f.ix.LookupRoute(f.pool, keys(0, 4), nil); len(ms) == 0 {
		t.Fatal("refreshed blocks expired")
	}
	f.clock.Advance(time.Minute)
	equalRuns(t, f.ix.LookupRoute(f.pool, keys(0, 4), nil), map[ReplicaID]int{})
	f.ix.SweepExpired()
	if got := f.ix.Entries(f.pool); got != 0 {
		t.Fatalf("entries after sweep = %d, want 0", got)
	}
	if got := testutil.ToFloat64(f.ix.metrics.evictions.WithLabelValues("p", "ttl")); got != 4 {
		t.Fatalf("ttl evictions = %v, want 4", got)
	}
	if st, _ := f.ix.Replica(a); st.Blocks != 0 {
		t.Fatalf("a blocks after expiry = %d", st.Blocks)
	}
	// A stale entry that is stored again starts afresh with only the new holder.
	f.ix.Store(a, keys(10, 11), TierGPU)
	f.ix.Store(b, keys(10, 11), TierGPU)
	f.clock.Advance(2 * time.Minute)
	f.ix.Store(a, keys(10, 11), TierGPU)
	equalRuns(t, f.ix.LookupRoute(f.pool, keys(10, 11), nil), map[ReplicaID]int{a.ID: 1})
	if got := f.ix.Entries(f.pool); got != 1 {
		t.Fatalf("entries = %d, want 1", got)
	}
}

func TestCapEvictsLeastRecentlyRefreshedFirst(t *testing.T) {
	reg := prometheus.NewRegistry()
	f := newFixture(t, 1, Options{MaxEntries: 1000, Registerer: reg})
	a := f.r[0]
	for i := 0; i < 10; i++ {
		f.ix.Store(a, keys(i*100, (i+1)*100), TierGPU)
		f.clock.Advance(time.Second)
	}
	if got := f.ix.TotalEntries(); got != 1000 {
		t.Fatalf("entries = %d, want 1000", got)
	}
	f.ix.Store(a, keys(1000, 1100), TierGPU) // 1100 > cap + slack: evicts now, per block
	total := f.ix.TotalEntries()
	if total > 1000+1000/capSlack {
		t.Fatalf("entries = %d after passing the cap, want ≤ cap + slack", total)
	}
	// The oldest batch (blocks 0..99) went first; the newest stays.
	if ms := f.ix.LookupRoute(f.pool, keys(0, 1), nil); len(ms) != 0 {
		t.Fatal("oldest block survived eviction")
	}
	if ms := f.ix.LookupRoute(f.pool, keys(1099, 1100), nil); len(ms) != 1 {
		t.Fatal("newest block was evicted")
	}
	if ms := f.ix.LookupRoute(f.pool, keys(500, 501), nil); len(ms) != 1 {
		t.Fatal("a middle-aged block was evicted before older ones")
	}
	evicted := testutil.ToFloat64(f.ix.metrics.evictions.WithLabelValues("p", "cap"))
	if int64(evicted) != 1100-total {
		t.Fatalf("cap evictions = %v, want %d", evicted, 1100-total)
	}
}

func TestCapEnforcedInBackgroundWithinSlack(t *testing.T) {
	f := newFixture(t, 1, Options{MaxEntries: 1000})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { f.ix.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	f.ix.Store(f.r[0], keys(0, 1010), TierGPU) // within slack: background eviction
	deadline := time.Now().Add(5 * time.Second)
	for f.ix.TotalEntries() > 1000 {
		if time.Now().After(deadline) {
			t.Fatalf("background eviction did not run: %d entries", f.ix.TotalEntries())
		}
		time.Sleep(time.Millisecond)
	}
}

// TestRunSweepsSpeculativeEntriesAtTheirOwnInterval: Run drops expired
// speculative entries every SpeculativeTTL/2, long before the block
// entries' interval (TTL/20, here 5 s), and leaves live block entries.
func TestRunSweepsSpeculativeEntriesAtTheirOwnInterval(t *testing.T) {
	f := newFixture(t, 1, Options{TTL: time.Hour, SpeculativeTTL: 200 * time.Millisecond})
	if all, spec := f.ix.sweepIntervals(); all != 5*time.Second || spec != 100*time.Millisecond {
		t.Fatalf("sweep intervals = %v, %v; want 5s, 100ms", all, spec)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { f.ix.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	f.ix.Store(f.r[0], keys(0, 10), TierGPU)
	f.ix.StoreSpeculative(f.r[0], keys(100, 150))
	p := f.ix.pool(f.pool)
	if got := p.specs.Load(); got != 50 {
		t.Fatalf("speculative entries = %d, want 50", got)
	}
	f.clock.Advance(time.Second) // the speculative entries expire
	deadline := time.Now().Add(2 * time.Second)
	for p.specs.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d expired speculative entries left after 2 s", p.specs.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got, total := f.ix.Entries(f.pool), f.ix.TotalEntries(); got != 10 || total != 10 {
		t.Fatalf("entries = %d, total %d; want 10, 10", got, total)
	}
	equalRuns(t, f.ix.LookupRoute(f.pool, keys(0, 10), nil), map[ReplicaID]int{f.r[0].ID: 10})
}

func TestClearForgetsOnlyThatReplica(t *testing.T) {
	f := newFixture(t, 2, Options{})
	a, b := f.r[0], f.r[1]
	f.ix.Store(a, keys(0, 8), TierGPU)
	f.ix.Store(a, keys(8, 10), TierCPU)
	f.ix.Store(b, keys(0, 4), TierGPU)
	f.ix.StoreSpeculative(a, keys(20, 22))
	f.ix.Clear(a)
	f.ix.Clear(a) // idempotent
	equalRuns(t, f.ix.LookupRoute(f.pool, keys(0, 10), nil), map[ReplicaID]int{b.ID: 4})
	equalRuns(t, f.ix.LookupRoute(f.pool, keys(20, 22), nil), map[ReplicaID]int{})
	if got := f.ix.Entries(f.pool); got != 4 {
		t.Fatalf("entries = %d, want 4", got)
	}
	if st, _ := f.ix.Replica(a); st.Blocks != 0 {
		t.Fatalf("a blocks = %d", st.Blocks)
	}
	// RemoveReplica frees the id for a new replica, which starts empty.
	f.ix.RemoveReplica(b)
	if got := f.ix.Entries(f.pool); got != 0 {
		t.Fatalf("entries after RemoveReplica = %d", got)
	}
	nb, err := f.ix.AddReplica(f.pool, "new")
	if err != nil || nb.ID != b.ID {
		t.Fatalf("AddReplica after removal = %v, %v; want the freed id %d", nb, err, b.ID)
	}
	equalRuns(t, f.ix.LookupRoute(f.pool, keys(0, 4), nil), map[ReplicaID]int{})
}

func TestSpeculativeEntriesCountUntilTheyExpire(t *testing.T) {
	f := newFixture(t, 2, Options{SpeculativeTTL: 2 * time.Second})
	a, b := f.r[0], f.r[1]
	f.ix.Store(a, keys(0, 2), TierGPU)
	f.ix.StoreSpeculative(b, keys(0, 6))
	equalRuns(t, f.ix.LookupRoute(f.pool, keys(0, 6), nil), map[ReplicaID]int{a.ID: 2, b.ID: 6})
	f.clock.Advance(1500 * time.Millisecond)
	equalRuns(t, f.ix.LookupRoute(f.pool, keys(0, 6), nil), map[ReplicaID]int{a.ID: 2, b.ID: 6})
	f.clock.Advance(time.Second)
	equalRuns(t, f.ix.LookupRoute(f.pool, keys(0, 6), nil), map[ReplicaID]int{a.ID: 2})
	// Confirmed by the engine: a real Store outlives the speculation.
	f.ix.StoreSpeculative(b, keys(0, 6))
	f.ix.Store(b, keys(0, 3), TierGPU)
	f.clock.Advance(3 * time.Second)
	equalRuns(t, f.ix.LookupRoute(f.pool, keys(0, 6), nil), map[ReplicaID]int{a.ID: 2, b.ID: 3})
	f.ix.SweepExpired()
	for i := range f.ix.pool(f.pool).shards {
		if n := f.ix.pool(f.pool).shards[i].spec.Len(); n != 0 {
			t.Fatalf("shard %d keeps %d expired speculative entries", i, n)
		}
	}
}

func TestLoadInFlightAndHealth(t *testing.T) {
	f := newFixture(t, 1, Options{})
	a := f.r[0]
	at := f.clock.Now()
	f.ix.BeginWork(a, 0, 0)
	f.ix.BeginWork(a, 0, 0)
	st, _ := f.ix.Replica(a)
	if st.InFlight != 2 || !st.Healthy {
		t.Fatalf("state = %+v, want 2 in flight and healthy", st)
	}
	f.ix.SetLoad(a, Load{Running: 3, Waiting: 1, KVUsage: 0.5}, at) // includes the 2 above
	f.ix.BeginWork(a, 0, 0)
	st, _ = f.ix.Replica(a)
	if st.InFlight != 3 || st.InFlightAtLoad != 2 || st.Load.KVUsage != 0.5 || !st.LoadAt.Equal(at) {
		t.Fatalf("state = %+v, want 3 in flight, 2 at load", st)
	}
	for i := 0; i < 5; i++ {
		f.ix.EndWork(a, Ticket{}) // more ends than begins never go negative
	}
	st, _ = f.ix.Replica(a)
	if st.InFlight != 0 {
		t.Fatalf("state = %+v, want in-flight 0", st)
	}
	f.ix.SetHealthy(a, false)
	if st, _ := f.ix.Replica(a); st.Healthy {
		t.Fatal("still healthy")
	}
	if got := f.ix.Replicas(f.pool); len(got) != 1 || got[0].Name != "ra0" {
		t.Fatalf("Replicas = %+v", got)
	}
}

func TestAddReplicaLimitsAndReuse(t *testing.T) {
	f := newFixture(t, MaxReplicas, Options{})
	if _, err := f.ix.AddReplica(f.pool, "one-too-many"); err == nil {
		t.Fatal("65th replica accepted")
	}
	again, err := f.ix.AddReplica(f.pool, f.ix.Replicas(f.pool)[5].Name)
	if err != nil || again != f.r[5] {
		t.Fatalf("re-adding an existing name = %v, %v", again, err)
	}
	if id, err := f.ix.AddPool("p"); err != nil || id != f.pool {
		t.Fatalf("AddPool existing = %v, %v", id, err)
	}
	if _, ok := f.ix.PoolByName("nope"); ok {
		t.Fatal("unknown pool found")
	}
	// Unknown pools and replicas are ignored, never a panic.
	f.ix.Store(Replica{Pool: 9}, keys(0, 1), TierGPU)
	f.ix.LookupRoute(9, keys(0, 1), nil)
	f.ix.Clear(Replica{Pool: 9})
	f.ix.SetLoad(Replica{Pool: 9}, Load{}, time.Time{})
}

func TestConcurrentLookupsWhileIngestWrites(t *testing.T) {
	f := newFixture(t, 8, Options{MaxEntries: 5000})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); f.ix.Run(ctx) }()
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for i := 0; i < 3000; i++ {
				r := f.r[rng.IntN(len(f.r))]
				lo := rng.IntN(4000)
				ks := keys(lo, lo+rng.IntN(32)+1)
				switch rng.IntN(10) {
				case 0:
					f.ix.Remove(r, ks, TierGPU)
				case 1:
					f.ix.Store(r, ks, TierCPU)
				case 2:
					if i%500 == 0 {
						f.ix.Clear(r)
					}
				case 3:
					f.ix.StoreSpeculative(r, ks)
				default:
					f.ix.Store(r, ks, TierGPU)
				}
			}
		}(w)
	}
	for rdr := 0; rdr < 4; rdr++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var dst []Match
			for i := 0; i < 3000; i++ {
				dst = f.ix.LookupRoute(f.pool, keys(i%100, i%100+64), dst)
				for _, m := range dst {
					if m.Blocks < 1 || m.Blocks > 64 || m.GPUBlocks > m.Blocks {
						t.Errorf("impossible match %+v", m)
						return
					}
				}
				f.ix.Replicas(f.pool)
			}
		}()
	}
	time.Sleep(50 * time.Millisecond)
	cancel()
	wg.Wait()
	// Counters agree with the tables after the storm.
	checkTables(t, f.ix, f.pool)
}

func TestMetricsAreRegistered(t *testing.T) {
	reg := prometheus.NewRegistry()
	f := newFixture(t, 1, Options{Registerer: reg})
	f.ix.Store(f.r[0], keys(0, 3), TierGPU)
	f.ix.LookupRoute(f.pool, keys(0, 3), nil)
	f.ix.LookupRoute(f.pool, keys(7, 9), nil)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, mf := range mfs {
		names = append(names, mf.GetName())
	}
	joined := strings.Join(names, " ")
	for _, want := range []string{metricEntries, metricAliases, metricStores, metricLookups, metricLookupDur} {
		if !strings.Contains(joined, want) {
			t.Errorf("metric %s missing from %s", want, joined)
		}
	}
	if got := testutil.ToFloat64(f.ix.metrics.lookups.WithLabelValues("p", "hit")); got != 1 {
		t.Errorf("hits = %v", got)
	}
	if got := testutil.ToFloat64(f.ix.metrics.lookups.WithLabelValues("p", "miss")); got != 1 {
		t.Errorf("misses = %v", got)
	}
}

// TestOptionsAreTakenAsGiven: a CPU tier weight of 0 counts CPU-only blocks
// as nothing and a SpeculativeTTL of 0 disables speculative entries (New once
// turned both zeros into defaults of its own).
func TestOptionsAreTakenAsGiven(t *testing.T) {
	ix := New(Options{TTL: time.Minute, MaxEntries: 1000})
	pid, err := ix.AddPool("p")
	if err != nil {
		t.Fatal(err)
	}
	a, _ := ix.AddReplica(pid, "a")
	b, _ := ix.AddReplica(pid, "b")
	ix.Store(a, keys(0, 4), TierCPU)
	ix.StoreSpeculative(b, keys(0, 4))
	ms := ix.LookupRoute(pid, keys(0, 4), nil)
	equalRuns(t, ms, map[ReplicaID]int{a.ID: 4})
	if ms[0].Weighted != 0 {
		t.Errorf("CPU-only blocks weigh %g at CPUTierWeight 0", ms[0].Weighted)
	}
	for _, bad := range []Options{{MaxEntries: 1}, {TTL: time.Minute}, {TTL: time.Minute, MaxEntries: 1, CPUTierWeight: 2}, {TTL: time.Minute, MaxEntries: 1, SpeculativeTTL: -1}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("New(%+v) accepted", bad)
				}
			}()
			New(bad)
		}()
	}
}

// TestRemovedReplicaHandlesAreInert: a removed replica's slot is reused by
// the next AddReplica under a new generation; writes through the old handle
// (a subscriber still stopping, a decision still in flight) must not land on
// the new occupant, and the old blocks are gone.
func TestRemovedReplicaHandlesAreInert(t *testing.T) {
	ix := New(Options{TTL: time.Minute, MaxEntries: 1000, SpeculativeTTL: time.Second})
	pid, _ := ix.AddPool("p")
	old, _ := ix.AddReplica(pid, "pod-a")
	ix.Store(old, keys(0, 8), TierGPU)
	ix.RemoveReplica(old)
	if n := ix.Entries(pid); n != 0 {
		t.Fatalf("%d entries after RemoveReplica", n)
	}
	fresh, _ := ix.AddReplica(pid, "pod-a")
	if fresh.ID != old.ID || fresh.Gen == old.Gen {
		t.Fatalf("slot reuse: old %+v new %+v", old, fresh)
	}
	ix.Store(old, keys(0, 8), TierGPU)
	ix.StoreSpeculative(old, keys(0, 8))
	ix.BeginWork(old, 0, 0)
	if ms := ix.LookupRoute(pid, keys(0, 8), nil); len(ms) != 0 {
		t.Fatalf("a stale handle's stores landed on the new replica: %+v", ms)
	}
	if st, ok := ix.Replica(fresh); !ok || st.InFlight != 0 || st.Blocks != 0 {
		t.Fatalf("new replica state %+v (ok %v)", st, ok)
	}
	if _, ok := ix.Replica(old); ok {
		t.Fatal("the old handle still resolves")
	}
	ix.Store(fresh, keys(0, 4), TierGPU)
	ix.Clear(old)
	ix.RemoveReplica(old)
	equalRuns(t, ix.LookupRoute(pid, keys(0, 4), nil), map[ReplicaID]int{fresh.ID: 4})
}

// TestStoreCountsGPUBlocksStoredAgain: Store says how many GPU blocks the
// replica already held — not the new ones, not CPU-tier stores (offloads),
// not a GPU store of a block held only on the CPU tier, not another
// replica's, not one removed meanwhile.
func TestStoreCountsGPUBlocksStoredAgain(t *testing.T) {
	f := newFixture(t, 2, Options{})
	a, b := f.r[0], f.r[1]
	if n := f.ix.Store(a, keys(0, 4), TierGPU); n != 0 {
		t.Fatalf("first store: %d stored again, want 0", n)
	}
	if n := f.ix.Store(a, keys(2, 6), TierGPU); n != 2 {
		t.Errorf("overlapping store: %d stored again, want 2", n)
	}
	if n := f.ix.Store(b, keys(0, 4), TierGPU); n != 0 {
		t.Errorf("another replica's store: %d stored again, want 0", n)
	}
	if n := f.ix.Store(a, keys(0, 2), TierCPU); n != 0 {
		t.Errorf("offload to the CPU tier: %d stored again, want 0", n)
	}
	if n := f.ix.Store(a, keys(10, 12), TierCPU); n != 0 {
		t.Errorf("CPU-only store: %d, want 0", n)
	}
	if n := f.ix.Store(a, keys(10, 12), TierGPU); n != 0 {
		t.Errorf("GPU store of CPU-only blocks: %d stored again, want 0", n)
	}
	if n := f.ix.Store(a, keys(0, 1), TierGPU); n != 1 {
		t.Errorf("GPU store of a block held on both tiers: %d stored again, want 1", n)
	}
	f.ix.Remove(a, keys(4, 6), TierGPU)
	if n := f.ix.Store(a, keys(4, 6), TierGPU); n != 0 {
		t.Errorf("store after remove: %d stored again, want 0", n)
	}
}
