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
	f := &r.o().Flow
	bound := f.SaturationTTFT
	if low := f.LowPrioritySaturationTTFT; low > 0 && (bound <= 0 || low < bound) &&
		priority < max(f.topPriority(), int(p.flowTop.Load())) {
		bound = low
	}
	return r.saturated(p, subset, nil, 0, 0, bound)
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
	f := &r.o().Flow
	var buf [64]candidate
	cands := r.eligible(p, subset, buf[:0], nil)
	if len(cands) == 0 {
		return false
	}
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
