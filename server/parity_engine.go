package server

import (
	"fmt"
	"time"

	"github.com/kvroute/kvroute/config"
	"github.com/kvroute/kvroute/ingest"
	"github.com/kvroute/kvroute/routing"
)

// cachedTokensShortToFlag is how many windows in a row must each fall short
// before the cached_tokens check says mismatch: one short window can be
// requests that ended without reaching the engine's prefill.
const cachedTokensShortToFlag = 2

// engineTrack is what the poll keeps per replica rank to learn from the
// engine what happened to the prompt tokens kvroute routed there: the
// cached_tokens check's window, and the bases of the stale and
// cached_unpredicted outcomes. Only the poll goroutine touches it.
type engineTrack struct {
	restarts int64
	// storedAgain is the rank's BlocksStoredAgain already turned into stale
	// tokens.
	storedAgain int64

	// check is the rank's cached_tokens check; judged when it judged a
	// window in this poll.
	check  CachedTokensCheck
	judged bool

	// cached_unpredicted: since the base, the engine's cached tokens minus
	// what kvroute predicted (less what turned out stale); counted is what
	// was already added. baseAt is when the base's prediction was read;
	// based once the engine's counter was read after it.
	based                   bool
	baseAt                  time.Time
	baseEngine, lastEngine  float64
	lastRouted              int64
	basePredicted, baseStal int64
	stale, counted          int64
}

// engineSide turns what ingest learned from each rank's engine into the
// funnel's stale and cached_unpredicted outcomes and the cached_tokens
// check.
func (p *parity) engineSide(statuses []ingest.ReplicaStatus) {
	f := p.s.funnel
	if f == nil {
		return
	}
	seen := make(map[parityKey]bool, len(statuses))
	var order []parityKey                   // replicas, in status order
	ranks := map[parityKey][]*engineTrack{} // replica → its ranks' tracks
	names := map[parityKey][]string{}       // replica → its ranks' names
	for i := range statuses {
		st := &statuses[i]
		k := parityKey{st.Pool, st.Replica} // the rank
		rep := parityKey{st.Pool, replicaOf(st)}
		seen[k] = true
		t := p.engine[k]
		if t == nil {
			t = &engineTrack{restarts: st.Restarts}
			p.engine[k] = t
		}
		restarted := st.Restarts != t.restarts || st.BlocksStoredAgain < t.storedAgain
		if st.EngineCachedTokens != nil && t.check.open && *st.EngineCachedTokens < t.check.engine0 {
			restarted = true // the counter went back: a new engine process
		}
		if restarted {
			*t = engineTrack{restarts: st.Restarts}
		}
		if _, ok := ranks[rep]; !ok {
			order = append(order, rep)
		}
		ranks[rep], names[rep] = append(ranks[rep], t), append(names[rep], st.Replica)
		t.judged = false
		if d := st.BlocksStoredAgain - t.storedAgain; d > 0 && st.PoolBlockSize > 0 {
			t.stale += f.AddEngineOutcome(st.Pool, st.Replica, routing.TokensStale, d*int64(st.PoolBlockSize))
		}
		t.storedAgain = st.BlocksStoredAgain
		if st.EngineCachedTokens == nil {
			t.check.State, t.check.Evidence = parityUnknown, "the engine exports neither vllm:prompt_tokens_cached_total nor vllm:prefix_cache_hits_total yet"
			continue
		}
		p.unpredicted(f, st, t)
		if p.cfg.CachedTokensWindow > 0 {
			t.judged = t.check.Observe(p.cfg, f, k.pool, k.replica, p.s.ix.Now(), *st.EngineCachedTokens, *st.EngineCachedAt, st.EngineCachedMetric)
		}
	}
	for k := range p.engine {
		if !seen[k] {
			delete(p.engine, k)
		}
	}
	if p.cfg.CachedTokensWindow > 0 {
		for _, rep := range order {
			state, ev, judged := combineRanks(ranks[rep], names[rep])
			p.set(rep, checkCachedTokens, state, ev, judged)
		}
	}
}

// combineRanks is a replica's cached_tokens state from its ranks': mismatch
// when one mismatches, match when one matches and none mismatches, else
// unknown; the evidence of each rank in that state (named with data
// parallelism).
func combineRanks(ts []*engineTrack, names []string) (state, evidence string, judged bool) {
	state = parityUnknown
	for _, t := range ts {
		switch {
		case t.check.State == parityMismatch:
			state = parityMismatch
		case t.check.State == parityMatch && state == parityUnknown:
			state = parityMatch
		}
		judged = judged || t.judged
	}
	var parts []string
	for i, t := range ts {
		if t.check.State != state && !(state == parityUnknown && t.check.State == "") {
			continue
		}
		ev := t.check.Evidence
		if len(ts) > 1 {
			ev = names[i] + ": " + ev
		}
		parts = append(parts, ev)
	}
	return state, joinEvidence(parts), judged
}

