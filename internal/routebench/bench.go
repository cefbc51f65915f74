package routebench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/kvroute/kvroute/blockhash"
	"github.com/kvroute/kvroute/config"
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
	PolicyOracle        = "oracle"
)

// AllPolicies is every policy, in report order.
var AllPolicies = []string{PolicyRandom, PolicyRoundRobin, PolicyLeastLoaded, PolicyApproxPrefix,
	PolicyKVRouteTokens, PolicyKVRouteEngine, PolicyOracle}

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
	// gateway-side prefix policies (kvroute's default routing.load_weight).
	LoadWeight float64
	Progress   *Progress    // nil: silent
	Log        *slog.Logger // nil: discarded
}

// DefaultBenchOptions are scaled to a 2-core machine: 4 replicas × 256
// blocks × 16 tokens (16,384 tokens of KV), prefill 100µs per uncached
// token (a cold 1,400-token prompt costs 140ms, a warm one a few ms), three
// rates, about 5 minutes for every policy and workload.
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
		},
		Rates:         []float64{8, 20, 40},
		PhaseDuration: 4 * time.Second,
		MinRequests:   30,
		Policies:      AllPolicies,
		LoadWeight:    256,
	}
}

// RunBench starts the emulated fleet and the two kvroute variants in
// process and runs every workload × rate × policy, caches reset before each
// phase. It returns the results in run order.
func RunBench(ctx context.Context, o BenchOptions) ([]*Result, error) {
	for _, p := range o.Policies {
		if !slices.Contains(AllPolicies, p) {
			return nil, fmt.Errorf("unknown policy %q (known: %s)", p, strings.Join(AllPolicies, ", "))
		}
	}
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
	fleet, err := StartEmuFleet(ctx, EmuFleetOptions{
		Replicas: o.Replicas, Model: o.Model, Tokenizer: tok, BlockSize: o.BlockSize, NumBlocks: o.NumBlocks,
		HashAlgo: blockhash.SHA256, Seed: o.Seed, MaxNumSeqs: o.MaxNumSeqs,
		PrefillPerToken: o.Prefill, DecodePerToken: o.Decode, Logger: log,
	})
	if err != nil {
		return nil, err
	}
	defer fleet.Close()

	kvURL := map[string]string{}
	kvs := map[string]*KVRoute{}
	for _, v := range []struct{ policy, keys string }{
		{PolicyKVRouteTokens, config.KeysTokens}, {PolicyKVRouteEngine, config.KeysEngine},
	} {
		if !slices.Contains(o.Policies, v.policy) {
			continue
		}
		kv, err := StartKVRoute(ctx, KVRouteConfig{Model: o.Model, TokenizerDir: tokDir, BlockSize: o.BlockSize,
			Keys: v.keys, HashAlgo: "sha256", Seed: o.Seed, ExtProc: "127.0.0.1:0", Replicas: fleet.Replicas}, 30*time.Second, log)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", v.policy, err)
		}
		defer kv.Close()
		kvURL[v.policy] = kv.URL
		kvs[v.policy] = kv
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
			for _, p := range o.Policies {
				var before map[string]float64
				if kv := kvs[p]; kv != nil {
					before = kv.Decisions()
				}
				r, err := runPhase(ctx, fleet, driver, o, p, kvURL[p], w, reqs)
				if err != nil {
					return results, fmt.Errorf("%s at %g req/s, %s: %w", w.Kind, rate, p, err)
				}
				if kv := kvs[p]; kv != nil {
					r.Decisions = map[string]int{}
					for k, v := range kv.Decisions() {
						if d := int(v - before[k]); d > 0 {
							r.Decisions[k] = d
						}
					}
				}
				results = append(results, r)
			}
		}
	}
	return results, nil
}

func runPhase(ctx context.Context, fleet *EmuFleet, driver *Driver, o BenchOptions, policy, url string, w WorkloadParams, reqs []Request) (*Result, error) {
	if url == "" {
		var pol Policy
		switch policy {
		case PolicyRandom:
			pol = NewRandom(w.Seed)
		case PolicyRoundRobin:
			pol = &RoundRobin{}
		case PolicyLeastLoaded:
			pol = &LeastLoaded{}
		case PolicyApproxPrefix:
			pol = NewApproxPrefix(o.LoadWeight)
		case PolicyOracle:
			pol = fleet.Oracle(o.LoadWeight)
		}
		u, stop, err := ServeLoopback(NewPolicyGateway(pol, fleet.HTTP.Addrs))
		if err != nil {
			return nil, err
		}
		defer stop()
		url = u
	}
	if o.Progress != nil {
		o.Progress.Begin(fmt.Sprintf("%s %g/s %s", w.Kind, w.Rate, policy), len(reqs))
		defer o.Progress.End()
	}
	ph := &Phase{Fleet: fleet.HTTP, Driver: driver, Settle: 300 * time.Millisecond, Policy: policy, Workload: w.Kind, Rate: w.Rate}
	return ph.Run(ctx, url, reqs)
}

