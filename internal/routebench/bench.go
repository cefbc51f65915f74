package routebench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kvroute/kvroute/blockhash"
	"github.com/kvroute/kvroute/chattemplate"
	"github.com/kvroute/kvroute/config"
	"github.com/kvroute/kvroute/internal/panics"
	"github.com/kvroute/kvroute/internal/vllmemu"
	"github.com/kvroute/kvroute/routing"
	"github.com/kvroute/kvroute/tokenize"
)

// Policy names as the benchmark reports them.
const (
	PolicyRandom        = "random"
	PolicyRoundRobin    = "round-robin"
	PolicyLeastLoaded   = "least-loaded"
	PolicyApproxPrefix  = "approx-prefix"
	PolicyKVRouteTokens = "kvroute-tokens"
	PolicyKVRouteEngine = "kvroute-engine"
	// PolicyGreedy is GreedyCacheAware: a greedy heuristic over the engines'
	// real caches, not a bound.
	PolicyGreedy = "greedy-cache-aware"
	// PolicyKVRouteTokensB is kvroute-tokens with BenchOptions.RoutingB
	// instead of Routing: an A/B of a routing setting inside one run.
	PolicyKVRouteTokensB = "kvroute-tokens-b"
	// PolicyKVRouteTokensPeers is kvroute-tokens with its gateway replicas
	// joined in the peer mesh (config peers): each books the requests the
	// others route. The same as kvroute-tokens behind one gateway.
	PolicyKVRouteTokensPeers = "kvroute-tokens-peers"
	// PolicyLLMDSticky is llm-d's "sticky until saturated" default and
	// PolicyDynamoKV Dynamo's KV router (anchors.go), both reading the
	// engines' caches.
	PolicyLLMDSticky = "llm-d-sticky"
	PolicyDynamoKV   = "dynamo-kv"
)

// extraPolicies run only when named: variants of kvroute-tokens and the
// anchors' policies.
var extraPolicies = []string{PolicyKVRouteTokensB, PolicyKVRouteTokensPeers, PolicyLLMDSticky, PolicyDynamoKV}

// AllPolicies is every policy, in report order.
var AllPolicies = []string{PolicyRandom, PolicyRoundRobin, PolicyLeastLoaded, PolicyApproxPrefix,
	PolicyKVRouteTokens, PolicyKVRouteEngine, PolicyGreedy}

// BenchOptions describe one benchmark run. Every figure in
// docs/BENCHMARKS.md states the options that produced it.
type BenchOptions struct {
	TokenizerDir string
	Model        string
	Replicas     int
	NumBlocks    int // KV capacity per replica, in blocks
	BlockSize    int
	MaxNumSeqs   int
	Prefill      time.Duration // emulated time per uncached prompt token
	Decode       time.Duration // emulated time per decode step
	Seed         string        // the fleet's PYTHONHASHSEED
	// Workloads are run in order; Rate and Requests are set per phase from
	// Rates and PhaseDuration.
	Workloads []WorkloadParams
	Rates     []float64 // request rates (req/s), each run for every policy
	// PhaseDuration × rate requests per phase (at least MinRequests).
	PhaseDuration time.Duration
	MinRequests   int
	Policies      []string // subset of AllPolicies
	// LoadWeight is the prompt tokens one queued request costs, for the
	// gateway-side prefix policies (approx-prefix and its kin).
	LoadWeight float64
	// Gateways is the number of gateway replicas in front of the fleet
	// (default 1): each gateway-side policy runs that many instances, each
	// with its own memory, and kvroute that many servers, each with its own
	// ingest; request i goes to gateway i mod Gateways.
	Gateways int
	// Routing is extra kvroute routing config for the kvroute policies, as
	// a YAML flow mapping ("{placement_slack: 1}"); "" = the defaults.
	Routing string
	// ScrapeInterval is kvroute's ingest.scrape_interval (0: 200ms).
	ScrapeInterval time.Duration
	// RoutingB is the routing config of policy kvroute-tokens-b (keys:
	// tokens), which runs beside the others for an A/B in one run.
	RoutingB string
	// Churn restarts replica 0 (cache gone, same addresses) at
	// RestartAt × the phase's arrival window and starts one more replica,
	// configured in kvroute from the start but down until then, at JoinAt.
	Churn     bool
	RestartAt float64      // default 1/3
	JoinAt    float64      // default 1/2
	Progress  *Progress    // nil: silent
	Log       *slog.Logger // nil: discarded
}

