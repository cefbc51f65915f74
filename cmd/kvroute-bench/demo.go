package main

import (
	"context"
	"flag"

	"github.com/kvroute/kvroute/internal/routebench"
)

// runDemo is `kvroute-bench demo`, what `make demo` runs.
func runDemo(ctx context.Context, args []string, io stdio) error {
	o := routebench.DefaultDemoOptions()
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(io.err)
	fs.StringVar(&o.BinDir, "bin", o.BinDir, "`dir`ectory holding vllm-emu and kvroute (built by make build)")
	fs.StringVar(&o.TokenizerDir, "tokenizer", o.TokenizerDir, "tokenizer `dir`ectory of the emulated model (fetched by make testdata)")
	fs.IntVar(&o.Replicas, "replicas", o.Replicas, "emulated vLLM replicas")
	fs.IntVar(&o.NumBlocks, "num-blocks", o.NumBlocks, "KV-cache blocks per replica")
	fs.DurationVar(&o.Prefill, "prefill-per-token", o.Prefill, "emulated prefill time per uncached prompt token")
	fs.IntVar(&o.Workload.Requests, "requests", o.Workload.Requests, "requests per policy")
	fs.Float64Var(&o.Workload.Rate, "rate", o.Workload.Rate, "mean request rate (Poisson), per second")
	fs.DurationVar(&o.Timeout, "timeout", o.Timeout, "bound on the whole demo")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return errUsage
	}
	o.Out, o.Err, o.TTY = io.out, io.err, io.errTTY
	return routebench.Demo(ctx, o)
}
