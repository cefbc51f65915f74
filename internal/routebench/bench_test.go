package routebench

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvroute/kvroute/config"
	"github.com/kvroute/kvroute/internal/testdata"
)

// TestKVRouteBeatsRoundRobinOnSharedPrefixes runs the whole harness small:
// two in-process emulated engines that each hold one of two shared
// documents but not both, kvroute in process behind the fake Envoy, and 20
// shared-prefix requests per policy. Round-robin makes each engine keep
// evicting one document for the other; kvroute must send each document's
// requests where it is cached, so its hit rate is higher.
func TestKVRouteBeatsRoundRobinOnSharedPrefixes(t *testing.T) {
	tok := testdata.TokenizerDir(t, "qwen3")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	o := BenchOptions{
		TokenizerDir: tok, Model: "qwen3", Replicas: 4, NumBlocks: 72, BlockSize: 16, MaxNumSeqs: 4,
		Prefill: 20 * time.Microsecond, Decode: time.Millisecond, Seed: "0",
		Workloads: []WorkloadParams{{Kind: SharedPrefix, Groups: 4, UsersPerGroup: 3, PrefixWords: 460,
			QuestionWords: 8, MaxTokens: 2, Seed: 4}},
		Rates: []float64{30}, PhaseDuration: time.Second, MinRequests: 32, LoadWeight: 256,
		Policies: []string{PolicyRoundRobin, PolicyKVRouteEngine, PolicyKVRouteTokens},
	}
	results, err := RunBench(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 2+3 {
		t.Fatalf("%d results, want the 2 ceilings and 3 policies", len(results))
	}
	byPolicy := map[string]*Result{}
	for _, r := range results {
		byPolicy[r.Policy] = r
		if r.Bound {
			continue
		}
		served := 0
		for _, n := range r.PerReplica {
			served += n
		}
		if r.Requests != 32 || r.Errors != 0 || served != 32 || len(r.TTFT) != 32 {
			t.Fatalf("%s: %d requests, %d errors (the first: %s), %d served by the engines, %d TTFTs", r.Policy, r.Requests, r.Errors, r.FirstError, served, len(r.TTFT))
		}
		// The responses' usage and the engines' /metrics tell the same story.
		if err := r.CrossCheck(); err != nil {
			t.Fatalf("%s: %v", r.Policy, err)
		}
	}
	rr := byPolicy[PolicyRoundRobin]
	// The ceilings: the pooled cache (4 × 71 blocks, the 4 documents fit) is
	// under the infinite cache and above every router.
	inf, pooled := byPolicy[BoundInfinite], byPolicy[BoundPooled]
	if inf.PromptTokens != rr.PromptTokens || pooled.HitRate() > inf.HitRate() || pooled.HitRate() < byPolicy[PolicyKVRouteTokens].HitRate() {
		t.Fatalf("ceilings %d tokens (policies %d), infinite %.3f, pooled %.3f, kvroute %.3f", inf.PromptTokens, rr.PromptTokens,
			inf.HitRate(), pooled.HitRate(), byPolicy[PolicyKVRouteTokens].HitRate())
	}
	for _, p := range []string{PolicyKVRouteTokens, PolicyKVRouteEngine} {
		kv := byPolicy[p]
		t.Logf("%s hit rate %.1f %%, round-robin %.1f %%; decisions %v", p, 100*kv.HitRate(), 100*rr.HitRate(), kv.Decisions)
		if kv.HitRate() <= rr.HitRate() {
			t.Errorf("%s hit rate %.3f does not beat round-robin's %.3f", p, kv.HitRate(), rr.HitRate())
		}
		if kv.Decisions["prefix/hit"] == 0 {
			t.Errorf("%s never routed on a prefix hit: %v", p, kv.Decisions)
		}
	}

	dir := t.TempDir()
	if err := WriteReport(dir, "# test\n", results, map[string]string{SharedPrefix: "the params"}, 4*71); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "results.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"### shared-prefix", "| shared-prefix | 30 | kvroute-engine |", "![TTFT p90 vs rate, shared-prefix](ttft-p90-shared-prefix.svg)", "prefix/hit",
		"parameters: the params", "distinct prompt blocks in more than one request", "*bound: pooled cache*"} {
		if !strings.Contains(string(md), want) {
			t.Fatalf("results.md lacks %q:\n%s", want, md)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "ttft-p90-shared-prefix.svg")); err != nil {
		t.Fatal(err)
	}
}

func TestRunBenchRejectsUnknownPolicy(t *testing.T) {
	_, err := RunBench(context.Background(), BenchOptions{Policies: []string{"magic"}})
	if err == nil || !strings.Contains(err.Error(), `unknown policy "magic"`) {
		t.Fatalf("err = %v", err)
	}
}

func TestKVRouteConfigParses(t *testing.T) {
	c := KVRouteConfig{Model: "m", TokenizerDir: "/tok", BlockSize: 16, Keys: "engine", HashAlgo: "sha256", Seed: "0",
		ExtProc: "127.0.0.1:0", Replicas: []Replica{{Name: "a", Address: "127.0.0.1:1", Events: "tcp://127.0.0.1:2", Replay: "tcp://127.0.0.1:3"}}}
	y := c.YAML()
	if _, err := config.Parse([]byte(y)); err != nil {
		t.Fatalf("%v\n%s", err, y)
	}
	for _, want := range []string{`keys: engine`, `seed: "0"`, `replay: "tcp://127.0.0.1:3"`, `admin: ""`} {
		if !strings.Contains(y, want) {
			t.Fatalf("config lacks %q:\n%s", want, y)
		}
	}
	// --routing merges with the debug headers the benchmark always asks for.
	c.DebugHeaders, c.Routing = true, "{placement_slack: 0.5, kv_full_penalty: 5ms}"
	cfg, err := config.Parse([]byte(c.YAML()))
	if err != nil {
		t.Fatalf("%v\n%s", err, c.YAML())
	}
	if !cfg.Routing.DebugHeaders || cfg.Routing.PlacementSlack != 0.5 || cfg.Routing.KVFullPenalty.Std() != 5*time.Millisecond {
		t.Fatalf("routing not applied: %+v\n%s", cfg.Routing, c.YAML())
	}
}
