package fleetsim

import (
	"fmt"
	"io"
	"time"

	"github.com/kvroute/kvroute/blockhash"
	"github.com/kvroute/kvroute/internal/routebench"
	"github.com/kvroute/kvroute/internal/vllmemu"
)

// Policy names.
const (
	PolicyKVRoute      = "kvroute"
	PolicyApproxPrefix = "approx-prefix"
	PolicyRoundRobin   = "round-robin"
	PolicyLeastLoaded  = "least-loaded"
	PolicyRandom       = "random"
	// PolicyLLMDSticky is llm-d's "sticky until saturated" default and
	// PolicyDynamoKV Dynamo's KV router, both on kvroute's exact index
	// (anchors.go).
	PolicyLLMDSticky = "llm-d-sticky"
	PolicyDynamoKV   = "dynamo-kv"
	// policyPooled is the pooled-cache bound: one engine with the whole
	// fleet's KV, budget and speed.
	policyPooled = "pooled"
)

// AllPolicies is every routing policy, in report order.
var AllPolicies = []string{PolicyRoundRobin, PolicyLeastLoaded, PolicyRandom, PolicyApproxPrefix, PolicyLLMDSticky, PolicyDynamoKV, PolicyKVRoute}

// Options describe a simulated fleet. Every figure in docs/BENCHMARKS.md
// names the options that produced it.
type Options struct {
	Engines int
	// KVBlocks is each engine's KV capacity in blocks of BlockSize tokens.
	KVBlocks  int
	BlockSize int
	// MaxNumSeqs and MaxNumBatchedTokens are vLLM's scheduler limits.
	MaxNumSeqs          int
	MaxNumBatchedTokens int
	MaxModelLen         int
	// Prefill is the step time per uncached prompt token, Decode the time
	// of a step in which sequences decode (the emulator's latency model).
	Prefill, Decode time.Duration
	// ScrapeInterval is how often kvroute reads each engine's load (its
	// ingest.scrape_interval).
	ScrapeInterval time.Duration
	// RoutingYAML is extra kvroute routing config ("{placement_slack: 1}"),
	// for tuning; "" takes the defaults.
	RoutingYAML string
	// ParityYAML is extra kvroute parity config
	// ("{cached_tokens_window: 5s}"), whose cached_tokens check the
	// kvroute policy runs at every scrape; "" takes the defaults.
	ParityYAML string
	// Gateways is the number of independent router instances in front of
	// the fleet (default 1): request i goes to instance i mod Gateways; each
	// kvroute has its own index, ingest and bookkeeping, each gateway-side
	// policy its own memory and in-flight counts.
	Gateways int
	// Peers joins the Gateways kvroute instances in a peer mesh: each tells
	// the others of every request it begins and ends (routing.Sharer), as
	// `peers:` in kvroute's config does over ZeroMQ, PeerDelay after.
	Peers bool
	// PeerDelay is how long a mesh message takes to reach the other
	// routers (0: at once).
	PeerDelay time.Duration
	// IndexTTL is kvroute's index.ttl; 0 keeps its default.
	IndexTTL time.Duration
	// StickySaturation is llm-d-sticky's saturation point as prefill time:
	// an engine whose token load (prompt tokens still to prefill of the
	// requests a gateway has in flight to it) takes this long at Prefill
	// per token no longer attracts requests by its cache.
	StickySaturation time.Duration
	// DynamoWeight and DynamoTemperature are dynamo-kv's
	// overlap_score_weight and router_temperature.
	DynamoWeight, DynamoTemperature float64
	// FlowControl turns kvroute's flow control on
	// (routing.flow_control.enabled; RoutingYAML may tune the rest): a
	// request that finds the fleet saturated waits in the routing
	// package's queue and is decided when capacity frees, or shed.
	FlowControl bool
	// Seed drives every random choice of the run (the random policy,
	// kvroute's tie-breaks): one seed, one result.
	Seed uint64
	// Progress, when set, receives a line when a policy's run ends and at
	// most one per ProgressInterval of wall time while it runs.
	Progress         io.Writer
	ProgressInterval time.Duration
	// GroundTruth makes the kvroute policy also compute, for every request,
	// what each engine really held (Result.FunnelTruth): one more prompt
	// hash per engine and request.
	GroundTruth bool
	// EvictWithoutEvents makes every engine drop cached blocks without
	// BlockRemoved events (vllmemu.Options.EvictWithoutEvents).
	EvictWithoutEvents bool
}

