package rhmap

import (
	"encoding/binary"
	"math/rand/v2"
	"runtime"
	"testing"
	"unsafe"

	"github.com/kvroute/kvroute/internal/prefetch"
)

// val is a value of the index's shape: three 32-bit words, 20-byte slots.
type val struct{ a, b, c uint32 }

func check[V comparable](t *testing.T, m *Map[V], want map[uint64]V) {
	t.Helper()
	if err := m.Check(); err != nil {
		t.Fatal(err)
	}
	if m.Len() != len(want) {
		t.Fatalf("table holds %d entries, want %d", m.Len(), len(want))
	}
	for k, v := range want {
		if got, ok := m.Get(k); !ok || got != v {
			t.Fatalf("Get(%x) = %+v, %v; want %+v", k, got, ok, v)
		}
	}
}

// runOps applies ops decoded from b to a Map and a plain map and checks they
// agree after each. Keys come from a small range (space, 0 included) so that
// puts hit existing keys, deletes find them, and homes collide.
func runOps(t *testing.T, b []byte, space uint64, sparse bool) *Map[val] {
	m := &Map[val]{}
	if sparse {
		*m = Sparse[val]()
	}
	want := map[uint64]val{}
	ops := 0
	for len(b) >= 3 {
		op, k := b[0]%6, uint64(binary.LittleEndian.Uint16(b[1:]))%space
		b = b[3:]
		if k%3 == 1 {
			k |= 1 << 63 // high halves differ too
		}
		switch op {
		case 0: // put
			v := val{uint32(k), uint32(len(b)), 1}
			m.Put(k, v)
			want[k] = v
		case 1: // upsert: update in place, or add the zero value
			p, ok := m.Upsert(k)
			if w, wok := want[k]; ok != wok || *p != w {
				t.Fatalf("Upsert(%x) = %+v, %v; want %+v, %v", k, *p, ok, w, wok)
			}
			p.c += 7
			want[k] = *p
		case 2: // delete
			_, ok := want[k]
			if got := m.Delete(k); got != ok {
				t.Fatalf("Delete(%x) = %v, want %v", k, got, ok)
			}
			delete(want, k)
		case 3, 4: // lookup of a key that may be absent
			got, ok := m.Get(k)
			if w, wok := want[k]; ok != wok || got != w {
				t.Fatalf("Get(%x) = %+v, %v; want %+v, %v", k, got, ok, w, wok)
			}
		case 5: // now and then, a rebuild at the size Shrink gives, at any size
			if k%32 == 0 {
				m.resize(m.sizeFor(m.n))
			}
		}
		// The whole table after every op while it is small, then after
		// every 64th, and every 1024th once it spans segments (a check
		// costs a lookup per entry).
		if ops++; m.Len() < 256 || ops%64 == 0 && m.Len() < segSlots || ops%1024 == 0 {
			check(t, m, want)
		}
	}
	check(t, m, want)
	// A walk with Next visits every entry once, in slot order.
	seen, last := 0, -1
	for i, v := m.Next(0); v != nil; i, v = m.Next(i + 1) {
		if i <= last || !m.Occupied(i) || *v != want[m.KeyAt(i)] {
			t.Fatalf("Next: slot %d after %d, occupied %v, value %+v", i, last, m.Occupied(i), *v)
		}
		seen, last = seen+1, i
	}
	if seen != len(want) {
		t.Fatalf("Next visited %d entries of %d", seen, len(want))
	}
	// Emptying it through DeleteAt, as the sweeps do, leaves nothing behind.
	for i := 0; i < m.Slots(); i++ {
		if m.Occupied(i) {
			k := m.KeyAt(i)
			if *m.ValueAt(i) != want[k] {
				t.Fatalf("slot %d: key %x holds %+v, want %+v", i, k, *m.ValueAt(i), want[k])
			}
			delete(want, k)
			m.DeleteAt(i)
			i--
		}
	}
	check(t, m, want)
	return m
}

func TestMapAgreesWithPlainMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, space := range []uint64{7, 64, 1000, 1 << 16} {
		b := make([]byte, 3*4000)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		runOps(t, b, space, false)
		runOps(t, b, space, true)
	}
}

// Tables of several segments, grown through with puts and deletes mixed,
// agree with a plain map too: runs cross from one segment into the next,
// and the merge that grows the table reuses the old table's segments.
func TestMapAgreesWithPlainMapAcrossSegments(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	b := make([]byte, 3*60_000)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	for _, sparse := range []bool{false, true} {
		m := runOps(t, b, 1<<17, sparse)
		if m.size < 3*segSlots {
			t.Fatalf("the table grew to %d slots only, %d segments", m.size, len(m.segs))
		}
	}
}

