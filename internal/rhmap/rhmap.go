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
// copies slots in home order, almost sequentially). The slots are held in
// segments of segSlots, so that a rebuild writes the new table into the old
// one's segments as it passes them instead of allocating a whole table.
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

	"github.com/kvroute/kvroute/internal/prefetch"
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
	// segSlots is the number of slots in a segment of a table (Map), a
	// power of two (80 KiB of the index's 20-byte slots; the last segment
	// holds only the rest). A growth leaves about one old segment unused,
	// so segments must be small next to a large table; a table of up to
	// segSlots is one segment, which a probe reads as directly as a flat
	// table (Map.seg0), as are the lookup benchmark's (docs/PERFORMANCE.md).
	segShift = 12
	segSlots = 1 << segShift
	segMask  = segSlots - 1
)

// Map maps uint64 keys to values of type V. V should hold no pointers (the
// garbage collector then never scans the slots). The zero Map is empty and
// ready. Not safe for concurrent use.
//
// Slot numbers (Find, Occupied, KeyAt, ValueAt, DeleteAt) run from 0 to
// Slots()-1; the last one is key 0's.
//
// The slots are held in segments of segSlots (the last one holds the rest),
// so that growing reuses the memory of the old table's segments as the
// merge passes them (resize) instead of allocating a whole new table.
type Map[V comparable] struct {
	// The fields a lookup reads come first, in the first 48 bytes.
	seg0    []slot[V] // segs[0], read without going through segs
	size    int       // slots in all the segments
	n       int       // entries in the slots
	hasZero bool
	sparse  bool
	zero    V           // the value of key 0, when hasZero
	hint    *Hint       // where to publish the slots, or nil
	segs    [][]slot[V] // slot i is segs[i>>segShift][i&segMask]
}

type slot[V comparable] struct {
	h0, h1 uint32 // the key's hash, low and high half; 0: empty
	v      V
}

func (s *slot[V]) hash() uint64 { return uint64(s.h0) | uint64(s.h1)<<32 }

func (s *slot[V]) empty() bool { return s.h0|s.h1 == 0 }

// at is slot i.
func (m *Map[V]) at(i int) *slot[V] { return &m.segs[i>>segShift][i&segMask] }

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
		return max(minSlots, m.size*sparseGrowth)
	}
	return max(minSlots, m.size*growthNum/growthDen+1)
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
// instructions keep those misses from overlapping. It holds an immutable
// layout behind an atomic pointer, so reading it races with nothing; a
// stale layout only fetches useless lines (a prefetch never faults).
type Hint struct {
	// layout points to the first of: the number of slots, the size of a
	// slot, how many bytes to fetch from a key's home slot on, then each
	// segment's first slot; nil while the Map has no slots. One pointer,
	// so a reader always sees one publication whole.
	layout atomic.Pointer[uintptr]
}

const (
	hintSlots = iota
	hintSlotSize
	hintFetchBytes
	hintSegs
)

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
	if m.size == 0 {
		m.hint.layout.Store(nil)
		return
	}
	l := make([]uintptr, hintSegs+len(m.segs))
	l[hintSlots], l[hintSlotSize] = uintptr(m.size), unsafe.Sizeof(m.segs[0][0])
	if m.sparse {
		l[hintFetchBytes] = sparseFetchSlots * l[hintSlotSize]
	} else {
		l[hintFetchBytes] = denseFetchSlots * l[hintSlotSize]
	}
	for i, seg := range m.segs {
		l[hintSegs+i] = uintptr(unsafe.Pointer(unsafe.SliceData(seg)))
	}
	m.hint.layout.Store(&l[0])
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
// pass the end of the slot's segment: a prefetch never faults). It is empty
// while the Map has no slots.
func (h *Hint) window(k uint64) (from, to uintptr) {
	p := h.layout.Load()
	if p == nil {
		return 0, 0
	}
	n := int(*p)
	l := unsafe.Slice(p, hintSegs+(n+segMask)>>segShift)
	i := home(hash(k), n)
	a := l[hintSegs+i>>segShift] + uintptr(i&segMask)*l[hintSlotSize]
	return a &^ (cacheLineBytes - 1), a + l[hintFetchBytes]
}

// Len is the number of entries held.
func (m *Map[V]) Len() int {
	if m.hasZero {
		return m.n + 1
	}
	return m.n
}

// Slots is the bound of slot numbers: the table's size plus one, key 0's.
func (m *Map[V]) Slots() int { return m.size + 1 }

