package fleetsim

import (
	"math"
	"math/rand/v2"
	"time"

	"github.com/kvroute/kvroute/index"
	"github.com/kvroute/kvroute/internal/vllmemu"
)

// The anchors' policies: what users of llm-d and Dynamo would deploy
// instead of kvroute, each fed by kvroute's own exact index (exactIndex) so
// that the comparison is policy against policy on the same knowledge of
// the engines' caches. Each gateway instance keeps its own books of the
// requests it routed, as those routers do.

// anchorBooks is one gateway instance's view of its own requests in
// flight: which engine, how many prompt tokens it must prefill there, how
// many blocks it holds.
type anchorBooks struct {
	x       *exactIndex
	now     time.Time
	cached  []int
	keys    []index.BlockKey
	matches []index.Match
	flights map[int]flight
	counts  map[string]int
	ties    int
}

type flight struct {
	engine     int
	uncached   int  // prompt tokens the engine must compute
	blocks     int  // the prompt's blocks
	prefilling bool // no first token yet
}

func newAnchorBooks(engines int, o Options) (*anchorBooks, error) {
	x, _, err := newExactIndex(engines, o)
	if err != nil {
		return nil, err
	}
	b := &anchorBooks{x: x, now: epoch, cached: make([]int, engines), flights: map[int]flight{}, counts: map[string]int{}}
	x.clock = func() time.Time { return b.now }
	return b, nil
}

// lookup fills b.cached (blocks per engine) and returns the prompt's
// blocks.
func (b *anchorBooks) lookup(tokens []int) (int, error) {
	n, keys, matches, err := b.x.cachedBlocks(tokens, b.cached, b.keys, b.matches)
	b.keys, b.matches = keys, matches
	return n, err
}

func (b *anchorBooks) begin(id, e, tokens, blocks int) {
	unc := max(tokens-b.cached[e]*b.x.blockSize, 0)
	b.flights[id] = flight{engine: e, uncached: unc, blocks: blocks, prefilling: true}
	b.counts["expected cached tokens"] += b.cached[e] * b.x.blockSize
}

func (b *anchorBooks) done(now time.Time, id int) {
	b.now = now
	delete(b.flights, id)
}

func (b *anchorBooks) prefilled(now time.Time, id int) {
	b.now = now
	if f, ok := b.flights[id]; ok {
		f.prefilling = false
		b.flights[id] = f
	}
}

func (b *anchorBooks) events(now time.Time, e int, payload []byte) error {
	b.now = now
	return b.x.appliers[e].Apply(payload)
}

func (*anchorBooks) scrape(time.Time, []vllmemu.Stats) {}

func (b *anchorBooks) decisions() map[string]int { return b.counts }

// argmin returns the engine of least cost among those ok allows (all when
// ok is nil), scanning from a rotating start so that equal costs spread.
func (b *anchorBooks) argmin(n int, ok func(int) bool, cost func(int) float64) int {
	b.ties++
	best, bestCost := -1, 0.0
	for k := range n {
		i := (b.ties + k) % n
		if ok != nil && !ok(i) {
			continue
		}
		if c := cost(i); best < 0 || c < bestCost {
			best, bestCost = i, c
		}
	}
	return best
}

// stickyPicker is llm-d's "sticky until saturated" default (llm-d blog,
// "Sticky Until Saturated: Token-Aware Routing in llm-d"): a prefix-cache
// affinity filter keeps the engines holding the longest cached prefix of
// the prompt, a token-load scorer picks the least loaded among them, and
// when every one of them carries at least Threshold tokens of load the
// affinity is released: the request goes to the least token-loaded engine
// of the fleet. Token load is the prompt tokens still to be computed of the
// requests this gateway has in flight to the engine (the prefill-bound
// signal the blog recommends).
type stickyPicker struct {
	*anchorBooks
	threshold int
	load      []int
}

func newSticky(engines int, o Options) (*stickyPicker, error) {
	b, err := newAnchorBooks(engines, o)
	if err != nil {
		return nil, err
	}
	return &stickyPicker{anchorBooks: b, threshold: o.StickyThreshold, load: make([]int, engines)}, nil
}

func (p *stickyPicker) pick(now time.Time, id int, tokens []int, _ []int) (int, error) {
	p.now = now
	blocks, err := p.lookup(tokens)
	if err != nil {
		return 0, err
	}
	e := p.choose()
	p.begin(id, e, len(tokens), blocks)
	p.load[e] += p.flights[id].uncached
	return e, nil
}

