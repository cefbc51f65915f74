package main

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/kvroute/kvroute/internal/fleetsim"
)

const suiteUsage = `usage: kvroute-bench suite [--quick] [--out DIR] [flags]

The routing suite: every Mooncake-format trace in --traces (whole up to
--trace-whole requests, else a window of --trace-requests) and every generated workload family, at
--gateways gateways (with and without kvroute's peer mesh), --seeds seeds
and --loads loads, on the simulated fleet in virtual time. Each cell
compares round-robin, approx-prefix, llm-d-sticky, dynamo-kv and kvroute
with the pooled-cache bound. Writes under --out: cells/.../results.json and
results.md per cell, summary.md (goals met or missed, the summary table,
the gateway curve), summary.json, summary.svg and curve.svg.

  --quick   a 2–3 minute subset for tuning: the synthetic trace, rag-zipf
            and no-sharing at 1 and 8 gateways (with the mesh), seed 3
            (the traces' last windows, where the synthetic trace's sharing
            is), loads 1× and 2×, no gateway curve. The full suite takes about 5 minutes
            of CPU (18 minutes with 4 parallel cells on a 2-core machine
            at load average 20).

Flags:
`

// quickSeed is --quick's one seed: the traces' last windows.
const quickSeed = 3

// runSuite is `kvroute-bench suite`.
func runSuite(ctx context.Context, args []string, io stdio) error {
	o := fleetsim.DefaultOptions()
	fs := flag.NewFlagSet("suite", flag.ContinueOnError)
	fs.SetOutput(io.err)
	fs.Usage = func() {
		fmt.Fprint(io.err, suiteUsage)
		fs.PrintDefaults()
	}
	quick := fs.Bool("quick", false, "the 2–3 minute tuning subset (see above)")
	out := fs.String("out", "suite-results", "directory for the cells and the summary")
	traces := fs.String("traces", filepath.Join("testdata", "traces"), "directory of Mooncake-format *.jsonl traces")
	whole := fs.Int("trace-whole", 0, "a trace of at most this many requests is replayed whole (each seed spreads arrivals over 1 s)")
	window := fs.Int("trace-requests", 500, "a longer trace is cut to a window of this many requests, which the seed places")
	workloads := fs.String("workloads", "", "only these workloads, comma-separated (trace names without _trace.jsonl, family names)")
	gateways := fs.String("gateways", "1,3,8", "gateway counts of the grid")
	noMesh := fs.Bool("no-mesh", false, "skip the peer-mesh cells")
	seeds := fs.Int("seeds", 3, "seeds per cell (1..N)")
	loads := fs.String("loads", "1,2", "load multipliers (arrival rate × L)")
	policies := fs.String("policies", strings.Join(fleetsim.SuitePolicies, ","), "policies to compare (kvroute must be one for the goals)")
	curve := fs.String("curve", "1,2,4,8", "gateway counts of the gateway curve on the synthetic trace (\"\": none)")
	curveSeed := fs.Uint64("curve-seed", 3, "the gateway curve's seed (3: the synthetic trace's last window, where its sharing is)")
	jobs := fs.Int("jobs", 2, "cells simulated in parallel (one core each)")
	fs.DurationVar(&o.StickySaturation, "sticky-saturation", o.StickySaturation, "llm-d-sticky's saturation point as prefill time: an engine whose token load takes this long to prefill stops attracting requests by its cache")
	fs.Float64Var(&o.DynamoWeight, "dynamo-weight", o.DynamoWeight, "dynamo-kv's overlap_score_weight")
	fs.Float64Var(&o.DynamoTemperature, "dynamo-temperature", o.DynamoTemperature, "dynamo-kv's router_temperature")
	fs.StringVar(&o.RoutingYAML, "routing", "", `extra kvroute routing config as YAML flow, e.g. "{placement_slack: 1}"`)
	quiet := fs.Bool("quiet", false, "no progress lines")
	summarize := fs.Bool("summarize", false, "run nothing: write the summary again from the cells already under --out (an interrupted run's finished cells; no gateway curve)")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	if *quick {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		def := func(name string, p *string, v string) {
			if !set[name] {
				*p = v
			}
		}
		def("workloads", workloads, fleetsim.Synthetic+","+fleetsim.FamilyRAG+","+fleetsim.FamilyNoSharing)
		def("gateways", gateways, "1,8")
		def("curve", curve, "")
		if !set["seeds"] {
			*seeds = 1
		}
	}
	gw, err1 := intList(*gateways)
	ld, err2 := floatList(*loads)
	cv, err3 := intList(*curve)
	if fs.NArg() > 0 || err1 != nil || err2 != nil || err3 != nil || *seeds < 1 || *jobs < 1 || len(gw) == 0 || len(ld) == 0 {
		fmt.Fprintln(io.err, "kvroute-bench suite: --gateways, --loads and --curve take comma-separated numbers; --seeds and --jobs at least 1")
		fs.Usage()
		return errUsage
	}
	ws, err := fleetsim.TraceWorkloads(*traces, *whole, *window)
	if err != nil {
		return err
	}
	ws = append(ws, fleetsim.FamilyWorkloads(fleetsim.DefaultFamilies())...)
	if *workloads != "" {
		keep := splitList(*workloads)
		var sel []fleetsim.SuiteWorkload
		for _, w := range ws {
			if slices.Contains(keep, w.Name) {
				sel = append(sel, w)
			}
		}
		if len(sel) != len(keep) {
			var names []string
			for _, w := range ws {
				names = append(names, w.Name)
			}
			return fmt.Errorf("--workloads: known workloads are %s", strings.Join(names, ", "))
		}
		ws = sel
	}
	so := fleetsim.SuiteOptions{Fleet: o, Workloads: ws, Gateways: gw, Mesh: !*noMesh, Loads: ld,
		Policies: splitList(*policies), Curve: cv, CurveWorkload: fleetsim.Synthetic, CurveSeed: *curveSeed, Jobs: *jobs}
	for s := 1; s <= *seeds; s++ {
		so.Seeds = append(so.Seeds, uint64(s))
	}
	if *quick && *seeds == 1 {
		so.Seeds = []uint64{quickSeed}
	}
	if len(cv) > 0 && !slices.ContainsFunc(ws, func(w fleetsim.SuiteWorkload) bool { return w.Name == fleetsim.Synthetic }) {
		so.CurveWorkload = ws[0].Name
	}
	if !*quiet {
		so.Progress = io.err
	}
	var res *fleetsim.SuiteResult
	if *summarize {
		cells, err := fleetsim.LoadCells(*out)
		if err != nil {
			return err
		}
		so.Curve = nil
		res = &fleetsim.SuiteResult{Cells: cells, Workloads: ws, Options: so}
	} else {
		if err := untilDone(ctx, func() (err error) { res, err = fleetsim.RunSuite(so, *out); return err }); err != nil {
			return err
		}
	}
	command := "kvroute-bench suite " + strings.Join(args, " ")
	if err := res.Write(*out, strings.TrimSpace(command)); err != nil {
		return err
	}
	for _, g := range res.Goals() {
		met := "MISSED"
		switch {
		case g.Met:
			met = "met"
		case g.None:
			met = "n/a"
		}
		fmt.Fprintf(io.out, "%-6s %s (%s)\n", met, g.Goal, g.Detail)
	}
	fmt.Fprintf(io.out, "\nwrote %s/summary.md, summary.json, summary.svg and %d cells\n", *out, len(res.Cells))
	return nil
}

func intList(s string) ([]int, error) {
	var out []int
	for _, f := range splitList(s) {
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 || n > 16 {
			return nil, fmt.Errorf("%q: want 1..16", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func floatList(s string) ([]float64, error) {
	var out []float64
	for _, f := range splitList(s) {
		v, err := strconv.ParseFloat(f, 64)
		if err != nil || !(v > 0) || v > 100 {
			return nil, fmt.Errorf("%q: want a positive multiplier", f)
		}
		out = append(out, v)
	}
	return out, nil
}
