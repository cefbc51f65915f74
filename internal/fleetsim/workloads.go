package fleetsim

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// Generated workload families of the routing suite. Each is a
// Mooncake-format trace (Record: arrival ms, prompt and output lengths,
// hash ids of 512-token blocks), so the simulator replays a family exactly
// as it replays a recorded trace, and a family can be written out as JSONL.
// A family at a seed is always the same records.

// Family names.
const (
	FamilyAgentic   = "agentic"
	FamilyRAG       = "rag-zipf"
	FamilyTenants   = "tenants"
	FamilyBursts    = "bursts"
	FamilyNoSharing = "no-sharing"
	// The flow-control goals' families (GoalFamilies; not in the suite).
	FamilyPriorityFlood = "priority-flood"
	FamilyTenantPair    = "tenant-pair"
)

// Tenants of the goal families.
const (
	TenantInteractive = "interactive"
	TenantBatch       = "batch"
	TenantLight       = "light"
	TenantHeavy       = "heavy"
)

// Family describes one generated workload. Block counts are in 512-token
// trace blocks (TraceBlockTokens).
type Family struct {
	Name string
	// Requests is how many requests to generate (a session family stops
	// starting turns once it has them).
	Requests int
	// Rate is the mean arrival rate in requests per second at 1× load.
	Rate float64
	// OutputMin, OutputMax bound each request's output tokens (uniform).
	OutputMin, OutputMax int

	// agentic: Sessions coding sessions, each opening with the shared
	// SystemBlocks then its own context of ContextMin..ContextMax blocks,
	// growing by GrowMin..GrowMax blocks a turn up to MaxBlocks; after each
	// turn, with probability FanOut, the session spawns SubAgents sub-agents
	// that each send SubTurns requests on the session's context plus their
	// own growing task. Turns of a session are ThinkSeconds apart on average.
	Sessions               int
	SystemBlocks           int
	ContextMin, ContextMax int
	GrowMin, GrowMax       int
	MaxBlocks              int
	FanOut                 float64
	SubAgents, SubTurns    int
	ThinkSeconds           float64
	// rag-zipf: Documents documents of DocBlocks blocks, drawn with Zipf
	// popularity (weight 1/(k+1)^ZipfS), after the SystemBlocks shared
	// prompt, followed by QueryBlocks unique blocks.
	// tenants: Documents tenants with system prompts of DocBlocks..
	// DocBlocksMax blocks, drawn with Zipf popularity, followed by
	// QueryBlocks..QueryBlocksMax unique blocks.
	Documents                   int
	DocBlocks, DocBlocksMax     int
	ZipfS                       float64
	QueryBlocks, QueryBlocksMax int
	// bursts: chat sessions (Sessions, each opening with one of Documents
	// shared system prompts of DocBlocks blocks, growing GrowMin..GrowMax
	// blocks a turn); arrivals come in cycles of CycleSeconds, the first
	// BurstSeconds of each at BurstFactor × Rate and the rest at the rate
	// that keeps the mean at Rate.
	CycleSeconds, BurstSeconds float64
	BurstFactor                float64
	// no-sharing: every prompt is its own QueryBlocks..QueryBlocksMax
	// blocks.

	// priority-flood: an interactive flow of HighShare × Rate (priority
	// HighPriority; the SystemBlocks shared prompt then ContextMin..
	// ContextMax unique blocks) under a batch flood of the rest (priority
	// 0; unique prompts of QueryBlocks..QueryBlocksMax blocks).
	HighShare    float64
	HighPriority int
	// tenant-pair: two tenants of unique prompts (QueryBlocks..
	// QueryBlocksMax blocks) at the same priority, the heavy one sending
	// HeavyFactor × the light one's requests; Rate is their sum.
	HeavyFactor float64
}

// GoalFamilies are the workloads of flow control's goals, sized for the
// default 16-engine fleet (320k prefill tokens/s): each saturates it.
// priority-flood offers 1.5× its prefill capacity (a tenth of it
// interactive); in tenant-pair the light tenant alone offers 0.6× it and
// the heavy one 10× that.
func GoalFamilies() []Family {
	return []Family{
		{Name: FamilyPriorityFlood, Requests: 4000, Rate: 200, OutputMin: 16, OutputMax: 64,
			HighShare: 0.1, HighPriority: 1, SystemBlocks: 2, ContextMin: 1, ContextMax: 2, QueryBlocks: 2, QueryBlocksMax: 8},
		{Name: FamilyTenantPair, Requests: 8000, Rate: 845, OutputMin: 16, OutputMax: 64,
			HeavyFactor: 10, QueryBlocks: 2, QueryBlocksMax: 8},
	}
}

