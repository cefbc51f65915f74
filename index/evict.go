package index

// Eviction keeps the index bounded two ways: SweepExpired drops entries not
// refreshed within the TTL, and enforceCap drops the least recently refreshed
// entries when the counted total passes Options.MaxEntries. The counted total
// (Index.entries) is block entries + speculative entries + aliases held for
// the index outside it (AccountAliases); only block and speculative entries
// can be evicted here, so aliases make block entries go sooner. The keeper
// of the aliases learns which block entries went (OnEvict) and drops their
// aliases. Tables that eviction left under a quarter full are rebuilt
// (shard.shrinkLocked).

// capSlack lets the count pass the cap by 1/capSlack before a writer evicts
// synchronously; below that, the Run goroutine evicts in the background.
const capSlack = 50

// SweepExpired removes entries older than the TTL and expired speculative
// entries. Run calls it periodically; tests may call it directly.
func (ix *Index) SweepExpired() {
	now := ix.nowTick()
	for id, p := range *ix.pools.Load() {
		var dropped int64
		out := ix.evictedOut()
		for i := range p.shards {
			dropped += p.shards[i].sweepExpired(p, now, ix.ttlTicks, out)
		}
		p.entries.Add(-dropped)
		ix.entries.Add(-dropped)
		p.m.evictedTTL.Add(float64(dropped))
		ix.reportEvicted(PoolID(id), out)
		ix.sweepSpeculative(p, now, false)
	}
}

// Evicted is what OnEvict's function learns of one pool's evicted block
// entries: each key with the replicas (bit 1<<ReplicaID) that held it.
type Evicted struct {
	Keys []BlockKey
	Held []uint64
}

// OnEvict has f called after block entries are evicted, at the cap or past
// the TTL (not when removed, cleared, or their replica removed), with the
// pool and what went, once per pool and eviction pass, with no index lock
// held; f must not keep ev. A later call replaces f.
func (ix *Index) OnEvict(f func(pool PoolID, ev *Evicted)) { ix.onEvict.Store(&f) }

// evictedOut is where an eviction pass collects what it evicts: nil when
// nobody listens.
func (ix *Index) evictedOut() *Evicted {
	if ix.onEvict.Load() == nil {
		return nil
	}
	return &Evicted{}
}

// reportEvicted hands an eviction pass's evicted entries to OnEvict's
// function.
func (ix *Index) reportEvicted(pool PoolID, ev *Evicted) {
	if f := ix.onEvict.Load(); f != nil && ev != nil && len(ev.Keys) > 0 {
		(*f)(pool, ev)
	}
}

// record notes block k's entry e as evicted (ev nil: nobody listens).
func (ev *Evicted) record(k BlockKey, e entry) {
	if ev != nil {
		ev.Keys = append(ev.Keys, k)
		ev.Held = append(ev.Held, e.held)
	}
}

// sweepExpired drops s's block entries older than ttl ticks at tick now and
// returns how many (recorded in out). It takes the shard lock and releases
// it on every exit, a panic included.
func (s *shard) sweepExpired(p *pool, now, ttl uint32, out *Evicted) (dropped int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, pe := s.m.Next(0); pe != nil; i, pe = s.m.Next(i + 1) {
		if stale(now, pe.entry().tick(), ttl) {
			out.record(BlockKey(s.m.KeyAt(i)), pe.entry())
			s.dropLocked(p, i)
			dropped++
			i-- // slot i now holds the next key of the run
		}
	}
	return dropped
}

// sweepAllSpeculative drops every pool's expired speculative entries.
func (ix *Index) sweepAllSpeculative() {
	now := ix.nowTick()
	for _, p := range *ix.pools.Load() {
		ix.sweepSpeculative(p, now, false)
	}
}

// sweepSpeculative drops a pool's speculative entries that expired before
// now (all of them when all is set) and shrinks the shards' maps.
func (ix *Index) sweepSpeculative(p *pool, now uint32, all bool) {
	var dropped int64
	for i := range p.shards {
		dropped += p.shards[i].sweepSpeculative(now, all)
	}
	p.specs.Add(-dropped)
	ix.entries.Add(-dropped)
}

// sweepSpeculative drops s's speculative entries that expired before now
// (all of them when all is set), shrinks its maps and returns how many it
// dropped. It takes the shard lock and releases it on every exit, a panic
// included.
func (s *shard) sweepSpeculative(now uint32, all bool) (dropped int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, pe := s.spec.Next(0); pe != nil; i, pe = s.spec.Next(i + 1) {
		if all || pe.seen < now { // seen: expiry tick
			s.spec.DeleteAt(i)
			dropped++
			i--
		}
	}
	s.shrinkLocked()
	return dropped
}

// syncEvictLine is the counted total past which a writer evicts before
// going on.
func (ix *Index) syncEvictLine() int64 {
	return ix.maxEntries + ix.maxEntries/capSlack
}

// writeCommitEvery bounds how many entries a writer adds before publishing
// them to the counted total, so concurrent writers (one per engine rank) pass
// the synchronous-eviction line by at most this many each.
const writeCommitEvery = 64

// writeBudget is how many entries a writer may add before publishing them
// and calling writeBudget again. At the synchronous-eviction line it evicts
// first; if other writers filled the room again meanwhile, it allows one
// entry (the next call evicts again).
func (ix *Index) writeBudget() int64 {
	line := ix.syncEvictLine()
	if room := line - ix.entries.Load(); room > 0 {
		return min(room, writeCommitEvery)
	}
	ix.enforceCap(ix.maxEntries)
	if room := line - ix.entries.Load(); room > 0 {
		return min(room, writeCommitEvery)
	}
	return 1
}

