package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/kvroute/kvroute/internal/fleetsim"
	"github.com/kvroute/kvroute/internal/routebench"
)

// runBench is `kvroute-bench run`, the routing-quality benchmark.
func runBench(ctx context.Context, args []string, io stdio) error {
	o := routebench.DefaultBenchOptions()
	shared, turns, unique, chat, evict, ten := &o.Workloads[0], &o.Workloads[1], &o.Workloads[2], &o.Workloads[3], &o.Workloads[4], &o.Workloads[5]
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(io.err)
	out := fs.String("out", "bench-results", "directory for results.md and the SVG charts")
	workloads := fs.String("workloads", "shared-prefix,multi-turn,no-sharing", "workloads to run, comma-separated ("+strings.Join(routebench.Kinds, ", ")+", and trace with --trace)")
	policies := fs.String("policies", strings.Join(routebench.AllPolicies, ","), "policies to compare, comma-separated; besides these, kvroute-tokens-b (with --routing-b), kvroute-tokens-peers (the --gateways kvroutes joined in the peer mesh), and the anchors' llm-d-sticky and dynamo-kv (reading the engines' caches)")
	rates := fs.String("rates", joinFloats(o.Rates), "request rates (req/s, Poisson), comma-separated")
	fs.StringVar(&o.TokenizerDir, "tokenizer", o.TokenizerDir, "tokenizer directory of the emulated model")
	fs.IntVar(&o.Replicas, "replicas", o.Replicas, "emulated vLLM replicas")
	fs.IntVar(&o.NumBlocks, "num-blocks", o.NumBlocks, "KV-cache blocks per replica")
	fs.IntVar(&o.MaxNumSeqs, "max-num-seqs", o.MaxNumSeqs, "running sequences per replica")
	fs.DurationVar(&o.Prefill, "prefill-per-token", o.Prefill, "emulated prefill time per uncached prompt token")
	fs.DurationVar(&o.Decode, "decode-per-token", o.Decode, "emulated time per decode step")
	fs.DurationVar(&o.PhaseDuration, "phase-duration", o.PhaseDuration, "arrivals last this long per phase (requests = rate × duration)")
	fs.IntVar(&o.MinRequests, "min-requests", o.MinRequests, "at least this many requests per phase")
	fs.IntVar(&shared.Groups, "shared-groups", shared.Groups, "shared-prefix: documents (groups)")
	fs.IntVar(&shared.UsersPerGroup, "shared-users", shared.UsersPerGroup, "shared-prefix: users per group")
	fs.IntVar(&shared.PrefixWords, "shared-prefix-words", shared.PrefixWords, "shared-prefix: words per document")
	fs.IntVar(&shared.QuestionWords, "shared-question-words", shared.QuestionWords, "shared-prefix: words per question")
	fs.IntVar(&turns.Groups, "turn-sessions", turns.Groups, "multi-turn: concurrent sessions")
	fs.IntVar(&turns.PrefixWords, "turn-system-words", turns.PrefixWords, "multi-turn: words in a session's system prompt")
	fs.IntVar(&turns.QuestionWords, "turn-words", turns.QuestionWords, "multi-turn: words per user turn (answers add half)")
	fs.IntVar(&unique.PrefixWords, "unique-words", unique.PrefixWords, "no-sharing: words per prompt")
	fs.IntVar(&chat.Groups, "chat-sessions", chat.Groups, "chat: concurrent sessions")
	fs.IntVar(&chat.PrefixWords, "chat-system-words", chat.PrefixWords, "chat: words in a session's system message")
	fs.IntVar(&chat.QuestionWords, "chat-words", chat.QuestionWords, "chat: words per user turn (assistant turns add half)")
	fs.IntVar(&evict.Groups, "eviction-docs", evict.Groups, "eviction: documents")
	fs.IntVar(&evict.PrefixWords, "eviction-doc-words", evict.PrefixWords, "eviction: words per document")
	fs.Float64Var(&evict.ZipfS, "eviction-zipf", evict.ZipfS, "eviction: Zipf exponent of document popularity (0: uniform)")
	fs.IntVar(&ten.Groups, "tenant-docs", ten.Groups, "tenants: shared documents")
	fs.IntVar(&ten.PrefixWords, "tenant-doc-words", ten.PrefixWords, "tenants: words per document")
	fs.IntVar(&ten.Tenants, "tenants", ten.Tenants, "tenants: cache_salt tenants")
	fs.IntVar(&ten.Adapters, "adapters", ten.Adapters, "tenants: LoRA adapters")
	fs.IntVar(&o.Gateways, "gateways", o.Gateways, "gateway replicas in front of the fleet (each policy instance and each kvroute with its own state; clients spread evenly)")
	fs.StringVar(&o.Routing, "routing", o.Routing, `extra kvroute routing config as YAML flow, e.g. "{placement_slack: 1}" (kvroute policies only)`)
	fs.DurationVar(&o.ScrapeInterval, "scrape-interval", routebench.DefaultBenchScrapeInterval, "kvroute's ingest.scrape_interval (how often each kvroute reads every engine's /metrics)")
	fs.StringVar(&o.RoutingB, "routing-b", o.RoutingB, `routing config of the extra policy kvroute-tokens-b (keys: tokens), for an A/B inside one run`)
	fs.BoolVar(&o.Churn, "churn", o.Churn, "restart replica 0 (cache gone, same address) and start one more replica (down until then) mid-phase")
	fs.Float64Var(&o.RestartAt, "restart-at", o.RestartAt, "churn: restart at this fraction of the phase")
	fs.Float64Var(&o.JoinAt, "join-at", o.JoinAt, "churn: the extra replica joins at this fraction of the phase")
	maxTokens := fs.Int("max-tokens", shared.MaxTokens, "output tokens per request")
	trace := fs.String("trace", "", "Mooncake-format JSONL trace for the trace workload (selected by default when given): its requests from --trace-from on, arrivals sped to each rate, every 512-token block as --trace-block-words words of text")
	traceFrom := fs.Int("trace-from", 0, "trace: the first request replayed")
	blockWords := fs.Int("trace-block-words", 8, "trace: words of text per 512-token block of the trace (scales the trace to the emulated fleet)")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	if *trace != "" {
		recs, err := fleetsim.ReadTrace(*trace)
		if err != nil {
			return err
		}
		if *traceFrom < 0 || *traceFrom >= len(recs) || *blockWords < 1 {
			return fmt.Errorf("--trace-from must be within 0..%d, --trace-block-words at least 1", len(recs)-1)
		}
		tr := &routebench.TraceReplay{BlockWords: *blockWords}
		for _, r := range recs[*traceFrom:] {
			tr.At = append(tr.At, time.Duration(r.Timestamp)*time.Millisecond)
			tr.Blocks = append(tr.Blocks, r.HashIDs)
		}
		o.Workloads = append(o.Workloads, routebench.WorkloadParams{Kind: routebench.Trace, Trace: tr, Seed: 7})
		set := false
		fs.Visit(func(f *flag.Flag) { set = set || f.Name == "workloads" })
		if !set {
			*workloads = routebench.Trace
		}
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return errUsage
	}
	var err error
	if o.Gateways < 1 || o.RestartAt < 0 || o.RestartAt > 1 || o.JoinAt < 0 || o.JoinAt > 1 {
		return errors.New("--gateways must be ≥ 1, --restart-at and --join-at within 0..1")
	}
	if o.Rates, err = parseFloats(*rates); err != nil {
		return fmt.Errorf("--rates: %w", err)
	}
	o.Policies = splitList(*policies)
	var ws []routebench.WorkloadParams
	for _, k := range splitList(*workloads) {
		found := false
		for _, w := range o.Workloads {
			if w.Kind == k {
				w.MaxTokens = *maxTokens
				ws = append(ws, w)
				found = true
			}
		}
		if !found {
			return fmt.Errorf("--workloads: unknown workload %q", k)
		}
	}
	o.Workloads = ws
	o.Progress = &routebench.Progress{W: io.err, TTY: io.errTTY}

	start := time.Now()
	results, runErr := routebench.RunBench(ctx, o)
	if len(results) == 0 {
		return runErr
	}
	var hdr strings.Builder
	fmt.Fprintf(&hdr, "# kvroute-bench run\n\ncommand: `kvroute-bench run %s`\n\n", strings.Join(args, " "))
	fmt.Fprintf(&hdr, "fleet: %d emulated vLLM replicas × %d blocks × %d tokens, max %d sequences, prefill %v per uncached token, decode %v per step; gateways: %d",
		o.Replicas, o.NumBlocks, o.BlockSize, o.MaxNumSeqs, o.Prefill, o.Decode, o.Gateways)
	if o.Churn {
		fmt.Fprintf(&hdr, "; churn: vllm-0 restarts at %.0f %% of each phase, vllm-%d joins at %.0f %%", 100*o.RestartAt, o.Replicas, 100*o.JoinAt)
	}
	fmt.Fprintf(&hdr, "; phases of %v (at least %d requests); rates %s req/s; policies %s; wall time %s\n",
		o.PhaseDuration, o.MinRequests, joinFloats(o.Rates), strings.Join(o.Policies, ", "), time.Since(start).Round(time.Second))
	hdr.WriteString("\nceilings (rows in italics): *bound: infinite cache* = the reuse in the workload (every block ever computed kept); *bound: pooled cache* = one engine holding the whole fleet's KV with the engines' BlockPool and eviction, requests replayed one at a time. Their TTFT columns are each request's zero-queue time to first token under that cache in the engines' time model (uncached prompt tokens × prefill per token): for the infinite cache a floor under every router's quantiles (\"floor\"), for the pooled cache an estimate (\"est.\"), not a bound. `greedy-cache-aware` asks the engines' real caches and picks greedily: a heuristic, not a bound.\n")
	params := map[string]string{}
	for _, w := range o.Workloads {
		params[w.Kind] = routebench.Describe(w)
	}
	first := true
	for _, p := range []string{routebench.PolicyKVRouteTokens, routebench.PolicyKVRouteEngine, routebench.PolicyKVRouteTokensPeers} {
		if goals := routebench.CheckGoals(results, p); len(goals) > 0 {
			if first {
				hdr.WriteString("\ngoals:\n\n")
				first = false
			}
			routebench.WriteGoals(&hdr, p, goals)
		}
	}
	if err := routebench.WriteReport(*out, hdr.String(), results, params, o.Replicas*(o.NumBlocks-1)); err != nil {
		return errors.Join(runErr, err)
	}
	md, _ := os.ReadFile(*out + "/results.md")
	io.out.Write(md)
	fmt.Fprintf(io.err, "kvroute-bench run: wrote %s/results.md and its charts\n", *out)
	return runErr
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func parseFloats(s string) ([]float64, error) {
	var out []float64
	for _, p := range splitList(s) {
		f, err := strconv.ParseFloat(p, 64)
		if err != nil || f <= 0 {
			return nil, fmt.Errorf("%q is not a positive number", p)
		}
		out = append(out, f)
	}
	if len(out) == 0 {
		return nil, errors.New("no rates")
	}
	return out, nil
}

func joinFloats(fs []float64) string {
	var parts []string
	for _, f := range fs {
		parts = append(parts, strconv.FormatFloat(f, 'g', -1, 64))
	}
	return strings.Join(parts, ",")
}