// DefaultBenchOptions are scaled to a 2-core machine: 4 replicas × 256
// blocks × 16 tokens (16,384 tokens of KV), prefill 100µs per uncached
// token (a cold 1,400-token prompt costs 140ms, a warm one a few ms).
// Workloads is every kind; `kvroute-bench run` picks from it.
func DefaultBenchOptions() BenchOptions {
	return BenchOptions{
		TokenizerDir: ".cache/tokenizers/qwen3", Model: "qwen3",
		Replicas: 4, NumBlocks: 256, BlockSize: 16, MaxNumSeqs: 8,
		Prefill: 100 * time.Microsecond, Decode: 5 * time.Millisecond, Seed: "0",
		Workloads: []WorkloadParams{
			// 8 documents × ~1,400 tokens ≈ 11,200 tokens: ~70 % of the fleet's KV.
			{Kind: SharedPrefix, Groups: 8, UsersPerGroup: 8, PrefixWords: 1300, QuestionWords: 24, MaxTokens: 8, Seed: 1},
			// 12 sessions growing by ~45 tokens a turn from a ~300-token system prompt.
			{Kind: MultiTurn, Groups: 12, PrefixWords: 300, QuestionWords: 30, MaxTokens: 8, Seed: 2},
			// Unique ~700-token prompts: nothing to share.
			{Kind: NoSharing, PrefixWords: 680, QuestionWords: 20, MaxTokens: 8, Seed: 3},
			// multi-turn as chat messages through the Qwen3 template.
			{Kind: Chat, Groups: 12, PrefixWords: 300, QuestionWords: 30, MaxTokens: 8, Seed: 4},
			// 36 documents × ~1,400 tokens ≈ 50,000 tokens: ~3× the fleet's KV.
			{Kind: Eviction, Groups: 36, PrefixWords: 1300, QuestionWords: 24, ZipfS: 1, MaxTokens: 8, Seed: 5},
			// 6 documents × ~700 tokens under 3 salts and 3 adapters: 36 KV
			// namespaces of the same text, ≈ 1.5× the fleet's KV.
			{Kind: Tenants, Groups: 6, PrefixWords: 650, QuestionWords: 20, Tenants: 3, Adapters: 3, MaxTokens: 8, Seed: 6},
		},
		Rates:         []float64{8, 20, 40},
		PhaseDuration: 4 * time.Second,
		MinRequests:   30,
		Policies:      AllPolicies,
		LoadWeight:    256,
		Gateways:      1,
		RestartAt:     1.0 / 3,
		JoinAt:        0.5,
	}
}

// fleetOptions are the emulated fleet o describes (without a tokenizer,
// chat templates, adapters, spares or logger: RunBench adds them).
func (o BenchOptions) fleetOptions() EmuFleetOptions {
	return EmuFleetOptions{Replicas: o.Replicas, Model: o.Model, BlockSize: o.BlockSize, NumBlocks: o.NumBlocks,
		HashAlgo: blockhash.SHA256, Seed: o.Seed, MaxNumSeqs: o.MaxNumSeqs, PrefillPerToken: o.Prefill, DecodePerToken: o.Decode}
}

// Describe lists a workload's parameters, as the report prints them.
func Describe(w WorkloadParams) string {
	var s string
	switch w.Kind {
	case SharedPrefix:
		s = fmt.Sprintf("%d documents × %d words, %d users per document, %d-word questions", w.Groups, w.PrefixWords, w.UsersPerGroup, w.QuestionWords)
	case MultiTurn:
		s = fmt.Sprintf("%d sessions, %d-word system prompt, %d-word turns (answers half)", w.Groups, w.PrefixWords, w.QuestionWords)
	case Chat:
		s = fmt.Sprintf("%d chat sessions via /v1/chat/completions and the model's template, %d-word system message, %d-word user turns (assistant half)", w.Groups, w.PrefixWords, w.QuestionWords)
	case NoSharing:
		s = fmt.Sprintf("%d-word unique prompts", w.PrefixWords+w.QuestionWords)
	case Eviction:
		s = fmt.Sprintf("%d documents × %d words, Zipf exponent %g, %d-word questions", w.Groups, w.PrefixWords, w.ZipfS, w.QuestionWords)
	case Tenants:
		s = fmt.Sprintf("%d documents × %d words, each request under one of %d cache_salt tenants or %d LoRA adapters, %d-word questions", w.Groups, w.PrefixWords, w.Tenants, w.Adapters, w.QuestionWords)
	case Trace:
		s = "a recorded trace's requests at its arrival pattern sped to the rate"
		if w.Trace != nil {
			s = fmt.Sprintf("%d requests of a recorded trace at its arrival pattern sped to the rate, each 512-token block as %d words", min(w.Requests, len(w.Trace.At)), w.Trace.BlockWords)
		}
	}
	return fmt.Sprintf("%s (%s; %d output tokens; seed %d)", w.Kind, s, w.MaxTokens, w.Seed)
}