func FuzzMap(f *testing.F) {
	f.Add([]byte{0, 1, 0, 0, 2, 0, 2, 1, 0, 3, 2, 0})
	f.Add(make([]byte, 300))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 3*2000 {
			b = b[:3*2000]
		}
		runOps(t, b, 97, len(b)%2 == 1)
	})
}

// A uint64 value makes 16-byte slots, the engine hash → key maps' shape.
func TestMapUint64Values(t *testing.T) {
	m := &Map[uint64]{}
	want := map[uint64]uint64{}
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 20_000 {
		k := rng.Uint64() % 5000
		switch i % 3 {
		case 0, 1:
			m.Put(k, k*31+uint64(i))
			want[k] = k*31 + uint64(i)
		case 2:
			m.Delete(k)
			delete(want, k)
		}
	}
	check(t, m, want)
}

// withSlots is an empty Map of n slots.
func withSlots(n int) *Map[val] {
	m := &Map[val]{}
	m.resize(n)
	return m
}

// keysHomedAt returns count keys whose home in a table of n slots is slot h.
func keysHomedAt(h, n, count int) []uint64 {
	var out []uint64
	for k := uint64(1); len(out) < count; k++ {
		if home(hash(k), n) == h {
			out = append(out, k)
		}
	}
	return out
}

// Keys sharing one home form one run; deleting from its middle shifts the
// rest back, and a run that passes the last slot wraps to the first. In a
// table of several segments runs also cross from one segment into the next
// and from the shorter last segment into the first.
func TestMapCollidingKeysWrapAround(t *testing.T) {
	const big = 2*segSlots + 100
	for _, c := range []struct{ slots, home int }{
		{64, 0}, {64, 30}, {64, 61}, {64, 63},
		{big, 0}, {big, segSlots - 3}, {big, 2*segSlots - 4}, {big, big - 3}, {big, big - 1},
	} {
		slots, h := c.slots, c.home
		m := withSlots(slots)
		want := map[uint64]val{}
		for i, k := range append(keysHomedAt(h, slots, 10), keysHomedAt((h+2)%slots, slots, 10)...) {
			v := val{uint32(i), 1, 2}
			m.Put(k, v)
			want[k] = v
			check(t, m, want)
		}
		if m.Slots() != slots+1 {
			t.Fatalf("table grew to %d slots with 20 entries", m.Slots())
		}
		for i, k := range keysHomedAt(h, slots, 10) {
			if i%2 == 0 {
				m.Delete(k)
				delete(want, k)
				check(t, m, want)
			}
		}
	}
}

// Rebuilding into fewer slots (as Shrink does) can wrap the last run moved
// past the first key the merge placed: here a key homed mid-table comes
// first and a run at the top of the hash space (home: the last slot at every
// size) wraps onto it; the keys that do not fit go in by probing.
func TestResizeWrapsTheLastRunOntoTheFirstKey(t *testing.T) {
	for top := 1; top <= 19; top++ {
		for _, slots := range []int{(top+1)*maxLoadDen/maxLoadNum + 1, 40} {
			m := withSlots(64)
			want := map[uint64]val{}
			for _, k := range append([]uint64{unhash(1 << 63)}, keysAtTheTop(top)...) {
				v := val{uint32(k), uint32(k >> 32), 1}
				m.Put(k, v)
				want[k] = v
			}
			check(t, m, want)
			m.resize(slots)
			if m.size != slots {
				t.Fatalf("resized to %d slots, want %d", m.size, slots)
			}
			check(t, m, want)
		}
	}
}

// The merge into fewer slots of several segments can wrap the last run
// past the first key too, when the run is longer than a segment.
func TestResizeWrapsALongRunAcrossSegments(t *testing.T) {
	m := withSlots(3 * segSlots)
	want := map[uint64]val{}
	for _, k := range append([]uint64{unhash(1 << 63)}, keysAtTheTop(segSlots+100)...) {
		v := val{uint32(k), uint32(k >> 32), 1}
		m.Put(k, v)
		want[k] = v
	}
	check(t, m, want)
	for _, slots := range []int{2*segSlots + 5, 5*segSlots + 1, 2*segSlots + 5} {
		m.resize(slots)
		if m.size != slots || len(m.segs) != (slots+segSlots-1)/segSlots {
			t.Fatalf("resized to %d slots in %d segments, want %d", m.size, len(m.segs), slots)
		}
		check(t, m, want)
	}
}

