package index

import (
	"sync"
	"sync/atomic"

	"github.com/kvroute/kvroute/internal/mix"
	"github.com/kvroute/kvroute/internal/rhmap"
)

// numShards splits each pool's map so writers and readers rarely meet.
const numShards = 64

// cpuFlag marks, in entry.seen, a block some replica holds in the CPU tier;
// its per-tier sets then live in shard.tiers.
const cpuFlag = 1 << 31

// entry is one block's record. Its replica set covers every tier.
type entry struct {
	held uint64 // replicas holding the block in any tier
	seen uint32 // tick of the last Store; cpuFlag when tiers has the block
}

func (e entry) tick() uint32 { return e.seen &^ cpuFlag }

// stale reports whether an entry last refreshed at tick seen is older than
// ttl ticks at tick now. A caller's now can be older than seen: another
// writer refreshed the entry after the caller read the clock. Such an entry
// is fresh, never stale (an unsigned now−seen would wrap to a huge age).
func stale(now, seen, ttl uint32) bool {
	return now > seen && now-seen > ttl
}

// packed is an entry as a table stores it: three 32-bit words, so that with
// its key it fills a 20-byte slot (a struct with a uint64 would be padded to
// 24), the whole per-block cost besides the table's free slots and distance
// bytes.
type packed struct{ h0, h1, seen uint32 }

func pack(e entry) packed { return packed{uint32(e.held), uint32(e.held >> 32), e.seen} }

func (p packed) entry() entry { return entry{held: uint64(p.h0) | uint64(p.h1)<<32, seen: p.seen} }

// blockTable maps a shard's block keys to their entries.
type blockTable = rhmap.Map[packed]

// tierSets splits a block's holders by tier, kept only for the (rare) blocks
// with a CPU-tier holder.
type tierSets struct{ gpu, cpu uint64 }

// shard is one slice of a pool's keys behind one lock. The lock is a plain
// Mutex, not an RWMutex: a key's critical section is a table access or two, so
// readers rarely meet on one of 64 shards, and a Mutex costs a writer two
// atomic operations per key where an RWMutex costs four (lock and unlock
// were the second-largest item of Store's CPU profile after map probing).
type shard struct {
	mu    sync.Mutex
	m     blockTable
	tiers map[BlockKey]tierSets
	// spec holds speculative holder sets: routed requests whose blocks the
	// engine has not yet confirmed. Its entry.seen is the tick after which
	// the entry no longer counts. Sparse: every routed request writes its
	// blocks here and the entries live seconds, so speed beats memory.
	spec blockTable
	// mHint and specHint publish where m's and spec's slots are, so that a
	// writer can start fetching the next keys' slots before it locks their
	// shards (prefetchAhead).
	mHint, specHint rhmap.Hint
}

// prefetchAhead is how many keys ahead of the one it writes a Store,
// Remove or StoreSpeculative asks for its run's slots to be fetched: the
// writes then wait on several cache misses at once instead of one after
// another.
const prefetchAhead = 4

// prefetchBlocks starts fetching the runs (rhmap.Hint.Prefetch) of
// keys[i+prefetchAhead] in the block table or, from index specFrom on, the
// speculative table; i = -1 starts the first prefetchAhead keys.
func (p *pool) prefetchBlocks(keys []BlockKey, i, specFrom int) {
	from := i + prefetchAhead
	if i < 0 {
		from = 0
	}
	for j := from; j <= i+prefetchAhead && j < len(keys); j++ {
		s := p.shardOf(keys[j])
		if j >= specFrom {
			s.specHint.Prefetch(uint64(keys[j]))
		} else {
			s.mHint.Prefetch(uint64(keys[j]))
		}
	}
}

type pool struct {
	name       string
	shards     [numShards]shard
	entries    atomic.Int64 // block entries (shard.m)
	specs      atomic.Int64 // speculative entries (shard.spec)
	replicasMu sync.Mutex
	replicas   [MaxReplicas]atomic.Pointer[replicaState]
	// gens is each slot's next generation (replicasMu): bumped when its
	// replica is removed.
	gens [MaxReplicas]uint32
	m    *poolMetrics
	held heldPrefixes
}