// Setup names o's gateway/churn mode as results carry it ("" for one
// gateway and a steady fleet).
func (o BenchOptions) Setup() string {
	var parts []string
	if o.Gateways > 1 {
		parts = append(parts, fmt.Sprintf("%d gateways", o.Gateways))
	}
	if o.ScrapeInterval > 0 && o.ScrapeInterval != DefaultBenchScrapeInterval {
		parts = append(parts, "kvroute scrape "+o.ScrapeInterval.String())
	}
	if o.Routing != "" {
		parts = append(parts, "kvroute routing "+o.Routing)
	}
	if o.RoutingB != "" && slices.Contains(o.Policies, PolicyKVRouteTokensB) {
		parts = append(parts, PolicyKVRouteTokensB+" routing "+o.RoutingB)
	}
	if o.Churn {
		parts = append(parts, fmt.Sprintf("churn (restart at %.0f %%, join at %.0f %%)", 100*o.RestartAt, 100*o.JoinAt))
	}
	return strings.Join(parts, ", ")
}

// adapters lists the LoRA adapters the workloads use.
func adapters(ws []WorkloadParams) []string {
	n := 0
	for _, w := range ws {
		if w.Kind == Tenants {
			n = max(n, w.Adapters)
		}
	}
	out := make([]string, n)
	for i := range out {
		out[i] = AdapterName(i)
	}
	return out
}

// RunBench starts the emulated fleet and kvroute in process and runs every
// workload × rate × policy, caches reset before each phase. Before the
// policies of each workload and rate it adds the two ceilings (Bound rows).
// It returns the results in run order.
func RunBench(ctx context.Context, o BenchOptions) ([]*Result, error) {
	for _, p := range o.Policies {
		if p == PolicyKVRouteTokensB && o.RoutingB == "" {
			return nil, fmt.Errorf("policy %s needs its routing config (--routing-b)", p)
		}
		if !slices.Contains(AllPolicies, p) && !slices.Contains(extraPolicies, p) {
			return nil, fmt.Errorf("unknown policy %q (known: %s)", p, strings.Join(append(slices.Clone(AllPolicies), extraPolicies...), ", "))
		}
	}
	o.Gateways = max(o.Gateways, 1)
	log := o.Log
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	tokDir, err := filepath.Abs(o.TokenizerDir)
	if err != nil {
		return nil, err
	}
	tok, err := tokenize.Load(tokDir)
	if err != nil {
		return nil, fmt.Errorf("tokenizer (run `make testdata`): %w", err)
	}
	chat, err := vllmemu.LoadChatTemplates(tok, tokDir, "")
	if err != nil {
		return nil, err
	}
	spare := 0
	if o.Churn {
		spare = 1
	}
	loras := adapters(o.Workloads)
	fo := o.fleetOptions()
	fo.Spare, fo.Tokenizer, fo.Chat, fo.LoRAAdapters, fo.Logger = spare, tok, chat, loras, log
	fleet, err := StartEmuFleet(ctx, fo)
	if err != nil {
		return nil, err
	}
	defer fleet.Close()

	kvs := map[string][]*KVRoute{}
	for _, v := range []struct {
		policy, keys, routing string
		peers                 bool
	}{
		{PolicyKVRouteTokens, config.KeysTokens, o.Routing, false}, {PolicyKVRouteEngine, config.KeysEngine, o.Routing, false},
		{PolicyKVRouteTokensB, config.KeysTokens, o.RoutingB, false}, {PolicyKVRouteTokensPeers, config.KeysTokens, o.Routing, true},
	} {
		if !slices.Contains(o.Policies, v.policy) {
			continue
		}
		var peers []string
		if v.peers {
			if peers, err = loopbackPeerEndpoints(o.Gateways); err != nil {
				return nil, err
			}
		}
		for g := range o.Gateways {
			kc := KVRouteConfig{Model: o.Model, TokenizerDir: tokDir, BlockSize: o.BlockSize,
				Keys: v.keys, HashAlgo: "sha256", Seed: o.Seed, ExtProc: "127.0.0.1:0", Replicas: fleet.Replicas,
				LoRAAdapters: loras, DebugHeaders: true, Routing: v.routing, ScrapeInterval: o.ScrapeInterval}
			if v.peers {
				kc.PeersListen, kc.Peers = peers[g], peers
			}
			kv, err := StartKVRoute(ctx, kc, 30*time.Second, log)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", v.policy, err)
			}
			defer kv.Close()
			kvs[v.policy] = append(kvs[v.policy], kv)
		}
	}

	driver := &Driver{Client: &http.Client{Timeout: 120 * time.Second}, Model: o.Model}
	if o.Progress != nil {
		driver.Progress = o.Progress.Observe
	}
	var results []*Result
	for _, w := range o.Workloads {
		for _, rate := range o.Rates {
			w.Rate = rate
			w.Requests = max(o.MinRequests, int(math.Round(rate*o.PhaseDuration.Seconds())))
			reqs, err := Generate(w)
			if err != nil {
				return nil, err
			}
			bounds, err := Ceilings(tok, chat, o, reqs)
			if err != nil {
				return nil, err
			}
			for _, b := range bounds {
				b.Workload, b.Setup, b.Rate = w.Kind, o.Setup(), rate
			}
			results = append(results, bounds...)
			floors := bounds[0].TTFT
			for _, p := range o.Policies {
				befores := make([]map[string]float64, len(kvs[p]))
				funnelBefore := make([]map[string]float64, len(kvs[p]))
				parityBefore := make([]map[string]float64, len(kvs[p]))
				meshBefore := make([]MeshDelay, len(kvs[p]))
				for i, kv := range kvs[p] {
					befores[i], funnelBefore[i], meshBefore[i] = kv.Decisions(), kv.PromptTokens(), kv.MeshDelay()
					parityBefore[i] = kv.ParityChecks()
				}
				r, err := runPhase(ctx, fleet, driver, o, p, kvs[p], w, reqs, floors)
				if err != nil {
					return results, fmt.Errorf("%s at %g req/s, %s: %w", w.Kind, rate, p, err)
				}
				for _, kv := range kvs[p] {
					if n := kv.Panics(); n > 0 {
						return results, fmt.Errorf("%s at %g req/s, %s: kvroute recovered %g panics (%s)", w.Kind, rate, p, n, panics.MetricName)
					}
				}
				if len(kvs[p]) > 0 {
					r.Decisions, r.Funnel, r.ParityChecks = map[string]int{}, map[string]int64{}, map[string]int{}
					var mesh MeshDelay
					for i, kv := range kvs[p] {
						for k, v := range kv.Decisions() {
							if d := int(v - befores[i][k]); d > 0 {
								r.Decisions[k] += d
							}
						}
						for o, v := range kv.PromptTokens() {
							r.Funnel[o] += int64(v - funnelBefore[i][o])
						}
						for c, v := range kv.ParityChecks() {
							if d := int(v - parityBefore[i][c]); d > 0 {
								r.ParityChecks[c] += d
							}
						}
						after := kv.MeshDelay()
						mesh.Messages += after.Messages - meshBefore[i].Messages
						mesh.Seconds += after.Seconds - meshBefore[i].Seconds
						mesh.Over20ms += after.Over20ms - meshBefore[i].Over20ms
					}
					if mesh.Messages > 0 {
						r.Mesh = &mesh
					}
				}
				results = append(results, r)
			}
		}
	}
	return results, nil
}

