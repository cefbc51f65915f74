package routing

import (
	"math"

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
