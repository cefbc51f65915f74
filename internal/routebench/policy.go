package routebench

import (
	"container/list"
	"encoding/binary"
	"encoding/json"
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"
)

// FleetView is what a gateway-side policy may know about the replicas at the
// moment it picks: requests it has in flight to each, and which are up (a
// gateway learns endpoints from the orchestrator; nil: all up).
type FleetView struct {
	InFlight []int
	Down     []bool
}

func (v FleetView) down(i int) bool { return v.Down != nil && v.Down[i] }

// PickRequest is what a gateway-side policy sees of a request.
type PickRequest struct {
	Model     string // the body's model: the base model or a LoRA adapter
	CacheSalt string
	Prompt    string        // /v1/completions text
	Messages  []ChatMessage // /v1/chat/completions messages (nil for completions)
	Body      []byte        // the body as sent
}

// Text is a completions request for prompt (tests, simple callers).
func Text(prompt string) PickRequest { return PickRequest{Prompt: prompt} }

// Policy picks a replica for a request at the gateway. kvroute itself is not
// a Policy: the harness reaches it through real ext_proc streams.
type Policy interface {
	Name() string
	Pick(r PickRequest, v FleetView) int
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
func (p *Random) Pick(_ PickRequest, v FleetView) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(v.InFlight)
	for {
		if i := p.rng.IntN(n); !v.down(i) {
			return i
		}
		if allDown(v) {
			return 0
		}
	}
}

func allDown(v FleetView) bool {
	for i := range v.InFlight {
		if !v.down(i) {
			return false
		}
	}
	return true
}

// RoundRobin cycles through the replicas.
type RoundRobin struct {
	mu   sync.Mutex
	next int
}

// Name implements Policy.
func (*RoundRobin) Name() string { return "round-robin" }

// Pick implements Policy.
func (p *RoundRobin) Pick(_ PickRequest, v FleetView) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for range v.InFlight {
		i := p.next % len(v.InFlight)
		p.next++
		if !v.down(i) {
			return i
		}
	}
	return 0
}

// LeastLoaded picks the replica with the fewest requests in flight from this
// gateway; ties go round-robin.
type LeastLoaded struct{ ties tieBreaker }

// Name implements Policy.
func (*LeastLoaded) Name() string { return "least-loaded" }

// Pick implements Policy.
func (p *LeastLoaded) Pick(_ PickRequest, v FleetView) int {
	return argmin(v, p.ties.next(), func(i int) float64 { return float64(v.InFlight[i]) })
}

// tieBreaker rotates where argmin starts, so equal costs (an idle fleet, a
// prompt no replica holds) spread over the replicas instead of piling onto
// the first one.
type tieBreaker struct{ n atomic.Uint64 }

func (t *tieBreaker) next() int { return int(t.n.Add(1) - 1) }

// argmin returns the up replica of least cost, scanning from start (mod n),
// so the first one scanned wins ties; 0 when every replica is down.
func argmin(v FleetView, start int, cost func(int) float64) int {
	n := len(v.InFlight)
	best, bestCost := -1, 0.0
	for k := 0; k < n; k++ {
		i := (start + k) % n
		if v.down(i) {
			continue
		}
		if c := cost(i); best < 0 || c < bestCost {
			best, bestCost = i, c
		}
	}
	return max(best, 0)
}

// ApproxPrefix routes on the history of its own decisions, the way the Gateway
// API Inference Extension's approximate prefix-cache plugin does: the user
// input (a completion's prompt; for chat, the JSON of the messages array, as
// GIE marshals it) is cut into fixed character chunks, each chunk's hash
// chained to the previous one from a root that hashes the request's model
// (a LoRA adapter name separates) and its cache_salt; an LRU per replica
// remembers the chunk hashes it was sent; the score is the replica's
// contiguous matched-chunk run. It never sees tokens or
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
func (p *ApproxPrefix) Pick(r PickRequest, v FleetView) int {
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
	input := approxInput(r)
	hashes := chunkHashes(r.Model, r.CacheSalt, input, p.ChunkChars)
	matched := make([]int, n)
	for i := 0; i < n; i++ {
		for _, h := range hashes {
			if _, ok := p.sets[i][h]; !ok {
				break
			}
			matched[i]++
		}
	}
	choice := argmin(v, p.ties.next(), func(i int) float64 {
		uncached := float64(len(input)-matched[i]*p.ChunkChars) / p.CharsPerToken
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

// approxInput is the text the approximate prefix plugin hashes: the prompt
// of a completion, the JSON array of a chat request's messages.
func approxInput(r PickRequest) string {
	if r.Messages == nil {
		return r.Prompt
	}
	b, err := json.Marshal(r.Messages)
	if err != nil {
		return ""
	}
	return string(b)
}

// chunkHashes chains xxhash64 over full chunks of input: the root hashes the
// model name and cache salt, each chunk hashes its bytes then the previous
// hash (little endian).
func chunkHashes(model, salt, input string, chunk int) []uint64 {
	var out []uint64
	d := xxhash.New()
	d.WriteString(model)
	d.WriteString(salt)
	h := d.Sum64()
	var prev [8]byte
	for i := 0; i+chunk <= len(input); i += chunk {
		binary.LittleEndian.PutUint64(prev[:], h)
		d.Reset()
		d.WriteString(input[i : i+chunk])
		d.Write(prev[:])
		h = d.Sum64()
		out = append(out, h)
	}
	return out
}

// GreedyCacheAware knows every replica's real prefix cache (it asks the
// emulated engines) and its real queue, and picks greedily with kvroute's
// cost (uncached tokens + LoadWeight × queue). It is a heuristic with perfect
// information, not a bound: a policy that places documents better over time
// can beat it (the ceilings are the infinite- and pooled-cache bounds).
type GreedyCacheAware struct {
	// Encode returns the request's token ids as the engines compute them
	// (nil when it cannot be encoded: then nothing counts as cached).
	Encode func(r PickRequest) []int
	// CachedTokens returns how many leading tokens of ids replica i would
	// take from its prefix cache now, for a request naming model (the base
	// model or a LoRA adapter) with this salt.
	CachedTokens func(i int, ids []int, model, salt string) int
	// Queue returns replica i's running + waiting requests.
	Queue      func(i int) int
	LoadWeight float64 // tokens one queued request costs

	ties tieBreaker
}

// Name implements Policy.
func (*GreedyCacheAware) Name() string { return PolicyGreedy }

// Pick implements Policy.
func (p *GreedyCacheAware) Pick(r PickRequest, v FleetView) int {
	ids := p.Encode(r)
	return argmin(v, p.ties.next(), func(i int) float64 {
		uncached := len(ids) - p.CachedTokens(i, ids, r.Model, r.CacheSalt)
		return float64(uncached) + p.LoadWeight*float64(max(p.Queue(i), v.InFlight[i]))
	})
}