func newPolicy(fleet *EmuFleet, o BenchOptions, policy string, w WorkloadParams) Policy {
	switch policy {
	case PolicyRandom:
		return NewRandom(w.Seed)
	case PolicyRoundRobin:
		return &RoundRobin{}
	case PolicyLeastLoaded:
		return &LeastLoaded{}
	case PolicyApproxPrefix:
		return NewApproxPrefix(o.LoadWeight)
	case PolicyGreedy:
		return fleet.Greedy(o.LoadWeight)
	case PolicyLLMDSticky, PolicyDynamoKV:
		g := fleet.Greedy(o.LoadWeight)
		x := exactCache{Encode: g.Encode, CachedTokens: g.CachedTokens, BlockSize: o.BlockSize}
		if policy == PolicyLLMDSticky {
			return &LLMDSticky{exactCache: x, Threshold: StickyThreshold(DefaultStickySaturation, o.Prefill)}
		}
		return &DynamoKV{exactCache: x, Weight: 1, Seed: w.Seed}
	}
	return nil
}

func runPhase(ctx context.Context, fleet *EmuFleet, driver *Driver, o BenchOptions, policy string, kvs []*KVRoute, w WorkloadParams, reqs []Request, floors []time.Duration) (*Result, error) {
	// Churn: the spare starts every phase down; kvroute must see it
	// unreachable (three failed scrapes) before the phase starts.
	settle := 300 * time.Millisecond
	if o.Churn {
		fleet.Stop(fleet.Len() - 1)
		settle = 1500 * time.Millisecond
	}
	var urls []string
	if len(kvs) == 0 {
		// One instance per gateway replica: each remembers only its own
		// decisions and counts only its own requests in flight.
		for range o.Gateways {
			g := NewPolicyGateway(newPolicy(fleet, o, policy, w), fleet.HTTP.Addrs)
			g.Down = func(i int) bool { return !fleet.IsUp(i) }
			u, stop, err := ServeLoopback(g)
			if err != nil {
				return nil, err
			}
			defer stop()
			urls = append(urls, u)
		}
	} else {
		for _, kv := range kvs {
			urls = append(urls, kv.URL)
		}
	}
	if o.Progress != nil {
		label := fmt.Sprintf("%s %g/s %s", w.Kind, w.Rate, policy)
		if s := o.Setup(); s != "" {
			label += " (" + s + ")"
		}
		o.Progress.Begin(label, len(reqs))
		defer o.Progress.End()
	}
	up, _ := fleet.UpFleet()
	ph := &Phase{Fleet: up, Driver: driver, Settle: settle, Policy: policy, Workload: w.Kind, Rate: w.Rate, Arrivals: fleet.Arrivals}
	var churn *ChurnStats
	var restartErr, joinErr error // set by ph.During, which Run waits for
	if o.Churn {
		window := reqs[len(reqs)-1].At
		churn = &ChurnStats{Restarted: fleet.HTTP.Names[0], Joined: fleet.HTTP.Names[fleet.Len()-1],
			RestartAt: time.Duration(o.RestartAt * float64(window)), JoinAt: time.Duration(o.JoinAt * float64(window))}
		ph.Names = fleet.HTTP.Names
		ph.After = func() *HTTPFleet { f, _ := fleet.UpFleet(); return f }
		ph.During = func(ctx context.Context) {
			start := time.Now()
			type event struct {
				at time.Duration
				do func()
			}
			events := []event{
				{churn.RestartAt, func() { restartErr = fleet.Restart(ctx, 0) }},
				{churn.JoinAt, func() { joinErr = fleet.Start(ctx, fleet.Len()-1) }},
			}
			slices.SortFunc(events, func(a, b event) int { return int(a.at - b.at) })
			for _, e := range events {
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Until(start.Add(e.at))):
				}
				e.do()
			}
		}
	}
	ph.Setup = o.Setup()
	r, err := ph.Run(ctx, urls, reqs)
	if err != nil {
		return nil, err
	}
	r.BelowFloor = BelowFloor(floors, ph.samples)
	tm := o.fleetOptions().TimeModel()
	for _, s := range ph.samples {
		if s.Err == nil && s.PromptTokens > 0 {
			r.Wait = append(r.Wait, s.TTFT-tm.FirstTokenFloor(s.PromptTokens-s.CachedTokens))
		}
	}
	if churn == nil {
		return r, nil
	}
	if err := errors.Join(restartErr, joinErr); err != nil {
		return nil, fmt.Errorf("churn: %w", err)
	}
	r.Churn = churn
	// Requests the restarted engine got once its restart was visible (1 s),
	// joined with what the client saw: kvroute claimed a match the engine no
	// longer held when x-kvroute-matched-tokens exceeds cached_tokens by more
	// than one block (kvroute counts every full block; the engine never hits
	// the block holding the last prompt token).
	for _, a := range ph.arrivals {
		id, err := strconv.Atoi(a.ID)
		if err != nil || id < 0 || id >= len(ph.samples) {
			continue
		}
		switch a.Replica {
		case churn.Joined:
			churn.ToJoined++
		case churn.Restarted:
			if a.At.Sub(ph.started) < churn.RestartAt+time.Second {
				continue
			}
			churn.ToRestarted++
			if s := ph.samples[id]; a.Matched > 0 && s.Err == nil && a.Matched > s.CachedTokens+o.BlockSize {
				churn.StaleRouted++
			}
		}
	}
	return r, nil
}

