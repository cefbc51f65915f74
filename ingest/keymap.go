package ingest

import (
	"sync/atomic"

	"github.com/kvroute/kvroute/index"
	"github.com/kvroute/kvroute/internal/rhmap"
)

// keyMap remembers, for one replica rank in tokens mode, engine block hash →
// kvroute block key, so BlockRemoved (engine hashes only) and the parents of
// later BlockStored runs can be translated. Only the rank's applier touches it.
//
// Its entries are held on the index's behalf (one per block and replica) and
// count toward index.max_entries: sync reports the change in size to account
// (index.Index.AccountAliases) after each event. They are bounded three ways:
//   - an entry lives while the engine holds the block: each records the tiers
//     the engine stored it in, and the BlockRemoved of its last tier deletes
//     it; AllBlocksCleared, a restart and the replica's removal drop them all;
//   - and while the index holds the block: when the index evicts it (at its
//     cap or past its TTL) the entry goes too (orphans.go);
//   - at most limit entries: past it, entries of the older of two
//     generations are evicted (trim), so entries used recently survive;
//   - the limit is the smaller of the per-rank cap and the rank's share of
//     the index's alias budget (index.Index.AliasBudget divided among the
//     ranks, share), so all ranks together never take more than the budget
//     and block entries keep the rest of index.max_entries.
type keyMap struct {
	cur, old   hashTable
	capEntries int
	share      *atomic.Int64 // the rank's share of the alias budget; nil: capEntries alone
	account    func(delta int64)
	evicted    func(n int) // entries evicted over the limit
	counted    int         // entries last reported to account
	walk       int         // trim's place in old
}

// alias is one engine hash's block key and the tiers (bit 1<<index.Tier)
// the engine holds the block in.
type alias struct {
	lo, hi uint32
	tiers  uint8
}

func (a alias) key() uint64 { return uint64(a.lo) | uint64(a.hi)<<32 }

func newKeyMap(capEntries int, account func(delta int64)) *keyMap {
	return &keyMap{capEntries: max(capEntries, 2), account: account}
}

// limit is the most entries the map may hold now.
func (k *keyMap) limit() int {
	l := k.capEntries
	if k.share != nil {
		l = min(l, int(max(k.share.Load(), 2)))
	}
	return l
}

// sync reports the entries added or dropped since the last sync.
func (k *keyMap) sync() {
	if n := k.len(); n != k.counted && k.account != nil {
		k.account(int64(n - k.counted))
		k.counted = n
	}
}

func (k *keyMap) get(h uint64) (uint64, bool) {
	a, ok := k.lookup(h)
	return a.key(), ok
}

// lookup finds h's alias, moving it to the current generation.
func (k *keyMap) lookup(h uint64) (alias, bool) {
	if a, ok := k.cur.Get(h); ok {
		return a, true
	}
	if a, ok := k.old.Get(h); ok {
		k.old.Delete(h)
		k.insert(h, a)
		return a, true
	}
	return alias{}, false
}

// put records that the engine holds hash h, block key v, in tier.
func (k *keyMap) put(h, v uint64, tier index.Tier) {
	a, ok := k.cur.Get(h)
	if !ok {
		if a, ok = k.old.Get(h); ok {
			k.old.Delete(h)
		}
	}
	if !ok || a.key() != v {
		a = alias{lo: uint32(v), hi: uint32(v >> 32)}
	}
	a.tiers |= 1 << tier
	k.insert(h, a)
}

// remove records that the engine dropped hash h from tier and returns its
// block key; the alias goes once no tier holds the block.
func (k *keyMap) remove(h uint64, tier index.Tier) (uint64, bool) {
	g := &k.cur
	a, ok := g.Get(h)
	if !ok {
		g = &k.old
		if a, ok = g.Get(h); !ok {
			return 0, false
		}
	}
	a.tiers &^= 1 << tier
	if a.tiers == 0 {
		g.Delete(h)
	} else {
		g.Put(h, a)
	}
	return a.key(), true
}

func (k *keyMap) insert(h uint64, a alias) {
	k.cur.Put(h, a)
	k.trim()
}

// trim evicts entries of the older generation until the map is within its
// limit; when the older generation is empty, the current one becomes it.
// Entries used since the last generation change (put, or looked up) are in
// the current one and go last. The walk over the older generation resumes
// where it stopped (a delete moves the next key of the run back into its
// slot), so evicting costs O(1) amortised.
func (k *keyMap) trim() {
	limit := k.limit()
	n := 0
	for k.len() > limit {
		if k.old.Len() == 0 {
			k.old, k.cur, k.walk = k.cur, hashTable{}, 0
		}
		i, v := k.old.Next(k.walk)
		if v == nil {
			i, _ = k.old.Next(0)
		}
		k.old.DeleteAt(i)
		k.walk = i
		n++
	}
	if n > 0 && k.evicted != nil {
		k.evicted(n)
	}
}

// dropWhere deletes the entries whose block key drop reports and returns
// how many.
func (k *keyMap) dropWhere(drop func(key uint64) bool) int {
	n := 0
	for _, g := range []*hashTable{&k.cur, &k.old} {
		for i, a := g.Next(0); a != nil; i, a = g.Next(i + 1) {
			if drop(a.key()) {
				g.DeleteAt(i)
				n++
				i-- // slot i now holds the next key of the run
			}
		}
	}
	return n
}

func (k *keyMap) reset() {
	k.cur, k.old = hashTable{}, hashTable{}
	k.sync()
}

// len is the number of entries held (both generations).
func (k *keyMap) len() int { return k.cur.Len() + k.old.Len() }

// hashTable maps engine hashes to aliases in 20-byte slots (the hash's 8
// bytes and the alias's 12).
type hashTable = rhmap.Map[alias]
