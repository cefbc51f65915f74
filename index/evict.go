package index

// Eviction keeps the index bounded two ways: SweepExpired drops entries not
// refreshed within the TTL, and enforceCap drops the least recently refreshed
// entries when the entry count passes Options.MaxEntries.

// capSlack lets the count pass the cap by 1/capSlack before a writer evicts
// synchronously; below that, the Run goroutine evicts in the background.
const capSlack = 50

// SweepExpired removes entries older than the TTL and expired speculative
// entries. Run calls it periodically; tests may call it directly.
func (ix *Index) SweepExpired() {
	now := ix.nowTick()
	for _, p := range *ix.pools.Load() {
		var dropped int64
		for i := range p.shards {
			s := &p.shards[i]
			s.mu.Lock()
			for k, e := range s.m {
				if now-e.tick() > ix.ttlTicks {
					s.dropLocked(p, k, e)
					dropped++
				}
			}
			for k, se := range s.spec {
				if se.expires < now {
					delete(s.spec, k)
				}
			}
			s.mu.Unlock()
		}
		p.entries.Add(-dropped)
		ix.entries.Add(-dropped)
		p.m.evictedTTL.Add(float64(dropped))
	}
}

// checkCap reacts to a write that left total entries in the index.
func (ix *Index) checkCap(total int64) {
	if total <= ix.maxEntries {
		return
	}
	if total > ix.maxEntries+ix.maxEntries/capSlack {
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
	excess := ix.entries.Load() - (limit - limit/100)
	if excess <= 0 {
		return
	}
	pools := *ix.pools.Load()
	// Pass 1: how many entries were last refreshed at each tick age.
	now := ix.nowTick()
	const buckets = 4096
	var hist [buckets]int64
	var oldest uint32 = now
	for _, p := range pools {
		for i := range p.shards {
			s := &p.shards[i]
			s.mu.RLock()
			for _, e := range s.m {
				oldest = min(oldest, e.tick())
			}
			s.mu.RUnlock()
		}
	}
	span := uint64(now-oldest) + 1
	bucketOf := func(t uint32) int {
		return int(uint64(t-oldest) * buckets / span)
	}
	for _, p := range pools {
		for i := range p.shards {
			s := &p.shards[i]
			s.mu.RLock()
			for _, e := range s.m {
				if t := e.tick(); t >= oldest {
					hist[bucketOf(t)]++
				}
			}
			s.mu.RUnlock()
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
	left := ix.evictWhere(pools, excess, func(b int) bool { return b < cutoff }, bucketOf, oldest)
	ix.evictWhere(pools, left, func(b int) bool { return b == cutoff }, bucketOf, oldest)
}

// evictWhere deletes up to limit entries whose refresh bucket satisfies pick
// and returns how many more may go.
func (ix *Index) evictWhere(pools []*pool, limit int64, pick func(int) bool, bucketOf func(uint32) int, oldest uint32) int64 {
	for _, p := range pools {
		var dropped int64
		for i := range p.shards {
			if limit <= 0 {
				break
			}
			s := &p.shards[i]
			s.mu.Lock()
			for k, e := range s.m {
				if limit <= 0 {
					break
				}
				if t := e.tick(); t >= oldest && pick(bucketOf(t)) {
					s.dropLocked(p, k, e)
					dropped++
					limit--
				}
			}
			s.mu.Unlock()
		}
		p.entries.Add(-dropped)
		ix.entries.Add(-dropped)
		p.m.evictedCap.Add(float64(dropped))
	}
	return limit
}
