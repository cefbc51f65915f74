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

// homeOf is the first slot among n that engine hash h may occupy. Engine
// hashes are random in production but small integers in tests: the
// multiplicative hash spreads both.
func homeOf(h uint64, n int) int {
	hi, _ := bits.Mul64(h*0x9E3779B97F4A7C15, uint64(n))
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

// find returns h's slot (h != 0), or -1.
func (t *hashTable) find(h uint64) int {
	if t.n == 0 {
		return -1
	}
	n := len(t.slots)
	i := homeOf(h, n)
	for d := 0; ; d++ {
		switch s := t.slots[i].h; {
		case s == h:
			return i
		case s == 0 || t.dist(i) < d:
			return -1
		}
		if i++; i == n {
			i = 0
		}
	}
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
	if i := t.find(h); i >= 0 {
		t.slots[i].v = v
		return
	}
	if (t.n+1)*tableMaxLoadDen > len(t.slots)*tableMaxLoadNum {
		t.resize(max(tableMinSlots, len(t.slots)*tableGrowthNum/tableGrowthDen+1))
	}
	t.place(h, v)
}

// place inserts h (absent, not 0) before the first key nearer its home than
// h would be, shifting the rest of the run one slot on.
func (t *hashTable) place(h, v uint64) {
	n := len(t.slots)
	i := homeOf(h, n)
	for d := 0; t.slots[i].h != 0 && t.dist(i) >= d; d++ {
		if i++; i == n {
			i = 0
		}
	}
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

// resize moves every entry to a table of slots slots, in home order.
func (t *hashTable) resize(slots int) {
	old := t.slots
	t.slots, t.n = make([]hashSlot, slots), 0
	for _, s := range old {
		if s.h != 0 {
			t.place(s.h, s.v)
		}
	}
}
