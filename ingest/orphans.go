package ingest

import (
	"math/bits"
	"sync"
	"time"

	"github.com/kvroute/kvroute/index"
)

// Aliases go with their blocks. In keys: tokens mode a rank's key map holds
// an engine hash → block key alias for each block the engine holds; when the
// index evicts a block entry (at index.max_entries or past index.ttl), it
// tells the manager (index.Index.OnEvict), which hands each evicted key to
// the ranks that held it; each rank's applier then drops those keys'
// aliases, unless the block is in the index again meanwhile. The applier
// does this at most orphanSweep after the first such key, or at once when
// the keys waiting reach an eighth of its aliases (so a sweep of the key map
// costs at most eight alias visits per evicted key).

// orphanSweepMin is the fewest keys waiting that wake the applier at once.
const orphanSweepMin = 4096

// orphans are the keys the index evicted from a rank, waiting for its
// applier.
type orphans struct {
	mu    sync.Mutex
	keys  map[index.BlockKey]struct{}
	armed bool // a wake-up after tuning.orphanSweep is scheduled
}

// blocksEvicted is the index's OnEvict function: each evicted key goes to
// the tokens-mode ranks of the pool that held it.
func (m *Manager) blocksEvicted(pool index.PoolID, ev *index.Evicted) {
	var byID [index.MaxReplicas]*rankState
	found := false
	for _, rs := range m.allRanks() {
		if rs.r.Pool == pool && !rs.pool.keys.EngineKeys() {
			byID[rs.r.ID] = rs
			found = true
		}
	}
	if !found {
		return
	}
	var per [index.MaxReplicas][]index.BlockKey
	for i, k := range ev.Keys {
		for h := ev.Held[i]; h != 0; h &= h - 1 {
			if id := bits.TrailingZeros64(h); byID[id] != nil {
				per[id] = append(per[id], k)
			}
		}
	}
	for id, keys := range per {
		if len(keys) > 0 {
			byID[id].orphaned(keys)
		}
	}
}

// orphaned records keys the index evicted from the rank and wakes its
// applier now or after tuning.orphanSweep.
func (rs *rankState) orphaned(keys []index.BlockKey) {
	o := &rs.orphans
	o.mu.Lock()
	if o.keys == nil {
		o.keys = make(map[index.BlockKey]struct{}, len(keys))
	}
	for _, k := range keys {
		o.keys[k] = struct{}{}
	}
	now := int64(len(o.keys)) >= max(orphanSweepMin, rs.aliases.Load()/8)
	arm := !now && !o.armed
	o.armed = o.armed || arm
	o.mu.Unlock()
	switch {
	case now:
		rs.poke()
	case arm:
		time.AfterFunc(rs.mgr.tuning.orphanSweep, rs.poke)
	}
}

// dropOrphans runs on the applier: the aliases of the blocks the index
// evicted from the rank go, unless the block is held again.
func (rs *rankState) dropOrphans() {
	o := &rs.orphans
	o.mu.Lock()
	keys := o.keys
	o.keys, o.armed = nil, false
	o.mu.Unlock()
	if len(keys) == 0 {
		return
	}
	n := rs.keys.dropWhere(func(key uint64) bool {
		_, evicted := keys[index.BlockKey(key)]
		return evicted && !rs.mgr.ix.Holds(rs.r, index.BlockKey(key))
	})
	rs.keys.sync()
	rs.met.aliasesOrphaned.Add(float64(n))
}
