package index

import "math/bits"

// blockTable maps block keys to entries for one shard: an open-addressing
// hash table of 20-byte slots (a Go map slot of the same data takes 24 bytes
// plus its control byte and its table's slack).
//
// It is Robin Hood linear probing: every key sits at or after its home slot
// and slots stay ordered by home, so a lookup stops at the first slot whose
// key lies closer to its own home than the searched key would, and a delete
// shifts the rest of its run back by one (no tombstones). A key's home is
// fastrange(hash, slots), which works for any number of slots: the table grows
// by a fifth when it is tableMaxLoad full, so it always holds between
// tableMaxLoad/tableGrowth and tableMaxLoad of its slots (no doubling, and a
// rebuild copies slots in home order, almost sequentially).
//
// Empty slots are zero: entries with held == 0 or seen == 0 are never stored
// (ticks start at 1), so a scan over every slot (sweeps, eviction) tells a
// live slot by its seen word alone. deleteAt keeps the slots slice, so a scan
// may hold it while it deletes.
// Not safe for concurrent use; the shard's lock guards it.
type blockTable struct {
	slots []slot
	n     int // entries held
}

// slot is one entry and its key in five 32-bit words, so that it packs in
// 20 bytes (a struct of uint64s would be padded to 24).
type slot struct {
	k0, k1 uint32 // key, low and high half
	h0, h1 uint32 // entry.held, low and high half; 0: the slot is empty
	seen   uint32 // entry.seen
}

func (s *slot) key() BlockKey { return BlockKey(uint64(s.k0) | uint64(s.k1)<<32) }
func (s *slot) held() uint64  { return uint64(s.h0) | uint64(s.h1)<<32 }
func (s *slot) empty() bool   { return s.h0|s.h1 == 0 }
func (s *slot) entry() entry  { return entry{held: s.held(), seen: s.seen} }

func (s *slot) setEntry(e entry) {
	s.h0, s.h1, s.seen = uint32(e.held), uint32(e.held>>32), e.seen
}

// Table sizing: the most entries per slot before the table grows, and the
// factor it grows by (both as num/den). Between them every table is 77–92 %
// full, except the small ones (tableMinSlots).
const (
	tableMaxLoadNum, tableMaxLoadDen = 23, 25 // 0.92
	tableGrowthNum, tableGrowthDen   = 6, 5   // 1.2
	tableMinSlots                    = 8
)

// blockHash spreads keys that are not random (tests, small integers) over the
// table: the multiplicative hash shardOf also uses, without the top bits that
// chose the shard.
func blockHash(k BlockKey) uint64 { return (uint64(k) * 0x9E3779B97F4A7C15) << 6 }

// home is the first slot a key with hash h may occupy among n.
func home(h uint64, n int) int {
	hi, _ := bits.Mul64(h, uint64(n))
	return int(hi)
}

func (t *blockTable) len() int { return t.n }

// dist is how far slot i's key sits from its home.
func (t *blockTable) dist(i int) int {
	d := i - home(blockHash(t.slots[i].key()), len(t.slots))
	if d < 0 {
		d += len(t.slots)
	}
	return d
}

// probe returns k's slot and true or, when k is absent, the slot Robin Hood
// order puts it in and false. Keys of one home are kept in hash order, so a
// whole table is in hash order from any empty slot on (resize relies on it):
// k goes before the first key nearer its home than k would be, or as near
// and of a greater hash. The table must have slots.
func (t *blockTable) probe(k BlockKey) (int, bool) {
	n := len(t.slots)
	k0, k1 := uint32(k), uint32(k>>32)
	h := blockHash(k)
	i := home(h, n)
	for d := 0; ; d++ {
		s := &t.slots[i]
		if s.empty() {
			return i, false
		}
		if s.k0 == k0 && s.k1 == k1 {
			return i, true
		}
		sh := blockHash(s.key())
		sd := i - home(sh, n)
		if sd < 0 {
			sd += n
		}
		if sd < d || sd == d && sh > h {
			return i, false // k would sit before this key: it is not here
		}
		if i++; i == n {
			i = 0
		}
	}
}

// find returns k's slot, or -1. It is probe without the insertion order's
// tie test (a miss may walk past keys of k's home, never past its run), and
// with no distance test at k's home itself: most lookups stop there.
func (t *blockTable) find(k BlockKey) int {
	if t.n == 0 {
		return -1
	}
	n := len(t.slots)
	k0, k1 := uint32(k), uint32(k>>32)
	i := home(blockHash(k), n)
	for d := 0; ; d++ {
		s := &t.slots[i]
		if s.empty() {
			return -1
		}
		if s.k0 == k0 && s.k1 == k1 {
			return i
		}
		if d > 0 && t.dist(i) < d {
			return -1
		}
		if i++; i == n {
			i = 0
		}
	}
}

