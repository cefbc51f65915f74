// Package rhmap is kvroute's compact hash table from 64-bit keys to small
// pointer-free values: the index's block entries and speculative entries and
// ingest's engine hash → block key maps are all one Map.
//
// It is open addressing with linear probing in Robin Hood order: every key
// sits at or after its home slot and slots stay ordered by home, so a lookup
// stops at the first slot whose key lies closer to its own home than the
// searched key would, and a delete shifts the rest of its run back by one (no
// tombstones). Beside the slots, one byte per slot holds its key's distance
// from home (0: empty), so probing reads bytes and never rehashes a stored
// key. A key's home is fastrange(hash, slots), which works for any number of
// slots: the table grows by a fifth when it is MaxLoad full, so it always
// holds between MaxLoad/Growth and MaxLoad of its slots (no doubling, and a
// rebuild copies slots in home order, almost sequentially).
//
// A key (all 64 bits) packs into two 32-bit words, so a slot is 8 bytes plus
// the value with no padding when the value is made of 32-bit words: 20 bytes
// for a 12-byte value (the index), 16 for a uint64.
package rhmap

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
)

// Table sizing: the most entries per slot before the table grows, and the
// factor it grows by (both as num/den). Between them every table is 77–92 %
// full, except the small ones (minSlots). The fill limit is what keeps
// kvroute's memory per (block, replica) under its target (docs/PERFORMANCE.md).
const (
	maxLoadNum, maxLoadDen = 23, 25 // 0.92
	growthNum, growthDen   = 6, 5   // 1.2
	minSlots               = 8
	// shrinkMinSlots is the smallest table Shrink rebuilds.
	shrinkMinSlots = 4096
)

// distFar in a distance byte means 254 slots or more from home: the real
// distance is computed from the key (only crafted keys get that far).
const distFar = 255

// Map maps uint64 keys to values of type V. V should hold no pointers (the
// garbage collector then never scans the slots). The zero Map is empty and
// ready. Not safe for concurrent use.
type Map[V comparable] struct {
	slots []slot[V]
	// dist[i] is 1 + how far slot i's key sits from its home (distFar when
	// that is 254 or more); 0 when slot i is empty.
	dist []uint8
	n    int
}

type slot[V comparable] struct {
	k0, k1 uint32 // key, low and high half
	v      V
}

func (s *slot[V]) key() uint64 { return uint64(s.k0) | uint64(s.k1)<<32 }

// hash spreads keys that are not random (tests, small integers) over the
// table: a bijection, so the slots' hash order is a total order of keys. Its
// multiplier differs from the one the index picks shards with, so the keys
// of one shard still spread over its whole table.
func hash(k uint64) uint64 { return (k ^ k>>32) * 0xBF58476D1CE4E5B9 }

// home is the first slot a key with hash h may occupy among n.
func home(h uint64, n int) int {
	hi, _ := bits.Mul64(h, uint64(n))
	return int(hi)
}

// Len is the number of entries held.
func (m *Map[V]) Len() int { return m.n }

// Slots is the table's size in slots: the bound of the slot numbers that
// Occupied, KeyAt and ValueAt take.
func (m *Map[V]) Slots() int { return len(m.slots) }

// Occupied reports whether slot i holds an entry.
func (m *Map[V]) Occupied(i int) bool { return m.dist[i] != 0 }

// KeyAt is the key in slot i, which must be occupied.
func (m *Map[V]) KeyAt(i int) uint64 { return m.slots[i].key() }

// ValueAt is the value in slot i, which must be occupied. The pointer is
// good until the next Put, Upsert, Delete, DeleteAt or Shrink.
func (m *Map[V]) ValueAt(i int) *V { return &m.slots[i].v }

// distAt is how far slot i's (present) key sits from its home.
func (m *Map[V]) distAt(i int) int {
	if d := m.dist[i]; d != distFar {
		return int(d) - 1
	}
	d := i - home(hash(m.slots[i].key()), len(m.slots))
	if d < 0 {
		d += len(m.slots)
	}
	return d
}

// distByte is the distance byte of a key d slots from its home.
func distByte(d int) uint8 { return uint8(min(d+1, distFar)) }