// unpredicted counts as cached_unpredicted what the engine served from its
// cache beyond kvroute's prediction since the base. Each reading pairs the
// engine's counter with the prediction read after that scrape ended, so a
// request still prefilling only holds the count back. The base pairs a
// prediction read while kvroute had no request in flight to the rank with
// the counter of a scrape begun after it, so no request sits across it; and
// it absorbs the hits the engine counts while kvroute has nothing there
// (other clients'). Hits of other clients' requests served while kvroute's
// are in flight still count.
func (p *parity) unpredicted(f *routing.Funnel, st *ingest.ReplicaStatus, t *engineTrack) {
	e, at, pred := *st.EngineCachedTokens, *st.EngineCachedAt, f.EngineCachedPredicted(st.Pool, st.Replica)
	switch {
	case !t.based && t.baseAt.IsZero():
		now := p.s.ix.Now()
		if p.inFlight(st.Pool, st.Replica) == 0 {
			t.basePredicted, t.baseStal, t.baseAt = pred, t.stale, now
		}
		return
	case !t.based:
		if !at.After(t.baseAt) {
			return // no scrape begun after the idle moment yet
		}
		t.based, t.baseEngine, t.lastEngine, t.lastRouted = true, e, e, routedTokens(f, st)
		return
	}
	routed := routedTokens(f, st)
	if routed == t.lastRouted && p.inFlight(st.Pool, st.Replica) == 0 {
		// Hits while kvroute routed nothing here and had nothing in
		// flight are another client's (a hit of a request of ours that
		// ended since the last reading is given up with them).
		t.baseEngine += e - t.lastEngine
	}
	t.lastEngine, t.lastRouted = e, routed
	excess := int64(e-t.baseEngine) - ((pred - t.basePredicted) - (t.stale - t.baseStal))
	if excess > t.counted {
		t.counted += f.AddEngineOutcome(st.Pool, st.Replica, routing.TokensCachedUnpredicted, excess-t.counted)
	}
}

// routedTokens is the prompt tokens kvroute routed to a rank so far.
func routedTokens(f *routing.Funnel, st *ingest.ReplicaStatus) int64 {
	t := f.RankTotals(st.Pool, st.Replica)
	return t[routing.TokensCachedPredicted] + t[routing.TokensNew] + t[routing.TokensGivenUpForLoad]
}

// inFlight is the requests this kvroute has in flight to a rank (-1 when the
// index does not know it).
func (p *parity) inFlight(pool, rank string) int64 {
	id, ok := p.s.ix.PoolByName(pool)
	if !ok {
		return -1
	}
	for _, rs := range p.s.ix.Replicas(id) {
		if rs.Name == rank {
			return rs.InFlight
		}
	}
	return -1
}

// CachedTokensCheck is one replica rank's cached_tokens check: it compares
// the cached tokens kvroute predicted for the requests that began and ended
// within a window (routing.Funnel.NextWindow) with the rise of the engine's
// cached prompt tokens counter over at least that window. Every such
// request's prefill lies inside the window, so a correct index never falls
// short; requests from before the window, of other routers or of mesh peers
// only add to the engine's side. The server's parity poll runs one per rank
// and the simulator the same, on its engines' counters. The zero value is a
// check that has seen nothing.
type CachedTokensCheck struct {
	// State (match, mismatch or unknown; "" before the first reading) and
	// Evidence say the last verdict.
	State, Evidence string
	// The window: open since start, when the engine's counter read engine0
	// (by a scrape that ended before start). closing: it ended at closedAt
	// with predicted tokens; judged at the first scrape begun after
	// closedAt. engineAtClose opens the next window.
	open, closing bool
	start         time.Time
	engine0       float64
	closedAt      time.Time
	engineAtClose float64
	predicted     int64
	short         int
}

// Mismatch reports whether the check's state is mismatch.
func (c *CachedTokensCheck) Mismatch() bool { return c.State == parityMismatch }

// Observe feeds the check one reading of the rank's engine counter: engine,
// read by a scrape that began at engineAt, named metric; now is the
// router's clock. It reports whether it judged a window.
func (c *CachedTokensCheck) Observe(cfg config.Parity, f *routing.Funnel, pool, rank string, now time.Time, engine float64, engineAt time.Time, metric string) (judged bool) {
	switch {
	case !c.open:
		f.NextWindow(pool, rank)
		c.open, c.start, c.engine0 = true, now, engine
		if c.State == "" || c.State == parityUnknown {
			c.State, c.Evidence = parityUnknown, fmt.Sprintf("no window judged yet: one is judged after %s with at least %d predicted cached tokens", cfg.CachedTokensWindow, cfg.CachedTokensMinTokens)
		}
	case c.closing:
		if !engineAt.After(c.closedAt) {
			return false // no scrape begun after the window ended yet
		}
		judged = c.judge(cfg, metric, engine-c.engine0)
		c.closing, c.start, c.engine0 = false, c.closedAt, c.engineAtClose
	case now.Sub(c.start) >= cfg.CachedTokensWindow.Std():
		c.predicted = f.NextWindow(pool, rank)
		c.closing, c.closedAt, c.engineAtClose = true, now, engine
	}
	return judged
}

// judge sets the check from one window: predicted cached tokens against the
// engine counter's rise. It reports false when the window had too few
// predicted hits to judge (the state stays).
func (c *CachedTokensCheck) judge(cfg config.Parity, metric string, rose float64) bool {
	tol := cfg.CachedTokensTolerance
	if c.predicted < int64(cfg.CachedTokensMinTokens) {
		return false
	}
	ev := fmt.Sprintf("window of %s: kvroute predicted %d cached prompt tokens for the requests it routed here that began and ended in it; the engine's %s rose by %.0f (tolerance %.0f%%)",
		c.closedAt.Sub(c.start).Round(time.Second), c.predicted, metric, rose, 100*tol)
	if rose >= float64(c.predicted)*(1-tol) {
		c.short, c.State, c.Evidence = 0, parityMatch, ev
		return true
	}
	c.short++
	if c.short < cachedTokensShortToFlag {
		c.Evidence = ev + fmt.Sprintf("; short, %d more short window(s) in a row flag it", cachedTokensShortToFlag-c.short)
		return true
	}
	c.State, c.Evidence = parityMismatch, ev+fmt.Sprintf("; short %d windows in a row", c.short)
	return true
}
