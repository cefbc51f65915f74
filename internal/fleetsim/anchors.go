package fleetsim

import (
	"math/rand/v2"
	"time"

	"github.com/kvroute/kvroute/index"
	"github.com/kvroute/kvroute/internal/routebench"
	"github.com/kvroute/kvroute/internal/vllmemu"
)

// The anchors' policies: what users of llm-d and Dynamo would deploy
// instead of kvroute, each fed by kvroute's own exact index (exactIndex) so
// that the comparison is policy against policy on the same knowledge of
// the engines' caches. Each gateway instance keeps its own books of the
// requests it routed, as those routers do.

// anchorBooks is one gateway instance's view of its own requests in
// flight: which engine, how many prompt tokens it must prefill there, how
// many blocks it holds. Instances of one policy share one exactIndex: every
// instance would build the same one from the same KV events (the anchors
// only read it), so one applies the events for all.
type anchorBooks struct {
	x       *exactIndex
	applies bool // this instance applies the KV events to x
	cached  []int
	keys    []index.BlockKey
	matches []index.Match
	flights map[int]flight
	counts  map[string]int
	ties    int // rotates where equal costs start
}

type flight struct {
	engine     int
	uncached   int  // prompt tokens the engine must compute
	blocks     int  // the prompt's blocks
	prefilling bool // no first token yet
}

// newAnchorBooks returns an instance's books over x (nil: its own index).
func newAnchorBooks(engines int, o Options, x *exactIndex) (*anchorBooks, error) {
	applies := x == nil
	if x == nil {
		var err error
		if x, _, err = newExactIndex(engines, o); err != nil {
			return nil, err
		}
	}
	x.clock = func() time.Time { return x.now }
	return &anchorBooks{x: x, applies: applies, cached: make([]int, engines), flights: map[int]flight{}, counts: map[string]int{}}, nil
}

// at sets the shared index's virtual time.
func (b *anchorBooks) at(now time.Time) {
	if now.After(b.x.now) {
		b.x.now = now
	}
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
	b.at(now)
	delete(b.flights, id)
}

func (b *anchorBooks) prefilled(now time.Time, id int) {
	b.at(now)
	if f, ok := b.flights[id]; ok {
		f.prefilling = false
		b.flights[id] = f
	}
}

func (b *anchorBooks) events(now time.Time, e int, payload []byte) error {
	b.at(now)
	if !b.applies {
		return nil
	}
	return b.x.appliers[e].Apply(payload)
}

func (*anchorBooks) scrape(time.Time, []vllmemu.Stats) {}

func (b *anchorBooks) decisions() map[string]int { return b.counts }

// stickyPicker is llm-d's "sticky until saturated" default
// (routebench.StickyChoice) on kvroute's index. Token load is the prompt
// tokens still to be computed of the requests this gateway has in flight
// to the engine (the prefill-bound signal llm-d recommends); the threshold
// is Options.StickySaturation of prefill at the engines' speed.
type stickyPicker struct {
	*anchorBooks
	threshold int
	load      []int
}

func newSticky(engines int, o Options, x *exactIndex) (*stickyPicker, error) {
	b, err := newAnchorBooks(engines, o, x)
	if err != nil {
		return nil, err
	}
	return &stickyPicker{anchorBooks: b, threshold: routebench.StickyThreshold(o.StickySaturation, o.Prefill), load: make([]int, engines)}, nil
}

func (p *stickyPicker) pick(now time.Time, id int, tokens []int, _ []int) (int, error) {
	p.at(now)
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
	p.ties++
	e, why := routebench.StickyChoice(p.cached, p.load, nil, p.threshold, p.ties)
	p.counts[why]++
	return e
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

// dynamoPicker is Dynamo's KV router (routebench.DynamoCosts and
// DynamoPick) on kvroute's index, with this gateway's books of the prompt
// tokens still prefilling and the blocks active per engine.
type dynamoPicker struct {
	*anchorBooks
	weight, temperature float64
	prefill, active     []int // per engine: tokens prefilling, blocks active
	rng                 *rand.Rand
	costs, probs        []float64
}

func newDynamo(engines int, o Options, x *exactIndex) (*dynamoPicker, error) {
	b, err := newAnchorBooks(engines, o, x)
	if err != nil {
		return nil, err
	}
	return &dynamoPicker{anchorBooks: b, weight: o.DynamoWeight, temperature: o.DynamoTemperature,
		prefill: make([]int, engines), active: make([]int, engines),
		rng: rand.New(rand.NewPCG(o.Seed, 0x64796e)), costs: make([]float64, engines), probs: make([]float64, engines)}, nil
}

func (p *dynamoPicker) pick(now time.Time, id int, tokens []int, _ []int) (int, error) {
	p.at(now)
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
	routebench.DynamoCosts(p.costs, n, p.x.blockSize, p.cached, p.prefill, p.active, p.weight)
	u := 0.0
	if p.temperature > 0 {
		u = p.rng.Float64()
	}
	p.ties++
	return routebench.DynamoPick(p.costs, p.probs, p.temperature, u, p.ties)
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
