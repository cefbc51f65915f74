package routing

import (
	"math"
	"slices"

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
			dst = append(dst, candidate{ep: ep, state: st, slot: slot})
		}
	}
	rate := r.poolRate(dst)
	for i := range dst {
		dst[i].rate = rate
	}
	return dst
}

// poolRate is the prefill rate the cost divides by on every candidate: the
// mean of the rates the candidates have learned, or the configured default
// while none has. The replicas of one pool serve one model on one kind of
// GPU; a replica's own learned rate rests on the few prefills it was given,
// and one that is low by chance makes the replica look slow, so it gets no
// more requests, so it never learns better (in the simulator one engine
// stuck at 13,100 tokens/s against its peers' 19,500 got 6 of 3,993
// requests). The queue ahead of a request still drains at the replica's own
// learned rate (index.ReplicaState.PendingTokens): a replica that is slower
// in fact keeps its queue longer and costs more.
func (r *Router) poolRate(cands []candidate) float64 {
	sum, n := 0.0, 0
	for i := range cands {
		if v := cands[i].state.PrefillRate; v > 0 && !math.IsInf(v, 0) {
			sum += v
			n++
		}
	}
	if n == 0 {
		return r.o().PrefillTokensPerSecond
	}
	return sum / float64(n)
}

// byLoad places a request no replica holds a prefix of by the same price,
// all its tokens uncached. With block keys (a prompt of at least one block) the
// choice among the replicas costing about the same is spread's: the one
// whose cache the request turns over least. Without keys it takes the
// cheapest, ties at random. It rejects with 503 only when no replica is
// healthy (or inside the subset hint).
func (r *Router) byLoad(p *pool, subset map[string]bool, reason string, cause error, rec *Recorder) Decision {
	return r.place(p, subset, reason, cause, nil, 0, rec)
}

func (r *Router) place(p *pool, subset map[string]bool, reason string, cause error, keys []index.BlockKey, promptTokens int, rec *Recorder) Decision {
	var buf [index.MaxReplicas]candidate
	cands := r.eligible(p, subset, buf[:0], rec)
	d := Decision{Pool: poolName(p), Outcome: OutcomeLoad, Reason: reason, Err: cause, Keys: keys, PromptTokens: promptTokens}
	if len(cands) == 0 {
		return r.noEligible(d)
	}
	var costs, uncachedBuf [index.MaxReplicas]float64
	cs, uncached := costs[:0], uncachedBuf[:0]
	best, ties := 0, 0
	for i := range cands {
		c := r.price(&cands[i], float64(promptTokens))
		cs = append(cs, c)
		uncached = append(uncached, float64(promptTokens))
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
		best = r.spread(cands, cs, uncached, promptTokens, best, keys[0], rec)
	}
	d.Endpoint, d.Cost = cands[best].ep, cs[best]
	return d
}

// spread is the last step of every decision on a prompt of at least one
// block. The price counts one request's time to first token and the prefill
// time its uncached tokens take; it does not price what they evict. Every uncached token a
// replica prefills is written into its cache, and its cache keeps the most
// recent writes: a replica written to twice as fast as its peers keeps a
// prefix half as long, so a fleet whose writes are unbalanced holds less
// of what its clients will send again than one cache of the same total size
// would. So among the candidates whose price is within placement_slack × the
// request's own prefill time of the cheapest (best) — a time-to-first-token
// margin the request may give up, measured in its own size — spread takes
// the one whose cache the request turns over least: the uncached tokens
// begun there lately (index.ReplicaState.RecentTokens, this router's and
// its peers') plus those this request would add there. A replica holding
// part of the prompt adds fewer, so it wins unless its cache is being
// written faster by more than the part it holds. At slack 0 only equal
// costs compete (on an idle fleet priced at one pool rate, every replica
// lacking the prompt); at the default 0.2 so does a replica lacking a
// shared prefix that is short beside the prompt (a system prompt), which
// then takes conversations from a holder written faster. Ties go to
// the replica ranking highest by rendezvous hashing for anchor (a block key
// of the prompt), alike on every kvroute replica.
func (r *Router) spread(cands []candidate, costs, uncached []float64, promptTokens, best int, anchor index.BlockKey, rec *Recorder) int {
	bound := costs[best] + r.o().PlacementSlack*float64(promptTokens)/cands[best].rate
	rec.slack(bound)
	pick, top, least := best, uint64(0), math.Inf(1)
	for i := range cands {
		turnover := cands[i].state.RecentTokens() + max(uncached[i], 0)
		within := costs[i] <= bound
		rec.spread(&cands[i], turnover, within)
		if !within {
			continue
		}
		if s := rendezvous(anchor, cands[i].ep); turnover < least || (turnover == least && s > top) {
			pick, top, least = i, s, turnover
		}
	}
	return pick
}

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

// choose weighs price (estimated seconds to first token plus the prefill
// seconds the request's uncached tokens take, see price) on the
// eligible endpoints, each with its own cached prefix, and takes spread's
// pick among those costing about the least; with no cached prefix anywhere
// it places the request by load (place).
func (r *Router) choose(p *pool, subset map[string]bool, keys []index.BlockKey, promptTokens, blockSize int, rec *Recorder) Decision {
	mp := r.matches.Get().(*[]index.Match)
	defer r.matches.Put(mp)
	matches := r.ix.LookupRoute(p.ID, keys, (*mp)[:0])
	rec.mark(stepLookup)
	*mp = matches[:0]
	if len(matches) == 0 {
		return r.place(p, subset, ReasonNoHit, nil, keys, promptTokens, rec)
	}
	var buf [index.MaxReplicas]candidate
	cands := r.eligible(p, subset, buf[:0], rec)
	d := Decision{Pool: p.Name, Keys: keys, PromptTokens: promptTokens, Outcome: OutcomePrefix, Reason: ReasonHit}
	if len(cands) == 0 {
		return r.noEligible(d)
	}
	var costBuf, uncachedBuf [index.MaxReplicas]float64
	var matchBuf [index.MaxReplicas]int
	costs, uncachedAll, matched := costBuf[:0], uncachedBuf[:0], matchBuf[:0]
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
		costs = append(costs, r.price(c, uncached))
		uncachedAll = append(uncachedAll, uncached)
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
	best = r.spread(cands, costs, uncachedAll, promptTokens, best, keys[min(matched[best], len(keys)-1)], rec)
	bestMatched := matched[best]
	d.Endpoint, d.Cost, d.MatchedTokens = cands[best].ep, costs[best], min(bestMatched*blockSize, promptTokens)
	d.matchedBlocks = min(bestMatched, len(keys))
	d.heldTokens = min(slices.Max(matched)*blockSize, promptTokens)
	if bestMatched == 0 {
		d.Outcome, d.Reason = OutcomeLoad, ReasonNoHit
	}
	return d
}
