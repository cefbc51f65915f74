// Package rhmap is kvroute's compact hash table from 64-bit keys to small
// pointer-free values: the index's block entries and speculative entries and
// ingest's engine hash → block key maps are all one Map.
//
// It is open addressing with linear probing in Robin Hood order: every key
// sits at or after its home slot and slots stay ordered by home, so a lookup
// stops at the first slot whose key lies closer to its own home than the
// searched key would, and a delete shifts the rest of its run back by one (no
// tombstones). A key's home is fastrange(hash, slots), which works for any
// number of slots: the table grows by a fifth when it is 92 % full, so it
// always holds between 77 and 92 % of its slots (no doubling, and a rebuild
// copies slots in home order, almost sequentially).
//
// A slot holds its key's hash, not the key: the hash is a bijection, so the
// key is recovered from it, and a probe reads each slot's home straight from
// the stored hash. Hash 0 (key 0) marks an empty slot; the entry of key 0 is
// held beside the slots. A hash packs into two 32-bit words, so a slot is 8
// bytes plus the value with no padding when the value is made of 32-bit
// words: 20 bytes for a 12-byte value (the index), 16 for a uint64. On
// Linux the memory of a large table is advised for transparent huge pages
// (adviseHuge).
package rhmap

import (
	"errors"
	"fmt"
	"math/bits"
	"sync/atomic"
	"unsafe"

	"github.com/kvroute/kvroute/prefetch"
)

// Table sizing: the most entries per slot before the table grows, and the
// factor it grows by (both as num/den). Between them every table is 77–92 %
// full, except the small ones (minSlots). The fill limit is what keeps
// kvroute's memory per (block, replica) under its target (docs/PERFORMANCE.md).
// A Sparse table grows by doubling at 3/4 full instead (37–75 % full).
const (
	maxLoadNum, maxLoadDen             = 23, 25 // 0.92
	growthNum, growthDen               = 6, 5   // 1.2
	sparseMaxLoadNum, sparseMaxLoadDen = 3, 4
	sparseGrowth                       = 2
	minSlots                           = 8
	// shrinkMinSlots is the smallest table Shrink rebuilds.
	shrinkMinSlots = 4096
	// hugeAdviseBytes is the smallest table whose memory resize asks the
	// kernel to back with huge pages (adviseHuge). Below it the advice
	// would mostly cover other heap memory; at 256 KiB a 64-shard index
	// shard table qualifies from about 11k entries (docs/PERFORMANCE.md).
	hugeAdviseBytes = 256 << 10
	// denseFetchSlots and sparseFetchSlots are how many slots from a key's
	// home Hint.Prefetch fetches. A Put of a new key walks from its home past
	// the keys that go before it to the run's next empty slot, shifting them
	// on; a Delete walks to the end of the run to shift it back. At a dense
	// table's fill that walk spans ~15 slots at 82 % full, ~30 at 87 %, and
	// each further cache line it reaches was a miss of its own
	// (docs/PERFORMANCE.md); in a sparse table runs are short.
	denseFetchSlots  = 24
	sparseFetchSlots = 8
	cacheLineBytes   = 64
)

// Map maps uint64 keys to values of type V. V should hold no pointers (the
// garbage collector then never scans the slots). The zero Map is empty and
// ready. Not safe for concurrent use.
//
// Slot numbers (Find, Occupied, KeyAt, ValueAt, DeleteAt) run from 0 to
// Slots()-1; the last one is key 0's.
type Map[V comparable] struct {
	slots   []slot[V]
	n       int // entries in slots
	hasZero bool
	zero    V // the value of key 0, when hasZero
	sparse  bool
	hint    *Hint // where to publish the slots, or nil
}

type slot[V comparable] struct {
	h0, h1 uint32 // the key's hash, low and high half; 0: empty
	v      V
}

func (s *slot[V]) hash() uint64 { return uint64(s.h0) | uint64(s.h1)<<32 }