// Ceilings replays a workload's requests, one at a time in arrival order,
// through two offline prefix caches and returns them as Bound results: the
// infinite cache (every block ever computed stays: the reuse in the
// workload itself) and the pooled cache (one engine holding the whole
// fleet's KV, Replicas × (NumBlocks − 1) blocks, with the engines' own
// BlockPool and eviction). Routing over separate engines cannot beat the
// first and rarely beats the second by much.
//
// Each row's TTFT holds one time to first token per request, in request
// order: the zero-queue time the fleet's engines would take with that
// cache (vllmemu.TimeModel.FirstTokenFloor of the request's uncached prompt
// tokens). Under the infinite cache it is a floor for every router: no
// engine can hold more of a prompt than every block computed before it, and
// nothing the engine charges beyond the prefill steps is unavoidable, so
// each request's real TTFT is at least its floor and every quantile at
// least the floors' (docs/BENCHMARKS.md states the argument and its one
// assumption). Under the pooled cache it is an estimate, not a bound.
func Ceilings(tok *tokenize.Tokenizer, chat *chattemplate.ChatTemplates, o BenchOptions, reqs []Request) ([]*Result, error) {
	seed := o.Seed
	h, err := blockhash.NewEngine(blockhash.SHA256, &seed, o.BlockSize)
	if err != nil {
		return nil, err
	}
	tm := o.fleetOptions().TimeModel()
	inf := &Result{Policy: BoundInfinite, Bound: true, Requests: len(reqs), TTFT: make([]time.Duration, 0, len(reqs))}
	pooled := &Result{Policy: BoundPooled, Bound: true, Requests: len(reqs), TTFT: make([]time.Duration, 0, len(reqs))}
	seen := map[string]int{} // requests containing each block
	replay := vllmemu.NewCacheReplay(o.Replicas*(o.NumBlocks-1)+1, o.BlockSize)
	for _, r := range reqs {
		_, body := RequestBody(o.Model, r)
		ids, err := EncodeRequest(tok, chat, PickRequest{Prompt: r.Prompt, Messages: r.Messages, Body: body})
		if err != nil {
			return nil, err
		}
		ds, err := vllmemu.BlockDigests(h, ids, r.Model, r.CacheSalt)
		if err != nil {
			return nil, err
		}
		maxHit := (len(ids) - 1) / o.BlockSize
		hit := 0
		for hit < min(maxHit, len(ds)) && seen[string(ds[hit].Bytes())] > 0 {
			hit++
		}
		for _, d := range ds {
			seen[string(d.Bytes())]++
		}
		inf.PromptTokens += int64(len(ids))
		inf.CachedTokens += int64(hit * o.BlockSize)
		inf.TTFT = append(inf.TTFT, tm.FirstTokenFloor(len(ids)-hit*o.BlockSize))
		cached := replay.Serve(ids, ds, r.MaxTokens)
		pooled.PromptTokens += int64(len(ids))
		pooled.CachedTokens += int64(cached)
		pooled.TTFT = append(pooled.TTFT, tm.FirstTokenFloor(len(ids)-cached))
	}
	// The distinct blocks the workload touches, and those in more than one
	// request (what is worth keeping), against the fleet's KV.
	for _, n := range seen {
		if n > 1 {
			inf.SharedBlocks++
		}
	}
	inf.WorkingSetBlocks = len(seen)
	pooled.WorkingSetBlocks, pooled.SharedBlocks = inf.WorkingSetBlocks, inf.SharedBlocks
	return []*Result{inf, pooled}, nil
}

