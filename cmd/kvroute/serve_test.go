package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/kvroute/kvroute/config"
	"github.com/kvroute/kvroute/internal/fakeenvoy"
	"github.com/kvroute/kvroute/internal/logbuf"
)

// startServe runs `kvroute serve` on cfg and returns the ext_proc and admin
// addresses it logged.
func startServe(t *testing.T, cfg string, flags ...string) (extProc, admin string, logs *logbuf.Buffer) {
	t.Helper()
	return startServeAt(t, filepath.Join(t.TempDir(), "kvroute.yaml"), cfg, flags...)
}

// startServeAt is startServe with the config file at path.
func startServeAt(t *testing.T, path, cfg string, flags ...string) (extProc, admin string, logs *logbuf.Buffer) {
	t.Helper()
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	logs = &logbuf.Buffer{}
	done := make(chan int)
	go func() {
		done <- run(ctx, append([]string{"serve", "--config", path}, flags...), stdio{strings.NewReader(""), logs, logs})
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("serve exited %d: %s", code, logs.String())
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for extProc == "" || admin == "" {
		if time.Now().After(deadline) {
			t.Fatalf("serve did not log its listeners: %s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
		for _, line := range strings.Split(logs.String(), "\n") {
			var rec struct{ Msg, Addr string }
			if json.Unmarshal([]byte(line), &rec) != nil {
				continue
			}
			switch rec.Msg {
			case "ext_proc listening":
				extProc = rec.Addr
			case "admin listening":
				admin = rec.Addr
			}
		}
	}
	return extProc, admin, logs
}

// idleEngineMetrics serves an idle engine's /metrics (vLLM v1 names) on
// loopback and returns its address: load data makes a pool ready.
func idleEngineMetrics(t *testing.T) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 0\nvllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} 0\n")
	}))
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

func TestServeRoutesOverExtProc(t *testing.T) {
	// Two engines' /metrics: load data makes the pool ready.
	addrA, addrB := idleEngineMetrics(t), idleEngineMetrics(t)
	extProc, admin, _ := startServe(t, fmt.Sprintf(`
listen: {extproc: "127.0.0.1:0", admin: "127.0.0.1:0"}
log: {level: debug}
ingest: {scrape_interval: 100ms, stall_timeout: 2s}
pools:
  - name: p
    models: [m]
    block_size: 16
    replicas:
      - {name: a, address: %q}
      - {name: b, address: %q, data_parallel_size: 2}
`, addrA, addrB))
	conn, err := grpc.NewClient(extProc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	for _, name := range []string{"envoy.service.ext_proc.v3.ExternalProcessor", "liveness", "readiness"} {
		var st healthpb.HealthCheckResponse_ServingStatus
		for i := 0; i < 250 && st != healthpb.HealthCheckResponse_SERVING; i++ {
			resp, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: name})
			if err == nil {
				st = resp.GetStatus()
			}
			time.Sleep(20 * time.Millisecond)
		}
		if st != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health %q: %v", name, st)
		}
	}
	res, err := fakeenvoy.Do(context.Background(), extprocv3.NewExternalProcessorClient(conn),
		fakeenvoy.Config{Mode: fakeenvoy.Buffered, SendProtocolConfig: true},
		fakeenvoy.Request{Method: "POST", Path: "/v1/completions", Body: []byte(`{"model":"m","prompt":"hello"}`)})
	if err != nil || res.Status != 0 {
		t.Fatalf("exchange: %v status %d", err, res.Status)
	}
	dest := res.Headers[fakeenvoy.DestinationHeader]
	if dest != addrA && dest != addrB {
		t.Fatalf("destination %q", dest)
	}
	if dest == addrB && res.Headers["x-data-parallel-rank"] == "" {
		t.Fatal("DP replica chosen without x-data-parallel-rank")
	}
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body bytes.Buffer
	body.ReadFrom(resp.Body)
	if !strings.Contains(body.String(), `kvroute_route_decisions_total{outcome="load",pool="p",reason="no_tokenizer"} 1`) {
		t.Fatalf("decision metric missing from /metrics")
	}
}