// hashMul and its inverse mod 2⁶⁴ make hash a bijection.
const (
	hashMul    = 0xBF58476D1CE4E5B9
	hashMulInv = 0x96DE1B173F119089
)

// hash spreads keys that are not random (tests, small integers) over the
// table. It is a bijection with hash(0) = 0, so slots hold hashes and the
// slots' hash order is a total order of keys. Its multiplier differs from the
// one the index picks shards with, so the keys of one shard still spread over
// its whole table.
func hash(k uint64) uint64 { return (k ^ k>>32) * hashMul }

// unhash is hash's inverse.
func unhash(h uint64) uint64 {
	x := h * hashMulInv
	return x ^ x>>32
}

// home is the first slot a key with hash h may occupy among n.
func home(h uint64, n int) int {
	hi, _ := bits.Mul64(h, uint64(n))
	return int(hi)
}

// Sparse returns an empty Map sized for speed rather than memory, for
// short-lived entries in tables that fill and drain in bursts: it grows by
// doubling when 3/4 full, so inserts shift short runs and growth copies each
// entry about once (a dense Map, the zero value, shifts runs of tens of slots
// near 92 % and growth copies each entry about five times).
func Sparse[V comparable]() Map[V] { return Map[V]{sparse: true} }

// overLoad reports whether n entries are over the fill limit of a table of
// slots slots.
func (m *Map[V]) overLoad(n, slots int) bool {
	if m.sparse {
		return n*sparseMaxLoadDen > slots*sparseMaxLoadNum
	}
	return n*maxLoadDen > slots*maxLoadNum
}

// grown is the table size after the next growth.
func (m *Map[V]) grown() int {
	if m.sparse {
		return max(minSlots, len(m.slots)*sparseGrowth)
	}
	return max(minSlots, len(m.slots)*growthNum/growthDen+1)
}

// sizeFor is the size growth gives a table of n entries at the least: n over
// the fill a table has just after growing.
func (m *Map[V]) sizeFor(n int) int {
	if m.sparse {
		return max(minSlots, n*sparseGrowth*sparseMaxLoadDen/sparseMaxLoadNum+1)
	}
	return max(minSlots, n*growthNum*maxLoadDen/(growthDen*maxLoadNum)+1)
}

// Hint publishes where a Map's slots are, so that a goroutine that does not
// hold the Map's lock can ask the CPU to start fetching a key's slots before
// it takes the lock (Prefetch): a writer of keys spread over a large index
// waits for the cache misses of each key's run, and the lock's atomic
// instructions keep those misses from overlapping. Its fields are atomic, so
// reading them races with nothing; a stale or mixed reading only fetches
// useless lines (a prefetch never faults).
type Hint struct {
	base       atomic.Uintptr
	slots      atomic.Int64
	slotSize   atomic.Int64
	fetchBytes atomic.Int64 // from a key's home slot on
}

// SetHint makes m publish its slots to h now and whenever it reallocates
// them.
func (m *Map[V]) SetHint(h *Hint) {
	m.hint = h
	m.publish()
}

func (m *Map[V]) publish() {
	if m.hint == nil {
		return
	}
	if len(m.slots) == 0 {
		m.hint.slots.Store(0)
		return
	}
	m.hint.base.Store(uintptr(unsafe.Pointer(&m.slots[0])))
	size := int64(unsafe.Sizeof(m.slots[0]))
	m.hint.slotSize.Store(size)
	if m.sparse {
		m.hint.fetchBytes.Store(sparseFetchSlots * size)
	} else {
		m.hint.fetchBytes.Store(denseFetchSlots * size)
	}
	m.hint.slots.Store(int64(len(m.slots)))
}

// Prefetch starts loading key k's home slot and the slots after it that a
// Put or Delete of k is likely to walk (denseFetchSlots, sparseFetchSlots)
// into the CPU cache (a no-op without amd64 assembly, and under the race
// detector: raceEnabled).
func (h *Hint) Prefetch(k uint64) {
	if raceEnabled {
		return
	}
	from, to := h.window(k)
	for l := from; l < to; l += cacheLineBytes {
		prefetch.Line(l)
	}
}

