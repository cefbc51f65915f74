package fleetsim

import (
	"testing"
	"time"

	"github.com/kvroute/kvroute/internal/routebench"
	"github.com/kvroute/kvroute/internal/testdata"
	"github.com/kvroute/kvroute/tokenize"
)

// TestLightLoadSharedDocumentsHitAsOftenAsApproxPrefix is the light-load
// finding, in the simulator: the real-socket benchmark's shared-prefix
// workload (8 documents of ~1,400 tokens, 4 engines of 256 × 16-token
// blocks, 100 µs per prefill token) in short phases, where every engine is
// idle when a document first arrives. Placing documents by the rendezvous
// hash alone put three or four on one engine, which then evicted them
// (61.0 % token hits at 8 req/s against approx-prefix's 73.2 %, the
// infinite-cache bound); placing each on the replica whose cache was
// written least lately (routing's spread) spreads them. kvroute must reach
// approx-prefix's hit rate within one point.
func TestLightLoadSharedDocumentsHitAsOftenAsApproxPrefix(t *testing.T) {
	tok, err := tokenize.Load(testdata.TokenizerDir(t, "qwen3"))
	if err != nil {
		t.Fatal(err)
	}
	o := benchmarkFleet(200 * time.Millisecond)
	for _, c := range []struct {
		rate     float64
		requests int
	}{{8, 32}, {20, 80}} {
		w := routebench.WorkloadParams{Kind: routebench.SharedPrefix, Groups: 8, UsersPerGroup: 8, PrefixWords: 1300,
			QuestionWords: 24, MaxTokens: 8, Seed: 1, Rate: c.rate, Requests: c.requests}
		src := benchmarkWorkload(t, tok, w)
		hit := map[string]float64{}
		for _, pol := range []string{PolicyApproxPrefix, PolicyKVRoute} {
			res, err := Run(src, pol, o)
			if err != nil {
				t.Fatal(err)
			}
			hit[pol] = res.HitRate()
			t.Logf("%g req/s, %d requests: %-13s %.1f %% token hits, TTFT p90 %v, decisions %v",
				c.rate, c.requests, pol, 100*res.HitRate(), res.Percentile(0.9), res.Decisions)
		}
		if kv, ap := hit[PolicyKVRoute], hit[PolicyApproxPrefix]; kv < ap-0.01 {
			t.Errorf("%g req/s: kvroute %.1f %% token hits, approx-prefix %.1f %%", c.rate, 100*kv, 100*ap)
		}
	}
}