// GoalFamily is the goal family named name.
func GoalFamily(name string) (Family, bool) {
	for _, f := range GoalFamilies() {
		if f.Name == name {
			return f, true
		}
	}
	return Family{}, false
}

// DefaultFamilies are the suite's generated families, sized for the
// default 16-engine fleet (8.4 M tokens of KV, 320k prefill tokens/s).
func DefaultFamilies() []Family {
	return []Family{
		{Name: FamilyAgentic, Requests: 100, OutputMin: 32, OutputMax: 256,
			Sessions: 12, SystemBlocks: 16, ContextMin: 82, ContextMax: 180, GrowMin: 1, GrowMax: 8, MaxBlocks: 390,
			FanOut: 0.15, SubAgents: 3, SubTurns: 3, ThinkSeconds: 6},
		{Name: FamilyRAG, Requests: 200, Rate: 24, OutputMin: 16, OutputMax: 200,
			SystemBlocks: 2, Documents: 1200, DocBlocks: 16, ZipfS: 0.9, QueryBlocks: 1, QueryBlocksMax: 1},
		{Name: FamilyTenants, Requests: 200, Rate: 40, OutputMin: 16, OutputMax: 200,
			Documents: 80, DocBlocks: 4, DocBlocksMax: 24, ZipfS: 0.7, QueryBlocks: 1, QueryBlocksMax: 4},
		{Name: FamilyBursts, Requests: 200, Rate: 20, OutputMin: 16, OutputMax: 200,
			Sessions: 60, Documents: 8, DocBlocks: 4, ContextMin: 2, ContextMax: 10, GrowMin: 1, GrowMax: 2, MaxBlocks: 120,
			CycleSeconds: 4, BurstSeconds: 1, BurstFactor: 3},
		{Name: FamilyNoSharing, Requests: 200, Rate: 12, OutputMin: 16, OutputMax: 200,
			QueryBlocks: 4, QueryBlocksMax: 32},
	}
}

// Describe is the family's parameters in one line, as the suite's table
// prints them.
func (f Family) Describe() string {
	switch f.Name {
	case FamilyAgentic:
		return fmt.Sprintf("%d coding sessions: %d-token shared tool prompt, own context %d–%d k tokens growing %d–%d blocks a turn to ≤ %d k; after a turn p=%.2f of %d sub-agents × %d requests on the session's context; %.0f s think time; %d requests",
			f.Sessions, f.SystemBlocks*TraceBlockTokens, f.ContextMin*TraceBlockTokens/1000, (f.SystemBlocks+f.ContextMax)*TraceBlockTokens/1000,
			f.GrowMin, f.GrowMax, f.MaxBlocks*TraceBlockTokens/1000, f.FanOut, f.SubAgents, f.SubTurns, f.ThinkSeconds, f.Requests)
	case FamilyRAG:
		return fmt.Sprintf("%d documents × %d tokens (%.1f M tokens) after a %d-token system prompt, Zipf s=%.1f, %d-token query; %g req/s; %d requests",
			f.Documents, f.DocBlocks*TraceBlockTokens, float64(f.Documents*f.DocBlocks*TraceBlockTokens)/1e6, f.SystemBlocks*TraceBlockTokens, f.ZipfS, f.QueryBlocks*TraceBlockTokens, f.Rate, f.Requests)
	case FamilyTenants:
		return fmt.Sprintf("%d tenants, system prompts of %d–%d tokens, Zipf s=%.1f over tenants, %d–%d-token user part; %g req/s; %d requests",
			f.Documents, f.DocBlocks*TraceBlockTokens, f.DocBlocksMax*TraceBlockTokens, f.ZipfS, f.QueryBlocks*TraceBlockTokens, f.QueryBlocksMax*TraceBlockTokens, f.Rate, f.Requests)
	case FamilyBursts:
		return fmt.Sprintf("%d chat sessions on %d system prompts of %d tokens, growing %d–%d blocks a turn; every %.0f s a %.0f s burst at %.0f× the mean %g req/s; %d requests",
			f.Sessions, f.Documents, f.DocBlocks*TraceBlockTokens, f.GrowMin, f.GrowMax, f.CycleSeconds, f.BurstSeconds, f.BurstFactor, f.Rate, f.Requests)
	case FamilyNoSharing:
		return fmt.Sprintf("unique prompts of %d–%d tokens; %g req/s; %d requests", f.QueryBlocks*TraceBlockTokens, f.QueryBlocksMax*TraceBlockTokens, f.Rate, f.Requests)
	case FamilyPriorityFlood:
		return fmt.Sprintf("%.0f %% interactive (priority %d, a %d-token shared prompt then %d–%d unique tokens) under a batch flood (priority 0, unique prompts of %d–%d tokens); %g req/s in all; %d requests",
			100*f.HighShare, f.HighPriority, f.SystemBlocks*TraceBlockTokens, f.ContextMin*TraceBlockTokens, f.ContextMax*TraceBlockTokens,
			f.QueryBlocks*TraceBlockTokens, f.QueryBlocksMax*TraceBlockTokens, f.Rate, f.Requests)
	case FamilyTenantPair:
		return fmt.Sprintf("two tenants at one priority, one sending %g× the other, unique prompts of %d–%d tokens; %g req/s in all; %d requests",
			f.HeavyFactor, f.QueryBlocks*TraceBlockTokens, f.QueryBlocksMax*TraceBlockTokens, f.Rate, f.Requests)
	}
	return f.Name
}