// Growing a table of many segments allocates about the fifth it grows by
// (and its last segment), not a whole new table: the merge writes the new
// table into the old one's segments as it passes them.
func TestGrowthReusesTheOldSegments(t *testing.T) {
	m := &Map[val]{}
	rng := rand.New(rand.NewPCG(7, 7))
	for m.size < 40*segSlots {
		m.Put(rng.Uint64(), val{1, 2, 3})
	}
	for !m.overLoad(m.n+1, m.size) {
		m.Put(rng.Uint64(), val{1, 2, 3})
	}
	before := m.size
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	m.Put(rng.Uint64(), val{1, 2, 3}) // grows
	runtime.ReadMemStats(&ms1)
	if m.size == before {
		t.Fatal("the table did not grow")
	}
	table := uint64(m.size) * uint64(unsafe.Sizeof(slot[val]{}))
	if got := ms1.TotalAlloc - ms0.TotalAlloc; got > table/3 {
		t.Fatalf("growing to %d slots (%d bytes) allocated %d bytes", m.size, table, got)
	}
	if err := m.Check(); err != nil {
		t.Fatal(err)
	}
}

// keysAtTheTop returns n keys whose hashes are the largest: home is the
// last slot at every table size.
func keysAtTheTop(n int) []uint64 {
	keys := make([]uint64, n)
	for j := range keys {
		keys[j] = unhash(^uint64(0) - uint64(j))
	}
	return keys
}

// Keys crafted to share one home (hashes 1..n: home 0 at every size) make
// one long run; the table stays correct through growth, lookups and
// deletes, and such keys cost probing time, not memory.
func TestMapLongRunOfCraftedKeys(t *testing.T) {
	for _, k := range []uint64{0, 1, 12345, 1 << 63, ^uint64(0)} {
		if unhash(hash(k)) != k || hash(unhash(k)) != k {
			t.Fatalf("unhash does not invert hash at %x", k)
		}
	}
	m := &Map[val]{}
	want := map[uint64]val{}
	for h := uint64(1); h <= 700; h++ {
		k := unhash(h)
		m.Put(k, val{uint32(h), 0, 0})
		want[k] = val{uint32(h), 0, 0}
		if h%50 == 0 {
			check(t, m, want)
		}
	}
	// Random keys mixed in sit behind the long run.
	rng := rand.New(rand.NewPCG(5, 6))
	for range 300 {
		k := rng.Uint64()
		m.Put(k, val{1, 2, 3})
		want[k] = val{1, 2, 3}
	}
	check(t, m, want)
	if m.Slots() > 2*len(want) {
		t.Fatalf("%d entries in %d slots", len(want), m.Slots())
	}
	for h := uint64(1); h <= 700; h += 3 {
		k := unhash(h)
		if !m.Delete(k) {
			t.Fatalf("crafted key %x (hash %d) lost", k, h)
		}
		delete(want, k)
	}
	check(t, m, want)
}

// A sparse table doubles at 3/4 full and stays correct through growth and
// shrinking.
func TestSparseMapGrowsByDoubling(t *testing.T) {
	m := Sparse[val]()
	want := map[uint64]val{}
	rng := rand.New(rand.NewPCG(2, 2))
	prev := 0
	for i := range 100_000 {
		k := rng.Uint64()
		m.Put(k, val{uint32(i), 0, 1})
		want[k] = val{uint32(i), 0, 1}
		if n := m.size; n != prev {
			if prev > 0 && n != 2*prev {
				t.Fatalf("grew from %d to %d slots", prev, n)
			}
			prev = n
		}
		if n := m.size; n > 1000 && (m.Len()*4 > n*3 || m.Len()*8 < n*3-8) {
			t.Fatalf("%d entries in %d slots", m.Len(), n)
		}
	}
	check(t, &m, want)
	for k := range want {
		if len(want) == 1000 {
			break
		}
		m.Delete(k)
		delete(want, k)
	}
	if !m.Shrink() || m.Slots() > 3*len(want) {
		t.Fatalf("after shrinking: %d entries in %d slots", len(want), m.Slots())
	}
	check(t, &m, want)
}

