package index

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
	"time"
)

// checkTable verifies blockTable's invariants against want: every entry is
// found, the count agrees, each run is in Robin Hood order (a key sits no
// further from its home than the key before it, plus one, and keys of one
// home are in hash order) and no slot lies before its key's home in its run.
func checkTable(t *testing.T, tb *blockTable, want map[BlockKey]entry) {
	t.Helper()
	if tb.len() != len(want) {
		t.Fatalf("table holds %d entries, want %d", tb.len(), len(want))
	}
	n, seen := tb.slotCount(), 0
	for i := range n {
		if tb.slots[i].empty() {
			continue
		}
		seen++
		prev := i - 1
		if prev < 0 {
			prev = n - 1
		}
		d := tb.dist(i)
		if tb.slots[prev].empty() && d != 0 || !tb.slots[prev].empty() && d > tb.dist(prev)+1 {
			t.Fatalf("slot %d of %d: key %x sits %d from home after a key %d from its own", i, n, tb.slots[i].key(), d, tb.dist(prev))
		}
		if ph, h := blockHash(tb.slots[prev].key()), blockHash(tb.slots[i].key()); d > 0 && home(ph, n) == home(h, n) && ph > h {
			t.Fatalf("slots %d and %d: keys of one home out of hash order", prev, i)
		}
		k, e := tb.at(i)
		if w, ok := want[k]; !ok || w != e {
			t.Fatalf("slot %d holds %x=%+v, want %+v (present %v)", i, k, e, w, ok)
		}
	}
	if seen != len(want) {
		t.Fatalf("%d occupied slots, want %d", seen, len(want))
	}
	for k, e := range want {
		if got, ok := tb.get(k); !ok || got != e {
			t.Fatalf("get(%x) = %+v, %v; want %+v", k, got, ok, e)
		}
	}
	if n > tableMinSlots && (tb.len()*tableMaxLoadDen > n*tableMaxLoadNum) {
		t.Fatalf("%d entries in %d slots: over the load limit", tb.len(), n)
	}
}

// runTableOps applies ops decoded from b to a blockTable and a plain map and
// checks they agree after each. Keys come from a small range (keySpace) so
// that puts hit existing keys, deletes find them, and homes collide.
func runTableOps(t *testing.T, b []byte, keySpace uint64) {
	tb := &blockTable{}
	want := map[BlockKey]entry{}
	for len(b) >= 3 {
		op, k := b[0]%4, BlockKey(uint64(binary.LittleEndian.Uint16(b[1:]))%keySpace)
		b = b[3:]
		if k%3 == 0 {
			k |= 1 << 63 // high halves differ too
		}
		switch op {
		case 0, 1: // put
			e := entry{held: uint64(k)*0x9E37 | 1<<(uint64(k)%64), seen: uint32(op) + uint32(k) + 1}
			tb.put(k, e)
			want[k] = e
		case 2: // delete
			_, ok := want[k]
			if got := tb.delete(k); got != ok {
				t.Fatalf("delete(%x) = %v, want %v", k, got, ok)
			}
			delete(want, k)
		case 3: // lookup of a key that may be absent
			got, ok := tb.get(k)
			if w, wok := want[k]; ok != wok || got != w {
				t.Fatalf("get(%x) = %+v, %v; want %+v, %v", k, got, ok, w, wok)
			}
		}
		checkTable(t, tb, want)
	}
	// Emptying it through deleteAt, as the sweeps do, leaves nothing behind.
	for i := 0; i < tb.slotCount(); i++ {
		if !tb.slots[i].empty() {
			tb.deleteAt(i)
			i--
		}
	}
	checkTable(t, tb, map[BlockKey]entry{})
}

func TestBlockTableAgreesWithMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, space := range []uint64{7, 64, 1000, 1 << 16} {
		b := make([]byte, 3*4000)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		runTableOps(t, b, space)
	}
}

func FuzzBlockTable(f *testing.F) {
	f.Add([]byte{0, 1, 0, 0, 2, 0, 2, 1, 0, 3, 2, 0})
	f.Add(make([]byte, 300))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 3*2000 {
			b = b[:3*2000]
		}
		runTableOps(t, b, 97)
	})
}

