package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvroute/kvroute/internal/fakeenvoy"
	"github.com/kvroute/kvroute/internal/routetest"
	"github.com/kvroute/kvroute/internal/testdata"
	"github.com/kvroute/kvroute/internal/vllmemu"
	"github.com/kvroute/kvroute/tokenize"
)

// flowFleet runs two emulated engines of one sequence each (prefill at
// prefillPerToken), `kvroute serve` over them with flow control on
// (flowYAML is routing.flow_control's body) and a gateway that behaves as
// envoy/envoy.yaml configures Envoy (200 ms message timeout, 30 s
// max_message_timeout). It returns the gateway's URL and the admin address.
func flowFleet(t *testing.T, prefillPerToken time.Duration, flowYAML string) (gateway, admin string) {
	t.Helper()
	return flowFleetWrapped(t, nil, prefillPerToken, 200*time.Millisecond, flowYAML)
}

// flowFleetWrapped is flowFleet with each engine's HTTP API behind wrap
// (nil: none) and the gateway's message timeout messageTimeout.
func flowFleetWrapped(t *testing.T, wrap func(http.Handler) http.Handler, prefillPerToken, messageTimeout time.Duration, flowYAML string) (gateway, admin string) {
	t.Helper()
	dir := testdata.TokenizerDir(t, "qwen3")
	tok, err := tokenize.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	var reps []string
	for i := range 2 {
		e, err := vllmemu.New(vllmemu.Options{Model: "m", Tokenizer: tok, BlockSize: 16, EventsEndpoint: "tcp://127.0.0.1:0",
			MaxNumSeqs: 1, PrefillPerToken: prefillPerToken, DecodePerToken: 2 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Close() })
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		h := e.Handler()
		if wrap != nil {
			h = wrap(h)
		}
		srv := &http.Server{Handler: h}
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { _ = srv.Close() })
		addr := ln.Addr().String()
		reps = append(reps, fmt.Sprintf("      - {name: e%d, address: %q, events: %q, metrics: \"http://%s/metrics\"}", i, addr, e.EventsEndpoint(), addr))
	}
	extProc, admin, _ := startServe(t, fmt.Sprintf(`
listen: {extproc: "127.0.0.1:0", admin: "127.0.0.1:0"}
ingest: {scrape_interval: 100ms, stall_timeout: 2s}
routing:
  prefill_tokens_per_second: 10
  flow_control:
%s
pools:
  - name: p
    models: [m]
    tokenizer: %q
    block_size: 16
    replicas:
%s
`, flowYAML, dir, strings.Join(reps, "\n")))
	return routetest.StartGateway(t, extProc, fakeenvoy.Config{Mode: fakeenvoy.Buffered, SendProtocolConfig: true, ReceivingNamespaces: []string{"envoy.lb"},
		MessageTimeout: messageTimeout, MaxMessageTimeout: 30 * time.Second}, nil), admin
}

type flowAnswer struct {
	status     int
	retryAfter string
	took       time.Duration
	err        error
}