func newPool(name string, m *metrics) *pool {
	p := &pool{name: name, m: m.forPool(name)}
	for i := range p.shards {
		p.shards[i].tiers = make(map[BlockKey]tierSets)
		p.shards[i].spec = rhmap.Sparse[packed]()
		p.shards[i].m.SetHint(&p.shards[i].mHint)
		p.shards[i].spec.SetHint(&p.shards[i].specHint)
	}
	return p
}

// shardOf is k's shard.
func (p *pool) shardOf(k BlockKey) *shard { return &p.shards[shardIndex(k)] }

// shardIndex spreads keys over shards even when keys are not random (tests,
// small integers): a multiplicative hash's top bits.
func shardIndex(k BlockKey) int { return int((uint64(k) * 0x9E3779B97F4A7C15) >> (64 - 6)) }

func (p *pool) replica(id ReplicaID) *replicaState {
	if int(id) >= MaxReplicas {
		return nil
	}
	return p.replicas[id].Load()
}

// live is r's state when r names the slot's current replica (same
// generation), else nil.
func (p *pool) live(r Replica) *replicaState {
	if rs := p.replica(r.ID); rs != nil && rs.gen == r.Gen {
		return rs
	}
	return nil
}

// Store records that r holds keys in tier and refreshes their freshness.
// Storing what is already stored only refreshes it. When tier is the GPU it
// returns how many of keys the engine computed again although kvroute
// predicted them cached (the prompt-token funnel's stale outcome): those r
// already held in the GPU tier (evicted without an event), and those a
// request routed to r in flight was promised (Promise) that the engine
// removed since.
func (ix *Index) Store(r Replica, keys []BlockKey, tier Tier) (restored int) {
	p, rs := ix.liveReplica(r)
	if rs == nil || len(keys) == 0 {
		return 0
	}
	bit := uint64(1) << r.ID
	now := ix.nowTick()
	var added, newBlocks int64
	// The cap holds per block, not per call: one event of millions of keys
	// must not go in whole before eviction runs. budget is how many new
	// entries this writer adds before publishing them and looking again
	// (writeBudget).
	budget := ix.writeBudget()
	p.prefetchBlocks(keys, -1, len(keys))
	for i, k := range keys {
		p.prefetchBlocks(keys, i, len(keys))
		if added >= budget {
			ix.commitStore(p, rs, &added, &newBlocks)
			budget = ix.writeBudget()
		}
		a, nb, again := p.shardOf(k).storeBlock(p, k, bit, tier, now, ix.ttlTicks)
		added += a
		newBlocks += nb
		if again {
			restored++
		}
	}
	total := ix.commitStore(p, rs, &added, &newBlocks)
	p.m.stores.Add(float64(len(keys)))
	ix.checkCap(total)
	if tier == TierGPU {
		restored += rs.promised.storedAgain(keys)
	}
	return restored
}

// storeBlock records that the replica of bit holds k in tier at tick now
// and returns whether it added an entry, whether the replica did not hold k
// before and whether it held k in the GPU tier already while tier is the
// GPU. It takes the shard lock and releases it on every exit, a panic
// included.
func (s *shard) storeBlock(p *pool, k BlockKey, bit uint64, tier Tier, now, ttl uint32) (added, newBlocks int64, again bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pe, ok := s.m.Upsert(uint64(k))
	e := pe.entry()
	if !ok {
		added = 1
	} else if stale(now, e.tick(), ttl) {
		// Expired but not yet swept: start afresh (the entry stays
		// counted: no net change).
		s.forgetLocked(p, k, e)
		e = entry{}
	}
	if e.held&bit == 0 {
		newBlocks = 1
	}
	flagged := e.seen&cpuFlag != 0
	if tier != TierCPU && e.held&bit != 0 {
		again = !flagged || s.tiers[k].gpu&bit != 0
	}
	switch {
	case tier == TierCPU:
		ts := tierSets{gpu: e.held}
		if flagged {
			ts = s.tiers[k]
		}
		ts.cpu |= bit
		s.tiers[k] = ts
		flagged = true
	case flagged:
		ts := s.tiers[k]
		ts.gpu |= bit
		s.tiers[k] = ts
	}
	e.held |= bit
	e.seen = now
	if flagged {
		e.seen |= cpuFlag
	}
	*pe = pack(e)
	return added, newBlocks, again
}

// commitStore publishes a Store's counts so far, zeroes them and returns the
// index's counted total.
func (ix *Index) commitStore(p *pool, rs *replicaState, added, newBlocks *int64) int64 {
	rs.blocks.Add(*newBlocks)
	p.entries.Add(*added)
	total := ix.entries.Add(*added)
	*added, *newBlocks = 0, 0
	return total
}