// window is the memory Prefetch fetches for key k: from the start of the
// cache line of k's home slot to the end of the fetched slots (which may
// pass the table's end: a prefetch never faults). It is empty while the Map
// has no slots.
func (h *Hint) window(k uint64) (from, to uintptr) {
	n := h.slots.Load()
	if n == 0 {
		return 0, 0
	}
	a := h.base.Load() + uintptr(home(hash(k), int(n)))*uintptr(h.slotSize.Load())
	return a &^ (cacheLineBytes - 1), a + uintptr(h.fetchBytes.Load())
}

// Len is the number of entries held.
func (m *Map[V]) Len() int {
	if m.hasZero {
		return m.n + 1
	}
	return m.n
}

// Slots is the bound of slot numbers: the table's size plus one, key 0's.
func (m *Map[V]) Slots() int { return len(m.slots) + 1 }

// Occupied reports whether slot i holds an entry.
func (m *Map[V]) Occupied(i int) bool {
	if i == len(m.slots) {
		return m.hasZero
	}
	return m.slots[i].h0|m.slots[i].h1 != 0
}

// Next is the first occupied slot at or after slot i and its value, or
// (Slots(), nil) when there is none: a walk over the entries is
//
//	for i, v := m.Next(0); v != nil; i, v = m.Next(i + 1)
//
// and one that deletes slot i as it goes steps back (i--) to look at slot i
// again (DeleteAt). The pointer is good until the next Put, Upsert, Delete,
// DeleteAt or Shrink.
func (m *Map[V]) Next(i int) (int, *V) {
	sl := m.slots
	for ; i < len(sl); i++ {
		if s := &sl[i]; s.h0 != 0 || s.h1 != 0 { // one read for most slots
			return i, &s.v
		}
	}
	if i == len(sl) && m.hasZero {
		return i, &m.zero
	}
	return len(sl) + 1, nil
}

// KeyAt is the key in slot i, which must be occupied.
func (m *Map[V]) KeyAt(i int) uint64 {
	if i == len(m.slots) {
		return 0
	}
	return unhash(m.slots[i].hash())
}

// ValueAt is the value in slot i, which must be occupied. The pointer is
// good until the next Put, Upsert, Delete, DeleteAt or Shrink.
func (m *Map[V]) ValueAt(i int) *V {
	if i == len(m.slots) {
		return &m.zero
	}
	return &m.slots[i].v
}

// dist is how far slot i's (present) key sits from its home.
func (m *Map[V]) dist(i int) int {
	d := i - home(m.slots[i].hash(), len(m.slots))
	if d < 0 {
		d += len(m.slots)
	}
	return d
}

// Find returns k's slot, or -1.
func (m *Map[V]) Find(k uint64) int {
	if k == 0 {
		if m.hasZero {
			return len(m.slots)
		}
		return -1
	}
	if m.n == 0 {
		return -1
	}
	if i, ok := m.probe(hash(k)); ok {
		return i
	}
	return -1
}

// Get returns k's value.
func (m *Map[V]) Get(k uint64) (V, bool) {
	if i := m.Find(k); i >= 0 {
		return *m.ValueAt(i), true
	}
	var zero V
	return zero, false
}

