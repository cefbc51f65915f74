package routing

import (
	"math"
	"time"

	"github.com/kvroute/kvroute/index"
)

// candidate is an eligible endpoint with its live state.
type candidate struct {
	ep    *Endpoint
	state index.ReplicaState
	rate  float64 // prefill tokens/s: learned, else the configured default
	slot  int     // its entry in the Recorder (Explain), when recording
}

// cost is the estimated seconds to this request's first token on c:
//
//	(queued prefill tokens + the request's uncached tokens) / prefill rate
//	+ kv_full_penalty when KV usage is above kv_usage_ceiling
//
// Queued prefill is this router's own outstanding uncached tokens on c plus,
// for the waiting requests the engine reports that this router did not
// send, each the engine's learned mean uncached prompt
// (foreign_request_tokens while nothing is learned).
func (r *Router) cost(c *candidate, uncached float64) float64 {
	st := &c.state
	cost := (r.queued(st) + max(uncached, 0)) / c.rate
	if r.o().KVUsageCeiling > 0 && st.Load.KVUsage > r.o().KVUsageCeiling {
		cost += r.o().KVFullPenalty
	}
	if math.IsNaN(cost) {
		return math.Inf(1)
	}
	return cost
}

// price is what a decision minimises on c: cost (this request's seconds to
// first token) plus fleetSeconds, the prefill seconds its uncached tokens
// take from c. Those seconds delay every request that queues on c after it,
// so a held prefix saves the fleet its prefill as well as this request its
// wait; priced at the request's wait alone, a holder with a short queue
// loses the request to an idle replica that must prefill it all, and under
// load those extra prefills are the queue the next requests wait in.
func (r *Router) price(c *candidate, uncached float64) float64 {
	return r.cost(c, uncached) + fleetSeconds(c, uncached)
}

// fleetSeconds is the prefill time uncached tokens take on c (see price).
func fleetSeconds(c *candidate, uncached float64) float64 {
	return max(uncached, 0) / c.rate
}

// queued is the prefill tokens ahead of a new request on a replica (see
// cost): this router's outstanding uncached tokens plus the engine's
// foreign waiting requests × its learned mean uncached prompt.
func (r *Router) queued(st *index.ReplicaState) float64 {
	mean := st.MeanPromptTokens
	if !(mean > 0) {
		mean = r.o().ForeignRequestTokens
	}
	return st.PendingTokens + foreignWaiting(st)*mean
}

// foreignWaiting is the scraped waiting requests this router did not route
// (other routers, direct clients): running and waiting minus what was its
// own in flight when the scrape was recorded, counted waiting first.
func foreignWaiting(s *index.ReplicaState) float64 {
	f := math.Max(0, s.Load.Running+s.Load.Waiting-float64(s.InFlightAtLoad))
	return math.Min(f, s.Load.Waiting)
}

// Saturated reports whether pool is saturated for any request now: every
// eligible replica inside subset (nil: all) is predicted to start a new
// request's first token more than Flow.SaturationTTFT from now (cost with
// no prompt of its own: the prefill queued ahead) or reports more than
// Flow.SaturationWaiting waiting requests. It reads the index only (no
// tokenizing, no lookup). A pool with no eligible replica is not saturated
// (the decision rejects its requests at once) nor is an unknown pool.
func (r *Router) Saturated(pool string, subset map[string]bool) bool {
	p := r.poolNamed(pool)
	if p == nil {
		return false
	}
	return r.saturated(p, subset, nil, 0, 0, r.o().Flow.SaturationTTFT)
}

// BandSaturated is Saturated for a request of priority: below the pool's
// top priority — the highest of the objectives' priorities and of those
// seen in the pool (NoteFlowPriority), at least 0 — a replica is busy past
// Flow.LowPrioritySaturationTTFT instead (when set and smaller), so lower
// bands leave capacity for higher ones. Priority 0 is the top while no
// higher priority is configured or seen.
func (r *Router) BandSaturated(pool string, subset map[string]bool, priority int) bool {
	p := r.poolNamed(pool)
	if p == nil {
		return false
	}
	return r.saturatedBand(p, subset, priority)
}

func (r *Router) saturatedBand(p *pool, subset map[string]bool, priority int) bool {
	return r.saturatedLeaving(p, subset, nil, 0, 0, r.bandBound(p, priority), r.reserveFor(p, priority))
}

// bandBound is the predicted wait past which a replica is busy for a
// request of priority in p: Flow.SaturationTTFT, or
// Flow.LowPrioritySaturationTTFT (when set and smaller) below the pool's
// top priority.
func (r *Router) bandBound(p *pool, priority int) time.Duration {
	f := &r.o().Flow
	bound := f.SaturationTTFT
	if low := f.LowPrioritySaturationTTFT; low > 0 && (bound <= 0 || low < bound) && priority < r.topPriority(p) {
		bound = low
	}
	return bound
}