// Remove records that r no longer holds keys in tier. Removing what is not
// held does nothing.
func (ix *Index) Remove(r Replica, keys []BlockKey, tier Tier) {
	p, rs := ix.liveReplica(r)
	if rs == nil || len(keys) == 0 {
		return
	}
	bit := uint64(1) << r.ID
	var dropped, specDropped, lostBlocks int64
	p.prefetchBlocks(keys, -1, len(keys))
	for i, k := range keys {
		p.prefetchBlocks(keys, i, len(keys))
		d, sd, lost := p.shardOf(k).removeBlock(k, bit, tier)
		dropped += d
		specDropped += sd
		lostBlocks += lost
	}
	if tier == TierGPU {
		rs.promised.removedPromised(keys)
	}
	rs.blocks.Add(-lostBlocks)
	p.entries.Add(-dropped)
	p.specs.Add(-specDropped)
	ix.entries.Add(-dropped - specDropped)
	p.m.removes.Add(float64(len(keys)))
}

// removeBlock records that the replica of bit no longer holds k in tier and
// returns whether it dropped k's block entry, whether it dropped k's
// speculative entry and whether the replica lost k altogether. It takes the
// shard lock and releases it on every exit, a panic included.
func (s *shard) removeBlock(k BlockKey, bit uint64, tier Tier) (dropped, specDropped, lostBlocks int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if tier == TierGPU && s.spec.Len() > 0 {
		if j := s.spec.Find(uint64(k)); j >= 0 {
			// The engine evicted what the router expected it to keep:
			// the speculation is over for this block.
			if se := s.spec.ValueAt(j).entry(); se.held&bit != 0 {
				if se.held &^= bit; se.held == 0 {
					s.spec.DeleteAt(j)
					specDropped = 1
				} else {
					*s.spec.ValueAt(j) = pack(se)
				}
			}
		}
	}
	i := s.m.Find(uint64(k))
	if i < 0 {
		return
	}
	e := s.m.ValueAt(i).entry()
	if e.held&bit == 0 {
		return
	}
	held := e.held
	if e.seen&cpuFlag != 0 {
		ts := s.tiers[k]
		if tier == TierCPU {
			ts.cpu &^= bit
		} else {
			ts.gpu &^= bit
		}
		held = ts.gpu | ts.cpu
		if ts.cpu == 0 {
			delete(s.tiers, k)
			e.seen &^= cpuFlag
		} else {
			s.tiers[k] = ts
		}
	} else if tier == TierGPU {
		held &^= bit
	}
	if held&bit == 0 && e.held&bit != 0 {
		lostBlocks = 1
	}
	if held == 0 {
		s.m.DeleteAt(i)
		delete(s.tiers, k)
		dropped = 1
	} else {
		e.held = held
		*s.m.ValueAt(i) = pack(e)
	}
	return dropped, specDropped, lostBlocks
}

// Clear forgets everything r holds (a restarted or vanished engine, or an
// AllBlocksCleared event). It walks the whole pool, so it is for rare events.
func (ix *Index) Clear(r Replica) {
	p := ix.pool(r.Pool)
	if p == nil {
		return
	}
	rs := p.live(r)
	if rs == nil {
		return
	}
	rs.promised.removedAll()
	ix.clearBit(p, r.ID)
}

// clearBit drops replica slot id from every entry of p.
func (ix *Index) clearBit(p *pool, id ReplicaID) {
	bit := uint64(1) << id
	var dropped, specDropped int64
	for i := range p.shards {
		d, sd := p.shards[i].clearBit(bit)
		dropped += d
		specDropped += sd
	}
	if rs := p.replica(id); rs != nil {
		rs.blocks.Store(0)
	}
	p.entries.Add(-dropped)
	p.specs.Add(-specDropped)
	ix.entries.Add(-dropped - specDropped)
	p.m.clears.Inc()
}