// DefaultOptions is the fleet the Mooncake figures use: 16 engines of
// 8,192 blocks × 64 tokens (524,288 tokens, an 8B model's KV on one 80 GB
// GPU; the fleet holds 8.4 M tokens against the trace's 93.6 M distinct),
// 64 sequences, 2,048-token chunks, 128k context, 50 µs per prefill token
// (20k tokens/s), 5 ms per decode step, load scraped every second.
func DefaultOptions() Options {
	return Options{
		Engines: 16, KVBlocks: 8192, BlockSize: 64, MaxNumSeqs: 64, MaxNumBatchedTokens: 2048,
		MaxModelLen: 131072, Prefill: 50 * time.Microsecond, Decode: 5 * time.Millisecond,
		ScrapeInterval: time.Second, Seed: 1, ProgressInterval: 20 * time.Second, Gateways: 1,
		StickySaturation: routebench.DefaultStickySaturation, DynamoWeight: 1,
	}
}

// Result is one policy's run.
type Result struct {
	Name         string
	Requests     int
	Errors       int
	PromptTokens int64
	HitTokens    int64
	TTFT         []time.Duration
	PerEngine    []int
	Virtual      time.Duration // simulated time until the last request finished
	LastArrival  time.Duration // when the last request arrived
	Wall         time.Duration
	Decisions    map[string]int // kvroute's outcome/reason counts
	// FlowControl says kvroute held requests while the fleet was
	// saturated. Shed counts, by reason, the requests it answered without
	// serving (429: neither served nor an error; their TTFT is not in
	// TTFT), ShedAfter how long after its arrival each was answered; Held
	// is how many requests waited in its queue, Wait the waits of those
	// decided after waiting.
	FlowControl bool
	Shed        map[string]int
	ShedAfter   []time.Duration
	Held        int
	Wait        []time.Duration
	// Tenants breaks the run down by tenant, for sources whose requests
	// name one (Record.Tenant).
	Tenants map[string]*TenantResult
	// Funnel is kvroute's prompt-token funnel by outcome (kvroute policies;
	// summed over gateways), FunnelTruth the simulator's ground truth of
	// given_up_for_load and stale (Options.GroundTruth).
	Funnel      map[string]int64
	FunnelTruth map[string]int64
	// Parity is what kvroute's cached_tokens check found over the run
	// (kvroute policies; summed over gateways).
	Parity *ParityResult
}

// TenantResult is one tenant's part of a run.
type TenantResult struct {
	// Priority is the priority of the tenant's first request.
	Priority                int
	Requests, Shed, Errors  int
	TTFT                    []time.Duration
	PromptTokens, HitTokens int64
	// prefills is, per served request, when its prefill ended and the
	// uncached prompt tokens it prefilled.
	prefills []prefillMark
}

type prefillMark struct {
	at     time.Duration // since the run's start
	tokens int64
}

// Prefilled is the uncached prompt tokens of the tenant's requests whose
// prefill ended within [from, to) of the run.
func (t *TenantResult) Prefilled(from, to time.Duration) int64 {
	var n int64
	for _, m := range t.prefills {
		if m.at >= from && m.at < to {
			n += m.tokens
		}
	}
	return n
}

// Percentile is the q-quantile of the tenant's TTFT.
func (t *TenantResult) Percentile(q float64) time.Duration { return routebench.NearestRank(t.TTFT, q) }