// topPriority is pool p's top priority: the highest of the objectives'
// priorities and of those seen in the pool (NoteFlowPriority), at least 0.
func (r *Router) topPriority(p *pool) int {
	return max(r.o().Flow.topPriority(), int(p.flowTop.Load()))
}

// reserveFor is how many of p's eligible replicas a request of priority
// leaves free of lower-band requests for higher priorities:
// Flow.ReservedReplicas below the pool's top priority, else none.
func (r *Router) reserveFor(p *pool, priority int) int {
	k := r.o().Flow.ReservedReplicas
	if k <= 0 || priority >= r.topPriority(p) {
		return 0
	}
	return k
}

// unreserved is cands less the replicas kept for higher priorities: while
// no more than reserve (at most all but one) of them are free of
// lower-band requests (none routed there is still in flight), a
// lower-band request goes only to the others, those already holding one.
func (r *Router) unreserved(p *pool, cands []candidate, reserve int) []candidate {
	reserve = min(reserve, len(cands)-1)
	if reserve <= 0 {
		return cands
	}
	free := 0
	for i := range cands {
		if p.lowBand[cands[i].ep.Replica.ID].Load() == 0 {
			free++
		}
	}
	if free > reserve {
		return cands
	}
	out := cands[:0]
	for _, c := range cands {
		if p.lowBand[c.ep.Replica.ID].Load() > 0 {
			out = append(out, c)
		}
	}
	return out
}

// unreservedSubset is subset narrowed to p's eligible replicas less the
// reserve kept for higher priorities (unreserved).
func (r *Router) unreservedSubset(p *pool, subset map[string]bool, reserve int) map[string]bool {
	var buf [index.MaxReplicas]candidate
	cands := r.unreserved(p, r.eligible(p, subset, buf[:0], nil), reserve)
	out := make(map[string]bool, len(cands))
	for i := range cands {
		out[cands[i].ep.Address] = true
	}
	return out
}

// NoteFlowPriority records that a request of priority reached flow
// control in pool, raising the pool's top priority (BandSaturated) for
// good when it is higher.
func (r *Router) NoteFlowPriority(pool string, priority int) {
	p := r.poolNamed(pool)
	if p == nil {
		return
	}
	for {
		top := p.flowTop.Load()
		if int64(priority) <= top || p.flowTop.CompareAndSwap(top, int64(priority)) {
			return
		}
	}
}

// SaturatedFor is Saturated for the prepared request: each replica's
// predicted time to first token includes the prefill of the request's
// prompt tokens that replica does not hold (one index lookup).
func (r *Router) SaturatedFor(pr *Prepared) bool {
	if pr.pool == nil {
		return false
	}
	var keys []index.BlockKey
	if pr.how == prepKeys {
		keys = pr.keys
	}
	return r.saturated(pr.pool, pr.subset, keys, pr.promptTokens, pr.blockSize, r.o().Flow.SaturationTTFT)
}

// saturated is Saturated with a request of promptTokens whose block keys
// (nil: none known) are looked up for each replica's uncached part, and a
// replica busy past ttft (0: that test is off).
func (r *Router) saturated(p *pool, subset map[string]bool, keys []index.BlockKey, promptTokens, blockSize int, ttft time.Duration) bool {
	return r.saturatedLeaving(p, subset, keys, promptTokens, blockSize, ttft, 0)
}

// saturatedLeaving is saturated over the eligible replicas less the
// reserve kept for higher priorities (unreserved).
func (r *Router) saturatedLeaving(p *pool, subset map[string]bool, keys []index.BlockKey, promptTokens, blockSize int, ttft time.Duration, reserve int) bool {
	f := &r.o().Flow
	var buf [index.MaxReplicas]candidate
	cands := r.eligible(p, subset, buf[:0], nil)
	if len(cands) == 0 {
		return false
	}
	cands = r.unreserved(p, cands, reserve)
	var matches []index.Match
	if len(keys) > 0 {
		mp := r.matches.Get().(*[]index.Match)
		defer r.matches.Put(mp)
		matches = r.ix.LookupRoute(p.ID, keys, (*mp)[:0])
		*mp = matches[:0]
	}
	for i := range cands {
		c := &cands[i]
		uncached := float64(promptTokens)
		for _, m := range matches {
			if m.Replica == c.ep.Replica.ID {
				uncached -= m.Weighted * float64(blockSize)
				break
			}
		}
		busy := (ttft > 0 && r.cost(c, uncached) > ttft.Seconds()) ||
			(f.SaturationWaiting > 0 && c.state.Load.Waiting > f.SaturationWaiting)
		if !busy {
			return false
		}
	}
	return true
}