// keysHomedAt returns count keys whose home in a table of n slots is slot h.
func keysHomedAt(h, n, count int) []BlockKey {
	var out []BlockKey
	for k := BlockKey(1); len(out) < count; k++ {
		if home(blockHash(k), n) == h {
			out = append(out, k)
		}
	}
	return out
}

// Keys sharing one home form one run; deleting from its middle shifts the
// rest back, and a run that passes the last slot wraps to the first.
func TestBlockTableCollidingKeysWrapAround(t *testing.T) {
	const slots = 64
	for _, h := range []int{0, 30, slots - 3, slots - 1} {
		tb := &blockTable{slots: make([]slot, slots)}
		want := map[BlockKey]entry{}
		for i, k := range append(keysHomedAt(h, slots, 10), keysHomedAt((h+2)%slots, slots, 10)...) {
			e := entry{held: 1 << i, seen: uint32(i) + 1}
			tb.put(k, e)
			want[k] = e
			checkTable(t, tb, want)
		}
		if tb.slotCount() != slots {
			t.Fatalf("table grew to %d slots with 20 entries", tb.slotCount())
		}
		for i, k := range keysHomedAt(h, slots, 10) {
			if i%2 == 0 {
				tb.delete(k)
				delete(want, k)
				checkTable(t, tb, want)
			}
		}
	}
}

// Growth keeps every table between the load bounds, and a table emptied by
// sweeps shrinks back.
func TestBlockTableGrowsInSmallStepsAndShrinks(t *testing.T) {
	tb := &blockTable{}
	rng := rand.New(rand.NewPCG(1, 1))
	var keys []BlockKey
	prev := 0
	for i := range 200_000 {
		k := BlockKey(rng.Uint64())
		keys = append(keys, k)
		tb.put(k, entry{held: 1, seen: uint32(i) + 1})
		if n := tb.slotCount(); n != prev {
			if prev > 100 && n > prev*tableGrowthNum/tableGrowthDen+1 {
				t.Fatalf("grew from %d to %d slots", prev, n)
			}
			prev = n
		}
		if n := tb.slotCount(); n > 1000 && float64(tb.len()) < 0.76*float64(n) {
			t.Fatalf("%d entries in %d slots", tb.len(), n)
		}
	}
	for _, k := range keys[:190_000] {
		if !tb.delete(k) {
			t.Fatalf("key %x lost", k)
		}
	}
	tb.shrink()
	if n := tb.slotCount(); n > 2*tb.len() {
		t.Fatalf("after shrink: %d entries in %d slots", tb.len(), n)
	}
	for i, k := range keys[190_000:] {
		if e, ok := tb.get(k); !ok || e.seen != uint32(190_000+i+1) {
			t.Fatalf("key %x after shrink: %+v, %v", k, e, ok)
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
	p := f.ix.pool(f.pool)
	var blocks, specs int64
	perReplica := map[ReplicaID]int64{}
	for i := range p.shards {
		s := &p.shards[i]
		for _, tb := range []*blockTable{&s.m, &s.spec} {
			want := map[BlockKey]entry{}
			for j := range tb.slotCount() {
				if k, e := tb.at(j); e.held != 0 {
					want[k] = e
				}
			}
			checkTable(t, tb, want)
		}
		blocks += int64(s.m.len())
		specs += int64(s.spec.len())
		for j := range s.m.slotCount() {
			_, e := s.m.at(j)
			forEachBit(e.held, func(id ReplicaID) { perReplica[id]++ })
		}
	}
	if blocks != f.ix.Entries(f.pool) || blocks+specs != f.ix.TotalEntries() {
		t.Fatalf("counters %d/%d, tables hold %d + %d speculative", f.ix.Entries(f.pool), f.ix.TotalEntries(), blocks, specs)
	}
	for _, st := range f.ix.Replicas(f.pool) {
		if st.Blocks != perReplica[st.ID] {
			t.Fatalf("replica %s: counter %d, tables hold %d", st.Name, st.Blocks, perReplica[st.ID])
		}
	}
}