// Occupied reports whether slot i holds an entry.
func (m *Map[V]) Occupied(i int) bool {
	if i == m.size {
		return m.hasZero
	}
	return !m.at(i).empty()
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
	for i < m.size {
		seg, base := m.segs[i>>segShift], i&^segMask
		for j := i - base; j < len(seg); j++ {
			if s := &seg[j]; s.h0 != 0 || s.h1 != 0 { // one read for most slots
				return base + j, &s.v
			}
		}
		i = base + len(seg)
	}
	if i == m.size && m.hasZero {
		return i, &m.zero
	}
	return m.size + 1, nil
}

// KeyAt is the key in slot i, which must be occupied.
func (m *Map[V]) KeyAt(i int) uint64 {
	if i == m.size {
		return 0
	}
	return unhash(m.at(i).hash())
}

// ValueAt is the value in slot i, which must be occupied. The pointer is
// good until the next Put, Upsert, Delete, DeleteAt or Shrink.
func (m *Map[V]) ValueAt(i int) *V {
	if i == m.size {
		return &m.zero
	}
	return &m.at(i).v
}

// dist is how far a key of hash h in slot i sits from its home.
func (m *Map[V]) dist(i int, h uint64) int {
	d := i - home(h, m.size)
	if d < 0 {
		d += m.size
	}
	return d
}

// Find returns k's slot, or -1.
func (m *Map[V]) Find(k uint64) int {
	if k == 0 {
		if m.hasZero {
			return m.size
		}
		return -1
	}
	if m.n == 0 {
		return -1
	}
	if i, _, ok := m.probe(hash(k)); ok {
		return i
	}
	return -1
}

// Get returns k's value.
func (m *Map[V]) Get(k uint64) (V, bool) {
	if k != 0 && m.n != 0 {
		if s := m.lookup(hash(k)); s != nil {
			return s.v, true
		}
	} else if k == 0 && m.hasZero {
		return m.zero, true
	}
	var zero V
	return zero, false
}

// probe returns the slot of hash h (not 0) and true or, when h is absent,
// the slot Robin Hood order puts it in and false. Keys of one home are kept
// in hash order, so a whole table read from any empty slot on is in hash
// order, wrapping once from the largest hash to the smallest (resize relies
// on it): h goes before the first key nearer its home than h would be, or
// as near and of a greater hash. As homes grow with hashes, a
// walk from h's home that has not wrapped past the last slot passes only
// keys of smaller hashes before reaching h's place, so that test (a
// multiply) is needed only at a key of a greater hash (where the walk
// ends, unless the key is one wrapped from the top slots) and, once the walk
// has wrapped, at every key. The table must have a free slot. The slot is
// also returned by address (segments do not move until the next resize).
func (m *Map[V]) probe(h uint64) (int, *slot[V], bool) {
	n := m.size
	i := home(h, n)
	seg, base, j := m.seg0, i&^segMask, i&segMask
	if i >= len(seg) {
		seg = m.segs[i>>segShift]
	}
	wrapped := false
	for d := 0; ; d++ {
		p := &seg[j]
		s := p.hash()
		if s == h {
			return base + j, p, true
		}
		if s == 0 {
			return base + j, p, false
		}
		if s > h || wrapped {
			sd := base + j - home(s, n)
			if sd < 0 {
				sd += n
			}
			if sd < d || sd == d && s > h {
				return base + j, p, false // h would sit before this key: it is not here
			}
		}
		if j++; j == len(seg) {
			if base += j; base == n {
				base, wrapped = 0, true
			}
			seg, j = m.segs[base>>segShift], 0
		}
	}
}

// lookup is probe for Get: the slot of hash h, or nil. A walk that stays
// in the first segment (all of a table of up to segSlots) runs as on one
// flat array and cannot have wrapped; others go to probe.
func (m *Map[V]) lookup(h uint64) *slot[V] {
	n, seg := m.size, m.seg0
	for i, d := home(h, n), 0; i < len(seg); i, d = i+1, d+1 {
		s := seg[i].hash()
		if s == h {
			return &seg[i]
		}
		if s == 0 {
			return nil
		}
		if s > h {
			sd := i - home(s, n)
			if sd < 0 {
				sd += n
			}
			if sd <= d { // and s > h
				return nil // h would sit before this key: it is not here
			}
		}
	}
	if _, p, ok := m.probe(h); ok {
		return p
	}
	return nil
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
	if m.overLoad(m.n+1, m.size) {
		m.resize(m.grown())
	}
	h := hash(k)
	i, p, ok := m.probe(h)
	if !ok {
		m.insertAt(i, h)
	}
	return &p.v, ok
}

