package fleetsim

import (
	"testing"
	"time"

	"github.com/kvroute/kvroute/internal/routebench"
	"github.com/kvroute/kvroute/internal/testdata"
	"github.com/kvroute/kvroute/tokenize"
)

// TestThreeGatewaysWithPeers replays the same eviction workload through
// three kvroute instances joined in the peer mesh (Options.Peers: each books
// the others' requests as they are routed), through three that are not, and
// through three approx-prefix gateways; then with the mesh's messages
// arriving 5 ms and 50 ms late. Three kvroutes, each with its own ingest,
// see each other's requests only when a scrape shows them; the mesh gives
// each the view one kvroute has of its own traffic. The test pins that three
// kvroutes keep more hits than three approx-prefix gateways, and that the
// mesh queues less (TTFT p90 lower) and hits at least as much as without
// it, on time and 5 ms late; it logs the figures docs/BENCHMARKS.md quotes. Every run has seed 1:
// three kvroutes without the mesh gave the same figures for seeds 1–3.
func TestThreeGatewaysWithPeers(t *testing.T) {
	src := gatewaysWorkload(t)
	type figures struct{ hit, p90 float64 }
	run := func(name, policy string, peers bool, delay time.Duration) figures {
		o := benchmarkFleet(200 * time.Millisecond)
		o.Gateways, o.Peers, o.PeerDelay, o.Seed = 3, peers, delay, 1
		res, err := Run(src, policy, o)
		if err != nil {
			t.Fatal(err)
		}
		f := figures{res.HitRate(), res.Percentile(0.9).Seconds()}
		t.Logf("3 gateways, %-28s %.1f %% hits, p90 %.0f ms", name, 100*f.hit, 1000*f.p90)
		return f
	}
	ap := run("approx-prefix", PolicyApproxPrefix, false, 0)
	alone := run("kvroute", PolicyKVRoute, false, 0)
	if alone.hit <= ap.hit {
		t.Errorf("three kvroutes (%.1f %%) do not keep more hits than three approx-prefix gateways (%.1f %%)", 100*alone.hit, 100*ap.hit)
	}
	joined := run("kvroute + peers", PolicyKVRoute, true, 0)
	late := run("kvroute + peers 5ms late", PolicyKVRoute, true, 5*time.Millisecond)
	run("kvroute + peers 50ms late", PolicyKVRoute, true, 50*time.Millisecond)
	for _, c := range []struct {
		name string
		f    figures
	}{{"on time", joined}, {"5 ms late", late}} {
		if c.f.p90 >= alone.p90 {
			t.Errorf("with peers %s: p90 %.0f ms, without %.0f ms: the mesh does not cut queueing", c.name, 1000*c.f.p90, 1000*alone.p90)
		}
		if c.f.hit < alone.hit {
			t.Errorf("with peers %s: %.1f %% hits, without %.1f %%", c.name, 100*c.f.hit, 100*alone.hit)
		}
	}
}

// gatewaysWorkload is the real-socket benchmark's eviction workload at 20
// req/s (36 Zipf documents, 1,200 requests), as the 3-gateway tests replay it.
func gatewaysWorkload(t *testing.T) SliceSource {
	tok, err := tokenize.Load(testdata.TokenizerDir(t, "qwen3"))
	if err != nil {
		t.Fatal(err)
	}
	return benchmarkWorkload(t, tok, routebench.WorkloadParams{Kind: routebench.Eviction, Groups: 36, PrefixWords: 1300,
		QuestionWords: 24, ZipfS: 1, MaxTokens: 8, Seed: 5, Rate: 20, Requests: 1200})
}
