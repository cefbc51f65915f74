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

	"github.com/kvroute/kvroute/internal/routebench"
)

// runBench is `kvroute-bench run`, the routing-quality benchmark.
func runBench(ctx context.Context, args []string, io stdio) error {
	o := routebench.DefaultBenchOptions()
	shared, turns, unique := &o.Workloads[0], &o.Workloads[1], &o.Workloads[2]
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(io.err)
	out := fs.String("out", "bench-results", "directory for results.md and the SVG charts")
	workloads := fs.String("workloads", "shared-prefix,multi-turn,no-sharing", "workloads to run, comma-separated")
	policies := fs.String("policies", strings.Join(routebench.AllPolicies, ","), "policies to compare, comma-separated")
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
	maxTokens := fs.Int("max-tokens", shared.MaxTokens, "output tokens per request")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return errUsage
	}
	var err error
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
	fmt.Fprintf(&hdr, "fleet: %d emulated vLLM replicas × %d blocks × %d tokens, max %d sequences, prefill %v per uncached token, decode %v per step; %d policies; wall time %s\n",
		o.Replicas, o.NumBlocks, o.BlockSize, o.MaxNumSeqs, o.Prefill, o.Decode, len(o.Policies), time.Since(start).Round(time.Second))
	fmt.Fprintf(&hdr, "\nworkloads: %s\n", describeWorkloads(o.Workloads))
	for _, p := range []string{routebench.PolicyKVRouteTokens, routebench.PolicyKVRouteEngine} {
		if goals := routebench.CheckGoals(results, p); len(goals) > 0 {
			hdr.WriteString("\ngoals (shared-prefix, highest rate):\n\n")
			routebench.WriteGoals(&hdr, p, goals)
		}
	}
	if err := routebench.WriteReport(*out, hdr.String(), results); err != nil {
		return errors.Join(runErr, err)
	}
	md, _ := os.ReadFile(*out + "/results.md")
	io.out.Write(md)
	fmt.Fprintf(io.err, "kvroute-bench run: wrote %s/results.md and its charts\n", *out)
	return runErr
}

func describeWorkloads(ws []routebench.WorkloadParams) string {
	var parts []string
	for _, w := range ws {
		switch w.Kind {
		case routebench.SharedPrefix:
			parts = append(parts, fmt.Sprintf("shared-prefix (%d documents × %d words, %d users per group, %d-word questions)",
				w.Groups, w.PrefixWords, w.UsersPerGroup, w.QuestionWords))
		case routebench.MultiTurn:
			parts = append(parts, fmt.Sprintf("multi-turn (%d sessions, %d-word system prompt, %d-word turns)", w.Groups, w.PrefixWords, w.QuestionWords))
		case routebench.NoSharing:
			parts = append(parts, fmt.Sprintf("no-sharing (%d-word unique prompts)", w.PrefixWords+w.QuestionWords))
		}
	}
	if len(ws) > 0 {
		parts = append(parts, fmt.Sprintf("%d output tokens each", ws[0].MaxTokens))
	}
	return strings.Join(parts, "; ")
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