// insertAt adds hash h, absent, with the zero value in slot i as probe
// returned it: the rest of the run moves one slot on.
func (m *Map[V]) insertAt(i int, h uint64) {
	// Most runs end in the segment they start in: shift them there.
	seg, o := m.segs[i>>segShift], i&segMask
	for j := o; j < len(seg); j++ {
		if seg[j].empty() {
			copy(seg[o+1:j+1], seg[o:j])
			seg[o] = slot[V]{h0: uint32(h), h1: uint32(h >> 32)}
			m.n++
			return
		}
	}
	m.insertAcross(i, h)
}

// insertAcross is insertAt where the run passes the end of slot i's segment.
func (m *Map[V]) insertAcross(i int, h uint64) {
	n := m.size
	j := i
	seg, o := m.segs[j>>segShift], j&segMask
	for !seg[o].empty() {
		j++
		if o++; o == len(seg) {
			if j == n {
				j = 0
			}
			seg, o = m.segs[j>>segShift], 0
		}
	}
	// Shift slots i..j-1 (circular) one on, into the empty slot j.
	if j >= i {
		m.shiftOn(i, j)
	} else {
		m.shiftOn(0, j)
		*m.at(0) = *m.at(n - 1)
		m.shiftOn(i, n-1)
	}
	*m.at(i) = slot[V]{h0: uint32(h), h1: uint32(h >> 32)}
	m.n++
}

// shiftOn moves slots i..j-1 to i+1..j (i <= j).
func (m *Map[V]) shiftOn(i, j int) {
	for j > i {
		seg, base := m.segs[j>>segShift], j&^segMask
		if i >= base {
			copy(seg[i-base+1:j-base+1], seg[i-base:j-base])
			return
		}
		copy(seg[1:j-base+1], seg[:j-base])
		seg[0] = *m.at(base - 1)
		j = base - 1
	}
}

// shiftBack moves slots i+1..j to i..j-1 (i <= j).
func (m *Map[V]) shiftBack(i, j int) {
	for i < j {
		seg, base := m.segs[i>>segShift], i&^segMask
		if j < base+len(seg) {
			copy(seg[i-base:j-base], seg[i-base+1:j-base+1])
			return
		}
		end := base + len(seg) - 1 // the segment's last slot
		copy(seg[i-base:end-base], seg[i-base+1:])
		seg[end-base] = *m.at(end + 1)
		i = end + 1
	}
}

