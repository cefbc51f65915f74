package ingest

import "github.com/kvroute/kvroute/internal/rhmap"

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
	if v, ok := k.cur.Get(h); ok {
		return v, true
	}
	if v, ok := k.old.Get(h); ok {
		k.old.Delete(h)
		k.put(h, v)
		return v, true
	}
	return 0, false
}

func (k *keyMap) put(h, v uint64) {
	k.cur.Put(h, v)
	if k.cur.Len() >= k.half {
		k.old, k.cur = k.cur, hashTable{}
	}
}

func (k *keyMap) reset() {
	k.cur, k.old = hashTable{}, hashTable{}
	k.sync()
}

// len is the number of entries held (both generations).
func (k *keyMap) len() int { return k.cur.Len() + k.old.Len() }

// hashTable maps engine hashes to block keys in 16-byte slots (a Go map of
// the same takes ≈ 30 bytes a pair with its control bytes and slack).
type hashTable = rhmap.Map[uint64]