// famGen holds one generation's random stream and hash-id counter.
type famGen struct {
	f    Family
	rng  *rand.Rand
	next int64
}

// fresh returns n new hash ids.
func (g *famGen) fresh(n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = g.next
		g.next++
	}
	return out
}

func (g *famGen) between(lo, hi int) int {
	if hi <= lo {
		return lo
	}
	return lo + g.rng.IntN(hi-lo+1)
}

func (g *famGen) record(atMs float64, ids []int64) Record {
	out := g.between(g.f.OutputMin, g.f.OutputMax)
	return Record{Timestamp: int64(atMs), InputLength: len(ids) * TraceBlockTokens, OutputLength: max(out, 1), HashIDs: slices.Clone(ids)}
}

// zipf draws k in 0..n-1 with weight 1/(k+1)^s from a precomputed CDF.
type zipf []float64

func newZipf(n int, s float64) zipf {
	c := make(zipf, n)
	sum := 0.0
	for k := range n {
		sum += 1 / math.Pow(float64(k+1), s)
		c[k] = sum
	}
	for k := range c {
		c[k] /= sum
	}
	return c
}

func (z zipf) draw(r *rand.Rand) int {
	k, _ := slices.BinarySearch(z, r.Float64())
	return min(k, len(z)-1)
}

// Generate returns the family's records at seed, in arrival order.
func (f Family) Generate(seed uint64) ([]Record, error) {
	if f.Requests < 1 {
		return nil, fmt.Errorf("family %s: no requests", f.Name)
	}
	g := &famGen{f: f, rng: rand.New(rand.NewPCG(seed, uint64(len(f.Name))*0x9E3779B97F4A7C15)), next: 1}
	var recs []Record
	switch f.Name {
	case FamilyAgentic:
		recs = g.agentic()
	case FamilyRAG, FamilyTenants:
		recs = g.prompts()
	case FamilyBursts:
		recs = g.bursts()
	case FamilyNoSharing:
		recs = g.unique()
	case FamilyPriorityFlood, FamilyTenantPair:
		recs = g.twoFlows()
	default:
		return nil, fmt.Errorf("unknown family %q", f.Name)
	}
	slices.SortStableFunc(recs, func(a, b Record) int { return cmp.Compare(a.Timestamp, b.Timestamp) })
	if len(recs) > f.Requests {
		recs = recs[:f.Requests]
	}
	for i := range recs {
		if err := recs[i].check(); err != nil {
			return nil, fmt.Errorf("family %s: %w", f.Name, err)
		}
	}
	return recs, nil
}

// poisson returns the next arrival after t (ms) at rate per second.
func (g *famGen) poisson(t, rate float64) float64 { return t + g.rng.ExpFloat64()/rate*1000 }

func (g *famGen) agentic() []Record {
	f := g.f
	system := g.fresh(f.SystemBlocks)
	var recs []Record
	for s := 0; s < f.Sessions; s++ {
		ctx := append(slices.Clone(system), g.fresh(g.between(f.ContextMin, f.ContextMax))...)
		t := g.rng.Float64() * f.ThinkSeconds * 1000 * 2
		for len(ctx) <= f.MaxBlocks && len(recs) < 4*f.Requests {
			recs = append(recs, g.record(t, ctx))
			if g.rng.Float64() < f.FanOut {
				for range f.SubAgents {
					sub := append(slices.Clone(ctx), g.fresh(g.between(f.GrowMin, f.GrowMax))...)
					st := t
					for range f.SubTurns {
						if len(sub) > f.MaxBlocks {
							break
						}
						st += g.rng.ExpFloat64() * f.ThinkSeconds * 1000 / 2
						recs = append(recs, g.record(st, sub))
						sub = append(sub, g.fresh(g.between(f.GrowMin, f.GrowMax))...)
					}
				}
			}
			ctx = append(ctx, g.fresh(g.between(f.GrowMin, f.GrowMax))...)
			t += g.rng.ExpFloat64() * f.ThinkSeconds * 1000
		}
	}
	return recs
}

