package routing

import (
	"github.com/kvroute/kvroute/index"
	"github.com/kvroute/kvroute/internal/mix"
)

// eligible lists p's endpoints (all pools' when p is nil) that are healthy
// and inside the subset hint. A full KV cache does not make a replica
// ineligible (it only costs more, see cost): a busy engine's cache is always
// full, and refusing traffic while engines serve is worse than queueing.
//
// With rec non-nil it records every endpoint it looks at, eligible or not
// and why.
func (r *Router) eligible(p *pool, subset map[string]bool, dst []candidate, rec *Recorder) []candidate {
	pools := r.pools
	if p != nil {
		pools = []*pool{p}
	}
	now := r.ix.Now()
	for _, pp := range pools {
		eps := pp.endpoints()
		for i := range eps {
			ep := &eps[i]
			slot := rec.add(ep)
			if subset != nil && !subset[ep.Address] {
				rec.ineligible(slot, IneligibleSubset)
				continue
			}
			st, ok := r.ix.ReplicaAt(ep.Replica, r.o().PrefillTokensPerSecond, now)
			if !ok {
				rec.ineligible(slot, IneligibleUnknown)
				continue
			}
			if !st.Healthy {
				rec.ineligible(slot, IneligibleUnhealthy)
				continue
			}
			rate := st.PrefillRate
			if !(rate > 0) {
				rate = r.o().PrefillTokensPerSecond
			}
			dst = append(dst, candidate{ep: ep, state: st, rate: rate, slot: slot})
		}
	}
	return dst
}

// byLoad places a request no replica holds a prefix of by the same cost, all
// its tokens uncached. With block keys (a prompt of at least one block) it
// is sticky: among the replicas whose cost is within placement_slack × the
// request's own prefill time of the cheapest, it takes the one ranking
// highest for the first block key by rendezvous hashing, so a document
// evicted everywhere comes back where it was rather than wherever is
// emptiest, unless that replica is busier than the bound. Without keys it
// takes the cheapest, ties at random. It rejects with 503 only when no
// replica is healthy (or inside the subset hint).
func (r *Router) byLoad(p *pool, subset map[string]bool, reason string, cause error, rec *Recorder) Decision {
	return r.place(p, subset, reason, cause, nil, 0, rec)
}

func (r *Router) place(p *pool, subset map[string]bool, reason string, cause error, keys []index.BlockKey, promptTokens int, rec *Recorder) Decision {
	var buf [64]candidate
	cands := r.eligible(p, subset, buf[:0], rec)
	d := Decision{Pool: poolName(p), Outcome: OutcomeLoad, Reason: reason, Err: cause, Keys: keys, PromptTokens: promptTokens}
	if len(cands) == 0 {
		return r.noEligible(d)
	}
	var costs [64]float64
	cs := costs[:0]
	best, ties := 0, 0
	for i := range cands {
		c := r.cost(&cands[i], float64(promptTokens))
		cs = append(cs, c)
		rec.weigh(r, &cands[i], index.Match{}, float64(promptTokens), c)
		switch {
		case i == 0 || c < cs[best]:
			best, ties = i, 1
		case c == cs[best]:
			// Reservoir sampling keeps each tied endpoint with equal chance.
			ties++
			if r.tieBreak(ties) == 0 {
				best = i
			}
		}
	}
	if len(keys) > 0 {
		bound := cs[best] + r.o().PlacementSlack*float64(promptTokens)/cands[best].rate
		// A replica with no prefill queued is as good as the cheapest when
		// its cost is within placementIdleTolerance: the learned prefill
		// rates of identical engines differ by a few percent, and the
		// fastest-looking one must not take every document of an idle fleet.
		idleBound := cs[best] * (1 + placementIdleTolerance)
		// Bounded by cache occupancy too: a replica holding more than half
		// this prompt's blocks beyond the least occupied candidate would
		// evict to take it while another has room. Full caches (steady
		// eviction) are all within the bound: placement stays sticky.
		least := cands[0].state.Blocks
		for i := range cands {
			least = min(least, cands[i].state.Blocks)
		}
		roomBound := float64(least) + placementOccupancySlack*float64(len(keys))
		top := uint64(0)
		for i := range cands {
			if (cs[i] > bound && !(r.idle(&cands[i]) && cs[i] <= idleBound)) || float64(cands[i].state.Blocks) > roomBound {
				continue
			}
			if s := rendezvous(keys[0], cands[i].ep); s >= top {
				top, best = s, i
			}
		}
	}
	d.Endpoint, d.Cost = cands[best].ep, cs[best]
	return d
}

// placementOccupancySlack bounds sticky placement by cache occupancy: a
// replica holding more than this fraction of the prompt's blocks beyond the
// least occupied candidate is not a placement target.
const placementOccupancySlack = 0.5