// tenant is c's TenantResult, made on its first request.
func (r *Result) tenant(c Class) *TenantResult {
	if r.Tenants == nil {
		r.Tenants = map[string]*TenantResult{}
	}
	t := r.Tenants[c.Tenant]
	if t == nil {
		t = &TenantResult{Priority: c.Priority}
		r.Tenants[c.Tenant] = t
	}
	return t
}

// Served is how many requests got their first token.
func (r *Result) Served() int { return len(r.TTFT) }

// ShedTotal is how many requests flow control shed, for any reason.
func (r *Result) ShedTotal() int {
	n := 0
	for _, v := range r.Shed {
		n += v
	}
	return n
}

// HitRate is the token-level prefix-cache hit rate.
func (r *Result) HitRate() float64 {
	if r.PromptTokens == 0 {
		return 0
	}
	return float64(r.HitTokens) / float64(r.PromptTokens)
}

// Percentile is the q-quantile of TTFT (nearest rank, as the real-socket
// benchmark reports it).
func (r *Result) Percentile(q float64) time.Duration { return routebench.NearestRank(r.TTFT, q) }

// Imbalance is max/mean requests per engine.
func (r *Result) Imbalance() float64 { return routebench.Imbalance(r.PerEngine) }

// epoch is the virtual clock's origin.
var epoch = time.Unix(1_767_225_600, 0)

// fleetSeed is the engines' PYTHONHASHSEED (kvroute's engine keys need it).
const fleetSeed = "0"

// simAlgo is the engines' --prefix-caching-hash-algo: xxhash, the fastest
// vLLM offers, since every engine and kvroute hash every prompt.
const simAlgo = blockhash.XXHash

// picker routes one request to an engine.
type picker interface {
	// pick returns the engine for request id, or an error (counted).
	pick(now time.Time, id int, tokens []int, inFlight []int) (int, error)
	// done is called when request id finished on its engine.
	done(now time.Time, id int)
	// step receives engine e's KV-event batch (kvroute's ingest).
	events(now time.Time, e int, payload []byte) error
	// scrape is called every scrape interval with the engines' stats.
	scrape(now time.Time, stats []vllmemu.Stats)
	decisions() map[string]int
}

// prefillWatcher is a picker that is told when a request's first token
// came (its prefill is done), as routers that watch the response stream are.
type prefillWatcher interface {
	prefilled(now time.Time, id int)
}

// flowPicker is a picker that may hold a request instead of deciding it at
// arrival: kvroute with flow control, whose queue is the routing package's.
type flowPicker interface {
	picker
	// offer decides request id now (held false: e or err as pick's), or
	// queues it (held true).
	offer(now time.Time, id int, tokens []int, c Class) (e int, held bool, err error)
	// release decides the held requests that capacity now allows, calling
	// place with each one's engine (or the decision's error), and sheds
	// the expired or displaced, calling shed with each one's reason.
	release(now time.Time, place func(id, e int, err error), shed func(id int, reason string))
	// deadline is when the next held request expires (ok false: never).
	deadline() (at time.Time, ok bool)
}

// heldRequest is a request waiting in flow control's queue.
type heldRequest struct {
	tokens    []int
	maxTokens int
}