// prompts is rag-zipf and tenants: a Zipf-popular shared part after an
// optional system prompt, then a unique tail.
func (g *famGen) prompts() []Record {
	f := g.f
	system := g.fresh(f.SystemBlocks)
	docs := make([][]int64, f.Documents)
	for i := range docs {
		docs[i] = g.fresh(g.between(f.DocBlocks, max(f.DocBlocks, f.DocBlocksMax)))
	}
	z := newZipf(f.Documents, f.ZipfS)
	recs := make([]Record, 0, f.Requests)
	t := 0.0
	for range f.Requests {
		t = g.poisson(t, f.Rate)
		ids := append(slices.Clone(system), docs[z.draw(g.rng)]...)
		ids = append(ids, g.fresh(g.between(f.QueryBlocks, max(f.QueryBlocks, f.QueryBlocksMax)))...)
		recs = append(recs, g.record(t, ids))
	}
	return recs
}

func (g *famGen) bursts() []Record {
	f := g.f
	systems := make([][]int64, f.Documents)
	for i := range systems {
		systems[i] = g.fresh(f.DocBlocks)
	}
	sessions := make([][]int64, f.Sessions)
	newSession := func(i int) {
		sessions[i] = append(slices.Clone(systems[g.rng.IntN(len(systems))]), g.fresh(g.between(f.ContextMin, f.ContextMax))...)
	}
	for i := range sessions {
		newSession(i)
	}
	burst := f.BurstFactor * f.Rate
	// The rest of a cycle at the rate that keeps the mean at Rate.
	calm := max((f.Rate*f.CycleSeconds-burst*f.BurstSeconds)/(f.CycleSeconds-f.BurstSeconds), 0.01)
	recs := make([]Record, 0, f.Requests)
	t := 0.0
	for range f.Requests {
		rate := calm
		if math.Mod(t/1000, f.CycleSeconds) < f.BurstSeconds {
			rate = burst
		}
		t = g.poisson(t, rate)
		s := g.rng.IntN(len(sessions))
		recs = append(recs, g.record(t, sessions[s]))
		sessions[s] = append(sessions[s], g.fresh(g.between(f.GrowMin, f.GrowMax))...)
		if len(sessions[s]) > f.MaxBlocks {
			newSession(s)
		}
	}
	return recs
}

func (g *famGen) unique() []Record {
	f := g.f
	recs := make([]Record, 0, f.Requests)
	t := 0.0
	for range f.Requests {
		t = g.poisson(t, f.Rate)
		recs = append(recs, g.record(t, g.fresh(g.between(f.QueryBlocks, f.QueryBlocksMax))))
	}
	return recs
}

// twoFlows is priority-flood and tenant-pair: two Poisson flows merged in
// arrival order.
func (g *famGen) twoFlows() []Record {
	f := g.f
	type flow struct {
		tenant   string
		priority int
		rate     float64
		prompt   func() []int64
	}
	unique := func() []int64 { return g.fresh(g.between(f.QueryBlocks, f.QueryBlocksMax)) }
	var flows [2]flow
	if f.Name == FamilyPriorityFlood {
		system := g.fresh(f.SystemBlocks)
		flows[0] = flow{TenantInteractive, f.HighPriority, f.HighShare * f.Rate, func() []int64 {
			return append(slices.Clone(system), g.fresh(g.between(f.ContextMin, f.ContextMax))...)
		}}
		flows[1] = flow{TenantBatch, 0, (1 - f.HighShare) * f.Rate, unique}
	} else {
		light := f.Rate / (1 + f.HeavyFactor)
		flows[0] = flow{TenantLight, 0, light, unique}
		flows[1] = flow{TenantHeavy, 0, f.Rate - light, unique}
	}
	recs := make([]Record, 0, f.Requests)
	var at [2]float64
	for i := range flows {
		at[i] = g.poisson(0, flows[i].rate)
	}
	for range f.Requests {
		i := 0
		if at[1] < at[0] {
			i = 1
		}
		r := g.record(at[i], flows[i].prompt())
		r.Tenant, r.Priority = flows[i].tenant, flows[i].priority
		recs = append(recs, r)
		at[i] = g.poisson(at[i], flows[i].rate)
	}
	return recs
}
