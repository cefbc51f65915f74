package fleetsim

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kvroute/kvroute/internal/routebench"
	"github.com/kvroute/kvroute/internal/testdata"
	"github.com/kvroute/kvroute/tokenize"
)

// TestRealSocketWorkloadsInTheSimulator replays the real-socket benchmark's
// eviction, multi-turn and shared-prefix workloads (4 engines of 256 × 16
// tokens, 100 µs per prefill token) through the simulator with kvroute and
// with approx-prefix, logs every figure and pins that on every one kvroute
// stays within a point of approx-prefix's hit rate (means of three runs).
func TestRealSocketWorkloadsInTheSimulator(t *testing.T) {
	tok, err := tokenize.Load(testdata.TokenizerDir(t, "qwen3"))
	if err != nil {
		t.Fatal(err)
	}
	const repeats = 3
	ws := []routebench.WorkloadParams{
		{Kind: routebench.Eviction, Groups: 36, PrefixWords: 1300, QuestionWords: 24, ZipfS: 1, MaxTokens: 8, Seed: 5, Rate: 20, Requests: 1200},
		{Kind: routebench.MultiTurn, Groups: 12, PrefixWords: 300, QuestionWords: 30, MaxTokens: 8, Seed: 2, Rate: 40, Requests: 600},
		{Kind: routebench.SharedPrefix, Groups: 8, UsersPerGroup: 8, PrefixWords: 1300, QuestionWords: 24, MaxTokens: 8, Seed: 1, Rate: 40, Requests: 600},
	}
	for _, w := range ws {
		src := benchmarkWorkload(t, tok, w)
		hit := map[string]float64{}
		for _, run := range []struct{ name, policy string }{
			{"kvroute", PolicyKVRoute},
			{"approx-prefix", PolicyApproxPrefix},
		} {
			o := benchmarkFleet(200 * time.Millisecond)
			// Random tie-breaks move kvroute's figure by about a point
			// between seeds: the mean over the same seeds is compared.
			var sum float64
			var runs []string
			for i := range repeats {
				o.Seed = uint64(i + 1)
				res, err := Run(src, run.policy, o)
				if err != nil {
					t.Fatal(err)
				}
				sum += res.HitRate()
				runs = append(runs, fmt.Sprintf("%.1f %% (p90 %v)", 100*res.HitRate(), res.Percentile(0.9).Round(time.Millisecond)))
			}
			hit[run.name] = sum / repeats
			t.Logf("%s %g req/s, %d requests: %-18s mean %.1f %% token hits; runs %s",
				w.Kind, w.Rate, w.Requests, run.name, 100*hit[run.name], strings.Join(runs, ", "))
		}
		if kv, ap := hit["kvroute"], hit["approx-prefix"]; kv < ap-0.01 {
			t.Errorf("%s: kvroute %.1f %% below approx-prefix %.1f %%", w.Kind, 100*kv, 100*ap)
		}
	}
}
