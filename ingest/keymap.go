package ingest

// keyMap remembers, for one replica rank in tokens mode, engine block hash →
// kvroute block key, so BlockRemoved (engine hashes only) and the parents of
// later BlockStored runs can be translated. It is bounded: two generations of
// at most cap/2 entries each; when the current one fills, the older is
// dropped, so entries used recently survive. Only the rank's applier touches it.
type keyMap struct {
	cur, old map[uint64]uint64
	half     int
}

func newKeyMap(capEntries int) *keyMap {
	half := max(capEntries/2, 1)
	return &keyMap{cur: make(map[uint64]uint64), old: map[uint64]uint64{}, half: half}
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
}