// Growth keeps every table between the load bounds, and a table emptied by
// deletes shrinks back.
func TestMapGrowsInSmallStepsAndShrinks(t *testing.T) {
	m := &Map[val]{}
	rng := rand.New(rand.NewPCG(1, 1))
	var keys []uint64
	prev := 0
	for i := range 200_000 {
		k := rng.Uint64()
		keys = append(keys, k)
		m.Put(k, val{1, uint32(i) + 1, 0})
		if n := m.size; n != prev {
			if prev > 100 && n > prev*growthNum/growthDen+1 {
				t.Fatalf("grew from %d to %d slots", prev, n)
			}
			prev = n
		}
		if n := m.size; n > 1000 && float64(m.Len()) < 0.76*float64(n) {
			t.Fatalf("%d entries in %d slots", m.Len(), n)
		}
	}
	if m.Shrink() {
		t.Fatal("a full table shrank")
	}
	for _, k := range keys[:190_000] {
		if !m.Delete(k) {
			t.Fatalf("key %x lost", k)
		}
	}
	if !m.Shrink() {
		t.Fatal("a table a twentieth full did not shrink")
	}
	if n := m.size; n > 2*m.Len() {
		t.Fatalf("after shrink: %d entries in %d slots", m.Len(), n)
	}
	for i, k := range keys[190_000:] {
		if v, ok := m.Get(k); !ok || v.b != uint32(190_000+i+1) {
			t.Fatalf("key %x after shrink: %+v, %v", k, v, ok)
		}
	}
	if err := m.Check(); err != nil {
		t.Fatal(err)
	}
}

// A Hint follows its Map through growth and shrinking, and prefetching
// through it, or at any address at all, never faults (run with and without
// -tags purego: the assembly and the fallback).
func TestHintFollowsTheSlots(t *testing.T) {
	var h Hint
	m := &Map[val]{}
	m.SetHint(&h)
	h.Prefetch(1) // empty: nothing to fetch
	if from, to := h.window(1); from != to {
		t.Fatalf("an empty map's window is %x..%x", from, to)
	}
	for k := uint64(1); k <= 10_000; k++ {
		m.Put(k, val{1, 2, 3})
		h.Prefetch(k)
		if l := hintLayout(&h); l[hintSlots] != uintptr(m.size) || len(l) != hintSegs+len(m.segs) || l[len(l)-1] != uintptr(unsafe.Pointer(&m.segs[len(m.segs)-1][0])) {
			t.Fatalf("after %d puts the hint says %d slots in %d segments, the table has %d in %d", k, l[hintSlots], len(l)-hintSegs, m.size, len(m.segs))
		}
		checkWindow(t, &h, m, k, denseFetchSlots)
	}
	for k := uint64(1); k <= 9_900; k++ {
		m.Delete(k)
	}
	if !m.Shrink() || hintLayout(&h)[hintSlots] != uintptr(m.size) {
		t.Fatalf("after shrinking the hint says %d slots, the table has %d", hintLayout(&h)[hintSlots], m.size)
	}
	for _, addr := range []uintptr{0, 1, ^uintptr(0), hintLayout(&h)[hintSegs] + 1<<30} {
		prefetch.Line(addr)
	}
	sparse := Sparse[val]()
	sparse.SetHint(&h)
	for k := uint64(1); k <= 1000; k++ {
		sparse.Put(k, val{})
		checkWindow(t, &h, &sparse, k, sparseFetchSlots)
	}
}

// hintLayout is what h publishes.
func hintLayout(h *Hint) []uintptr {
	p := h.layout.Load()
	return unsafe.Slice(p, hintSegs+(int(*p)+segMask)>>segShift)
}

// checkWindow fails unless h's window for key k starts on the cache line of
// k's home slot and covers that slot and the fetched ones after it.
func checkWindow(t *testing.T, h *Hint, m *Map[val], k uint64, fetched int) {
	t.Helper()
	from, to := h.window(k)
	homeSlot := uintptr(unsafe.Pointer(m.at(home(hash(k), m.size))))
	end := homeSlot + uintptr(fetched)*unsafe.Sizeof(slot[val]{})
	if from%cacheLineBytes != 0 || from > homeSlot || homeSlot-from >= cacheLineBytes || to != end {
		t.Fatalf("key %d: window %x..%x, home slot at %x, %d slots end at %x", k, from, to, homeSlot, fetched, end)
	}
}

// Shrinking can give every key the same home in the new table: here two
// keys of a table of shrinkMinSlots, one in slot 0 and one a few slots on
// (so the merge starts after slot 0 and takes the key there last, after the
// hash order wrapped), both home 0 once rebuilt into 8 slots. The key taken
// after the wrap has the smaller hash and must go first in its run, or
// lookups stop before reaching it.
func TestShrinkWrapsIntoOneHome(t *testing.T) {
	for _, gap := range []uint64{2, 5, 300} {
		m := withSlots(shrinkMinSlots)
		want := map[uint64]val{}
		for _, h := range []uint64{1, gap<<52 | 1} { // homes 0 and gap
			k := unhash(h)
			m.Put(k, val{uint32(h), 1, 2})
			want[k] = val{uint32(h), 1, 2}
		}
		check(t, m, want)
		if !m.Shrink() || m.size != minSlots {
			t.Fatalf("Shrink left %d slots, want %d", m.size, minSlots)
		}
		check(t, m, want)
	}
}
