package routebench

import (
	"container/list"
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"
)

// FleetView is what a gateway-side policy may know about the replicas at the
// moment it picks: requests it has in flight to each.
type FleetView struct {
	InFlight []int
}

// Policy picks a replica for a prompt at the gateway. kvroute itself is not a
// Policy: the harness reaches it through real ext_proc streams.
type Policy interface {
	Name() string
	Pick(prompt string, v FleetView) int
}

// Random picks uniformly.
type Random struct {
	mu  sync.Mutex
	rng *rand.Rand
}

// NewRandom returns a seeded Random policy.
func NewRandom(seed uint64) *Random { return &Random{rng: rand.New(rand.NewPCG(seed, 1))} }

// Name implements Policy.
func (*Random) Name() string { return "random" }

// Pick implements Policy.
func (p *Random) Pick(_ string, v FleetView) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rng.IntN(len(v.InFlight))
}

// RoundRobin cycles through the replicas.
type RoundRobin struct {
	mu   sync.Mutex
	next int
}

// Name implements Policy.
func (*RoundRobin) Name() string { return "round-robin" }

// Pick implements Policy.
func (p *RoundRobin) Pick(_ string, v FleetView) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := p.next % len(v.InFlight)
	p.next++
	return i
}

// LeastLoaded picks the replica with the fewest requests in flight from this
// gateway; ties go round-robin.
type LeastLoaded struct{ ties tieBreaker }

// Name implements Policy.
func (*LeastLoaded) Name() string { return "least-loaded" }

// Pick implements Policy.
func (p *LeastLoaded) Pick(_ string, v FleetView) int {
	return argmin(len(v.InFlight), p.ties.next(), func(i int) float64 { return float64(v.InFlight[i]) })
}

// tieBreaker rotates where argmin starts, so equal costs (an idle fleet, a
// prompt no replica holds) spread over the replicas instead of piling onto
// the first one.
type tieBreaker struct{ n atomic.Uint64 }

func (t *tieBreaker) next() int { return int(t.n.Add(1) - 1) }

// argmin returns the replica of least cost among n, scanning from start
// (mod n), so the first one scanned wins ties.
func argmin(n, start int, cost func(int) float64) int {
	best, bestCost := -1, 0.0
	for k := 0; k < n; k++ {
		i := (start + k) % n
		if c := cost(i); best < 0 || c < bestCost {
			best, bestCost = i, c
		}
	}
	return best
}

// ApproxPrefix routes on the history of its own decisions, the way the Gateway
// API Inference Extension's approximate prefix-cache plugin does: the prompt
// is cut into fixed character chunks, each chunk's hash chained to the
// previous one; an LRU per replica remembers the chunk hashes it was sent; the
// score is the replica's contiguous matched-chunk run. It never sees tokens or
// the engines' real caches. Cost = unmatched characters / CharsPerToken +
// LoadWeight × in-flight, the same trade-off kvroute makes in tokens.
type ApproxPrefix struct {
	ChunkChars    int     // characters per chunk (the plugin's block size)
	CharsPerToken float64 // converts characters to a token estimate
	LoadWeight    float64 // tokens one in-flight request costs
	Capacity      int     // chunk hashes remembered per replica

	mu    sync.Mutex
	ties  tieBreaker
	sets  []map[uint64]*list.Element
	lrus  []*list.List
	ready bool
}

// Name implements Policy.
func (*ApproxPrefix) Name() string { return "approx-prefix" }

// Pick implements Policy: choose, then remember the prompt's chunks on the
// chosen replica.
func (p *ApproxPrefix) Pick(prompt string, v FleetView) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(v.InFlight)
	if !p.ready {
		p.sets = make([]map[uint64]*list.Element, n)
		p.lrus = make([]*list.List, n)
		for i := range p.sets {
			p.sets[i] = map[uint64]*list.Element{}
			p.lrus[i] = list.New()
		}
		p.ready = true
	}
	hashes := chunkHashes(prompt, p.ChunkChars)
	matched := make([]int, n)
	for i := 0; i < n; i++ {
		for _, h := range hashes {
			if _, ok := p.sets[i][h]; !ok {
				break
			}
			matched[i]++
		}
	}
	choice := argmin(n, p.ties.next(), func(i int) float64 {
		uncached := float64(len(prompt)-matched[i]*p.ChunkChars) / p.CharsPerToken
		return uncached + p.LoadWeight*float64(v.InFlight[i])
	})
	set, lru := p.sets[choice], p.lrus[choice]
	for _, h := range hashes {
		if e, ok := set[h]; ok {
			lru.MoveToFront(e)
			continue
		}
		set[h] = lru.PushFront(h)
		if lru.Len() > p.Capacity {
			old := lru.Back()
			lru.Remove(old)
			delete(set, old.Value.(uint64))
		}
	}
	return choice
}

// chunkHashes chains xxhash64 over full chunks of the prompt's bytes.
func chunkHashes(prompt string, chunk int) []uint64 {
	var out []uint64
	var prev [8]byte
	for i := 0; i+chunk <= len(prompt); i += chunk {
		d := xxhash.New()
		d.Write(prev[:])
		d.WriteString(prompt[i : i+chunk])
		h := d.Sum64()
		out = append(out, h)
		for j := range prev {
			prev[j] = byte(h >> (8 * j))
		}
	}
	return out
}

// Oracle knows every replica's real prefix cache (it asks the emulated
// engines) and its real queue; it bounds what any router could achieve with
// the same cost function as kvroute's.
type Oracle struct {
	// Encode returns the prompt's token ids as the engines compute them.
	Encode func(prompt string) []int
	// CachedTokens returns how many leading tokens of ids replica i would
	// take from its prefix cache now.
	CachedTokens func(i int, ids []int) int
	// Queue returns replica i's running + waiting requests.
	Queue      func(i int) int
	LoadWeight float64 // tokens one queued request costs

	ties tieBreaker
}

// Name implements Policy.
func (*Oracle) Name() string { return "oracle" }

// Pick implements Policy.
func (p *Oracle) Pick(prompt string, v FleetView) int {
	ids := p.Encode(prompt)
	return argmin(len(v.InFlight), p.ties.next(), func(i int) float64 {
		uncached := len(ids) - p.CachedTokens(i, ids)
		return float64(uncached) + p.LoadWeight*float64(max(p.Queue(i), v.InFlight[i]))
	})
}