// BelowFloor counts the answered requests whose TTFT is under their
// infinite-cache floor (floors in request order, as Ceilings returns them;
// samples as Driver.Run does). It is 0 whenever the floor argument holds; a
// run reports it so that a violation shows.
func BelowFloor(floors []time.Duration, samples []Sample) int {
	n := 0
	for i, s := range samples {
		if i < len(floors) && s.Err == nil && s.TTFT < floors[i] {
			n++
		}
	}
	return n
}

// Ceiling row names.
const (
	BoundInfinite = "bound: infinite cache"
	BoundPooled   = "bound: pooled cache"
)

// NewApproxPrefix is the approximate prefix policy with the Gateway API
// Inference Extension's prefix plugin defaults: 64-character chunks and an
// LRU of 31,250 chunks per server (pkg/epp/scheduling/framework/plugins/
// multi/prefix, v0.5), and 4 characters per token.
func NewApproxPrefix(loadWeight float64) *ApproxPrefix {
	return &ApproxPrefix{ChunkChars: 64, CharsPerToken: 4, LoadWeight: loadWeight, Capacity: 31250}
}

// WriteReport writes results.md (per workload and setup: its parameters, the
// ceilings and the table) and one SVG chart of TTFT p90 against rate per
// section into dir. params describes each workload kind (Describe);
// fleetKVBlocks is the fleet's KV in blocks, for the working-set ratio.
func WriteReport(dir string, header string, results []*Result, params map[string]string, fleetKVBlocks int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var md strings.Builder
	md.WriteString(header)
	for _, label := range labels(results) {
		rs := filterLabel(results, label)
		fmt.Fprintf(&md, "\n### %s\n\n", label)
		if p := params[rs[0].Workload]; p != "" {
			fmt.Fprintf(&md, "parameters: %s", p)
			if rs[0].Setup != "" {
				fmt.Fprintf(&md, "; %s", rs[0].Setup)
			}
			md.WriteString("\n")
		}
		md.WriteString("\n")
		for _, r := range rs {
			if r.Bound && r.Policy == BoundInfinite && fleetKVBlocks > 0 {
				fmt.Fprintf(&md, "- working set at %g req/s: %d distinct prompt blocks in more than one request = %.2f× the fleet's KV (%d blocks); %d distinct blocks in all\n",
					r.Rate, r.SharedBlocks, float64(r.SharedBlocks)/float64(fleetKVBlocks), fleetKVBlocks, r.WorkingSetBlocks)
			}
		}
		md.WriteString("\n")
		WriteMarkdown(&md, rs)
		writeFloorCheck(&md, rs)
		writeDecisions(&md, rs)
		writeChurn(&md, rs)
		var routed []*Result
		for _, r := range rs {
			if !r.Bound {
				routed = append(routed, r)
			}
		}
		name := "ttft-p90-" + slug(label) + ".svg"
		fmt.Fprintf(&md, "\n![TTFT p90 vs rate, %s](%s)\n", label, name)
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		WriteSVG(f, "TTFT p90 vs request rate — "+label, routed)
		if err := f.Close(); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(dir, "results.md"), []byte(md.String()), 0o644)
}

// slug makes a section label a file name.
func slug(s string) string {
	var b strings.Builder
	dash := false
	for _, c := range strings.ToLower(s) {
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' {
			b.WriteRune(c)
			dash = false
		} else if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	return strings.TrimSuffix(b.String(), "-")
}

func labels(results []*Result) []string {
	var out []string
	for _, r := range results {
		if !slices.Contains(out, r.Label()) {
			out = append(out, r.Label())
		}
	}
	return out
}

