package routing

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Where a routed request's prompt tokens went
// (kvroute_prompt_tokens_total{pool,outcome}). Two breakdowns share the
// counter:
//
//   - decided when the request is routed: every prompt token of a request
//     routed with block keys lands in exactly one of cached_predicted, new
//     and given_up_for_load, so these three add up to the prompt tokens
//     routed;
//   - learned from the engine afterwards: stale is the part of
//     cached_predicted the engine computed again (index.Store's restored:
//     blocks it stored while the index held them, or that it removed and
//     computed again for a request in flight that was predicted to hit
//     them),
//     cached_unpredicted the
//     part of new and given_up_for_load it served from its cache. They are
//     not added to the sum: they re-label tokens already counted.
const (
	// TokensCachedPredicted: the chosen replica held them (its contiguous
	// cached prefix), as the decision predicted.
	TokensCachedPredicted = "cached_predicted"
	// TokensNew: no replica of the pool held them, as the decision's
	// lookup saw them (the engines' events received so far, and speculative
	// entries of requests routed within index.speculative_ttl).
	TokensNew = "new"
	// TokensGivenUpForLoad: another replica of the pool held them, as the
	// decision's lookup saw them, but the cost (its load) sent the request
	// elsewhere.
	TokensGivenUpForLoad = "given_up_for_load"
	// TokensStale: of cached_predicted, the engine stored them again while
	// the index said the replica held them (it had evicted them unseen), or
	// removed them and computed them again for a request in flight that was
	// predicted to hit them.
	TokensStale = "stale"
	// TokensCachedUnpredicted: of new and given_up_for_load, the engine
	// counted them as prefix-cache hits.
	TokensCachedUnpredicted = "cached_unpredicted"
)

// TokenOutcomes are every outcome label value, in a fixed order.
var TokenOutcomes = [...]string{TokensCachedPredicted, TokensNew, TokensGivenUpForLoad, TokensStale, TokensCachedUnpredicted}

// Outcome indexes into TokenOutcomes.
const (
	outCachedPredicted = iota
	outNew
	outGivenUp
	outStale
	outCachedUnpredicted
)

// Funnel counts where the prompt tokens of routed requests went, per pool
// and per replica rank (the metric is per pool; the per-rank totals are
// for /debug/replicas and the cached_tokens parity check).
type Funnel struct {
	pools map[string]*poolFunnel // read-only after NewFunnel
}

type poolFunnel struct {
	metric [len(TokenOutcomes)]prometheus.Counter
	total  [len(TokenOutcomes)]atomic.Int64
	ranks  sync.Map // rank name → *rankFunnel
}

// rankFunnel is one replica rank's share of its pool's funnel.
type rankFunnel struct {
	total [len(TokenOutcomes)]atomic.Int64
	// requests counts the requests counted here (RankRequests).
	requests atomic.Int64
	// engineCached is the cached prompt tokens predicted for the requests
	// routed here as the engine counts hits: a fully cached prompt still
	// computes its last block (vLLM's get_computed_blocks caps a hit at
	// num_tokens - 1).
	engineCached atomic.Int64
	// window packs the current check window's generation (top windowGenBits)
	// with the engineCached tokens of the requests that began in that window
	// and have ended.
	window atomic.Uint64
}

const (
	windowGenBits  = 16
	windowTokenMax = 1<<(64-windowGenBits) - 1
)

// NewFunnel registers kvroute_prompt_tokens_total for pools.
func NewFunnel(reg prometheus.Registerer, pools []string) *Funnel {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvroute_prompt_tokens_total",
		Help: "Prompt tokens of routed requests by where they went: cached_predicted, new, given_up_for_load (these add up to the tokens routed); stale (of cached_predicted) and cached_unpredicted (of new and given_up_for_load) as the engines report."},
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

func totalsOf(t *[len(TokenOutcomes)]atomic.Int64) map[string]int64 {
	out := make(map[string]int64, len(TokenOutcomes))
	for i, o := range TokenOutcomes {
		out[o] = t[i].Load()
	}
	return out
}

// Totals is a pool's prompt tokens by outcome since start (nil map for an
// unknown pool).
func (f *Funnel) Totals(pool string) map[string]int64 {
	pf := f.pools[pool]
	if pf == nil {
		return nil
	}
	return totalsOf(&pf.total)
}

// RankTotals is a replica rank's prompt tokens by outcome since start (nil
// when nothing was routed to it).
func (f *Funnel) RankTotals(pool, rank string) map[string]int64 {
	rf := f.rankOf(pool, rank, false)
	if rf == nil {
		return nil
	}
	return totalsOf(&rf.total)
}

// RankRequests is how many routed requests with block keys went to a
// replica rank since start (0 when none did).
func (f *Funnel) RankRequests(pool, rank string) int64 {
	rf := f.rankOf(pool, rank, false)
	if rf == nil {
		return 0
	}
	return rf.requests.Load()
}