// DeleteAt removes the entry in slot i: the keys after it in its run that
// are not at their home move back one slot. Slot i then holds the next key
// of the run, or is empty; a walk over the slots deleting as it goes stays
// at i.
func (m *Map[V]) DeleteAt(i int) {
	n := m.size
	if i == n {
		m.hasZero, m.zero = false, *new(V)
		return
	}
	// The run to move back ends before the first slot that is empty or
	// holds a key at its home. Most runs end in slot i's segment.
	seg, o := m.segs[i>>segShift], i&segMask
	for j := o + 1; j < len(seg); j++ {
		if s := &seg[j]; s.empty() || m.dist(i-o+j, s.hash()) == 0 {
			copy(seg[o:j-1], seg[o+1:j])
			seg[j-1] = slot[V]{}
			m.n--
			return
		}
	}
	j := i + 1
	if j == n {
		j = 0
	}
	seg, o = m.segs[j>>segShift], j&segMask
	for {
		s := &seg[o]
		if s.empty() || m.dist(j, s.hash()) == 0 {
			break
		}
		j++
		if o++; o == len(seg) {
			if j == n {
				j = 0
			}
			seg, o = m.segs[j>>segShift], 0
		}
	}
	if j > i {
		m.shiftBack(i, j-1)
		*m.at(j - 1) = slot[V]{}
	} else { // the run wraps: i+1..n-1, then 0..j-1
		m.shiftBack(i, n-1)
		if j == 0 {
			*m.at(n - 1) = slot[V]{}
		} else {
			*m.at(n - 1) = *m.at(0)
			m.shiftBack(0, j-1)
			*m.at(j - 1) = slot[V]{}
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
	if m.size < shrinkMinSlots || m.n*4 >= m.size {
		return false
	}
	m.resize(m.sizeFor(m.n))
	return true
}

// resize moves every entry to a table of slots slots. From an empty slot on,
// the old table is in hash order (probe) up to its one wrap, which is home
// order in the new one too: each key goes at its home or just after the key
// placed before it, a sequential merge. Only where that place is taken (the last run wrapping
// onto the first) does it fall back to probing.
//
// The merge reads the old table's segments in order and writes the new
// one's in order, every slot once (an entry or zero); each old segment it
// has read to the end goes on a free list, and the new table takes its full
// segments from that list before it allocates. Growing by a fifth, the
// writes run about a fifth ahead of the reads, so a growth allocates about
// a fifth of the table and the old table leaves about one segment of
// garbage (docs/PERFORMANCE.md).
func (m *Map[V]) resize(slots int) {
	old, oldSize := m.segs, m.size
	m.segs, m.size, m.n = make([][]slot[V], (slots+segMask)>>segShift), slots, 0
	defer m.publish()
	g := merger[V]{m: m, slots: slots, slotBytes: unsafe.Sizeof(slot[V]{})}
	// A table of hugeAdviseBytes or more has its new segments advised for
	// huge pages before their first write. The growth that brings a table
	// there reuses none of the old segments (written on base pages, they
	// would stay on them), so from then on every segment is advised.
	g.advise = uintptr(slots)*g.slotBytes >= hugeAdviseBytes
	g.reuse = !g.advise || uintptr(oldSize)*g.slotBytes >= hugeAdviseBytes
	start := 0
	for start < oldSize && !old[start>>segShift][start&segMask].empty() {
		start++
	}
	// The merge reads the slots from start to the end, then the tail: one
	// pass in cyclic hash order, which wraps from the largest hash to the
	// smallest at most once, in the tail. The new homes need not show it (a
	// shrink can give every key one home), so the hashes tell: last is the
	// largest hash before the tail.
	var last uint64
	for i := oldSize - 1; i >= start; i-- {
		if h := old[i>>segShift][i&segMask].hash(); h != 0 {
			last = h
			break
		}
	}
	// The slots before start (the end of the last run, wrapped) are merged
	// last: keep them aside so that their segments can be reused.
	var tail []slot[V]
	for i := range start {
		tail = append(tail, old[i>>segShift][i&segMask])
	}
	for k := range start >> segShift {
		g.release(old, k)
	}
	for k := start >> segShift; k < len(old); k++ {
		seg := old[k]
		for o := max(start-k<<segShift, 0); o < len(seg); o++ {
			var n int
			o, g.next, n = mergeRun(g.wseg, seg, g.wbase, o, g.next, slots)
			m.n += n
			g.filled = min(g.next, slots)
			if o < len(seg) {
				g.place(&seg[o])
			}
		}
		g.release(old, k)
	}
	for i := range tail {
		h := tail[i].hash()
		if h < last {
			g.wrapped = slots // homes start again at 0
		}
		last = h
		g.place(&tail[i])
	}
	g.fillTo(slots)
	if !m.sparse {
		// A sparse table's entries live seconds (the index's speculative
		// table): collapsing it measured no faster, and its growth was most
		// of the collapses in the decision benchmarks (docs/PERFORMANCE.md).
		collapseHuge(g.fresh)
	}
	m.seg0 = m.segs[0]
	for _, s := range g.fallback {
		i, p, _ := m.probe(s.hash())
		m.insertAt(i, s.hash())
		p.v = s.v
	}
}

// mergeRun is resize's common case: it moves the entries of src from slot
// o on into dst, the new table's segment from slot dbase on, each at its
// home or just after the entry placed before it (next), zeroing the slots
// it passes, and returns where it stopped: at the end of src, or at an
// entry whose place is out of dst, which it leaves to merger.place. Its
// entries are in hash order (resize's slots from start on), so homes never
// go back.
func mergeRun[V comparable](dst, src []slot[V], dbase, o, next, slots int) (int, int, int) {
	n, dend := 0, dbase+len(dst)
	for ; o < len(src); o++ {
		h := src[o].hash()
		if h == 0 {
			continue
		}
		hm := home(h, slots)
		i := max(hm, next)
		if i >= dend {
			break
		}
		for ; next < i; next++ {
			dst[next-dbase] = slot[V]{}
		}
		dst[i-dbase] = src[o]
		next = i + 1
		n++
	}
	return o, next, n
}

// merger is resize's state between the keys it places out of the common
// case: at a new segment, where hash order wraps past the top, and in the
// fallback.
type merger[V comparable] struct {
	m         *Map[V]
	slots     int
	free      [][]slot[V] // old segments read to the end
	slotBytes uintptr
	advise    bool // advise new segments for huge pages
	reuse     bool // put old segments on the free list
	// fresh lists the new segments advised for huge pages, to collapse
	// onto huge pages once written (collapseHuge).
	fresh []segSpan
	// The new slots before filled are written (an entry or zero); wseg is
	// the segment being written, from slot wbase on.
	filled, wbase int
	wseg          []slot[V]
	// next: the unwrapped slot after the last key placed; wrapped: slots
	// once hash order has passed the top and homes start again at 0 (set by
	// resize, which sees the hashes).
	next, wrapped int
	fallback      []slot[V] // entries left for probing
}

// segSpan is a segment's memory: its first slot and its size in bytes.
type segSpan struct {
	p unsafe.Pointer
	n uintptr
}

// release puts old segment k, read to the end, on the free list.
func (g *merger[V]) release(old [][]slot[V], k int) {
	if len(old[k]) == segSlots && g.reuse {
		g.free = append(g.free, old[k])
	}
	old[k] = nil
}

// nextSeg makes the segment from slot filled on the one being written: a
// segment off the free list or, for the last (shorter) one or when the list
// is empty, a new one.
func (g *merger[V]) nextSeg() {
	q := g.filled >> segShift
	size := min(segSlots, g.slots-g.filled)
	reused := size == segSlots && len(g.free) > 0
	if reused {
		g.m.segs[q], g.free = g.free[len(g.free)-1], g.free[:len(g.free)-1]
	} else {
		g.m.segs[q] = make([]slot[V], size)
	}
	if !reused && g.advise {
		adviseHuge(unsafe.Pointer(unsafe.SliceData(g.m.segs[q])), uintptr(size)*g.slotBytes)
		g.fresh = append(g.fresh, segSpan{unsafe.Pointer(unsafe.SliceData(g.m.segs[q])), uintptr(size) * g.slotBytes})
	}
	g.wseg, g.wbase = g.m.segs[q], g.filled
}

// fillTo zeroes the new slots from filled to i (i <= slots).
func (g *merger[V]) fillTo(i int) {
	for g.filled < i {
		if g.filled == g.wbase+len(g.wseg) {
			g.nextSeg()
		}
		end := min(i, g.wbase+len(g.wseg))
		clear(g.wseg[g.filled-g.wbase : end-g.wbase])
		g.filled = end
	}
}

// place puts the entry of s, the next in hash order, in the new table.
func (g *merger[V]) place(s *slot[V]) {
	if g.fallback != nil {
		g.fallback = append(g.fallback, *s)
		return
	}
	i := max(home(s.hash(), g.slots)+g.wrapped, g.next)
	g.next = i + 1
	if i < g.slots {
		g.fillTo(i)
		if g.filled == g.wbase+len(g.wseg) {
			g.nextSeg()
		}
		g.wseg[i-g.wbase] = *s
		g.filled = i + 1
		g.m.n++
		return
	}
	g.fillTo(g.slots)
	if i -= g.slots; i >= g.slots || !g.m.at(i).empty() {
		g.fallback = append(g.fallback, *s) // the last run reached the first
		return
	}
	*g.m.at(i) = *s
	g.m.n++
}

// Check verifies the table's invariants: the count agrees with the occupied
// slots, each run is in Robin Hood order (a key sits no further from its home
// than the key before it, plus one; keys of one home are in hash order),
// every key is found where it is, empty slots are zero, every segment but
// the last holds segSlots slots, and the fill is within the limit. For
// tests.
func (m *Map[V]) Check() error {
	n, seen := m.size, 0
	total := 0
	for q, seg := range m.segs {
		if q < len(m.segs)-1 && len(seg) != segSlots || len(seg) == 0 {
			return fmt.Errorf("segment %d of %d holds %d slots", q, len(m.segs), len(seg))
		}
		total += len(seg)
	}
	if total != n {
		return fmt.Errorf("segments hold %d slots, size %d", total, n)
	}
	for i := range n {
		if !m.Occupied(i) {
			if *m.at(i) != (slot[V]{}) {
				return fmt.Errorf("empty slot %d holds %+v", i, *m.at(i))
			}
			continue
		}
		seen++
		prev := i - 1
		if prev < 0 {
			prev = n - 1
		}
		d := m.dist(i, m.at(i).hash())
		if !m.Occupied(prev) && d != 0 || m.Occupied(prev) && d > m.dist(prev, m.at(prev).hash())+1 {
			return fmt.Errorf("slot %d of %d: key %x sits %d from home after an empty slot or one %d from its own", i, n, m.KeyAt(i), d, m.dist(prev, m.at(prev).hash()))
		}
		if ph, h := m.at(prev).hash(), m.at(i).hash(); m.Occupied(prev) && d > 0 && home(ph, n) == home(h, n) && ph > h {
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