func filterLabel(results []*Result, label string) []*Result {
	var out []*Result
	for _, r := range results {
		if r.Label() == label {
			out = append(out, r)
		}
	}
	return out
}

// writeFloorCheck says how many answered requests beat their infinite-cache
// floor: none may, if the floor is one.
func writeFloorCheck(w io.Writer, results []*Result) {
	below, answered := 0, 0
	for _, r := range results {
		if !r.Bound {
			below += r.BelowFloor
			answered += len(r.TTFT)
		}
	}
	if answered == 0 {
		return
	}
	fmt.Fprintf(w, "\nrequests answered faster than their own infinite-cache TTFT floor (the floor is a bound only if this is 0): %d of %d\n", below, answered)
	for _, r := range results {
		if r.Errors > 0 {
			fmt.Fprintf(w, "\nerrors, %g req/s %s: %d; the first: %s\n", r.Rate, r.Policy, r.Errors, r.FirstError)
		}
		if m := r.Mesh; m != nil {
			fmt.Fprintf(w, "\npeer mesh, %g req/s %s: %.0f messages handled, mean delay %.2f ms, %.1f %% over %g ms (kvroute_peer_message_delay_seconds)\n",
				r.Rate, r.Policy, m.Messages, 1000*m.Seconds/m.Messages, 100*m.Over20ms/m.Messages, 1000*meshDelaySlow)
		}
	}
	fmt.Fprintln(w, "\nwait: TTFT minus the request's own zero-queue prefill with the hit it got (queueing, decodes sharing its steps, the gateway hop), p50 / p90 / p99:")
	for _, r := range results {
		if !r.Bound && len(r.Wait) > 0 {
			fmt.Fprintf(w, "- %g req/s %s: %s / %s / %s\n", r.Rate, r.Policy, ms(NearestRank(r.Wait, 0.5)), ms(NearestRank(r.Wait, 0.9)), ms(NearestRank(r.Wait, 0.99)))
		}
	}
}

func writeChurn(w io.Writer, results []*Result) {
	first := true
	for _, r := range results {
		c := r.Churn
		if c == nil {
			continue
		}
		if first {
			fmt.Fprintln(w, "\nchurn: requests reaching the restarted engine ≥ 1 s after its restart, of which kvroute claimed more matched tokens than the engine held (x-kvroute-matched-tokens > cached_tokens + one block); requests reaching the joined engine:")
			first = false
		}
		fmt.Fprintf(w, "- %g req/s %s: %s restarted at %s, %d requests after, %d stale-routed; %s joined at %s, %d requests\n",
			r.Rate, r.Policy, c.Restarted, c.RestartAt.Round(time.Millisecond), c.ToRestarted, c.StaleRouted,
			c.Joined, c.JoinAt.Round(time.Millisecond), c.ToJoined)
	}
}

// Goal is one of the targets for kvroute, checked on a run.
type Goal struct {
	Name   string
	Met    bool
	Detail string
}