// EngineCachedPredicted is the cached prompt tokens predicted for every
// request routed to rank, as the engine counts its hits (one block less
// for a fully cached prompt).
func (f *Funnel) EngineCachedPredicted(pool, rank string) int64 {
	if rf := f.rankOf(pool, rank, false); rf != nil {
		return rf.engineCached.Load()
	}
	return 0
}

// NextWindow ends rank's current check window and starts the next: it
// returns the engine-comparable cached tokens predicted for the requests
// that began in the window just ended and ended before now. A request
// counts only in the window it began in, so every token returned was
// prefilled between the window's start and now.
func (f *Funnel) NextWindow(pool, rank string) int64 {
	rf := f.rankOf(pool, rank, true)
	if rf == nil {
		return 0
	}
	for {
		cur := rf.window.Load()
		gen := cur >> (64 - windowGenBits)
		if rf.window.CompareAndSwap(cur, ((gen+1)&(1<<windowGenBits-1))<<(64-windowGenBits)) {
			return int64(cur & windowTokenMax)
		}
	}
}

// AddEngineOutcome counts n tokens of rank as stale or cached_unpredicted
// (what the engines report; the server's parity loop calls it). Stale is
// capped at the rank's cached_predicted and cached_unpredicted at its new
// plus given_up_for_load, so each stays a part of what it re-labels; it
// returns what was counted.
func (f *Funnel) AddEngineOutcome(pool, rank, outcome string, n int64) int64 {
	pf := f.pools[pool]
	rf := f.rankOf(pool, rank, true)
	if rf == nil || n <= 0 {
		return 0
	}
	var i int
	var room int64
	switch outcome {
	case TokensStale:
		i, room = outStale, rf.total[outCachedPredicted].Load()-rf.total[outStale].Load()
	case TokensCachedUnpredicted:
		i, room = outCachedUnpredicted, rf.total[outNew].Load()+rf.total[outGivenUp].Load()-rf.total[outCachedUnpredicted].Load()
	default:
		return 0
	}
	n = min(n, max(room, 0))
	if n > 0 {
		pf.add(i, int(n))
		rf.total[i].Add(n)
	}
	return n
}

func (f *Funnel) rankOf(pool, rank string, create bool) *rankFunnel {
	pf := f.pools[pool]
	if pf == nil {
		return nil
	}
	if v, ok := pf.ranks.Load(rank); ok {
		return v.(*rankFunnel)
	}
	if !create {
		return nil
	}
	v, _ := pf.ranks.LoadOrStore(rank, &rankFunnel{})
	return v.(*rankFunnel)
}

// ForgetRank drops a rank that left the pool.
func (f *Funnel) ForgetRank(pool, rank string) {
	if pf := f.pools[pool]; pf != nil {
		pf.ranks.Delete(rank)
	}
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
// beyond it (the decision's own lookup, Decision.heldTokens), and the rest;
// and opens d's place in its rank's check window.
func (r *Router) countFunnel(d *Decision) {
	f := r.funnel.Load()
	if f == nil || d.Endpoint == nil || d.PromptTokens <= 0 || len(d.Keys) == 0 {
		return
	}
	pf := f.pools[d.Pool]
	if pf == nil {
		return
	}
	rf := f.rankOf(d.Pool, d.Endpoint.Name, true)
	rf.requests.Add(1)
	chosen := min(d.MatchedTokens, d.PromptTokens)
	best := max(chosen, d.heldTokens)
	for i, n := range [...]int{outCachedPredicted: chosen, outNew: d.PromptTokens - best, outGivenUp: best - chosen} {
		if n > 0 {
			pf.add(i, n)
			rf.total[i].Add(int64(n))
		}
	}
	engine := chosen
	if chosen == d.PromptTokens && d.matchedBlocks == len(d.Keys) {
		// Every prompt token sits in a matched full block: the engine
		// computes the last block again (d.PromptTokens/len(d.Keys) is the
		// block size here).
		engine -= d.PromptTokens / len(d.Keys)
	}
	if engine > 0 {
		rf.engineCached.Add(int64(engine))
	}
	d.funnelRank, d.funnelCached, d.funnelGen = rf, engine, rf.window.Load()>>(64-windowGenBits)
	// The request and the blocks predicted cached, so that the engine
	// removing one and computing it again for this request counts stale.
	d.promise = r.ix.Promise(d.Endpoint.Replica, d.Keys, d.matchedBlocks)
}

// endFunnel ends a request's promise and adds its predicted cached tokens
// to its rank's check window when the window it began in is still open.
func (r *Router) endFunnel(d *Decision) {
	if d.promise != 0 {
		r.ix.Unpromise(d.Endpoint.Replica, d.promise)
		d.promise = 0
	}
	rf := d.funnelRank
	if rf == nil || d.funnelCached <= 0 {
		return
	}
	d.funnelRank = nil
	for {
		cur := rf.window.Load()
		if cur>>(64-windowGenBits) != d.funnelGen || cur&windowTokenMax+uint64(d.funnelCached) > windowTokenMax {
			return
		}
		if rf.window.CompareAndSwap(cur, cur+uint64(d.funnelCached)) {
			return
		}
	}
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
