package ingest

import "math/bits"

// keyMap remembers, for one replica rank in tokens mode, engine block hash →
// kvroute block key, so BlockRemoved (engine hashes only) and the parents of
// later BlockStored runs can be translated. It is bounded: two generations of
// at most cap/2 entries each; when the current one fills, the older is
// dropped, so entries used recently survive. Only the rank's applier touches it.
//
// Its entries are held on the index's behalf (one per block and replica) and
// count toward index.max_entries: sync reports the change in size to account
// (index.Index.AccountAliases) after each event.
type keyMap struct {
	cur, old hashTable
	half     int
	account  func(delta int64)
	counted  int // entries last reported to account
}

func newKeyMap(capEntries int, account func(delta int64)) *keyMap {
	return &keyMap{half: max(capEntries/2, 1), account: account}
}

// sync reports the entries added or dropped since the last sync.
func (k *keyMap) sync() {
	if n := k.len(); n != k.counted && k.account != nil {
		k.account(int64(n - k.counted))
		k.counted = n
	}
}

func (k *keyMap) get(h uint64) (uint64, bool) {
	if v, ok := k.cur.get(h); ok {
		return v, true
	}
	if v, ok := k.old.get(h); ok {
		k.old.delete(h)
		k.put(h, v)
		return v, true
	}
	return 0, false
}

func (k *keyMap) put(h, v uint64) {
	k.cur.put(h, v)
	if k.cur.len() >= k.half {
		k.old, k.cur = k.cur, hashTable{}
	}
}

func (k *keyMap) reset() {
	k.cur, k.old = hashTable{}, hashTable{}
	k.sync()
}

// len is the number of entries held (both generations).
func (k *keyMap) len() int { return k.cur.len() + k.old.len() }

// hashTable maps engine hashes to block keys: an open-addressing table of
// 16-byte slots (a Go map of the same takes ≈ 30 bytes a pair with its
// control bytes and slack). Robin Hood linear probing with backward-shift
// deletion, homes by fastrange so the table grows by a fifth at a time and
// stays 77–92 % full; the same scheme as the index's block table (whose
// comment says more). Hash 0 marks an empty slot, so the one entry with
// hash 0 is held beside the slots.
type hashTable struct {
	slots   []hashSlot
	n       int // entries in slots
	hasZero bool
	zero    uint64 // the value of hash 0, when hasZero
}

type hashSlot struct{ h, v uint64 }

// Table sizing, as in the index's block table: grow at 92 % full, by 6/5.
const (
	tableMaxLoadNum, tableMaxLoadDen = 23, 25
	tableGrowthNum, tableGrowthDen   = 6, 5
	tableMinSlots                    = 8
)

// mix spreads engine hashes, random in production but small integers in
// tests: a multiplicative hash. Slots are in mix order.
func mix(h uint64) uint64 { return h * 0x9E3779B97F4A7C15 }

// homeOf is the first slot among n that engine hash h may occupy.
func homeOf(h uint64, n int) int {
	hi, _ := bits.Mul64(mix(h), uint64(n))
	return int(hi)
}

func (t *hashTable) len() int {
	if t.hasZero {
		return t.n + 1
	}
	return t.n
}

func (t *hashTable) dist(i int) int {
	d := i - homeOf(t.slots[i].h, len(t.slots))
	if d < 0 {
		d += len(t.slots)
	}
	return d
}

// probe returns h's slot (h != 0) and true or, when h is absent, the slot
// Robin Hood order puts it in and false: before the first key nearer its
// home than h would be, or as near and greater (so that resize can merge).
// The table must have slots.
func (t *hashTable) probe(h uint64) (int, bool) {
	n := len(t.slots)
	i := homeOf(h, n)
	for d := 0; ; d++ {
		s := t.slots[i].h
		if s == h {
			return i, true
		}
		if s == 0 {
			return i, false
		}
		if sd := t.dist(i); sd < d || sd == d && mix(s) > mix(h) {
			return i, false
		}
		if i++; i == n {
			i = 0
		}
	}
}

// find returns h's slot (h != 0), or -1.
func (t *hashTable) find(h uint64) int {
	if t.n == 0 {
		return -1
	}
	if i, ok := t.probe(h); ok {
		return i
	}
	return -1
}

func (t *hashTable) get(h uint64) (uint64, bool) {
	if h == 0 {
		return t.zero, t.hasZero
	}
	if i := t.find(h); i >= 0 {
		return t.slots[i].v, true
	}
	return 0, false
}

func (t *hashTable) put(h, v uint64) {
	if h == 0 {
		t.zero, t.hasZero = v, true
		return
	}
	if (t.n+1)*tableMaxLoadDen > len(t.slots)*tableMaxLoadNum {
		t.resize(max(tableMinSlots, len(t.slots)*tableGrowthNum/tableGrowthDen+1))
	}
	i, ok := t.probe(h)
	if ok {
		t.slots[i].v = v
		return
	}
	t.insertAt(i, h, v)
}

// insertAt puts h (absent, not 0) in slot i as probe returned it, shifting
// the rest of the run one slot on.
func (t *hashTable) insertAt(i int, h, v uint64) {
	n := len(t.slots)
	j := i
	for t.slots[j].h != 0 {
		if j++; j == n {
			j = 0
		}
	}
	if j >= i {
		copy(t.slots[i+1:j+1], t.slots[i:j])
	} else {
		copy(t.slots[1:j+1], t.slots[:j])
		t.slots[0] = t.slots[n-1]
		copy(t.slots[i+1:], t.slots[i:n-1])
	}
	t.slots[i] = hashSlot{h, v}
	t.n++
}

func (t *hashTable) delete(h uint64) {
	if h == 0 {
		t.zero, t.hasZero = 0, false
		return
	}
	i := t.find(h)
	if i < 0 {
		return
	}
	n := len(t.slots)
	for {
		j := i + 1
		if j == n {
			j = 0
		}
		if t.slots[j].h == 0 || t.dist(j) == 0 {
			break
		}
		t.slots[i] = t.slots[j]
		i = j
	}
	t.slots[i] = hashSlot{}
	t.n--
}

// resize moves every entry to a table of slots slots: from an empty slot on
// the old table is in mix order, so each key goes at its new home or just
// after the one placed before it (probing only where the last run wraps onto
// the first).
func (t *hashTable) resize(slots int) {
	old := t.slots
	t.slots, t.n = make([]hashSlot, slots), 0
	start := 0
	for start < len(old) && old[start].h != 0 {
		start++
	}
	next, wrapped, prev, probing := 0, 0, -1, false
	for c := range old {
		o := old[(start+c)%len(old)]
		if o.h == 0 {
			continue
		}
		if !probing {
			pos := homeOf(o.h, slots) + wrapped
			if pos < prev {
				wrapped = slots
				pos += slots
			}
			prev = pos
			pos = max(pos, next)
			if i := pos % slots; t.slots[i].h == 0 {
				t.slots[i] = o
				t.n++
				next = pos + 1
				continue
			}
			probing = true
		}
		i, _ := t.probe(o.h)
		t.insertAt(i, o.h, o.v)
	}
}
