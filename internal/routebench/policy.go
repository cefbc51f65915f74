package routebench

import (
	"container/list"
	"math/rand/v2"
	"sync"

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
// gateway, ties to the lowest index.
type LeastLoaded struct{}

// Name implements Policy.
func (LeastLoaded) Name() string { return "least-loaded" }

// Pick implements Policy.
func (LeastLoaded) Pick(_ string, v FleetView) int {
	return argmin(v.InFlight, func(i int) float64 { return float64(v.InFlight[i]) })
}

func argmin(xs []int, cost func(int) float64) int {
	best, bestCost := 0, cost(0)
	for i := 1; i < len(xs); i++ {
		if c := cost(i); c < bestCost {
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
	choice := argmin(v.InFlight, func(i int) float64 {
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
// the same cost function.
type Oracle struct {
	// CachedTokens returns how many of the prompt's tokens replica i holds.
	CachedTokens func(i int, prompt string) int
	// PromptTokens returns the prompt's token count.
	PromptTokens func(prompt string) int
	// Queue returns replica i's running + waiting requests.
	Queue      func(i int) int
	LoadWeight float64
}

// Name implements Policy.
func (*Oracle) Name() string { return "oracle" }

// Pick implements Policy.
func (p *Oracle) Pick(prompt string, v FleetView) int {
	total := p.PromptTokens(prompt)
	return argmin(v.InFlight, func(i int) float64 {
		return float64(total-p.CachedTokens(i, prompt)) + p.LoadWeight*float64(max(p.Queue(i), v.InFlight[i]))
	})
}
