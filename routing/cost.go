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
	return r.saturated(p, subset, nil, 0, 0)
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
	return r.saturated(pr.pool, pr.subset, keys, pr.promptTokens, pr.blockSize)
}

// saturated is Saturated with a request of promptTokens whose block keys
// (nil: none known) are looked up for each replica's uncached part.
func (r *Router) saturated(p *pool, subset map[string]bool, keys []index.BlockKey, promptTokens, blockSize int) bool {
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
		busy := (f.SaturationTTFT > 0 && r.cost(c, uncached) > f.SaturationTTFT.Seconds()) ||
			(f.SaturationWaiting > 0 && c.state.Load.Waiting > f.SaturationWaiting)
		if !busy {
			return false
		}
	}
	return true
}
