package main

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"

	"github.com/kvroute/kvroute/internal/routebench"
)

// runSoak is `kvroute-bench soak`, what `make soak` runs.
func runSoak(ctx context.Context, args []string, io stdio) error {
	o := routebench.DefaultSoakOptions()
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.SetOutput(io.err)
	bin := fs.String("bin", "bin", "`dir`ectory holding kvroute and vllm-emu (built by make build)")
	fs.StringVar(&o.TokenizerDir, "tokenizer", o.TokenizerDir, "tokenizer `dir`ectory of the emulated model (fetched by make testdata)")
	fs.DurationVar(&o.Duration, "duration", o.Duration, "length of the load phase")
	fs.IntVar(&o.Streams, "streams", o.Streams, "ext_proc streams open at once")
	fs.DurationVar(&o.Period, "period", o.Period, "each stream starts a request this often, holding its stream open until then (streams ÷ period decisions/s)")
	fs.Int64Var(&o.MaxEntries, "max-entries", o.MaxEntries, "every kvroute's index.max_entries (below what the engines hold)")
	fs.IntVar(&o.NumBlocks, "num-blocks", o.NumBlocks, "KV-cache blocks per emulated engine")
	fs.Float64Var(&o.FeedRate, "feed-rate", o.FeedRate, "requests with new prompts sent on to the engines, per second")
	fs.StringVar(&o.Dir, "dir", "", "keep configs, certificates and logs here (default: a temporary directory, kept only on failure)")
	fs.Usage = func() {
		fmt.Fprintln(io.err, "usage: kvroute-bench soak [--bin DIR] [--duration D] [--streams N] [flags]")
		fmt.Fprintln(io.err, "Three kvroute processes joined by the peer mesh on mutual TLS, in front of emulated vLLM engines")
		fmt.Fprintln(io.err, "publishing KV events, with the index at a small index.max_entries: N ext_proc streams at once for")
		fmt.Fprintln(io.err, "the duration while one kvroute is stopped (SIGSTOP) and continued (SIGCONT) and strangers hammer")
		fmt.Fprintln(io.err, "the mesh ports. Prints each check; exits 1 when one fails.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	if fs.NArg() > 0 || o.Streams <= 0 || o.Duration <= 0 || o.Period <= 0 || o.MaxEntries <= 0 || o.FeedRate <= 0 {
		fs.Usage()
		return errUsage
	}
	kv, err := filepath.Abs(filepath.Join(*bin, "kvroute"))
	if err != nil {
		return err
	}
	o.KVRoute = []string{kv}
	if o.EngineBin, err = filepath.Abs(filepath.Join(*bin, "vllm-emu")); err != nil {
		return err
	}
	o.Out, o.Err = io.out, io.err
	rep, err := routebench.Soak(ctx, o)
	if rep != nil && err == nil {
		fmt.Fprintf(io.out, "soak passed: %d decisions (%.0f/s), %d requests to the engines, %d hostile connections\n",
			rep.Decisions, rep.DecisionsPerSecond, rep.Fed, rep.Hostile)
	}
	return err
}
