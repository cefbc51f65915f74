package fleetsim

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvroute/kvroute/config"
	"github.com/kvroute/kvroute/internal/vllmemu"
	"github.com/kvroute/kvroute/routing"
	"github.com/kvroute/kvroute/server"
)

// Ground-truth keys of Result.FunnelTruth: what the simulator, which sees
// every engine's cache, says of the outcomes kvroute can only infer.
const (
	truthGivenUp = routing.TokensGivenUpForLoad
	truthStale   = routing.TokensStale
)

// simFunnel is a kvroute instance's prompt-token funnel as the server keeps
// it: routing's counts per decision, stale from the blocks its engines
// stored again (ingest), cached_unpredicted from their cached prompt tokens
// counters at each scrape; and, with Options.GroundTruth, the truth. Its
// parity loop runs the server's cached_tokens check on every engine at
// each scrape, with the config's parity settings.
type simFunnel struct {
	parityCfg config.Parity
	checks    []server.CachedTokensCheck // per engine
	parity    ParityResult
	f         *routing.Funnel
	engines   []*vllmemu.Virtual
	stored    []int64 // per engine: BlocksStoredAgain already counted
	stale     []int64 // per engine: stale tokens counted
	counted   []int64 // per engine: cached_unpredicted counted
	truth     map[string]int64
	predicted map[int]int // request id → engine-comparable predicted cached tokens (ground truth)
}

func newSimFunnel(k *kvPicker, parity config.Parity) *simFunnel {
	sf := &simFunnel{f: routing.NewFunnel(prometheus.NewRegistry(), []string{k.pool}),
		stored: make([]int64, len(k.eps)), stale: make([]int64, len(k.eps)), counted: make([]int64, len(k.eps)),
		parityCfg: parity, checks: make([]server.CachedTokensCheck, len(k.eps))}
	k.router.SetFunnel(sf.f)
	return sf
}

// groundTruth makes the instance compute the truth over engines.
func (k *kvPicker) groundTruth(engines []*vllmemu.Virtual) {
	k.funnel.engines = engines
	k.funnel.truth = map[string]int64{truthGivenUp: 0, truthStale: 0}
	k.funnel.predicted = map[int]int{}
}

// decided records the truth of a routed decision: the cached prefix the
// best engine really held beyond the chosen one's (or beyond the chosen
// one's predicted hit, when that is longer), and the hit the decision
// predicted (as vLLM counts hits), for admitted.
func (k *kvPicker) decided(id int, d *routing.Decision, chosen int, tokens []int) {
	sf := k.funnel
	if sf.engines == nil || len(d.Keys) == 0 {
		return
	}
	best, mine := 0, 0
	for e, v := range sf.engines {
		n := v.CachedPrefixBlocks(tokens)
		best = max(best, n)
		if e == chosen {
			mine = n
		}
	}
	pred := min(d.MatchedTokens, len(tokens))
	if capped := (len(tokens) - 1) / k.blockSize * k.blockSize; pred > capped {
		pred = capped
	}
	// The chosen engine's share is what it held or what the decision
	// predicted it would hit, whichever is more: a predicted block it did
	// not hold yet (a request in flight there was computing it) is not
	// given up; if the engine misses it at admission, it is stale.
	sf.truth[truthGivenUp] += int64(max(best-max(mine, pred/k.blockSize), 0) * k.blockSize)
	sf.predicted[id] = pred
}

// admitted records the truth of a request's hit: predicted cached tokens
// the engine did not serve from its cache were stale.
func (k *kvPicker) admitted(id, hit int) {
	sf := k.funnel
	if sf.predicted == nil {
		return
	}
	if pred, ok := sf.predicted[id]; ok {
		sf.truth[truthStale] += int64(max(pred-hit, 0))
		delete(sf.predicted, id)
	}
}

// storedAgain turns engine e's blocks stored again into stale tokens.
func (k *kvPicker) storedAgain(e int) {
	sf := k.funnel
	n := k.appliers[e].BlocksStoredAgain()
	if d := n - sf.stored[e]; d > 0 {
		sf.stale[e] += sf.f.AddEngineOutcome(k.pool, k.eps[e].Name, routing.TokensStale, d*int64(k.blockSize))
	}
	sf.stored[e] = n
}