// probe returns the slot of hash h (not 0) and true or, when h is absent,
// the slot Robin Hood order puts it in and false. Keys of one home are kept
// in hash order, so a whole table is in hash order from any empty slot on
// (resize relies on it): h goes before the first key nearer its home than h
// would be, or as near and of a greater hash. As homes grow with hashes, a
// walk from h's home that has not wrapped past the last slot passes only
// keys of smaller hashes before reaching h's place, so that test (a
// multiply) is needed only at a key of a greater hash (where the walk
// ends, unless the key is one wrapped from the top slots) and, once the walk
// has wrapped, at every key. The table must have a free slot.
func (m *Map[V]) probe(h uint64) (int, bool) {
	n := len(m.slots)
	i := home(h, n)
	wrapped := false
	for d := 0; ; d++ {
		s := m.slots[i].hash()
		if s == h {
			return i, true
		}
		if s == 0 {
			return i, false
		}
		if s > h || wrapped {
			sd := i - home(s, n)
			if sd < 0 {
				sd += n
			}
			if sd < d || sd == d && s > h {
				return i, false // h would sit before this key: it is not here
			}
		}
		if i++; i == n {
			i, wrapped = 0, true
		}
	}
}

// Put stores v under k, replacing any value.
func (m *Map[V]) Put(k uint64, v V) {
	p, _ := m.Upsert(k)
	*p = v
}

// Upsert returns the value stored under k and true or, when k is absent,
// adds it with the zero value and returns that and false. The pointer is
// good until the next Put, Upsert, Delete, DeleteAt or Shrink.
func (m *Map[V]) Upsert(k uint64) (*V, bool) {
	if k == 0 {
		ok := m.hasZero
		if !ok {
			m.hasZero, m.zero = true, *new(V)
		}
		return &m.zero, ok
	}
	if m.overLoad(m.n+1, len(m.slots)) {
		m.resize(m.grown())
	}
	h := hash(k)
	i, ok := m.probe(h)
	if !ok {
		m.insertAt(i, h)
	}
	return &m.slots[i].v, ok
}

// insertAt adds hash h, absent, with the zero value in slot i as probe
// returned it: the rest of the run moves one slot on.
func (m *Map[V]) insertAt(i int, h uint64) {
	n := len(m.slots)
	j := i
	for m.slots[j].h0|m.slots[j].h1 != 0 {
		if j++; j == n {
			j = 0
		}
	}
	// Shift slots i..j-1 (circular) one on, into the empty slot j.
	if j >= i {
		copy(m.slots[i+1:j+1], m.slots[i:j])
	} else {
		copy(m.slots[1:j+1], m.slots[:j])
		m.slots[0] = m.slots[n-1]
		copy(m.slots[i+1:], m.slots[i:n-1])
	}
	m.slots[i] = slot[V]{h0: uint32(h), h1: uint32(h >> 32)}
	m.n++
}

// DeleteAt removes the entry in slot i: the keys after it in its run that
// are not at their home move back one slot. Slot i then holds the next key
// of the run, or is empty; a walk over the slots deleting as it goes stays
// at i.
func (m *Map[V]) DeleteAt(i int) {
	n := len(m.slots)
	if i == n {
		m.hasZero, m.zero = false, *new(V)
		return
	}
	// The run to move back ends before the first slot that is empty or
	// holds a key at its home.
	j := i + 1
	for ; ; j++ {
		if j == n {
			j = 0
		}
		if s := &m.slots[j]; s.h0|s.h1 == 0 || m.dist(j) == 0 {
			break
		}
	}
	if j > i {
		copy(m.slots[i:j-1], m.slots[i+1:j])
		m.slots[j-1] = slot[V]{}
	} else { // the run wraps: i+1..n-1, then 0..j-1
		copy(m.slots[i:n-1], m.slots[i+1:])
		if j == 0 {
			m.slots[n-1] = slot[V]{}
		} else {
			m.slots[n-1] = m.slots[0]
			copy(m.slots[:j-1], m.slots[1:j])
			m.slots[j-1] = slot[V]{}
		}
	}
	m.n--
}

// Delete removes k and reports whether it was there.
func (m *Map[V]) Delete(k uint64) bool {
	i := m.Find(k)
	if i >= 0 {
		m.DeleteAt(i)
	}
	return i >= 0
}