// placementIdleTolerance: an idle replica (no prefill queued) within this
// fraction of the cheapest placement cost counts as tied with it.
const placementIdleTolerance = 0.2

// rendezvous is endpoint e's highest-random-weight score for key k.
func rendezvous(k index.BlockKey, e *Endpoint) uint64 {
	return mix.Mix64(uint64(k) ^ e.nameHash())
}

// nameHash is FNV-1a of the endpoint's name (stable across restarts and
// routers, so every kvroute replica places a document alike).
func (e *Endpoint) nameHash() uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(e.Name); i++ {
		h ^= uint64(e.Name[i])
		h *= 1099511628211
	}
	return h
}

// choose minimises cost (estimated seconds to first token, see cost) over
// the eligible endpoints, each with its own cached prefix, ties broken at
// random; with no cached prefix anywhere it places the request by load,
// sticky to the first block (place).
func (r *Router) choose(p *pool, subset map[string]bool, keys []index.BlockKey, promptTokens, blockSize int, rec *Recorder) Decision {
	mp := r.matches.Get().(*[]index.Match)
	defer r.matches.Put(mp)
	matches := r.ix.LookupRoute(p.ID, keys, (*mp)[:0])
	rec.mark(stepLookup)
	*mp = matches[:0]
	if len(matches) == 0 {
		return r.place(p, subset, ReasonNoHit, nil, keys, promptTokens, rec)
	}
	var buf [64]candidate
	cands := r.eligible(p, subset, buf[:0], rec)
	d := Decision{Pool: p.Name, Keys: keys, PromptTokens: promptTokens, Outcome: OutcomePrefix, Reason: ReasonHit}
	if len(cands) == 0 {
		return r.noEligible(d)
	}
	var costBuf [64]float64
	var matchBuf [64]int
	costs, matched := costBuf[:0], matchBuf[:0]
	best, ties := 0, 0
	for i := range cands {
		c := &cands[i]
		var held index.Match
		for _, m := range matches {
			if m.Replica == c.ep.Replica.ID {
				held = m
				break
			}
		}
		uncached := float64(promptTokens) - held.Weighted*float64(blockSize)
		costs = append(costs, r.cost(c, uncached))
		matched = append(matched, held.Blocks)
		rec.weigh(r, c, held, uncached, costs[i])
		switch {
		case i == 0 || costs[i] < costs[best]:
			best, ties = i, 1
		case costs[i] == costs[best]:
			// Reservoir sampling keeps each tied endpoint with equal chance.
			ties++
			if r.tieBreak(ties) == 0 {
				best = i
			}
		}
	}
	best = r.spreadIdle(cands, costs, matched, keys, best)
	bestMatched := matched[best]
	d.Endpoint, d.Cost, d.MatchedTokens = cands[best].ep, costs[best], min(bestMatched*blockSize, promptTokens)
	d.matchedBlocks = min(bestMatched, len(keys))
	if bestMatched == 0 {
		d.Outcome, d.Reason = OutcomeLoad, ReasonNoHit
	}
	return d
}

// spreadIdle picks among the idle replicas whose cost is within
// placementIdleTolerance of the cheapest one (best): when the cheapest is
// idle, the part of the prompt it lacks is new to all of them, and their
// costs differ only by the noise in their learned prefill rates or by a
// short shared prefix (a fleet's system prompt) one of them lacks, so the
// cheapest-looking one would take every such request — every new
// conversation. The pick is the one given the fewest requests lately
// (ReplicaState.RecentRequests: the conversations it serves, whose context
// its cache must keep), then the rendezvous winner for the first block
// beyond the cheapest one's prefix, as place does for prompts nobody holds:
// new conversations spread evenly over the whole fleet, and one that lost
// its blocks comes back where it was. A replica that lacks the shared prefix
// competes too: were it excluded it would never get a request, so never
// the prefix (in the simulator, 7 of 16 engines got no request on one seed).
func (r *Router) spreadIdle(cands []candidate, costs []float64, matched []int, keys []index.BlockKey, best int) int {
	m := matched[best]
	if m >= len(keys) || !r.idle(&cands[best]) {
		return best
	}
	anchor, bound := keys[m], costs[best]*(1+placementIdleTolerance)
	pick, top, load := best, rendezvous(anchor, cands[best].ep), cands[best].state.RecentRequests()
	for i := range cands {
		if i == best || costs[i] > bound || !r.idle(&cands[i]) {
			continue
		}
		l := cands[i].state.RecentRequests()
		if s := rendezvous(anchor, cands[i].ep); l < load || (l == load && s > top) {
			pick, top, load = i, s, l
		}
	}
	return pick
}