// NewApproxPrefix is the approximate prefix policy with the Gateway API
// Inference Extension's prefix plugin defaults: 64-character chunks and an
// LRU of 31,250 chunks per server (pkg/epp/scheduling/framework/plugins/
// multi/prefix, v0.5), and 4 characters per token.
func NewApproxPrefix(loadWeight float64) *ApproxPrefix {
	return &ApproxPrefix{ChunkChars: 64, CharsPerToken: 4, LoadWeight: loadWeight, Capacity: 31250}
}

// WriteReport writes results.md (the tables, per workload) and one SVG
// chart of TTFT p90 against rate per workload into dir.
func WriteReport(dir string, header string, results []*Result) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var md strings.Builder
	md.WriteString(header)
	for _, kind := range workloadKinds(results) {
		rs := filterWorkload(results, kind)
		fmt.Fprintf(&md, "\n### %s\n\n", kind)
		WriteMarkdown(&md, rs)
		writeDecisions(&md, rs)
		name := "ttft-p90-" + kind + ".svg"
		fmt.Fprintf(&md, "\n![TTFT p90 vs rate, %s](%s)\n", kind, name)
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		WriteSVG(f, "TTFT p90 vs request rate — "+kind, rs)
		if err := f.Close(); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(dir, "results.md"), []byte(md.String()), 0o644)
}

func workloadKinds(results []*Result) []string {
	var kinds []string
	for _, r := range results {
		if !slices.Contains(kinds, r.Workload) {
			kinds = append(kinds, r.Workload)
		}
	}
	return kinds
}

func filterWorkload(results []*Result, kind string) []*Result {
	var out []*Result
	for _, r := range results {
		if r.Workload == kind {
			out = append(out, r)
		}
	}
	return out
}

// Goal is one of the targets for kvroute, checked on a run.
type Goal struct {
	Name   string
	Met    bool
	Detail string
}

// CheckGoals evaluates the goals for kvroute (the variant named by
// policy) on the shared-prefix workload at the highest rate run: token hit
// rate ≥ 90 % of the oracle's; TTFT p90 ≥ 10× better than round-robin's and
// ≥ 2× better than the approximate prefix router's. A goal whose baseline
// was not run is left out.
func CheckGoals(results []*Result, policy string) []Goal {
	top := map[string]*Result{}
	for _, r := range results {
		if r.Workload != SharedPrefix {
			continue
		}
		if cur, ok := top[r.Policy]; !ok || r.Rate > cur.Rate {
			top[r.Policy] = r
		}
	}
	kv := top[policy]
	if kv == nil {
		return nil
	}
	var goals []Goal
	if o := top[PolicyOracle]; o != nil && o.Rate == kv.Rate {
		ratio := kv.HitRate() / o.HitRate()
		goals = append(goals, Goal{Name: "hit rate ≥ 90 % of oracle's", Met: ratio >= 0.9,
			Detail: fmt.Sprintf("%.1f %% vs %.1f %% (%.0f %%)", 100*kv.HitRate(), 100*o.HitRate(), 100*ratio)})
	}
	for _, b := range []struct {
		policy string
		factor float64
	}{{PolicyRoundRobin, 10}, {PolicyApproxPrefix, 2}} {
		base := top[b.policy]
		if base == nil || base.Rate != kv.Rate {
			continue
		}
		ratio := float64(base.Percentile(0.9)) / float64(max(kv.Percentile(0.9), 1))
		goals = append(goals, Goal{Name: fmt.Sprintf("TTFT p90 ≥ %g× better than %s at %g req/s", b.factor, b.policy, kv.Rate),
			Met: ratio >= b.factor, Detail: fmt.Sprintf("%s vs %s (%.1f×)", ms(kv.Percentile(0.9)), ms(base.Percentile(0.9)), ratio)})
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
	}
}