// CheckGoals evaluates the routing goals for kvroute (the variant named by
// policy) on what was run: no-sharing TTFT p90 ≤ 1.05× round-robin's at every
// rate; no request rejected; on eviction and several gateways (highest rate)
// TTFT p90 ≥ 2× better than approx-prefix's and token hit rate ≥
// approx-prefix's + 10 points; under churn 0 stale-routed requests. A goal
// whose baseline was not run is left out.
func CheckGoals(results []*Result, policy string) []Goal {
	find := func(label, pol string, rate float64) *Result {
		for _, r := range results {
			if r.Label() == label && r.Policy == pol && r.Rate == rate {
				return r
			}
		}
		return nil
	}
	var goals []Goal
	var order []string
	refused, requests, answered503 := map[string]int{}, map[string]int{}, map[string]int{}
	top := map[string]float64{}
	for _, r := range results {
		top[r.Label()] = max(top[r.Label()], r.Rate)
	}
	for _, kv := range results {
		if kv.Policy != policy {
			continue
		}
		label := kv.Label()
		if kv.Workload == NoSharing && kv.Setup == "" {
			if rr := find(label, PolicyRoundRobin, kv.Rate); rr != nil {
				ratio := float64(kv.Percentile(0.9)) / float64(max(rr.Percentile(0.9), 1))
				goals = append(goals, Goal{Name: fmt.Sprintf("%s %g req/s: TTFT p90 ≤ 1.05× round-robin's", label, kv.Rate), Met: ratio <= 1.05,
					Detail: fmt.Sprintf("%s vs %s (%.2f×)", ms(kv.Percentile(0.9)), ms(rr.Percentile(0.9)), ratio)})
			}
		}
		// kvroute's own refusals; the 503 column also counts the gateway's
		// "upstream connect error" (Envoy's status) for an engine that is down.
		for k, n := range kv.Decisions {
			if strings.HasPrefix(k, "rejected/") {
				refused[label] += n
			}
		}
		requests[label] += kv.Requests
		answered503[label] += kv.Rejected
		if !slices.Contains(order, label) {
			order = append(order, label)
		}
		if (kv.Workload == Eviction || strings.Contains(kv.Setup, "gateways")) && kv.Rate == top[label] {
			if ap := find(label, PolicyApproxPrefix, kv.Rate); ap != nil {
				ratio := float64(ap.Percentile(0.9)) / float64(max(kv.Percentile(0.9), 1))
				detail := fmt.Sprintf("%s vs %s (%.2f×)", ms(kv.Percentile(0.9)), ms(ap.Percentile(0.9)), ratio)
				// Whether 2× is within reach at all: the infinite cache's
				// p90 is a floor, the pooled cache's an estimate.
				if inf, pooled := find(label, BoundInfinite, kv.Rate), find(label, BoundPooled, kv.Rate); inf != nil && pooled != nil && len(inf.TTFT) > 0 {
					detail += fmt.Sprintf("; 2× needs ≤ %s: infinite-cache floor p90 %s, pooled-cache estimate p90 %s",
						ms(ap.Percentile(0.9)/2), ms(inf.Percentile(0.9)), ms(pooled.Percentile(0.9)))
				}
				goals = append(goals, Goal{Name: fmt.Sprintf("%s %g req/s: TTFT p90 ≥ 2× better than approx-prefix's", label, kv.Rate), Met: ratio >= 2,
					Detail: detail})
				d := 100 * (kv.HitRate() - ap.HitRate())
				goals = append(goals, Goal{Name: fmt.Sprintf("%s %g req/s: token hit rate ≥ approx-prefix's + 10 points", label, kv.Rate), Met: d >= 10,
					Detail: fmt.Sprintf("%.1f %% vs %.1f %% (%+.1f points)", 100*kv.HitRate(), 100*ap.HitRate(), d)})
			}
		}
		if c := kv.Churn; c != nil {
			goals = append(goals, Goal{Name: fmt.Sprintf("%s %g req/s: 0 requests routed to the restarted engine for blocks it lost", label, kv.Rate),
				Met: c.StaleRouted == 0, Detail: fmt.Sprintf("%d of %d requests it got ≥ 1 s after the restart", c.StaleRouted, c.ToRestarted)})
		}
	}
	for _, label := range order {
		goals = append(goals, Goal{Name: fmt.Sprintf("%s, every rate: no request rejected by kvroute", label), Met: refused[label] == 0,
			Detail: fmt.Sprintf("%d of %d rejected by kvroute (decisions rejected/*); %d answered 503 in all", refused[label], requests[label], answered503[label])})
	}
	return goals
}

// WriteGoals lists goals as Markdown bullets.
func WriteGoals(w io.Writer, policy string, goals []Goal) {
	for _, g := range goals {
		verdict := "met"
		if !g.Met {
			verdict = "NOT met"
		}
		fmt.Fprintf(w, "- %s, %s: %s — %s\n", policy, g.Name, verdict, g.Detail)
	}
}

// writeDecisions lists kvroute's decisions per phase (outcome/reason counts).
func writeDecisions(w io.Writer, results []*Result) {
	first := true
	for _, r := range results {
		if r.Decisions == nil {
			continue
		}
		if first {
			fmt.Fprintln(w, "\nkvroute's decisions (kvroute_route_decisions_total, outcome/reason):")
			first = false
		}
		keys := slices.Sorted(maps.Keys(r.Decisions))
		parts := make([]string, 0, len(keys))
		for _, k := range keys {
			parts = append(parts, fmt.Sprintf("%s %d", k, r.Decisions[k]))
		}
		fmt.Fprintf(w, "- %g req/s %s: %s\n", r.Rate, r.Policy, strings.Join(parts, ", "))
		if f := r.Funnel; f != nil {
			routed := f[routing.TokensCachedPredicted] + f[routing.TokensNew] + f[routing.TokensGivenUpForLoad]
			fmt.Fprintf(w, "  prompt tokens (kvroute_prompt_tokens_total): %d routed (the engines' responses say %d); %s %d, %s %d, %s %d; of them per the engines %s %d, %s %d\n",
				routed, r.PromptTokens, routing.TokensCachedPredicted, f[routing.TokensCachedPredicted], routing.TokensNew, f[routing.TokensNew],
				routing.TokensGivenUpForLoad, f[routing.TokensGivenUpForLoad], routing.TokensStale, f[routing.TokensStale],
				routing.TokensCachedUnpredicted, f[routing.TokensCachedUnpredicted])
		}
		if pc := r.ParityChecks; pc != nil {
			keys := slices.Sorted(maps.Keys(pc))
			parts := make([]string, 0, len(keys))
			for _, k := range keys {
				parts = append(parts, fmt.Sprintf("%s %d", k, pc[k]))
			}
			fmt.Fprintf(w, "  parity checks (kvroute_parity_checks_total, check/result): %s\n", strings.Join(parts, ", "))
		}
	}
}
