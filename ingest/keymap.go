package ingest

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
	cur, old map[uint64]uint64
	half     int
	account  func(delta int64)
	counted  int // entries last reported to account
}

func newKeyMap(capEntries int, account func(delta int64)) *keyMap {
	half := max(capEntries/2, 1)
	return &keyMap{cur: make(map[uint64]uint64), old: map[uint64]uint64{}, half: half, account: account}
}

// sync reports the entries added or dropped since the last sync.
func (k *keyMap) sync() {
	if n := k.len(); n != k.counted && k.account != nil {
		k.account(int64(n - k.counted))
		k.counted = n
	}
}

func (k *keyMap) get(h uint64) (uint64, bool) {
	if v, ok := k.cur[h]; ok {
		return v, true
	}
	if v, ok := k.old[h]; ok {
		k.put(h, v)
		return v, true
	}
	return 0, false
}

func (k *keyMap) put(h, v uint64) {
	k.cur[h] = v
	if len(k.cur) >= k.half {
		k.old, k.cur = k.cur, make(map[uint64]uint64, k.half/4)
	}
}

func (k *keyMap) reset() {
	k.cur, k.old = make(map[uint64]uint64), map[uint64]uint64{}
	k.sync()
}

// len is the number of entries held (both generations).
func (k *keyMap) len() int { return len(k.cur) + len(k.old) }