// TestServeReloadsItsConfig: `kvroute serve` follows its config file. A new
// replica in the file is routed to within a few seconds without a restart;
// an invalid file and a change that needs a restart are refused, counted and
// logged, and the running config keeps serving.
func TestServeReloadsItsConfig(t *testing.T) {
	addrA, addrB := idleEngineMetrics(t), idleEngineMetrics(t)
	path := filepath.Join(t.TempDir(), "kvroute.yaml")
	cfg := func(extra string) string {
		return fmt.Sprintf(`
listen: {extproc: "127.0.0.1:0", admin: "127.0.0.1:0"}
ingest: {scrape_interval: 100ms, stall_timeout: 2s}
pools:
  - name: p
    models: [m]
    block_size: 16
    replicas:
      - {name: a, address: %q}
%s`, addrA, extra)
	}
	extProc, admin, logs := startServeAt(t, path, cfg(""), "--watch-interval", "50ms")
	conn, err := grpc.NewClient(extProc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := extprocv3.NewExternalProcessorClient(conn)
	destinations := func() map[string]bool {
		seen := map[string]bool{}
		for range 40 {
			res, err := fakeenvoy.Do(context.Background(), client, fakeenvoy.Config{Mode: fakeenvoy.Buffered, SendProtocolConfig: true},
				fakeenvoy.Request{Method: "POST", Path: "/v1/completions", Body: []byte(`{"model":"m","prompt":"hello"}`)})
			if err != nil {
				t.Fatal(err)
			}
			seen[res.Headers[fakeenvoy.DestinationHeader]] = true
		}
		return seen
	}
	metric := func(series string) string {
		resp, err := http.Get("http://" + admin + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, series+" ") {
				return strings.TrimPrefix(line, series+" ")
			}
		}
		return ""
	}
	waitMetric := func(series, want string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); metric(series) != want; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s = %q, want %s; logs:\n%s", series, metric(series), want, logs.String())
			}
		}
	}
	if d := destinations(); !d[addrA] || len(d) != 1 {
		t.Fatalf("before the reload: %v", d)
	}

	// Add replica b: applied live.
	if err := os.WriteFile(path, []byte(cfg(fmt.Sprintf("      - {name: b, address: %q}\n", addrB))), 0o600); err != nil {
		t.Fatal(err)
	}
	waitMetric(`kvroute_config_reloads_total{result="applied"}`, "1")
	waitMetric(`kvroute_replica_ranks{pool="p"}`, "2")
	deadline := time.Now().Add(10 * time.Second)
	for d := destinations(); !d[addrB]; d = destinations() {
		if time.Now().After(deadline) {
			t.Fatalf("b never routed to after the reload: %v", d)
		}
	}

	// An invalid file: refused, old config serves.
	if err := os.WriteFile(path, []byte("pools: [{name: p}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	waitMetric(`kvroute_config_reloads_total{result="invalid"}`, "1")
	// A change only a restart applies: refused with the key named.
	if err := os.WriteFile(path, []byte(strings.Replace(cfg(fmt.Sprintf("      - {name: b, address: %q}\n", addrB)), "block_size: 16", "block_size: 32", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	waitMetric(`kvroute_config_reloads_total{result="restart_required"}`, "1")
	if !strings.Contains(logs.String(), "pools[0].block_size") {
		t.Fatalf("the refused key is not named in the log:\n%s", logs.String())
	}
	if d := destinations(); !d[addrA] && !d[addrB] {
		t.Fatalf("after refused reloads: %v", d)
	}
	if metric(`kvroute_replica_ranks{pool="p"}`) != "2" {
		t.Fatal("a refused reload changed the replica set")
	}
}

// TestJSONLogsDurationsAsDurations: a backoff of 100 ms reads "100ms" in the
// JSON log, not 100000000 (nanoseconds), also inside a group.
func TestJSONLogsDurationsAsDurations(t *testing.T) {
	var buf bytes.Buffer
	log := newLogger(config.Log{Level: "info", Format: "json"}, &buf)
	log.Info("reconnecting", "backoff", 100*time.Millisecond, slog.Group("g", "wait", 1500*time.Millisecond), "n", 3)
	var got map[string]any
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got["backoff"] != "100ms" || got["g"].(map[string]any)["wait"] != "1.5s" || got["n"] != float64(3) {
		t.Fatalf("log line %s", buf.Bytes())
	}
}
