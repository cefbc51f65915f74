package index

import (
	"sync"
	"sync/atomic"
)

// Bounds of one replica's promises (Index.Promise). MaxPromisedBlocks is
// the distinct block keys its routed requests in flight may have been
// promised and MaxPromiseFlights those requests: at about 24 bytes a key
// and 80 a request in Go maps, some 2 MB a replica at most, the removed set
// (12 bytes a key) no larger than the keys; a request's keys are its
// decision's, not copied. A request that would pass either is not tracked
// (Promise returns 0): a block it was promised that the engine evicts and
// computes again is then not counted, and one it computes first may count
// for a request that was promised it.
const (
	MaxPromisedBlocks = 1 << 16
	MaxPromiseFlights = 1 << 12
)

// PromiseTicket names a request Promise tracks; 0 is none.
type PromiseTicket uint64

// promises are a replica's routed requests in flight, with the blocks each
// was predicted to hit there (its decision's matched run), and the
// predicted blocks the engine removed since. When the engine stores such a
// block again, the earliest routed request in flight that contains it is
// the one that computed it (the engine admits in arrival order, and a
// request it is running pins its blocks): if that request was promised the
// block, the engine computed a block kvroute had predicted cached, as when
// it evicts without telling (Store's restored).
type promises struct {
	mu      sync.Mutex
	next    PromiseTicket
	flights map[PromiseTicket]flight
	keys    map[BlockKey]promisedKey // the keys promised to some flight
	removed map[BlockKey]int32       // of those, the ones the engine removed since → their block position
	// promisedKeys and removedKeys are len(keys) and len(removed), read
	// without the lock so that Remove and Store skip the lock when there is
	// nothing to look at.
	promisedKeys, removedKeys atomic.Int64
}

// flight is a tracked request: its block keys (the caller's slice, left
// unchanged until Unpromise) and how many of them were predicted cached.
type flight struct {
	keys    []BlockKey
	matched int
}

// promisedKey is a key's position in its prompt (a chained key sits at one
// position in every prompt that has it) and how many flights were promised
// it.
type promisedKey struct {
	pos, promised int32
}

// Promise records a request routed to r with block keys, of which the first
// matched were predicted cached there, until Unpromise with the ticket. It
// keeps keys, which the caller must not change meanwhile. It returns 0 (no
// Unpromise needed) when r is gone or the replica's bounds would be passed.
func (ix *Index) Promise(r Replica, keys []BlockKey, matched int) PromiseTicket {
	_, rs := ix.liveReplica(r)
	if rs == nil || len(keys) == 0 {
		return 0
	}
	matched = max(0, min(matched, len(keys)))
	ps := &rs.promised
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if len(ps.keys)+matched > MaxPromisedBlocks || len(ps.flights) >= MaxPromiseFlights {
		return 0
	}
	if ps.flights == nil {
		ps.flights, ps.keys, ps.removed = map[PromiseTicket]flight{}, map[BlockKey]promisedKey{}, map[BlockKey]int32{}
	}
	ps.next++
	ps.flights[ps.next] = flight{keys: keys, matched: matched}
	for i, k := range keys[:matched] {
		pk := ps.keys[k]
		pk.pos = int32(i)
		pk.promised++
		ps.keys[k] = pk
	}
	ps.promisedKeys.Store(int64(len(ps.keys)))
	return ps.next
}

// Unpromise ends the request Promise tracked as t: its stream ended.
func (ix *Index) Unpromise(r Replica, t PromiseTicket) {
	_, rs := ix.liveReplica(r)
	if rs == nil || t == 0 {
		return
	}
	ps := &rs.promised
	ps.mu.Lock()
	defer ps.mu.Unlock()
	f, ok := ps.flights[t]
	if !ok {
		return
	}
	delete(ps.flights, t)
	for _, k := range f.keys[:f.matched] {
		pk, ok := ps.keys[k]
		if !ok {
			continue
		}
		if pk.promised--; pk.promised > 0 {
			ps.keys[k] = pk
			continue
		}
		delete(ps.keys, k)
		delete(ps.removed, k)
	}
	ps.promisedKeys.Store(int64(len(ps.keys)))
	ps.removedKeys.Store(int64(len(ps.removed)))
}

// removedPromised marks the promised ones of keys, which the engine just
// removed from its GPU cache.
func (ps *promises) removedPromised(keys []BlockKey) {
	if ps.promisedKeys.Load() == 0 {
		return
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for _, k := range keys {
		if pk := ps.keys[k]; pk.promised > 0 {
			ps.removed[k] = pk.pos
		}
	}
	ps.removedKeys.Store(int64(len(ps.removed)))
}

// removedAll marks every promised key removed (the engine cleared its cache
// or restarted).
func (ps *promises) removedAll() {
	if ps.promisedKeys.Load() == 0 {
		return
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for k, pk := range ps.keys {
		ps.removed[k] = pk.pos
	}
	ps.removedKeys.Store(int64(len(ps.removed)))
}

// storedAgain returns how many of keys, which the engine just stored in its
// GPU cache, it had removed while promised and computed for a request that
// was promised them: the earliest tracked request in flight that contains
// the key. Each removal counts once.
func (ps *promises) storedAgain(keys []BlockKey) int {
	if ps.removedKeys.Load() == 0 {
		return 0
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	n := 0
	for _, k := range keys {
		pos, ok := ps.removed[k]
		if !ok {
			continue
		}
		delete(ps.removed, k)
		first, promised := PromiseTicket(0), false
		for t, f := range ps.flights {
			if (first == 0 || t < first) && int(pos) < len(f.keys) && f.keys[pos] == k {
				first, promised = t, int(pos) < f.matched
			}
		}
		if promised {
			n++
		}
	}
	ps.removedKeys.Store(int64(len(ps.removed)))
	return n
}
