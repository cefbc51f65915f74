package routebench

import (
	"math"
	"sync"
	"time"
)

// DefaultStickySaturation is llm-d-sticky's saturation point as queued
// prefill time: an engine whose token load would take this long to prefill
// is saturated. llm-d calibrates the point per model and GPU; here the
// engines' prefill speed converts it to tokens (StickyThreshold), and its
// value is the best of a sweep on the routing suite (docs/BENCHMARKS.md,
// Routing suite).
const DefaultStickySaturation = 800 * time.Millisecond

// StickyThreshold is the token load that takes saturation to prefill at
// perToken per uncached prompt token.
func StickyThreshold(saturation, perToken time.Duration) int {
	if perToken <= 0 {
		return math.MaxInt
	}
	return int(saturation / perToken)
}

// The anchors' routing decisions, shared by the simulator (internal/
// fleetsim, fed by kvroute's own index) and the real-socket benchmark (fed
// by the emulated engines' caches). Each is a pure function of what the
// router knows at the moment it picks.

// Sticky outcomes.
const (
	StickyHeld      = "sticky"    // an affine engine below saturation
	StickySaturated = "saturated" // every affine engine at or past the threshold
	StickyNoPrefix  = "no-prefix" // no engine holds any of the prompt
)

// StickyChoice is llm-d's "sticky until saturated" default (llm-d blog,
// "Sticky Until Saturated: Token-Aware Routing in llm-d"): a prefix-cache
// affinity filter keeps the engines holding the longest cached prefix
// (cached, in blocks), a token-load scorer picks the least loaded of them
// (load, in tokens), and when every one of them carries threshold tokens
// or more the affinity is released to the least loaded engine of all. up
// (nil: all) excludes engines; ties go to the first scanned from start.
// It returns the engine (-1 when none is up) and the outcome.
func StickyChoice(cached, load []int, up func(int) bool, threshold, start int) (int, string) {
	best := 0
	for i, c := range cached {
		if up == nil || up(i) {
			best = max(best, c)
		}
	}
	byLoad := func(i int) float64 { return float64(load[i]) }
	if best > 0 {
		affine := func(i int) bool { return (up == nil || up(i)) && cached[i] == best && load[i] < threshold }
		if e := argminOf(len(load), start, affine, byLoad); e >= 0 {
			return e, StickyHeld
		}
		return argminOf(len(load), start, up, byLoad), StickySaturated
	}
	return argminOf(len(load), start, up, byLoad), StickyNoPrefix
}

// DynamoCosts fills costs with Dynamo's KV-router cost per worker (Dynamo
// router docs, "Routing Concepts"): weight × prefill blocks + decode
// blocks, where prefill blocks are the prompt's blocks the worker does not
// hold plus the prompt tokens still prefilling there (in blocks), and decode
// blocks are the blocks active there plus this prompt's new ones.
func DynamoCosts(costs []float64, promptTokens, blockSize int, cached, prefillTokens, activeBlocks []int, weight float64) {
	bs := float64(blockSize)
	promptBlocks := math.Ceil(float64(promptTokens) / bs)
	for i := range costs {
		newBlocks := max(promptBlocks-float64(cached[i]), 0)
		costs[i] = weight*(newBlocks+float64(prefillTokens[i])/bs) + float64(activeBlocks[i]) + newBlocks
	}
}

// DynamoPick chooses a worker from costs: the least (ties to the first
// scanned from start) at temperature 0; above it, worker i with
// probability ∝ exp(−c_i/temperature), c_i its cost scaled to 0..1 over
// the workers, drawn with u uniform in [0, 1). probs is scratch of
// len(costs).
func DynamoPick(costs, probs []float64, temperature, u float64, start int) int {
	if temperature <= 0 {
		return argminOf(len(costs), start, nil, func(i int) float64 { return costs[i] })
	}
	lo, hi := costs[0], costs[0]
	for _, c := range costs {
		lo, hi = min(lo, c), max(hi, c)
	}
	sum := 0.0
	for i, c := range costs {
		scaled := 0.0
		if hi > lo {
			scaled = (c - lo) / (hi - lo)
		}
		probs[i] = math.Exp(-scaled / temperature)
		sum += probs[i]
	}
	r := u * sum
	for i, w := range probs {
		if r < w {
			return i
		}
		r -= w
	}
	return len(probs) - 1
}