// scraped counts cached_unpredicted from the engines' cached prompt tokens
// counters (vllm:prompt_tokens_cached_total) against the hits predicted for
// the requests routed there so far, as the server's parity loop does; the
// simulation starts idle, so the base is zero.
func (k *kvPicker) scraped(stats []vllmemu.Stats) {
	sf := k.funnel
	for e, s := range stats {
		excess := s.PrefilledCachedTokens - (sf.f.EngineCachedPredicted(k.pool, k.eps[e].Name) - sf.stale[e])
		if excess > sf.counted[e] {
			sf.counted[e] += sf.f.AddEngineOutcome(k.pool, k.eps[e].Name, routing.TokensCachedUnpredicted, excess-sf.counted[e])
		}
		if sf.parityCfg.CachedTokensWindow > 0 {
			sf.checkParity(k, e, s)
		}
	}
}

// ParityResult is what a kvroute policy's parity loop found: how many
// windows the cached_tokens check judged over the run (every engine's) and
// how many times an engine's check went to mismatch. The simulated engines
// run kvroute's config, so every flag is a false one.
type ParityResult struct {
	WindowsJudged int `json:"windows_judged"`
	Flags         int `json:"mismatch_flags"`
}

// simCachedMetric names the simulated engines' cached prompt tokens counter
// in the check's evidence.
const simCachedMetric = "simulated vllm:prompt_tokens_cached_total"

// checkParity feeds engine e's cached prompt tokens counter, read at this
// scrape, to its cached_tokens check.
func (sf *simFunnel) checkParity(k *kvPicker, e int, s vllmemu.Stats) {
	c := &sf.checks[e]
	was := c.Mismatch()
	if c.Observe(sf.parityCfg, sf.f, k.pool, k.eps[e].Name, k.now, float64(s.PrefilledCachedTokens), k.now, simCachedMetric) {
		sf.parity.WindowsJudged++
	}
	if c.Mismatch() && !was {
		sf.parity.Flags++
	}
}

// funnelTotals is the instance's funnel and ground truth (nil without it).
func (k *kvPicker) funnelTotals() (funnel, truth map[string]int64) {
	return k.funnel.f.Totals(k.pool), k.funnel.truth
}

// parityResult is what the instance's parity loop found.
func (k *kvPicker) parityResult() ParityResult { return k.funnel.parity }

// funnelReporter is a picker with a prompt-token funnel and a parity loop
// (kvroute's).
type funnelReporter interface {
	funnelTotals() (funnel, truth map[string]int64)
	parityResult() ParityResult
}

// truthWatcher is a picker that computes the funnel's ground truth.
type truthWatcher interface {
	groundTruth(engines []*vllmemu.Virtual)
	admitted(id, hit int)
}

func (m *multiPicker) funnelTotals() (funnel, truth map[string]int64) {
	for _, p := range m.ps {
		r, ok := p.(funnelReporter)
		if !ok {
			return nil, nil
		}
		f, t := r.funnelTotals()
		funnel, truth = addTotals(funnel, f), addTotals(truth, t)
	}
	return funnel, truth
}

func (m *multiPicker) parityResult() ParityResult {
	var sum ParityResult
	for _, p := range m.ps {
		if r, ok := p.(funnelReporter); ok {
			pr := r.parityResult()
			sum.WindowsJudged += pr.WindowsJudged
			sum.Flags += pr.Flags
		}
	}
	return sum
}

func (m *multiPicker) groundTruth(engines []*vllmemu.Virtual) {
	for _, p := range m.ps {
		if w, ok := p.(truthWatcher); ok {
			w.groundTruth(engines)
		}
	}
}

func (m *multiPicker) admitted(id, hit int) {
	if w, ok := m.ps[id%len(m.ps)].(truthWatcher); ok {
		w.admitted(id, hit)
	}
}

func addTotals(sum, t map[string]int64) map[string]int64 {
	if t == nil {
		return sum
	}
	if sum == nil {
		sum = map[string]int64{}
	}
	for o, n := range t {
		sum[o] += n
	}
	return sum
}