// choose is the decision on p.cached and p.load.
func (p *stickyPicker) choose() int {
	n := len(p.load)
	best := 0
	for _, c := range p.cached {
		best = max(best, c)
	}
	byLoad := func(i int) float64 { return float64(p.load[i]) }
	if best > 0 {
		affine := func(i int) bool { return p.cached[i] == best && p.load[i] < p.threshold }
		if e := p.argmin(n, affine, byLoad); e >= 0 {
			p.counts["sticky"]++
			return e
		}
		p.counts["saturated"]++
	} else {
		p.counts["no-prefix"]++
	}
	return p.argmin(n, nil, byLoad)
}

func (p *stickyPicker) done(now time.Time, id int) {
	p.release(id)
	p.anchorBooks.done(now, id)
}

func (p *stickyPicker) prefilled(now time.Time, id int) {
	p.release(id)
	p.anchorBooks.prefilled(now, id)
}

// release takes a request's prompt tokens off its engine's load once: at
// its first token (the prefill is done) or at its end, whichever is first.
func (p *stickyPicker) release(id int) {
	if f, ok := p.flights[id]; ok && f.prefilling {
		p.load[f.engine] -= f.uncached
	}
}

// dynamoPicker is Dynamo's KV router (docs.nvidia.com/dynamo, router
// "Routing Concepts" and "Configuration and Tuning"): per worker, prefill
// blocks = the prompt's blocks the worker does not hold + the prompt tokens
// of requests routed there still prefilling, in blocks; decode blocks = the
// blocks of the requests active there plus this one's new blocks; cost =
// Weight × prefill blocks + decode blocks. Temperature 0 takes the least
// cost; above 0 a worker is drawn with probability ∝ exp(−c/Temperature),
// c its cost scaled to 0..1 over the workers.
type dynamoPicker struct {
	*anchorBooks
	weight, temperature float64
	prefill, active     []int // per engine: tokens prefilling, blocks active
	rng                 *rand.Rand
	costs, probs        []float64
}

func newDynamo(engines int, o Options) (*dynamoPicker, error) {
	b, err := newAnchorBooks(engines, o)
	if err != nil {
		return nil, err
	}
	return &dynamoPicker{anchorBooks: b, weight: o.DynamoWeight, temperature: o.DynamoTemperature,
		prefill: make([]int, engines), active: make([]int, engines),
		rng: rand.New(rand.NewPCG(o.Seed, 0x64796e)), costs: make([]float64, engines), probs: make([]float64, engines)}, nil
}

func (p *dynamoPicker) pick(now time.Time, id int, tokens []int, _ []int) (int, error) {
	p.now = now
	blocks, err := p.lookup(tokens)
	if err != nil {
		return 0, err
	}
	e := p.choose(len(tokens))
	p.begin(id, e, len(tokens), blocks)
	f := p.flights[id]
	p.prefill[e] += f.uncached
	p.active[e] += blocks
	return e, nil
}

// choose is the decision for a prompt of n tokens on p.cached, p.prefill
// and p.active.
func (p *dynamoPicker) choose(n int) int {
	bs := float64(p.x.blockSize)
	promptBlocks := math.Ceil(float64(n) / bs)
	for i := range p.costs {
		newBlocks := max(promptBlocks-float64(p.cached[i]), 0)
		prefillBlocks := newBlocks + float64(p.prefill[i])/bs
		decodeBlocks := float64(p.active[i]) + newBlocks
		p.costs[i] = p.weight*prefillBlocks + decodeBlocks
	}
	if p.temperature <= 0 {
		return p.argmin(len(p.costs), nil, func(i int) float64 { return p.costs[i] })
	}
	lo, hi := p.costs[0], p.costs[0]
	for _, c := range p.costs {
		lo, hi = min(lo, c), max(hi, c)
	}
	sum := 0.0
	for i, c := range p.costs {
		scaled := 0.0
		if hi > lo {
			scaled = (c - lo) / (hi - lo)
		}
		p.probs[i] = math.Exp(-scaled / p.temperature)
		sum += p.probs[i]
	}
	r := p.rng.Float64() * sum
	for i, w := range p.probs {
		if r < w {
			return i
		}
		r -= w
	}
	return len(p.probs) - 1
}

func (p *dynamoPicker) done(now time.Time, id int) {
	if f, ok := p.flights[id]; ok {
		if f.prefilling {
			p.prefill[f.engine] -= f.uncached
		}
		p.active[f.engine] -= f.blocks
	}
	p.anchorBooks.done(now, id)
}

func (p *dynamoPicker) prefilled(now time.Time, id int) {
	if f, ok := p.flights[id]; ok && f.prefilling {
		p.prefill[f.engine] -= f.uncached
	}
	p.anchorBooks.prefilled(now, id)
}