// AccountAliases adds delta to the entries counted toward Options.MaxEntries
// for aliases kept on the index's behalf outside it: ingest's engine hash →
// block key maps in keys: tokens mode, one per (block, replica). When the
// total passes the cap, block entries are evicted to make room.
func (ix *Index) AccountAliases(delta int64) {
	ix.aliases.Add(delta)
	ix.checkCap(ix.entries.Add(delta))
}

// MaxEntries is the cap on counted entries (Options.MaxEntries).
func (ix *Index) MaxEntries() int64 { return ix.maxEntries }

// checkCap reacts to a write that left total entries in the index.
func (ix *Index) checkCap(total int64) {
	if total <= ix.maxEntries {
		return
	}
	if total > ix.syncEvictLine() {
		ix.enforceCap(ix.maxEntries)
		return
	}
	select {
	case ix.evictSignal <- struct{}{}:
	default:
	}
}

// enforceCap evicts the least recently refreshed entries until at most
// limit − limit/100 remain (a margin so eviction runs in batches). It builds a
// histogram of refresh ticks, finds the cutoff tick, then deletes entries at
// or before it, oldest buckets first.
func (ix *Index) enforceCap(limit int64) {
	if ix.entries.Load() <= limit {
		return
	}
	ix.evictMu.Lock()
	defer ix.evictMu.Unlock()
	target := limit - limit/100
	pools := *ix.pools.Load()
	now := ix.nowTick()
	// Expired speculative entries go first; they no longer count for routing.
	for _, p := range pools {
		ix.sweepSpeculative(p, now, false)
	}
	excess := ix.entries.Load() - target
	if excess <= 0 {
		return
	}
	// Pass 1: how many entries were last refreshed at each tick age. The
	// scan reads the clock once; writers go on meanwhile, so an entry may
	// carry a tick after now. Such an entry is the newest there is: it is
	// neither counted nor evicted this round (ticks.bucket says so).
	const buckets = 4096
	var hist [buckets]int64
	ticks := tickRange{oldest: now, now: now, buckets: buckets}
	for _, p := range pools {
		for i := range p.shards {
			ticks.oldest = min(ticks.oldest, p.shards[i].oldestTick(now))
		}
	}
	for _, p := range pools {
		for i := range p.shards {
			p.shards[i].countTicks(&ticks, hist[:])
		}
	}
	cutoff, sum := 0, int64(0)
	for cutoff = range hist {
		sum += hist[cutoff]
		if sum >= excess {
			break
		}
	}
	// Pass 2: delete the buckets before the cutoff, then the cutoff bucket
	// itself until enough are gone.
	left := ix.evictWhere(pools, excess, &ticks, func(b int) bool { return b < cutoff })
	ix.evictWhere(pools, left, &ticks, func(b int) bool { return b == cutoff })
	// Live speculative entries go only when block entries alone could not
	// make room (a flood of routed requests, or aliases filling the cap).
	if ix.entries.Load() > target {
		for _, p := range pools {
			ix.sweepSpeculative(p, now, true)
		}
	}
}

// tickRange maps refresh ticks in [oldest, now] onto histogram buckets.
type tickRange struct {
	oldest, now uint32
	buckets     int
}

// bucket is t's histogram bucket, or false when t lies outside the range:
// before oldest, or after now (refreshed after the scan read the clock).
func (r *tickRange) bucket(t uint32) (int, bool) {
	if t < r.oldest || t > r.now {
		return 0, false
	}
	span := uint64(r.now-r.oldest) + 1
	return int(uint64(t-r.oldest) * uint64(r.buckets) / span), true
}

// oldestTick is the oldest refresh tick of s's block entries, at most now.
// It takes the shard lock and releases it on every exit, a panic included.
func (s *shard) oldestTick(now uint32) uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	oldest := now
	for i, pe := s.m.Next(0); pe != nil; i, pe = s.m.Next(i + 1) {
		oldest = min(oldest, pe.entry().tick())
	}
	return oldest
}

// countTicks adds s's block entries to hist by refresh-tick bucket. It
// takes the shard lock and releases it on every exit, a panic included.
func (s *shard) countTicks(r *tickRange, hist []int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, pe := s.m.Next(0); pe != nil; i, pe = s.m.Next(i + 1) {
		if b, ok := r.bucket(pe.entry().tick()); ok {
			hist[b]++
		}
	}
}

// evictWhere deletes up to limit entries whose refresh bucket satisfies pick
// and returns how many more may go.
func (ix *Index) evictWhere(pools []*pool, limit int64, r *tickRange, pick func(int) bool) int64 {
	for id, p := range pools {
		var dropped int64
		out := ix.evictedOut()
		for i := range p.shards {
			if limit <= 0 {
				break
			}
			d := p.shards[i].evictWhere(p, limit, r, pick, out)
			dropped += d
			limit -= d
		}
		p.entries.Add(-dropped)
		ix.entries.Add(-dropped)
		p.m.evictedCap.Add(float64(dropped))
		ix.reportEvicted(PoolID(id), out)
	}
	return limit
}

// evictWhere deletes up to limit of s's block entries whose refresh bucket
// satisfies pick (recorded in out), shrinks its maps and returns how many it
// deleted. It takes the shard lock and releases it on every exit, a panic
// included.
func (s *shard) evictWhere(p *pool, limit int64, r *tickRange, pick func(int) bool, out *Evicted) (dropped int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, pe := s.m.Next(0); pe != nil && dropped < limit; i, pe = s.m.Next(i + 1) {
		if b, ok := r.bucket(pe.entry().tick()); ok && pick(b) {
			out.record(BlockKey(s.m.KeyAt(i)), pe.entry())
			s.dropLocked(p, i)
			dropped++
			i-- // slot i now holds the next key of the run
		}
	}
	s.shrinkLocked()
	return dropped
}