// clearBit drops the replica of bit from every entry of s and returns how
// many block and speculative entries it deleted. It takes the shard lock
// and releases it on every exit, a panic included.
func (s *shard) clearBit(bit uint64) (dropped, specDropped int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, pe := s.m.Next(0); pe != nil; i, pe = s.m.Next(i + 1) {
		k, e := BlockKey(s.m.KeyAt(i)), pe.entry()
		if e.held&bit == 0 {
			continue
		}
		e.held &^= bit
		if e.seen&cpuFlag != 0 {
			ts := s.tiers[k]
			ts.gpu &^= bit
			ts.cpu &^= bit
			if ts.cpu == 0 {
				delete(s.tiers, k)
				e.seen &^= cpuFlag
			} else {
				s.tiers[k] = ts
			}
		}
		if e.held == 0 {
			s.m.DeleteAt(i)
			delete(s.tiers, k)
			dropped++
			i-- // slot i now holds the next key of the run
		} else {
			*s.m.ValueAt(i) = pack(e)
		}
	}
	for i, pe := s.spec.Next(0); pe != nil; i, pe = s.spec.Next(i + 1) {
		if se := pe.entry(); se.held&bit != 0 {
			se.held &^= bit
			if se.held == 0 {
				s.spec.DeleteAt(i)
				specDropped++
				i--
			} else {
				*s.spec.ValueAt(i) = pack(se)
			}
		}
	}
	s.shrinkLocked()
	return dropped, specDropped
}

// StoreSpeculative records that r is about to hold keys because the router
// just sent it a request with them; they count (as GPU blocks) until
// Options.SpeculativeTTL passes, so a burst with one new prefix neither herds
// nor scatters before the engine's events arrive. Speculative entries count
// toward Options.MaxEntries like block entries. With a SpeculativeTTL of 0
// it does nothing.
func (ix *Index) StoreSpeculative(r Replica, keys []BlockKey) { ix.Hold(r, keys, 0) }

// Hold is what the router records for a request it routed to r: Touch on
// keys[:matched], the blocks it will hit there, and StoreSpeculative on the
// rest, in one pass. A matched block r holds in the block table (within the
// TTL) is refreshed there and needs no speculative entry; every other key —
// the request's new blocks, and matched ones r holds only speculatively (KV
// events off, or not arrived yet) — is stored speculative. With a
// SpeculativeTTL of 0 it only touches. A matched run already held on r in
// the current tick (the index's 100 ms clock) is left as it is: its entries
// carry the tick already (a block of it the engine evicted since is not
// speculated again before the next tick; its request will store it anew).
func (ix *Index) Hold(r Replica, keys []BlockKey, matched int) {
	p := ix.pool(r.Pool)
	if p == nil || p.live(r) == nil {
		return
	}
	matched = max(0, min(matched, len(keys)))
	now := ix.nowTick()
	if matched > 0 {
		// A matched run Hold already refreshed on r in this tick carries
		// this tick's seen and expiry: doing it again writes the same
		// values (a hot prefix is matched by every request).
		if p.held.sameTick(r, keys[:matched], now) {
			keys, matched = keys[matched:], 0
		} else {
			defer p.held.record(r, keys[:matched], now)
		}
	}
	if ix.specTicks == 0 {
		ix.Touch(r, keys[:matched])
		return
	}
	bit := uint64(1) << r.ID
	expires := now + ix.specTicks
	var added int64
	budget := ix.writeBudget()
	p.prefetchBlocks(keys, -1, matched)
	for i, k := range keys {
		p.prefetchBlocks(keys, i, matched)
		if added >= budget {
			p.specs.Add(added)
			ix.entries.Add(added)
			added = 0
			budget = ix.writeBudget()
		}
		added += ix.holdBlock(p.shardOf(k), k, bit, i < matched, now, expires)
	}
	p.specs.Add(added)
	ix.checkCap(ix.entries.Add(added))
}

// holdBlock refreshes k on the replica of bit in the block table when
// matched and held there, else marks it speculatively held until expires,
// and returns 1 when it added a speculative entry. It takes the shard lock
// and releases it on every exit, a panic included.
func (ix *Index) holdBlock(s *shard, k BlockKey, bit uint64, matched bool, now, expires uint32) (added int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if matched && ix.touchLocked(s, k, bit, now) {
		return 0
	}
	pe, ok := s.spec.Upsert(uint64(k))
	se := pe.entry() // se.seen is the expiry tick
	if !ok {
		added = 1
	}
	if se.seen < expires-ix.specTicks {
		se.held = 0 // stale leftovers
	}
	se.held |= bit
	se.seen = max(se.seen, expires) // a concurrent Hold may have read a later clock
	*pe = pack(se)
	return added
}