// Run simulates one policy over src.
func Run(src Source, policy string, o Options) (*Result, error) {
	start := time.Now()
	lastLine := start
	engines := o.Engines
	eo := vllmemu.Options{
		BlockSize: o.BlockSize, NumBlocks: o.KVBlocks, HashAlgo: simAlgo, MaxNumSeqs: o.MaxNumSeqs,
		MaxNumBatchedTokens: o.MaxNumBatchedTokens, MaxModelLen: o.MaxModelLen,
		PrefillPerToken: o.Prefill, DecodePerToken: o.Decode, EvictWithoutEvents: o.EvictWithoutEvents,
	}
	// A context longer than the KV cache cannot run: cap it (longer prompts
	// are then counted as errors, as vLLM rejects them).
	eo.MaxModelLen = min(eo.MaxModelLen, (o.KVBlocks-1)*o.BlockSize)
	if policy == policyPooled {
		// One engine with the whole fleet's KV, sequence slots, token budget
		// and prefill speed: what no router over these engines beats by much.
		eo.NumBlocks = o.KVBlocks * engines
		eo.MaxNumSeqs *= engines
		eo.MaxNumBatchedTokens *= engines
		eo.PrefillPerToken = o.Prefill / time.Duration(engines)
		engines = 1
	}
	seed := fleetSeed
	eo.Seed = &seed
	var eng []*vllmemu.Virtual
	for i := range engines {
		eo.DataParallelRank = 0
		_ = i
		v, err := vllmemu.NewVirtual(eo, epoch)
		if err != nil {
			return nil, err
		}
		eng = append(eng, v)
	}
	p, err := newPicker(policy, engines, o)
	if err != nil {
		return nil, err
	}
	tw, _ := p.(truthWatcher)
	if o.GroundTruth && tw != nil {
		tw.groundTruth(eng)
	}
	res := &Result{Name: policy, PerEngine: make([]int, engines)}
	fp, _ := p.(flowPicker)
	if fp != nil {
		res.FlowControl = true
		res.Shed = map[string]int{}
	}
	inFlight := make([]int, engines)
	engineOf := map[int]int{}
	arrival := map[int]time.Time{}
	tenant := map[int]*TenantResult{} // of requests in flight or held, when the source has tenants
	held := map[int]heldRequest{}
	now := epoch
	nextScrape := epoch
	if o.ScrapeInterval <= 0 {
		o.ScrapeInterval = time.Second
	}
	stats := make([]vllmemu.Stats, engines)
	var evErr error
	first := func(q *vllmemu.VirtualRequest) {
		// From the request's arrival at the router: a held request's wait
		// is part of its TTFT.
		ttft := q.FirstToken().Sub(arrival[q.ID])
		res.TTFT = append(res.TTFT, ttft)
		res.PromptTokens += int64(q.PromptTokens())
		res.HitTokens += int64(q.HitTokens())
		if t := tenant[q.ID]; t != nil {
			t.TTFT = append(t.TTFT, ttft)
			t.PromptTokens += int64(q.PromptTokens())
			t.HitTokens += int64(q.HitTokens())
			t.prefills = append(t.prefills, prefillMark{at: q.FirstToken().Sub(epoch), tokens: int64(q.PromptTokens() - q.HitTokens())})
		}
		if w, ok := p.(prefillWatcher); ok {
			w.prefilled(now, q.ID)
		}
		if tw != nil {
			tw.admitted(q.ID, q.HitTokens())
		}
	}
	done := func(q *vllmemu.VirtualRequest) {
		e := engineOf[q.ID]
		inFlight[e]--
		delete(engineOf, q.ID)
		delete(arrival, q.ID)
		delete(tenant, q.ID)
		p.done(now, q.ID)
	}
	fail := func(id int) {
		res.Errors++
		if t := tenant[id]; t != nil {
			t.Errors++
		}
		delete(arrival, id)
		delete(tenant, id)
	}
	// submit hands request id, decided for engine e, to that engine.
	submit := func(id, e int, tokens []int, maxTokens int) {
		if _, err := eng[e].Submit(now, id, tokens, maxTokens); err != nil {
			fail(id)
			p.done(now, id)
			return
		}
		inFlight[e]++
		engineOf[id] = e
		res.PerEngine[e]++
		eng[e].Start(now)
	}
	// release decides the held requests capacity now allows and sheds the
	// expired (flow control).
	release := func() {
		if fp == nil || len(held) == 0 {
			return
		}
		fp.release(now, func(id, e int, err error) {
			h := held[id]
			delete(held, id)
			res.Wait = append(res.Wait, now.Sub(arrival[id]))
			if err != nil {
				fail(id)
				return
			}
			submit(id, e, h.tokens, h.maxTokens)
		}, func(id int, reason string) {
			delete(held, id)
			res.ShedAfter = append(res.ShedAfter, now.Sub(arrival[id]))
			res.Shed[reason]++
			if t := tenant[id]; t != nil {
				t.Shed++
			}
			delete(arrival, id)
			delete(tenant, id)
		})
	}
	next, n := 0, src.Len()
	for {
		// The earliest event: an engine's step end, a scrape, a held
		// request's deadline, an arrival (in that order at equal times).
		stepAt, stepE := time.Time{}, -1
		for i, v := range eng {
			if busy, t := v.Busy(); busy && (stepE < 0 || t.Before(stepAt)) {
				stepAt, stepE = t, i
			}
		}
		arrAt, haveArr := time.Time{}, next < n
		if haveArr {
			arrAt = epoch.Add(src.At(next))
		}
		dueAt, haveDue := time.Time{}, false
		if fp != nil && len(held) > 0 {
			dueAt, haveDue = fp.deadline()
		}
		if stepE < 0 && !haveArr && len(held) == 0 {
			break
		}
		// before reports whether an event at t comes before the arrival.
		before := func(t time.Time) bool { return !haveArr || !arrAt.Before(t) }
		switch {
		case stepE >= 0 && before(stepAt) && !nextScrape.Before(stepAt) && (!haveDue || !dueAt.Before(stepAt)):
			now = stepAt
			v := eng[stepE]
			if payload := v.Finish(first, done); payload != nil {
				if err := p.events(now, stepE, payload); err != nil && evErr == nil {
					evErr = err
				}
			}
			v.Start(now)
			release()
		case before(nextScrape) && (!haveDue || !dueAt.Before(nextScrape)):
			now = nextScrape
			for i, v := range eng {
				stats[i] = v.Stats()
			}
			p.scrape(now, stats)
			nextScrape = nextScrape.Add(o.ScrapeInterval)
			release()
		case haveDue && before(dueAt):
			now = dueAt
			release()
		default:
			now = arrAt
			id := next
			next++
			tokens, maxTokens := src.Prompt(id)
			res.Requests++
			res.LastArrival = now.Sub(epoch)
			arrival[id] = now
			if c := classOf(src, id); c.Tenant != "" {
				tenant[id] = res.tenant(c)
				tenant[id].Requests++
			}
			var e int
			var err error
			if fp != nil {
				var wait bool
				e, wait, err = fp.offer(now, id, tokens, classOf(src, id))
				if wait {
					res.Held++
					held[id] = heldRequest{tokens: tokens, maxTokens: maxTokens}
					release() // a full queue sheds at once
					break
				}
			} else {
				e, err = p.pick(now, id, tokens, inFlight)
			}
			if err != nil {
				fail(id)
				continue
			}
			submit(id, e, tokens, maxTokens)
			if o.Progress != nil && o.ProgressInterval > 0 && time.Since(lastLine) >= o.ProgressInterval {
				lastLine = time.Now()
				fmt.Fprintf(o.Progress, "sim %s: %d of %d requests, %.0f s of the trace, %.0f s so far\n",
					policy, next, n, now.Sub(epoch).Seconds(), time.Since(start).Seconds())
			}
		}
	}
	if evErr != nil {
		return nil, fmt.Errorf("%s: applying KV events: %w", policy, evErr)
	}
	res.Virtual = now.Sub(epoch)
	res.Wall = time.Since(start)
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, "sim %s: done, %d requests, %.0f s of the trace in %.1f s\n", policy, n, res.Virtual.Seconds(), res.Wall.Seconds())
	}
	res.Decisions = p.decisions()
	if r, ok := p.(funnelReporter); ok {
		res.Funnel, res.FunnelTruth = r.funnelTotals()
		if res.Funnel != nil {
			pr := r.parityResult()
			res.Parity = &pr
		}
	}
	return res, nil
}