func postCompletion(ctx context.Context, gateway, prompt string) flowAnswer {
	start := time.Now()
	body := fmt.Sprintf(`{"model":"m","prompt":%q,"max_tokens":8}`, prompt)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, gateway+"/v1/completions", strings.NewReader(body))
	if err != nil {
		return flowAnswer{err: err}
	}
	req.Header.Set("content-type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return flowAnswer{err: err, took: time.Since(start)}
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return flowAnswer{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"), took: time.Since(start)}
}

// adminMetric sums a metric's samples whose labels contain match.
func adminMetric(t *testing.T, admin, name, match string) float64 {
	t.Helper()
	b, err := askAdmin(context.Background(), admin, 5*time.Second, http.MethodGet, "/metrics", nil, 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	re := regexp.MustCompile(`^` + name + `(\{[^}]*\})? (\S+)$`)
	for _, line := range strings.Split(string(b), "\n") {
		if m := re.FindStringSubmatch(line); m != nil && strings.Contains(m[1], match) {
			v, _ := strconv.ParseFloat(m[2], 64)
			sum += v
		}
	}
	return sum
}

// poolSaturated reports whether GET /debug/replicas shows pool saturated
// for its top priority.
func poolSaturated(t *testing.T, admin, pool string) bool {
	t.Helper()
	b, err := askAdmin(context.Background(), admin, 5*time.Second, http.MethodGet, "/debug/replicas", nil, 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Pools []struct {
			Pool string `json:"pool"`
			Flow *struct {
				Saturated bool `json:"saturated"`
			} `json:"flow"`
		} `json:"pools"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("GET /debug/replicas: %v", err)
	}
	for _, p := range v.Pools {
		if p.Pool == pool {
			return p.Flow != nil && p.Flow.Saturated
		}
	}
	t.Fatalf("GET /debug/replicas: no pool %s", pool)
	return false
}

// Over real sockets (emulated engines, kvroute serve, a gateway speaking
// Envoy's ext_proc): a burst larger than the fleet waits in kvroute past
// the gateway's message timeout and every request is served, none shed.
func TestFlowControlServesABurstAgainstServe(t *testing.T) {
	gateway, admin := flowFleetWrapped(t, nil, 500*time.Microsecond, burstMessageTimeout, burstFlowYAML)
	serveBurst(t, gateway, admin, 0)
}

// Engines that answer /health and /metrics slowly, within
// ingest.stall_timeout (2s here; the default 300ms would make them
// unroutable), stay routable, and no decision waits for those answers: the
// burst is served from the start, before the first load reading arrives,
// and again once slow answers have come in.
func TestFlowControlServesABurstWhileProbesAreSlow(t *testing.T) {
	slow := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/health" || r.URL.Path == "/metrics" {
				select {
				case <-time.After(time.Second):
				case <-r.Context().Done():
					return
				}
			}
			h.ServeHTTP(w, r)
		})
	}
	gateway, admin := flowFleetWrapped(t, slow, 500*time.Microsecond, burstMessageTimeout, burstFlowYAML)
	serveBurst(t, gateway, admin, 0)
	time.Sleep(1500 * time.Millisecond)
	serveBurst(t, gateway, admin, 1)
	if got := adminMetric(t, admin, "kvroute_ingest_unroutable_total", `pool="p"`); got != 0 {
		t.Errorf("a replica was made unroutable %v times", got)
	}
}

// burstFlowYAML is the flow control of the burst tests: a replica with
// anything queued is busy, and a request may wait 20 s.
const burstFlowYAML = "    enabled: true\n    saturation_ttft: 50ms\n    saturation_waiting: 0\n    ttl: 20s"

// burstMessageTimeout is the burst tests' gateway message timeout: 1 s, not
// Envoy's 200 ms default, so that a busy test machine delaying kvroute's
// first answer to a request it decides at once is not mistaken for one
// flow control failed to hold.
const burstMessageTimeout = time.Second

// serveBurst sends 8 requests at once to two engines of one sequence each:
// all are answered 200, some after waiting in flow control past
// burstMessageTimeout, none shed. Each prompt (about 1,100 tokens, new in
// each round) takes an engine 0.55 s to prefill at 500 µs a token, so the
// burst's last requests wait over a second.
func serveBurst(t *testing.T, gateway, admin string, round int) {
	t.Helper()
	const n = 8
	var wg sync.WaitGroup
	answers := make([]flowAnswer, n)
	for i := range n {
		wg.Go(func() {
			answers[i] = postCompletion(t.Context(), gateway, fmt.Sprintf("round %d, request %d: %s", round, i, strings.Repeat("the quick brown fox jumps over the lazy dog ", 120)))
		})
	}
	wg.Wait()
	longest := time.Duration(0)
	for i, a := range answers {
		if a.err != nil || a.status != http.StatusOK {
			t.Errorf("request %d: status %d err %v after %v", i, a.status, a.err, a.took)
		}
		longest = max(longest, a.took)
	}
	if longest <= burstMessageTimeout {
		t.Errorf("the longest request took %v: none waited past the %v message timeout", longest, burstMessageTimeout)
	}
	if got := adminMetric(t, admin, "kvroute_flow_released_total", `pool="p"`); got < 1 {
		t.Errorf("released %v: no request waited", got)
	}
	if got := adminMetric(t, admin, "kvroute_flow_shed_total", `pool="p"`); got != 0 {
		t.Errorf("shed %v", got)
	}
}

// With the engines stalled (seconds per prompt) and the queue full, no request hangs: those that
// wait are answered 429 with Retry-After within TTL + 100 ms, those that
// find the queue full at once.
func TestFlowControlShedsWhenEnginesStallAgainstServe(t *testing.T) {
	gateway, admin := flowFleet(t, 100*time.Millisecond, "    enabled: true\n    saturation_ttft: 50ms\n    saturation_waiting: 0\n    ttl: 300ms\n    max_queued: 2\n    retry_after: 2s")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	prompt := func(i int) string {
		// About 60 tokens: the two routed ones count as 6 s of queued
		// prefill (prefill_tokens_per_second 10), so the pool stays
		// saturated however slowly the test runs.
		return fmt.Sprintf("stall %d: %s", i, strings.Repeat("lorem ipsum dolor sit amet ", 10))
	}
	// One request per engine: each takes seconds of prefill there. The
	// second is sent once the first is decided: two decisions running at
	// once each see both engines idle and may pick the same one, leaving
	// the other free for a request the test expects to wait.
	for i := range 2 {
		go postCompletion(ctx, gateway, prompt(i))
		deadline := time.Now().Add(10 * time.Second)
		for adminMetric(t, admin, "kvroute_route_decisions_total", `pool="p"`) < float64(i+1) {
			if time.Now().After(deadline) {
				t.Fatalf("request %d was not routed", i)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// The decision is counted just before its load is on the books: wait
	// until flow control sees the pool saturated.
	deadline := time.Now().Add(10 * time.Second)
	for !poolSaturated(t, admin, "p") {
		if time.Now().After(deadline) {
			t.Fatal("the pool is not saturated with a request on each engine")
		}
		time.Sleep(10 * time.Millisecond)
	}
	var wg sync.WaitGroup
	answers := make([]flowAnswer, 4)
	for i := range 4 {
		wg.Go(func() { answers[i] = postCompletion(ctx, gateway, prompt(10+i)) })
		time.Sleep(20 * time.Millisecond) // in order: two wait, two find the queue full
	}
	wg.Wait()
	// The TTL runs from when a request is queued; what comes before (HTTP,
	// the gateway, tokenizing) is what a request answered at once takes.
	overhead := max(answers[2].took, answers[3].took)
	for i, a := range answers {
		if a.err != nil || a.status != http.StatusTooManyRequests || a.retryAfter != "2" {
			t.Errorf("request %d: status %d Retry-After %q err %v", i, a.status, a.retryAfter, a.err)
		}
		if i < 2 && a.took > 400*time.Millisecond+overhead {
			t.Errorf("request %d answered after %v, over TTL + 100 ms + %v (a request answered at once)", i, a.took, overhead)
		}
	}
	t.Logf("answered after %v, %v (TTL 300 ms), queue full after %v, %v", answers[0].took, answers[1].took, answers[2].took, answers[3].took)
	for reason, want := range map[string]float64{"ttl": 2, "queue_full": 2} {
		if got := adminMetric(t, admin, "kvroute_flow_shed_total", `reason="`+reason+`"`); got != want {
			t.Errorf("shed %s: %v, want %v", reason, got, want)
		}
	}
}

// kvroute status and kvroute explain --objective show the saturation test
// of each priority: the top one's saturation_ttft, and below it
// low_priority_saturation_ttft with the replicas reserved for higher
// priorities.
func TestFlowBandTestInStatusAndExplain(t *testing.T) {
	_, admin := flowFleet(t, time.Microsecond, "    enabled: true\n    reserved_replicas: 1\n    objectives: [{name: interactive, priority: 1}]")
	var out, errOut bytes.Buffer
	if code := run(t.Context(), []string{"status", "--admin", admin}, stdio{strings.NewReader(""), &out, &errOut}); code != 0 ||
		!strings.Contains(out.String(), "  priority 1 and above: busy past 1s, not saturated; below: busy past 50ms, 1 replica reserved for higher priorities, not saturated") {
		t.Errorf("status exit %d:\n%s%s", code, out.String(), errOut.String())
	}
	bodyFile := filepath.Join(t.TempDir(), "req.json")
	if err := os.WriteFile(bodyFile, []byte(`{"model":"m","prompt":"hello"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for objective, want := range map[string]string{
		"":            "flow control on: pool not saturated for priority 0 (busy past 50ms, 1 replica reserved for higher priorities), 0 waiting; this request would be decided at once",
		"interactive": "flow control on: pool not saturated for priority 1 (busy past 1s), 0 waiting; this request would be decided at once",
	} {
		out.Reset()
		args := []string{"explain", "--admin", admin, "--path", "/v1/completions", "--body", bodyFile}
		if objective != "" {
			args = append(args, "--objective", objective)
		}
		if code := run(t.Context(), args, stdio{strings.NewReader(""), &out, &errOut}); code != 0 || !strings.Contains(out.String(), want) {
			t.Errorf("explain --objective %q exit %d, want %q:\n%s%s", objective, code, want, out.String(), errOut.String())
		}
	}
}
