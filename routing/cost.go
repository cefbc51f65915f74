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
//	+ decode_interference × decoding sequences
//	+ kv_full_penalty when KV usage is above kv_usage_ceiling
//
// Queued prefill is this router's own outstanding uncached tokens on c plus,
// for the requests the engine reports that this router did not send, the
// waiting ones × the engine's learned mean uncached prompt (prefill rate
// default while nothing is learned), and the running ones × foreign_running_share
// of it (queued). Decoding sequences are this router's in
// flight there plus the engine's foreign running ones.
func (r *Router) cost(c *candidate, uncached float64) float64 {
	st := &c.state
	_, fr := foreign(st)
	cost := (r.queued(st, c.rate)+max(uncached, 0))/c.rate + r.o().DecodeInterference*(float64(st.InFlight)+fr)
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

// queued is the prefill tokens ahead of a new request on a replica at
// prefill rate rate (see cost): this router's outstanding uncached tokens
// plus the engine's foreign requests × its learned mean uncached prompt —
// each waiting one whole, each running one foreign_running_share of it,
// drained at rate since the scrape that saw it.
func (r *Router) queued(st *index.ReplicaState, rate float64) float64 {
	return st.PendingTokens + r.foreignQueued(st, rate)
}

// foreignQueued is the part of queued that other routers and clients sent.
// The running part is what the scrape suggests is still being prefilled:
// it drains like this router's own queue, so a stale scrape (1 s old) no
// longer marks a replica busy whose foreign prefills ended long ago.
func (r *Router) foreignQueued(st *index.ReplicaState, rate float64) float64 {
	fw, fr := foreign(st)
	mean := st.MeanPromptTokens
	if !(mean > 0) {
		mean = r.o().ForeignRequestTokens
	}
	running := fr * mean * r.o().ForeignRunningShare
	if running > 0 && rate > 0 && st.At.After(st.LoadAt) {
		running = max(0, running-rate*st.At.Sub(st.LoadAt).Seconds())
	}
	return fw*mean + running
}

// foreign splits the scraped queue into the requests this router did not
// route (other routers, direct clients): running and waiting minus what was
// its own in flight when the scrape was recorded; waiting ones first.
func foreign(s *index.ReplicaState) (waiting, running float64) {
	f := math.Max(0, s.Load.Running+s.Load.Waiting-float64(s.InFlightAtLoad))
	waiting = math.Min(f, s.Load.Waiting)
	return waiting, f - waiting
}
