package index

import (
	"math/rand/v2"
	"testing"
	"time"
)

// checkTables verifies every shard table of p (rhmap.Map.Check) and that
// the pool's counters agree with what the tables hold: block entries,
// speculative entries and each replica's blocks.
func checkTables(t *testing.T, ix *Index, pool PoolID) {
	t.Helper()
	p := ix.pool(pool)
	var blocks, specs int64
	perReplica := map[ReplicaID]int64{}
	for i := range p.shards {
		s := &p.shards[i]
		for _, tb := range []*blockTable{&s.m, &s.spec} {
			if err := tb.Check(); err != nil {
				t.Fatalf("shard %d: %v", i, err)
			}
		}
		blocks += int64(s.m.Len())
		specs += int64(s.spec.Len())
		for j := range s.m.Slots() {
			if s.m.Occupied(j) {
				forEachBit(s.m.ValueAt(j).entry().held, func(id ReplicaID) { perReplica[id]++ })
			}
		}
	}
	if blocks != ix.Entries(pool) || blocks+specs != ix.TotalEntries()-ix.aliases.Load() {
		t.Fatalf("counters %d/%d, tables hold %d + %d speculative", ix.Entries(pool), ix.TotalEntries(), blocks, specs)
	}
	for _, st := range ix.Replicas(pool) {
		if st.Blocks != perReplica[st.ID] {
			t.Fatalf("replica %s: counter %d, tables hold %d", st.Name, st.Blocks, perReplica[st.ID])
		}
	}
}

// Every replica of a full pool holds the same blocks; each one's removal
// leaves the rest, and the last one's removes the entries.
func TestStoreManyReplicasPerBlock(t *testing.T) {
	f := newFixture(t, MaxReplicas, Options{})
	ks := keys(0, 1000)
	for _, r := range f.r {
		f.ix.Store(r, ks, TierGPU)
	}
	if got := f.ix.Entries(f.pool); got != 1000 {
		t.Fatalf("%d entries for 1000 blocks held by %d replicas", got, MaxReplicas)
	}
	for i, r := range f.r {
		m := f.ix.LookupRoute(f.pool, ks, nil)
		if len(m) != MaxReplicas-i || m[0].Blocks != 1000 {
			t.Fatalf("after %d removals: %d matches, first %+v", i, len(m), m[0])
		}
		f.ix.Remove(r, ks, TierGPU)
	}
	if got := f.ix.Entries(f.pool); got != 0 || f.ix.TotalEntries() != 0 {
		t.Fatalf("%d entries (%d counted) after every holder removed them", got, f.ix.TotalEntries())
	}
}

// Eviction under index.max_entries deletes from the tables while it walks
// them; afterwards every entry left is still found, and the counters agree
// with the tables.
func TestEvictionLeavesTablesConsistent(t *testing.T) {
	const capEntries = 2000
	f := newFixture(t, 4, Options{MaxEntries: capEntries, SpeculativeTTL: time.Second})
	rng := rand.New(rand.NewPCG(9, 9))
	for round := range 200 {
		ks := make([]BlockKey, 64)
		for i := range ks {
			ks[i] = BlockKey(rng.Uint64())
		}
		f.ix.Store(f.r[round%4], ks, TierGPU)
		f.ix.Store(f.r[(round+1)%4], ks[:16], TierCPU)
		f.ix.StoreSpeculative(f.r[(round+2)%4], ks[32:])
		f.clock.Advance(150 * time.Millisecond)
	}
	if got := f.ix.TotalEntries(); got > capEntries+capEntries/capSlack {
		t.Fatalf("%d entries counted with a cap of %d", got, capEntries)
	}
	checkTables(t, f.ix, f.pool)
}