// heldPrefixes remembers, for a pool, which (replica, matched run) pairs
// Hold refreshed and in which tick: a direct-mapped table of 32-bit tags
// and ticks, written without locks (a lost or overwritten slot only makes
// the next Hold do the work again; a tag collision, one in 2^32, skips one
// refresh for the rest of a tick). Block keys are chained, so a run is
// known by its length and its last key.
type heldPrefixes [heldPrefixSlots]atomic.Uint64

const heldPrefixSlots = 4096

// slot returns the slot of run on r and the run's tag there (never 0).
func (h *heldPrefixes) slot(r Replica, run []BlockKey) (*atomic.Uint64, uint64) {
	x := uint64(run[len(run)-1]) ^ uint64(len(run))<<40 ^ uint64(r.ID)<<52 ^ uint64(r.Gen)<<20
	x = mix.Mix64(x)
	return &h[x%heldPrefixSlots], (x>>32 | 1) << 32
}

// sameTick reports whether run was recorded on r in tick now.
func (h *heldPrefixes) sameTick(r Replica, run []BlockKey, now uint32) bool {
	sl, tag := h.slot(r, run)
	return sl.Load() == tag|uint64(now)
}

// record notes that Hold refreshed run on r in tick now.
func (h *heldPrefixes) record(r Replica, run []BlockKey, now uint32) {
	sl, tag := h.slot(r, run)
	sl.Store(tag | uint64(now))
}

// dropLocked deletes the entry in slot i, fixing the counters of its
// holders. The shard lock is held; pool/index entry counts are the caller's.
// Slot i then holds the next key of its run (rhmap.Map.DeleteAt).
func (s *shard) dropLocked(p *pool, i int) {
	s.forgetLocked(p, BlockKey(s.m.KeyAt(i)), s.m.ValueAt(i).entry())
	s.m.DeleteAt(i)
}

// forgetLocked takes block k's entry e off its holders' counters and drops
// its tier sets, before the entry is deleted or started afresh.
func (s *shard) forgetLocked(p *pool, k BlockKey, e entry) {
	forEachBit(e.held, func(id ReplicaID) {
		if rs := p.replica(id); rs != nil {
			rs.blocks.Add(-1)
		}
	})
	if e.seen&cpuFlag != 0 {
		delete(s.tiers, k)
	}
}

// shrinkLocked rebuilds the shard's tables when they hold under a quarter of
// their slots (rhmap.Map.Shrink), so memory taken by a burst (or a replica
// now cleared) goes back to the runtime; the tiers map (a Go map, which never
// gives back its table) is rebuilt with the block table. The shard lock is
// held; the copy costs O(slots).
func (s *shard) shrinkLocked() {
	if s.m.Shrink() {
		t := make(map[BlockKey]tierSets, len(s.tiers))
		for k, ts := range s.tiers {
			t[k] = ts
		}
		s.tiers = t
	}
	s.spec.Shrink()
}

// Touch refreshes the freshness of the keys r already holds, as a cache hit
// refreshes them in the engine's LRU: vLLM sends no event when a request
// reuses cached blocks, so without it a block every request hits would
// expire after Options.TTL while the engine keeps it hottest. The router
// touches the blocks a routed request matched on its replica. Keys r does
// not hold are left alone.
func (ix *Index) Touch(r Replica, keys []BlockKey) {
	p := ix.pool(r.Pool)
	if p == nil || p.live(r) == nil {
		return
	}
	bit := uint64(1) << r.ID
	now := ix.nowTick()
	for _, k := range keys {
		ix.touch(p.shardOf(k), k, bit, now)
	}
}

// touch is touchLocked under s's lock, released on every exit, a panic
// included.
func (ix *Index) touch(s *shard, k BlockKey, bit uint64, now uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ix.touchLocked(s, k, bit, now)
}

// touchLocked refreshes k in the block table when the replica of bit holds
// it there within the TTL, and reports whether it did. The shard lock is
// held.
func (ix *Index) touchLocked(s *shard, k BlockKey, bit uint64, now uint32) bool {
	i := s.m.Find(uint64(k))
	if i < 0 {
		return false
	}
	pe := s.m.ValueAt(i)
	if pe.entry().held&bit == 0 || stale(now, pe.entry().tick(), ix.ttlTicks) {
		return false
	}
	pe.seen = now | pe.seen&cpuFlag
	return true
}
