package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvroute/kvroute/blockhash"
	"github.com/kvroute/kvroute/internal/logbuf"
	"github.com/kvroute/kvroute/internal/routebench"
	"github.com/kvroute/kvroute/internal/testdata"
	"github.com/kvroute/kvroute/tokenize"
)

var listeningRE = regexp.MustCompile(`listening on (http://127\.0\.0\.1:\d+)`)

// startGatewayCmd runs `kvroute-bench gateway` with args on a free loopback
// port and returns its base URL; the command stops with the test.
func startGatewayCmd(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out, errw := &logbuf.Buffer{}, &logbuf.Buffer{}
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, append([]string{"gateway", "--listen", "127.0.0.1:0"}, args...), stdio{out: out, err: errw})
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("gateway exit %d: %s", code, errw.String())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if m := listeningRE.FindStringSubmatch(out.String()); m != nil {
			return m[1]
		}
		select {
		case code := <-done:
			t.Fatalf("gateway exited %d: %s", code, errw.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Fatalf("gateway did not say where it listens: %q", out.String())
	return ""
}

// TestGatewayRoutesThroughKVRoute: two emulated engines, kvroute's ext_proc
// server, the gateway command, all on loopback sockets. A streamed request
// goes through the gateway, arrives at the engine kvroute named, streams
// back as SSE, and carries kvroute's routing headers.
func TestGatewayRoutesThroughKVRoute(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tokDir := testdata.TokenizerDir(t, "qwen3")
	tok, err := tokenize.Load(tokDir)
	if err != nil {
		t.Fatal(err)
	}
	fleet, err := routebench.StartEmuFleet(ctx, routebench.EmuFleetOptions{Replicas: 2, Model: "qwen3", Tokenizer: tok, BlockSize: 16, NumBlocks: 64,
		HashAlgo: blockhash.SHA256, Seed: "0", PrefillPerToken: time.Microsecond, DecodePerToken: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	port, err := routebench.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	extproc := fmt.Sprintf("127.0.0.1:%d", port)
	// kvroute reaches each engine's HTTP server through a loopback proxy the
	// test can stop: an engine that fails after kvroute chose it. Without
	// /health probes (NoLoadSignals), kvroute cannot learn of the stop
	// before it routes, so the answer is the gateway's 502 whatever the
	// timing.
	replicas := slices.Clone(fleet.Replicas)
	var stopProxies []func()
	for i := range replicas {
		target := &url.URL{Scheme: "http", Host: replicas[i].Address}
		u, stop, err := routebench.ServeLoopback(httputil.NewSingleHostReverseProxy(target))
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
		stopProxies = append(stopProxies, stop)
		replicas[i].Address = strings.TrimPrefix(u, "http://")
	}
	kv, err := routebench.StartKVRoute(ctx, routebench.KVRouteConfig{Model: "qwen3", TokenizerDir: tokDir, BlockSize: 16, Keys: "tokens",
		HashAlgo: "sha256", ExtProc: extproc, Replicas: replicas, DebugHeaders: true, NoLoadSignals: true}, 20*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer kv.Close()
	base := startGatewayCmd(t, "--extproc", extproc, "--debug-headers", "--max-body-bytes", "4096")

	_, body := routebench.RequestBody("qwen3", routebench.Request{Prompt: strings.Repeat("route this prefix please ", 10), MaxTokens: 4})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/completions", strings.NewReader(string(body)))
	req.Header.Set("content-type", "application/json")
	req.Header.Set("x-gateway-destination-endpoint", "127.0.0.1:1") // a client's copy is never trusted
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("content-type"), "text/event-stream") {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d, content-type %q: %s", resp.StatusCode, resp.Header.Get("content-type"), b)
	}
	var events int
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "data: ") {
			events++
		}
	}
	if events < 2 || sc.Err() != nil {
		t.Fatalf("%d SSE events, err %v", events, sc.Err())
	}
	dest, replica := resp.Header.Get("x-gateway-destination-endpoint"), resp.Header.Get("x-kvroute-replica")
	if resp.Header.Get("x-kvroute-reason") == "" || resp.Header.Get("x-kvroute-prompt-tokens") == "" {
		t.Fatalf("no kvroute debug headers on the answer: %v", resp.Header)
	}
	arrivals := fleet.Arrivals.Take()
	if len(arrivals) != 1 {
		t.Fatalf("%d arrivals at the engines, want 1", len(arrivals))
	}
	i := slices.IndexFunc(replicas, func(r routebench.Replica) bool { return r.Name == arrivals[0].Replica })
	if arrivals[0].Replica != replica || replicas[i].Address != dest {
		t.Fatalf("request landed on %s (%s); kvroute picked %s at %s", arrivals[0].Replica, replicas[i].Address, replica, dest)
	}

	// A body above --max-body-bytes never reaches kvroute or an engine.
	big := strings.Repeat("x", 5000)
	resp2, err := http.Post(base+"/v1/completions", "application/json", strings.NewReader(big))
	if err != nil {
		t.Fatal(err)
	}
	resp2.Body.Close()
	if resp2.StatusCode != http.StatusRequestEntityTooLarge || len(fleet.Arrivals.Take()) != 0 {
		t.Fatalf("oversized body: status %d", resp2.StatusCode)
	}

	// The engine kvroute picked goes away: 502 naming the engine.
	for _, stop := range stopProxies {
		stop()
	}
	resp3, err := http.Post(base+"/v1/completions", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	msg, _ := io.ReadAll(resp3.Body)
	resp3.Body.Close()
	if resp3.StatusCode != http.StatusBadGateway || !strings.Contains(string(msg), "engine 127.0.0.1:") {
		t.Fatalf("engine down: status %d, %q", resp3.StatusCode, msg)
	}
}

// TestGatewayWithoutKVRouteAnswers502: nothing listens at --extproc.
func TestGatewayWithoutKVRouteAnswers502(t *testing.T) {
	port, err := routebench.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	base := startGatewayCmd(t, "--extproc", fmt.Sprintf("127.0.0.1:%d", port))
	resp, err := http.Post(base+"/v1/completions", "application/json", strings.NewReader(`{"model":"m","prompt":"p"}`))
	if err != nil {
		t.Fatal(err)
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway || !strings.HasPrefix(string(msg), "ext_proc: ") {
		t.Fatalf("status %d, %q", resp.StatusCode, msg)
	}
}

// The gateway honours kvroute's override_message_timeout up to its
// --max-message-timeout (30 s, as envoy/envoy.yaml): a request flow control
// holds past the gateway's message timeout is answered by kvroute (429 at
// its TTL), not failed by the gateway (504 at the message timeout).
func TestGatewayLetsFlowControlHoldARequest(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tokDir := testdata.TokenizerDir(t, "qwen3")
	tok, err := tokenize.Load(tokDir)
	if err != nil {
		t.Fatal(err)
	}
	// One engine, busy for seconds with the first request.
	fleet, err := routebench.StartEmuFleet(ctx, routebench.EmuFleetOptions{Replicas: 1, Model: "qwen3", Tokenizer: tok, BlockSize: 16, NumBlocks: 256,
		HashAlgo: blockhash.SHA256, Seed: "0", PrefillPerToken: 10 * time.Millisecond, DecodePerToken: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	port, err := routebench.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	extproc := fmt.Sprintf("127.0.0.1:%d", port)
	// 10 prefill tokens/s: the first request alone saturates the pool.
	kv, err := routebench.StartKVRoute(ctx, routebench.KVRouteConfig{Model: "qwen3", TokenizerDir: tokDir, BlockSize: 16, Keys: "tokens",
		HashAlgo: "sha256", ExtProc: extproc, Replicas: fleet.Replicas, NoLoadSignals: true,
		Routing: "{prefill_tokens_per_second: 10, flow_control: {enabled: true, saturation_waiting: 0, ttl: 600ms}}"}, 20*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer kv.Close()
	base := startGatewayCmd(t, "--extproc", extproc, "--message-timeout", "200ms")
	post := func(ctx context.Context, prompt string) (int, time.Duration) {
		_, body := routebench.RequestBody("qwen3", routebench.Request{Prompt: prompt, MaxTokens: 2})
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/completions", strings.NewReader(string(body)))
		req.Header.Set("content-type", "application/json")
		start := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, time.Since(start)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, time.Since(start)
	}
	firstCtx, stopFirst := context.WithCancel(ctx)
	defer stopFirst()
	go post(firstCtx, strings.Repeat("keep the engine busy ", 20))
	for deadline := time.Now().Add(10 * time.Second); len(fleet.Arrivals.Take()) == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first request never reached the engine")
		}
	}
	code, took := post(ctx, "a second request that must wait")
	if code != http.StatusTooManyRequests || took < 500*time.Millisecond {
		t.Fatalf("held request: status %d after %v, want 429 at its 600 ms TTL", code, took)
	}
}
