package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/kvroute/kvroute/internal/engine"
	"github.com/kvroute/kvroute/internal/fleetsim"
)

// runSim is `kvroute-bench sim`: replay a Mooncake-format trace on a
// simulated fleet in virtual time (internal/fleetsim).
func runSim(ctx context.Context, args []string, io stdio) error {
	o := fleetsim.DefaultOptions()
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.SetOutput(io.err)
	trace := fs.String("trace", "", "Mooncake-format JSONL trace (timestamp ms, input_length, output_length, hash_ids of 512-token blocks; optional priority and tenant); this or --family is required")
	family := fs.String("family", "", "instead of --trace: a generated workload family ("+strings.Join(familyNames(), ", ")+"), drawn with --seed")
	tenants := fs.String("tenants", "", "replay only the requests of these tenants, comma-separated (e.g. priority-flood's interactive flow alone)")
	fs.BoolVar(&o.FlowControl, "flow-control", false, "run kvroute with flow control on (routing.flow_control.enabled; the rest of routing.flow_control at its defaults unless --routing sets it): requests wait in kvroute while the fleet is saturated and are shed past their TTL")
	out := fs.String("out", "sim-results", "directory for results.json, results.md and results.svg")
	policies := fs.String("policies", strings.Join(fleetsim.AllPolicies, ","), "policies to compare, comma-separated")
	limit := fs.Int("requests", 0, "replay only the first N requests (0 = all)")
	from := fs.Int("from", 0, "skip the trace's first N requests (arrivals then count from the first replayed)")
	blockTokens := fs.Int("block-tokens", 0, "scale the trace: every 512-token block becomes this many tokens (0: as recorded), to mirror kvroute-bench run --trace on a small fleet")
	speedup := fs.Float64("speedup", 1, "divide the trace's arrival times by this (2 = twice the request rate)")
	maxTokens := fs.Int("max-tokens", 0, "output tokens of every request (0: the trace's output_length)")
	rate := fs.Float64("rate", 0, "instead of --speedup: speed the replayed requests' arrivals to this mean rate (req/s), as kvroute-bench run --trace --rates does")
	fs.IntVar(&o.Engines, "engines", o.Engines, "simulated vLLM engines")
	fs.IntVar(&o.KVBlocks, "kv-blocks", o.KVBlocks, "KV-cache blocks per engine (the default makes the trace's working set exceed the fleet)")
	fs.IntVar(&o.BlockSize, "block-size", o.BlockSize, "tokens per KV block (engines and kvroute)")
	fs.IntVar(&o.MaxNumSeqs, "max-num-seqs", o.MaxNumSeqs, "running sequences per engine")
	fs.IntVar(&o.MaxNumBatchedTokens, "max-num-batched-tokens", o.MaxNumBatchedTokens, "token budget of one engine step (chunked prefill)")
	fs.IntVar(&o.MaxModelLen, "max-model-len", o.MaxModelLen, "context length (capped at one engine's KV); longer requests count as errors")
	fs.DurationVar(&o.Prefill, "prefill-per-token", o.Prefill, "simulated step time per uncached prompt token")
	fs.DurationVar(&o.Decode, "decode-per-token", o.Decode, "simulated time of a decode step")
	fs.DurationVar(&o.ScrapeInterval, "scrape-interval", o.ScrapeInterval, "how often kvroute reads the engines' load")
	fs.DurationVar(&o.IndexTTL, "index-ttl", 0, "kvroute's index.ttl (0: its default)")
	fs.StringVar(&o.RoutingYAML, "routing", "", `extra kvroute routing config as YAML flow, e.g. "{placement_slack: 1}"`)
	fs.IntVar(&o.Gateways, "gateways", o.Gateways, "independent router instances in front of the fleet, request i to instance i mod N: each approx-prefix instance its own memory, each kvroute its own index, ingest and bookkeeping (as several GIE or kvroute replicas)")
	fs.BoolVar(&o.Peers, "peers", false, "join the --gateways kvroute instances in the peer mesh (config peers): each books the requests the others route")
	spread := fs.Duration("spread", 0, "spread each request's arrival uniformly over this window after its recorded time (Mooncake's trace records 3 s buckets: 3s spreads them), seeded by --seed")
	fs.DurationVar(&o.PeerDelay, "peer-delay", 0, "with --peers: how late the mesh's messages reach the other instances")
	fs.DurationVar(&o.StickySaturation, "sticky-saturation", o.StickySaturation, "llm-d-sticky's saturation point as prefill time: an engine whose token load takes this long to prefill stops attracting requests by its cache")
	fs.Float64Var(&o.DynamoWeight, "dynamo-weight", o.DynamoWeight, "dynamo-kv's overlap_score_weight (prefill blocks' weight against decode blocks)")
	fs.Float64Var(&o.DynamoTemperature, "dynamo-temperature", o.DynamoTemperature, "dynamo-kv's router_temperature (0: least cost; above: softmax sampling)")
	fs.Uint64Var(&o.Seed, "seed", o.Seed, "seed of every random choice in the run (the random policy, kvroute's tie-breaks among equal costs)")
	fs.BoolVar(&o.GroundTruth, "ground-truth", false, "also compute what each engine really held at every decision (results' prompt_tokens_ground_truth: given_up_for_load and stale); one more prompt hash per engine and request")
	fs.BoolVar(&o.EvictWithoutEvents, "evict-without-events", false, "engines drop cached blocks without BlockRemoved events (kvroute's index goes stale: its stale outcome counts it)")
	quiet := fs.Bool("quiet", false, "no progress lines")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	if fs.NArg() > 0 || (*trace == "") == (*family == "") || o.Engines < 1 || o.Engines > engine.MaxRanks || o.Gateways < 1 || o.Gateways > 16 {
		fmt.Fprintln(io.err, "kvroute-bench sim: one of --trace FILE and --family NAME is required; --engines within 1..64, --gateways within 1..16")
		fs.Usage()
		return errUsage
	}
	recs, err := simRecords(*trace, *family, o.Seed)
	if err != nil {
		return err
	}
	if *tenants != "" {
		if recs = fleetsim.KeepTenants(recs, splitList(*tenants)); len(recs) == 0 {
			return fmt.Errorf("no request of tenants %s", *tenants)
		}
	}
	if *from < 0 || *from >= len(recs) || *blockTokens < 0 {
		return fmt.Errorf("--from must be within 0..%d, --block-tokens at least 0", len(recs)-1)
	}
	recs = fleetsim.TraceWindow(recs[*from:], len(recs)-*from, 1)
	recs = fleetsim.SpreadArrivals(recs, *spread, o.Seed)
	if *limit > 0 && *limit < len(recs) {
		recs = recs[:*limit]
	}
	if *rate > 0 && len(recs) > 1 {
		if span := float64(recs[len(recs)-1].Timestamp-recs[0].Timestamp) / 1000; span > 0 {
			*speedup = *rate * span / float64(len(recs)-1)
		}
	}
	if !*quiet {
		o.Progress = io.err
	}
	src := &fleetsim.TraceSource{Records: recs, Speedup: *speedup, BlockTokens: *blockTokens, MaxTokens: *maxTokens}
	start := time.Now()
	var rep *fleetsim.Report
	if err := untilDone(ctx, func() (err error) { rep, err = fleetsim.RunAll(src, splitList(*policies), o); return err }); err != nil {
		return err
	}
	flow := ""
	if o.FlowControl {
		flow = ", kvroute with flow control"
	}
	header := fmt.Sprintf("Fleet simulation: %d requests, %d engines × %d blocks × %d tokens%s\n\n"+
		"`kvroute-bench sim %s` (wall %s)\n\n",
		len(recs), o.Engines, o.KVBlocks, o.BlockSize, flow, strings.Join(args, " "), time.Since(start).Round(time.Second))
	if err := rep.Write(*out, header); err != nil {
		return err
	}
	rep.WriteMarkdown(io.out)
	fmt.Fprintf(io.out, "\nwrote %s/results.json, results.md, results.svg\n", *out)
	return nil
}

// simRecords is the trace read from path, or the named family drawn at
// seed.
func simRecords(path, family string, seed uint64) ([]fleetsim.Record, error) {
	if path != "" {
		return fleetsim.ReadTrace(path)
	}
	for _, f := range append(fleetsim.DefaultFamilies(), fleetsim.GoalFamilies()...) {
		if f.Name == family {
			return f.Generate(seed)
		}
	}
	return nil, fmt.Errorf("unknown --family %q (known: %s)", family, strings.Join(familyNames(), ", "))
}

func familyNames() []string {
	var names []string
	for _, f := range append(fleetsim.DefaultFamilies(), fleetsim.GoalFamilies()...) {
		names = append(names, f.Name)
	}
	return names
}

// untilDone runs fn on its own goroutine and returns its error, or ctx's
// error as soon as ctx ends (Ctrl-C): a simulation in virtual time cannot be
// interrupted, so the command returns without waiting for it.
func untilDone(ctx context.Context, fn func() error) error {
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case err := <-done:
		return err
	}
}