// Find returns k's slot, or -1.
func (m *Map[V]) Find(k uint64) int {
	if m.n == 0 {
		return -1
	}
	n := len(m.slots)
	k0, k1 := uint32(k), uint32(k>>32)
	i := home(hash(k), n)
	dist := m.dist[:n]
	for d := 1; ; d++ { // d: the distance byte k would have in slot i
		sd := dist[i]
		if sd == 0 {
			return -1
		}
		if int(sd) == d || sd == distFar {
			if s := &m.slots[i]; s.k0 == k0 && s.k1 == k1 {
				return i
			}
		} else if int(sd) < d {
			return -1
		}
		if i++; i == n {
			i = 0
		}
	}
}

// Get returns k's value.
func (m *Map[V]) Get(k uint64) (V, bool) {
	if i := m.Find(k); i >= 0 {
		return m.slots[i].v, true
	}
	var zero V
	return zero, false
}

// probe returns k's slot and true or, when k is absent, the slot Robin Hood
// order puts it in, its distance from home there and false. Keys of one home
// are kept in hash order, so a whole table is in hash order from any empty
// slot on (resize relies on it): k goes before the first key nearer its home
// than k would be, or as near and of a greater hash. The table must have a
// free slot.
func (m *Map[V]) probe(k uint64) (i, d int, found bool) {
	n := len(m.slots)
	k0, k1 := uint32(k), uint32(k>>32)
	h := hash(k)
	i = home(h, n)
	dist := m.dist[:n]
	for d = 0; ; d++ {
		sd := dist[i]
		if sd == 0 {
			return i, d, false
		}
		sdi := int(sd) - 1
		if sd == distFar {
			sdi = m.distAt(i)
		}
		if sdi < d {
			return i, d, false // k would sit before this key: it is not here
		}
		if sdi == d {
			s := &m.slots[i]
			if s.k0 == k0 && s.k1 == k1 {
				return i, d, true
			}
			if hash(s.key()) > h {
				return i, d, false
			}
		}
		if i++; i == n {
			i = 0
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
	if (m.n+1)*maxLoadDen > len(m.slots)*maxLoadNum {
		m.resize(max(minSlots, len(m.slots)*growthNum/growthDen+1))
	}
	i, d, ok := m.probe(k)
	if !ok {
		m.insertAt(i, d, k)
	}
	return &m.slots[i].v, ok
}

// insertAt adds k, absent, with the zero value in slot i, d slots from its
// home, as probe returned them: the rest of the run moves one slot on.
func (m *Map[V]) insertAt(i, d int, k uint64) {
	n := len(m.slots)
	j := m.nextEmpty(i)
	// Shift slots i..j-1 (circular) one on, into the empty slot j; each
	// moved key is one slot further from its home.
	if j >= i {
		copy(m.slots[i+1:j+1], m.slots[i:j])
		copy(m.dist[i+1:j+1], m.dist[i:j])
		incDist(m.dist[i+1 : j+1])
	} else {
		copy(m.slots[1:j+1], m.slots[:j])
		copy(m.dist[1:j+1], m.dist[:j])
		m.slots[0], m.dist[0] = m.slots[n-1], m.dist[n-1]
		copy(m.slots[i+1:], m.slots[i:n-1])
		copy(m.dist[i+1:], m.dist[i:n-1])
		incDist(m.dist[:j+1])
		incDist(m.dist[i+1:])
	}
	m.slots[i] = slot[V]{k0: uint32(k), k1: uint32(k >> 32)}
	m.dist[i] = distByte(d)
	m.n++
}

const (
	bytesOf1  = 0x0101010101010101
	bytesOf80 = 0x8080808080808080
)

// nextEmpty is the first empty slot at or after i (circular); the table
// has one. It reads the distance bytes eight at a time.
func (m *Map[V]) nextEmpty(i int) int {
	dist := m.dist
	for {
		for ; i+8 <= len(dist); i += 8 {
			w := binary.LittleEndian.Uint64(dist[i:])
			// The lowest byte flagged is the first zero byte (borrows only
			// flag bytes above a zero one).
			if z := (w - bytesOf1) &^ w & bytesOf80; z != 0 {
				return i + bits.TrailingZeros64(z)/8
			}
		}
		for ; i < len(dist); i++ {
			if dist[i] == 0 {
				return i
			}
		}
		i = 0
	}
}

// incDist adds one to every distance byte in b (none empty), saturating at
// distFar.
func incDist(b []uint8) {
	for len(b) >= 8 {
		w := binary.LittleEndian.Uint64(b)
		if nw := ^w; (nw-bytesOf1)&^nw&bytesOf80 != 0 { // a byte is distFar
			break
		}
		binary.LittleEndian.PutUint64(b, w+bytesOf1)
		b = b[8:]
	}
	for j := range b {
		if b[j] != distFar {
			b[j]++
		}
	}
}

// DeleteAt removes the entry in slot i: the keys after it in its run that
// are not at their home move back one slot. Slot i then holds the next key
// of the run, or is empty; a walk over the slots deleting as it goes stays
// at i.
func (m *Map[V]) DeleteAt(i int) {
	n := len(m.slots)
	for {
		j := i + 1
		if j == n {
			j = 0
		}
		sd := m.dist[j]
		if sd <= 1 { // empty, or at its home
			break
		}
		if sd == distFar {
			sd = distByte(m.distAt(j) - 1)
		} else {
			sd--
		}
		m.slots[i], m.dist[i] = m.slots[j], sd
		i = j
	}
	m.slots[i], m.dist[i] = slot[V]{}, 0
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
	m.resize(max(minSlots, m.n*growthNum*maxLoadDen/(growthDen*maxLoadNum)+1))
	return true
}

// resize moves every entry to a table of slots slots. From an empty slot on,
// the old table is in hash order (probe), which is home order in the new one
// too: each key goes at its home or just after the key placed before it, a
// sequential merge. Only where that place is taken (the last run wrapping
// onto the first) does it fall back to probing.
func (m *Map[V]) resize(slots int) {
	old, oldDist := m.slots, m.dist
	m.slots, m.dist, m.n = make([]slot[V], slots), make([]uint8, slots), 0
	start := 0
	for start < len(old) && oldDist[start] != 0 {
		start++
	}
	next, wrapped, prev, probing := 0, 0, -1, false // next: unwrapped slot after the last key placed
	for c := range old {
		o := (start + c) % len(old)
		if oldDist[o] == 0 {
			continue
		}
		k := old[o].key()
		if !probing {
			h := home(hash(k), slots) + wrapped
			if h < prev { // hash order passed the top: homes start again at 0
				wrapped = slots
				h += slots
			}
			prev = h
			pos := max(h, next)
			if i := pos % slots; m.dist[i] == 0 {
				m.slots[i], m.dist[i] = old[o], distByte(pos-h)
				m.n++
				next = pos + 1
				continue
			}
			probing = true
		}
		i, d, _ := m.probe(k)
		m.insertAt(i, d, k)
		m.slots[i].v = old[o].v
	}
}

// Check verifies the table's invariants: the count agrees with the occupied
// slots, every distance byte is its key's distance from home, each run is in
// Robin Hood order (a key sits no further from its home than the key before
// it, plus one; keys of one home are in hash order), every key is found
// where it is, and the fill is within the limit. For tests.
func (m *Map[V]) Check() error {
	n, seen := len(m.slots), 0
	if len(m.dist) != n {
		return fmt.Errorf("%d distance bytes for %d slots", len(m.dist), n)
	}
	for i := range n {
		if m.dist[i] == 0 {
			if m.slots[i] != (slot[V]{}) {
				return fmt.Errorf("empty slot %d holds %+v", i, m.slots[i])
			}
			continue
		}
		seen++
		h := hash(m.slots[i].key())
		d := i - home(h, n)
		if d < 0 {
			d += n
		}
		if m.dist[i] != distByte(d) {
			return fmt.Errorf("slot %d: distance byte %d, key sits %d from home", i, m.dist[i], d)
		}
		prev := i - 1
		if prev < 0 {
			prev = n - 1
		}
		if m.dist[prev] == 0 && d != 0 || m.dist[prev] != 0 && d > m.distAt(prev)+1 {
			return fmt.Errorf("slot %d of %d: key %x sits %d from home after an empty slot or one %d from its own", i, n, m.slots[i].key(), d, m.distAt(prev))
		}
		if ph := hash(m.slots[prev].key()); m.dist[prev] != 0 && d > 0 && home(ph, n) == home(h, n) && ph > h {
			return fmt.Errorf("slots %d and %d: keys of one home out of hash order", prev, i)
		}
		if j := m.Find(m.slots[i].key()); j != i {
			return fmt.Errorf("key %x in slot %d is found in slot %d", m.slots[i].key(), i, j)
		}
	}
	if seen != m.n {
		return fmt.Errorf("%d occupied slots, count %d", seen, m.n)
	}
	if n > minSlots && m.n*maxLoadDen > n*maxLoadNum {
		return errors.New("over the load limit")
	}
	return nil
}