// Shrink rebuilds a large table left under a quarter full (by deletes) at
// the size growth would have given it, so its memory goes back to the
// runtime, and reports whether it did.
func (m *Map[V]) Shrink() bool {
	if len(m.slots) < shrinkMinSlots || m.n*4 >= len(m.slots) {
		return false
	}
	m.resize(m.sizeFor(m.n))
	return true
}

// resize moves every entry to a table of slots slots. From an empty slot on,
// the old table is in hash order (probe), which is home order in the new one
// too: each key goes at its home or just after the key placed before it, a
// sequential merge. Only where that place is taken (the last run wrapping
// onto the first) does it fall back to probing.
func (m *Map[V]) resize(slots int) {
	old := m.slots
	m.slots, m.n = make([]slot[V], slots), 0
	if size := uintptr(slots) * unsafe.Sizeof(m.slots[0]); size >= hugeAdviseBytes {
		adviseHuge(unsafe.Pointer(unsafe.SliceData(m.slots)), size) // before the slots are first written
	}
	defer m.publish()
	start := 0
	for start < len(old) && old[start].h0|old[start].h1 != 0 {
		start++
	}
	// next: the unwrapped slot after the last key placed; wrapped: slots
	// once hash order has passed the top and homes start again at 0.
	next, wrapped, prev := 0, 0, -1
	var fallback []int // old slots left for probing
	for _, r := range [2][2]int{{start, len(old)}, {0, start}} {
		for o := r[0]; o < r[1]; o++ {
			h := old[o].hash()
			if h == 0 {
				continue
			}
			if fallback != nil {
				fallback = append(fallback, o)
				continue
			}
			hm := home(h, slots) + wrapped
			if hm < prev {
				wrapped = slots
				hm += slots
			}
			prev = hm
			i := max(hm, next)
			next = i + 1
			if i >= slots {
				i -= slots
			}
			if i >= slots || m.slots[i].h0|m.slots[i].h1 != 0 {
				fallback = append(fallback, o) // the last run reached the first
				continue
			}
			m.slots[i] = old[o]
			m.n++
		}
	}
	for _, o := range fallback {
		i, _ := m.probe(old[o].hash())
		m.insertAt(i, old[o].hash())
		m.slots[i].v = old[o].v
	}
}

// Check verifies the table's invariants: the count agrees with the occupied
// slots, each run is in Robin Hood order (a key sits no further from its home
// than the key before it, plus one; keys of one home are in hash order),
// every key is found where it is, empty slots are zero, and the fill is
// within the limit. For tests.
func (m *Map[V]) Check() error {
	n, seen := len(m.slots), 0
	for i := range n {
		if !m.Occupied(i) {
			if m.slots[i] != (slot[V]{}) {
				return fmt.Errorf("empty slot %d holds %+v", i, m.slots[i])
			}
			continue
		}
		seen++
		prev := i - 1
		if prev < 0 {
			prev = n - 1
		}
		d := m.dist(i)
		if !m.Occupied(prev) && d != 0 || m.Occupied(prev) && d > m.dist(prev)+1 {
			return fmt.Errorf("slot %d of %d: key %x sits %d from home after an empty slot or one %d from its own", i, n, m.KeyAt(i), d, m.dist(prev))
		}
		if ph, h := m.slots[prev].hash(), m.slots[i].hash(); m.Occupied(prev) && d > 0 && home(ph, n) == home(h, n) && ph > h {
			return fmt.Errorf("slots %d and %d: keys of one home out of hash order", prev, i)
		}
		if j := m.Find(m.KeyAt(i)); j != i {
			return fmt.Errorf("key %x in slot %d is found in slot %d", m.KeyAt(i), i, j)
		}
	}
	if seen != m.n {
		return fmt.Errorf("%d occupied slots, count %d", seen, m.n)
	}
	if !m.hasZero && m.zero != *new(V) {
		return errors.New("key 0 absent but its value is not zero")
	}
	if n > minSlots && m.overLoad(m.n, n) {
		return errors.New("over the load limit")
	}
	return nil
}