// get returns k's entry.
func (t *blockTable) get(k BlockKey) (entry, bool) {
	if i := t.find(k); i >= 0 {
		return t.slots[i].entry(), true
	}
	return entry{}, false
}

// at returns the key and entry in slot i (a slot find returned).
func (t *blockTable) at(i int) (BlockKey, entry) {
	return t.slots[i].key(), t.slots[i].entry()
}

// set replaces the entry in slot i; e.held and e.seen must not be 0.
func (t *blockTable) set(i int, e entry) { t.slots[i].setEntry(e) }

// put stores k's entry, replacing any; e.held and e.seen must not be 0.
func (t *blockTable) put(k BlockKey, e entry) {
	t.reserve()
	if i, ok := t.probe(k); ok {
		t.set(i, e)
	} else {
		t.insertAt(i, k, e)
	}
}

// reserve makes room for one more entry, so that the slot probe returns
// next stays the place to insert at.
func (t *blockTable) reserve() {
	if (t.n+1)*tableMaxLoadDen > len(t.slots)*tableMaxLoadNum {
		t.resize(max(tableMinSlots, len(t.slots)*tableGrowthNum/tableGrowthDen+1))
	}
}

// insertAt adds k, absent, in slot i as probe returned it after reserve,
// shifting the rest of the run one slot on. e.held and e.seen must not be 0.
func (t *blockTable) insertAt(i int, k BlockKey, e entry) {
	if e.held == 0 || e.seen == 0 {
		panic("index: blockTable.insertAt of an empty entry")
	}
	n := len(t.slots)
	j := i
	for !t.slots[j].empty() {
		if j++; j == n {
			j = 0
		}
	}
	// Shift slots i..j-1 (circular) one on, into the empty slot j.
	if j >= i {
		copy(t.slots[i+1:j+1], t.slots[i:j])
	} else {
		copy(t.slots[1:j+1], t.slots[:j])
		t.slots[0] = t.slots[n-1]
		copy(t.slots[i+1:], t.slots[i:n-1])
	}
	t.slots[i] = slot{k0: uint32(k), k1: uint32(k >> 32)}
	t.slots[i].setEntry(e)
	t.n++
}

// deleteAt removes the entry in slot i: the keys after it in its run that are
// not at their home move back one slot. Slot i then holds the next key of the
// run, or is empty; a walk over the slots deleting as it goes stays at i.
func (t *blockTable) deleteAt(i int) {
	n := len(t.slots)
	for {
		j := i + 1
		if j == n {
			j = 0
		}
		if t.slots[j].empty() || t.dist(j) == 0 {
			break
		}
		t.slots[i] = t.slots[j]
		i = j
	}
	t.slots[i] = slot{}
	t.n--
}

// delete removes k and reports whether it was there.
func (t *blockTable) delete(k BlockKey) bool {
	i := t.find(k)
	if i >= 0 {
		t.deleteAt(i)
	}
	return i >= 0
}

// slotCount is the table's size in slots.
func (t *blockTable) slotCount() int { return len(t.slots) }

// shrink rebuilds a table left under a quarter full (by sweeps, eviction or
// Clear) at the size growth would have given it, so its memory goes back to
// the runtime.
func (t *blockTable) shrink() {
	if len(t.slots) >= shrinkMin && t.n*4 < len(t.slots) {
		t.resize(max(tableMinSlots, t.n*tableGrowthNum*tableMaxLoadDen/(tableGrowthDen*tableMaxLoadNum)+1))
	}
}

// resize moves every entry to a table of slots slots. From an empty slot on,
// the old table is in hash order (probe), which is home order in the new one
// too: each key goes at its home or just after the key placed before it, a
// sequential merge. Only where that place is taken (the last run wrapping
// onto the first) does it fall back to probing.
func (t *blockTable) resize(slots int) {
	old := t.slots
	t.slots, t.n = make([]slot, slots), 0
	start := 0
	for start < len(old) && !old[start].empty() {
		start++
	}
	next, wrapped, probing := 0, 0, false // next: unwrapped slot after the last key placed
	prev := -1
	for c := range old {
		o := &old[(start+c)%len(old)]
		if o.empty() {
			continue
		}
		k := o.key()
		if !probing {
			pos := home(blockHash(k), slots) + wrapped
			if pos < prev { // hash order passed the top: homes start again at 0
				wrapped = slots
				pos += slots
			}
			prev = pos
			pos = max(pos, next)
			if i := pos % slots; t.slots[i].empty() {
				t.slots[i] = *o
				t.n++
				next = pos + 1
				continue
			}
			probing = true
		}
		i, _ := t.probe(k)
		t.insertAt(i, k, o.entry())
	}
}
