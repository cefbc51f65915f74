package grafana

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvroute/kvroute/blockhash"
	"github.com/kvroute/kvroute/config"
	"github.com/kvroute/kvroute/internal/routebench"
	"github.com/kvroute/kvroute/internal/testdata"
	"github.com/kvroute/kvroute/server"
	"github.com/kvroute/kvroute/tokenize"
)

// liveMetrics runs the real kvroute server (server.New, as `kvroute serve`
// does) against an emulated vLLM engine, routes a few requests through the
// fake Envoy, and returns every kvroute_* family its registry exports, with
// label names.
func liveMetrics(t *testing.T) map[string][]string {
	t.Helper()
	tokDir := testdata.TokenizerDir(t, "qwen3")
	tok, err := tokenize.Load(tokDir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	fleet, err := routebench.StartEmuFleet(ctx, routebench.EmuFleetOptions{Replicas: 1, Model: "m", Tokenizer: tok,
		BlockSize: 16, NumBlocks: 64, HashAlgo: blockhash.SHA256, Seed: "0", MaxNumSeqs: 4,
		PrefillPerToken: time.Microsecond, DecodePerToken: time.Millisecond, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	kc := routebench.KVRouteConfig{Model: "m", TokenizerDir: tokDir, BlockSize: 16, Keys: config.KeysTokens,
		HashAlgo: "sha256", Seed: "0", ExtProc: "127.0.0.1:0", Admin: "127.0.0.1:0", Replicas: fleet.Replicas}
	cfg, err := config.Parse([]byte(kc.YAML()))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	srv, err := server.New(server.Options{Config: cfg, Logger: quiet, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Run(runCtx) }()
	defer func() { stop(); <-done }()
	for !srv.Ready() {
		if ctx.Err() != nil {
			t.Fatal("server never ready")
		}
		time.Sleep(20 * time.Millisecond)
	}
	url, stopGW, err := routebench.StartGateway(srv.ExtProcAddr().String(), quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer stopGW()
	reqs, err := routebench.Generate(routebench.WorkloadParams{Kind: routebench.SharedPrefix, Groups: 1, UsersPerGroup: 2,
		PrefixWords: 80, QuestionWords: 4, Rate: 50, Requests: 4, MaxTokens: 2, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	d := &routebench.Driver{Client: &http.Client{Timeout: 20 * time.Second}, Model: "m"}
	if err := routebench.FirstError(d.Run(ctx, []string{url}, reqs)); err != nil {
		t.Fatal(err)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, f := range fams {
		if !strings.HasPrefix(f.GetName(), "kvroute_") {
			continue
		}
		var labels []string
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if !slices.Contains(labels, l.GetName()) {
					labels = append(labels, l.GetName())
				}
			}
		}
		out[f.GetName()] = labels
	}
	return out
}

// TestDashboardMetricsAreRegisteredByTheRealServer checks the dashboard
// against the registry of a running server: every family the live server
// exports is known to the descriptor walk (so the walk mirrors the server),
// and every dashboard metric is either exported live or, for a vector that
// saw no label value in this short run (evictions, gaps, ...), declared by
// the same packages the server builds.
func TestDashboardMetricsAreRegisteredByTheRealServer(t *testing.T) {
	live := liveMetrics(t)
	declared, err := kvrouteMetrics()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := live["kvroute_route_decisions_total"]; !ok {
		t.Fatalf("the live server exported no routing decisions: %v", keys(live))
	}
	for name, labels := range live {
		dl, ok := declared[name]
		if !ok {
			t.Errorf("the server exports %s, which the descriptor walk does not know: extend kvrouteMetrics", name)
			continue
		}
		for _, l := range labels {
			if !slices.Contains(dl, l) {
				t.Errorf("%s: live label %q not among the declared %v", name, l, dl)
			}
		}
	}
	d := loadDashboard(t)
	for _, p := range flatten(d.Panels) {
		for _, tg := range p.Targets {
			for _, n := range metricRef.FindAllString(tg.Expr, -1) {
				if _, ok := baseMetric(n, live); ok {
					continue
				}
				if _, ok := baseMetric(n, declared); !ok {
					t.Errorf("panel %q: %s is neither exported by the running server nor declared", p.Title, n)
				}
			}
		}
	}
	t.Logf("%d kvroute families exported live, %d declared", len(live), len(declared))
}

func keys(m map[string][]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
