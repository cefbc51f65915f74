package routing

import (
	"fmt"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Where a routed request's prompt tokens went
// (kvroute_prompt_tokens_total{pool,outcome}), as far as kvroute can know
// when it routes: every prompt token of a request routed with block keys
// lands in exactly one of the first three outcomes; stale and
// cached_unpredicted take tokens back from cached_predicted and new once the
// engine's events show what happened.
const (
	// TokensCachedPredicted: the chosen replica held them (its contiguous
	// cached prefix), as the decision predicted.
	TokensCachedPredicted = "cached_predicted"
	// TokensNew: no replica of the pool held them.
	TokensNew = "new"
	// TokensGivenUpForLoad: another replica of the pool held them but the
	// cost (its load) sent the request elsewhere.
	TokensGivenUpForLoad = "given_up_for_load"
	// TokensStale: predicted cached, but the engine stored them again (the
	// index was stale). Not counted yet: always 0.
	TokensStale = "stale"
	// TokensCachedUnpredicted: cached on the engine though kvroute did not
	// predict it. Not counted yet: always 0.
	TokensCachedUnpredicted = "cached_unpredicted"
)

// TokenOutcomes are every outcome label value, in a fixed order.
var TokenOutcomes = [...]string{TokensCachedPredicted, TokensNew, TokensGivenUpForLoad, TokensStale, TokensCachedUnpredicted}

// Funnel counts where the prompt tokens of routed requests went, per pool.
// It is read-only after NewFunnel except for its counters.
type Funnel struct {
	pools map[string]*poolFunnel
}

type poolFunnel struct {
	metric [len(TokenOutcomes)]prometheus.Counter
	total  [len(TokenOutcomes)]atomic.Int64
}

// NewFunnel registers kvroute_prompt_tokens_total for pools.
func NewFunnel(reg prometheus.Registerer, pools []string) *Funnel {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvroute_prompt_tokens_total",
		Help: "Prompt tokens of routed requests by where they went: cached_predicted, new, given_up_for_load, stale, cached_unpredicted."},
		[]string{"pool", "outcome"})
	reg.MustRegister(vec)
	f := &Funnel{pools: map[string]*poolFunnel{}}
	for _, p := range pools {
		pf := &poolFunnel{}
		for i, o := range TokenOutcomes {
			pf.metric[i] = vec.WithLabelValues(p, o)
		}
		f.pools[p] = pf
	}
	return f
}

// Totals is a pool's prompt tokens by outcome since start (nil map for an
// unknown pool).
func (f *Funnel) Totals(pool string) map[string]int64 {
	pf := f.pools[pool]
	if pf == nil {
		return nil
	}
	out := make(map[string]int64, len(TokenOutcomes))
	for i, o := range TokenOutcomes {
		out[o] = pf.total[i].Load()
	}
	return out
}

func (pf *poolFunnel) add(i, n int) {
	if n > 0 {
		pf.metric[i].Add(float64(n))
		pf.total[i].Add(int64(n))
	}
}

// SetFunnel makes the router count every routed request's prompt tokens
// into f from now on (nil: no counting).
func (r *Router) SetFunnel(f *Funnel) { r.funnel.Store(f) }

// countFunnel splits d's prompt tokens over the outcomes known at routing
// time: what the chosen replica held, what the best-holding candidate held
// beyond it (the decision's own lookup, Decision.heldTokens), and the rest.
func (r *Router) countFunnel(d *Decision) {
	f := r.funnel.Load()
	if f == nil || d.Endpoint == nil || d.PromptTokens <= 0 || len(d.Keys) == 0 {
		return
	}
	pf := f.pools[d.Pool]
	if pf == nil {
		return
	}
	chosen := min(d.MatchedTokens, d.PromptTokens)
	best := max(chosen, d.heldTokens)
	pf.add(0, chosen)
	pf.add(2, best-chosen)
	pf.add(1, d.PromptTokens-best)
}

// SetLoadOnly makes pool route by load alone (on) or by prefix and load
// again (off), for every decision that starts afterwards: the parity checks
// found a replica whose engine disagrees with the pool's config, and
// parity.on_mismatch says to stop trusting the prefix match meanwhile.
func (r *Router) SetLoadOnly(pool string, on bool) error {
	p := r.poolNamed(pool)
	if p == nil {
		return fmt.Errorf("router: unknown pool %s", pool)
	}
	p.loadOnly.Store(on)
	return nil
}
