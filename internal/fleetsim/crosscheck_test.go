package fleetsim

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/kvroute/kvroute/internal/routebench"
	"github.com/kvroute/kvroute/internal/testdata"
	"github.com/kvroute/kvroute/tokenize"
)

// TestSimulatorAgreesWithTheRealSocketBenchmark is the simulator's cross-check
// against the real-socket benchmark:
// one small scenario — 4 engines, 4 shared documents of ~500 tokens, 128
// requests at 8 req/s — run by the real-socket benchmark (emulated engines
// over HTTP + ZeroMQ, kvroute over gRPC behind the fake Envoy) and by the
// simulator (the same requests, tokenized as the engines do, on Virtual
// engines with the same cache and latency model). The token hit rates of
// round-robin and of kvroute must agree within 3 points.
func TestSimulatorAgreesWithTheRealSocketBenchmark(t *testing.T) {
	if testing.Short() {
		t.Skip("real-socket run of ~15 s")
	}
	dir := testdata.TokenizerDir(t, "qwen3")
	w := routebench.WorkloadParams{Kind: routebench.SharedPrefix, Groups: 4, UsersPerGroup: 3, PrefixWords: 460,
		QuestionWords: 8, MaxTokens: 2, Seed: 4}
	const rate, n = 8, 128
	bo := routebench.BenchOptions{
		TokenizerDir: dir, Model: "qwen3", Replicas: 4, NumBlocks: 256, BlockSize: 16, MaxNumSeqs: 4,
		Prefill: 20 * time.Microsecond, Decode: time.Millisecond, Seed: "0",
		Workloads: []routebench.WorkloadParams{w}, Rates: []float64{rate}, PhaseDuration: n / rate * time.Second, MinRequests: n,
		LoadWeight: 256, Policies: []string{routebench.PolicyRoundRobin, routebench.PolicyKVRouteEngine},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	real, err := routebench.RunBench(ctx, bo)
	if err != nil {
		t.Fatal(err)
	}
	// The same requests for the simulator, tokenized as the engines do
	// (completions add special tokens).
	tok, err := tokenize.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	w.Rate, w.Requests = rate, n
	src := benchmarkWorkload(t, tok, w)
	so := DefaultOptions()
	so.Engines, so.KVBlocks, so.BlockSize, so.MaxNumSeqs, so.MaxModelLen = 4, 256, 16, 4, 255*16
	so.Prefill, so.Decode, so.ScrapeInterval = bo.Prefill, bo.Decode, 200*time.Millisecond
	for _, pair := range [][2]string{{routebench.PolicyRoundRobin, PolicyRoundRobin}, {routebench.PolicyKVRouteEngine, PolicyKVRoute}} {
		var r *routebench.Result
		for _, x := range real {
			if x.Policy == pair[0] {
				r = x
			}
		}
		if r == nil || r.Errors != 0 || r.Requests != n {
			t.Fatalf("real %s: %+v", pair[0], r)
		}
		s, err := Run(src, pair[1], so)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: real-socket hit rate %.1f %%, simulated %.1f %%", pair[1], 100*r.HitRate(), 100*s.HitRate())
		if s.Errors != 0 || s.Requests != n {
			t.Fatalf("sim %s: %d requests, %d errors", pair[1], s.Requests, s.Errors)
		}
		if d := math.Abs(r.HitRate() - s.HitRate()); d > 0.03 {
			t.Errorf("%s: real-socket %.1f %% and simulated %.1f %% differ by %.1f points (> 3)", pair[1], 100*r.HitRate(), 100*s.HitRate(), 100*d)
		}
	}
}