// argminOf is the engine of least cost among those ok allows (nil: all),
// scanning from start; -1 when none is allowed.
func argminOf(n, start int, ok func(int) bool, cost func(int) float64) int {
	best, bestCost := -1, 0.0
	for k := range n {
		i := (start + k) % n
		if ok != nil && !ok(i) {
			continue
		}
		if c := cost(i); best < 0 || c < bestCost {
			best, bestCost = i, c
		}
	}
	return best
}

// Tracker is a Policy that keeps books of the requests it routed: Begin
// picks like Pick and returns the function the gateway calls when the
// request's response has ended.
type Tracker interface {
	Policy
	Begin(r PickRequest, v FleetView) (int, func())
}

// exactCache is what the anchors' real-socket policies know of the
// engines' caches: the engines' own answer (EmuFleet.Greedy's Encode and
// CachedTokens), the truth kvroute's index mirrors from KV events.
type exactCache struct {
	Encode       func(r PickRequest) []int
	CachedTokens func(i int, ids []int, model, salt string) int
	BlockSize    int
}

func (x exactCache) lookup(r PickRequest, n int) ([]int, []int) {
	ids := x.Encode(r)
	cached := make([]int, n)
	for i := range cached {
		cached[i] = x.CachedTokens(i, ids, r.Model, r.CacheSalt) / x.BlockSize
	}
	return ids, cached
}

// LLMDSticky is StickyChoice behind a gateway: token load is the uncached
// prompt tokens of this gateway's requests in flight to each engine.
type LLMDSticky struct {
	exactCache
	Threshold int

	mu   sync.Mutex
	load []int
	ties tieBreaker
}

// Name implements Policy.
func (*LLMDSticky) Name() string { return PolicyLLMDSticky }

// Pick implements Policy.
func (p *LLMDSticky) Pick(r PickRequest, v FleetView) int { e, _ := p.Begin(r, v); return e }

// Begin implements Tracker.
func (p *LLMDSticky) Begin(r PickRequest, v FleetView) (int, func()) {
	n := len(v.InFlight)
	ids, cached := p.lookup(r, n)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.load == nil {
		p.load = make([]int, n)
	}
	e, _ := StickyChoice(cached, p.load, func(i int) bool { return !v.down(i) }, p.Threshold, p.ties.next())
	e = max(e, 0)
	unc := max(len(ids)-cached[e]*p.BlockSize, 0)
	p.load[e] += unc
	return e, func() {
		p.mu.Lock()
		p.load[e] -= unc
		p.mu.Unlock()
	}
}

// DynamoKV is DynamoCosts and DynamoPick behind a gateway, with this
// gateway's books of prefill tokens and active blocks per engine (both
// released when the response ends: the benchmark's responses are short).
type DynamoKV struct {
	exactCache
	Weight, Temperature float64
	Seed                uint64

	mu              sync.Mutex
	prefill, active []int
	costs, probs    []float64
	ties            tieBreaker
	rng             *Random
}

// Name implements Policy.
func (*DynamoKV) Name() string { return PolicyDynamoKV }

// Pick implements Policy.
func (p *DynamoKV) Pick(r PickRequest, v FleetView) int { e, _ := p.Begin(r, v); return e }

// Begin implements Tracker.
func (p *DynamoKV) Begin(r PickRequest, v FleetView) (int, func()) {
	n := len(v.InFlight)
	ids, cached := p.lookup(r, n)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.prefill == nil {
		p.prefill, p.active, p.costs, p.probs = make([]int, n), make([]int, n), make([]float64, n), make([]float64, n)
		p.rng = NewRandom(p.Seed)
	}
	DynamoCosts(p.costs, len(ids), p.BlockSize, cached, p.prefill, p.active, p.Weight)
	worst := 0.0
	for _, c := range p.costs {
		worst = max(worst, c)
	}
	for i := range p.costs {
		if v.down(i) {
			p.costs[i] = 2*worst + 1 // never the least; rarely drawn
		}
	}
	u := 0.0
	if p.Temperature > 0 {
		p.rng.mu.Lock()
		u = p.rng.rng.Float64()
		p.rng.mu.Unlock()
	}
	e := max(DynamoPick(p.costs, p.probs, p.Temperature, u, p.ties.next()), 0)
	unc := max(len(ids)-cached[e]*p.BlockSize, 0)
	blocks := (len(ids) + p.BlockSize - 1) / p.BlockSize
	p.prefill[e] += unc
	p.active[e] += blocks
	return e, func() {
		p.mu.Lock()
		p.prefill[e] -= unc
		p.active[e] -= blocks
		p.mu.Unlock()
	}
}
