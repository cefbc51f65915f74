package server

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/vmihailenco/msgpack/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kvroute/kvroute/config"
	"github.com/kvroute/kvroute/extproc"
	"github.com/kvroute/kvroute/internal/fakeenvoy"
	"github.com/kvroute/kvroute/internal/routetest"
	"github.com/kvroute/kvroute/internal/testdata"
	"github.com/kvroute/kvroute/internal/vllmzmq"
	"github.com/kvroute/kvroute/routing"
	"github.com/kvroute/kvroute/tokenize"
)

const blockSize = 16

// replica is one emulated engine's outside: a PUB socket publishing KV
// events like vLLM's ZmqEventPublisher and an HTTP server whose /metrics
// reads like vLLM's.
type replica struct {
	pub  *vllmzmq.Publisher
	http *httptest.Server
}

func newReplica(t *testing.T) *replica {
	t.Helper()
	pub, err := vllmzmq.NewPublisher("tcp://127.0.0.1:0", "", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// vLLM v1 metric names (vllm/v1/metrics/loggers.py).
		fmt.Fprint(w, "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine=\"0\",model_name=\"qwen\"} 0\n"+
			"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{engine=\"0\",model_name=\"qwen\"} 0\n"+
			"# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{engine=\"0\",model_name=\"qwen\"} 0.1\n")
	}))
	t.Cleanup(srv.Close)
	return &replica{pub: pub, http: srv}
}

// storeBlocks publishes one BlockStored event holding the full blocks of
// tokens (engine hashes are arbitrary: the pool uses kvroute's token keys).
func (r *replica) storeBlocks(t *testing.T, tokens []int) {
	t.Helper()
	n := len(tokens) / blockSize
	hashes := make([]uint64, n)
	for i := range hashes {
		hashes[i] = uint64(1000 + i)
	}
	ev := map[string]any{
		"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": nil,
		"token_ids": tokens[:n*blockSize], "block_size": blockSize, "lora_id": nil, "medium": "GPU",
	}
	payload, err := msgpack.Marshal([]any{float64(time.Now().Unix()), []any{ev}, 0})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.pub.WaitSubscribed(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := r.pub.Publish(payload); err != nil {
		t.Fatal(err)
	}
}

func startServer(t *testing.T, reps ...*replica) (*Server, extprocv3.ExternalProcessorClient) {
	t.Helper()
	return startServerBS(t, blockSize, reps...)
}

// startServerBS is startServer with the pool's block_size (0: not
// configured, learned from the engines).
func startServerBS(t *testing.T, bs int, reps ...*replica) (*Server, extprocv3.ExternalProcessorClient) {
	t.Helper()
	return runServer(t, qwenConfig(t, bs, reps...))
}

// qwenConfig is startServerBS's config. The server tests' configs give
// ingest.stall_timeout 2s: their engines run in the test's own -race
// process, which on a busy machine can leave a /health probe unanswered
// past the 300 ms default and make the replica unroutable for a moment.
func qwenConfig(t *testing.T, bs int, reps ...*replica) *config.Config {
	t.Helper()
	tokDir := testdata.TokenizerDir(t, "qwen3")
	var b strings.Builder
	fmt.Fprintf(&b, "listen: {extproc: \"127.0.0.1:0\", admin: \"127.0.0.1:0\"}\nrouting: {debug_headers: true}\n")
	fmt.Fprintf(&b, "ingest: {scrape_interval: 100ms, stall_timeout: 2s}\npools:\n  - name: qwen\n    models: [qwen]\n    tokenizer: %q\n", tokDir)
	if bs > 0 {
		fmt.Fprintf(&b, "    block_size: %d\n", bs)
	}
	b.WriteString("    replicas:\n")
	for i, r := range reps {
		fmt.Fprintf(&b, "      - {name: r%d, address: %q, events: %q}\n", i, r.http.Listener.Addr().String(), r.pub.Endpoint())
	}
	cfg, err := config.Parse([]byte(b.String()))
	if err != nil {
		t.Fatalf("config: %v\n%s", err, b.String())
	}
	return cfg
}

// runServer starts a Server from cfg, waits until it is ready and returns it
// with an ext_proc client; it stops at cleanup.
func runServer(t *testing.T, cfg *config.Config) (*Server, extprocv3.ExternalProcessorClient) {
	t.Helper()
	s, err := New(Options{Config: cfg, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	return s, serve(t, s)
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// serve runs s until the test ends, waits until it is ready and returns an
// ext_proc client.
func serve(t *testing.T, s *Server) extprocv3.ExternalProcessorClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	conn, err := grpc.NewClient(s.ExtProcAddr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	deadline := time.Now().Add(10 * time.Second)
	for !s.Ready() {
		if time.Now().After(deadline) {
			t.Fatal("server never became ready (no replica scraped or connected)")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return extprocv3.NewExternalProcessorClient(conn)
}

// route sends one request through a real ext_proc stream until the decision
// names want (events travel asynchronously) or the deadline passes.
func route(t *testing.T, c extprocv3.ExternalProcessorClient, path, body, want string) map[string]string {
	t.Helper()
	var h map[string]string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		res, err := fakeenvoy.Do(context.Background(), c, fakeenvoy.Config{Mode: fakeenvoy.Buffered, SendProtocolConfig: true},
			fakeenvoy.Request{Method: "POST", Path: path, Body: []byte(body)})
		if err != nil {
			t.Fatal(err)
		}
		h = res.Headers
		if h[extproc.HeaderDebugReplica] == want && h[extproc.HeaderDebugReason] != "" && h[extproc.HeaderDebugMatchedTokens] != "0" {
			return h
		}
	}
	t.Fatalf("never routed to %s by prefix; last decision %v", want, h)
	return nil
}

func prose(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "Sentence %d of the shared system prompt talks about caching. ", i)
	}
	return b.String()
}

// TestRoutesCompletionToReplicaHoldingItsBlocks is the whole product on
// loopback: the real tokenizer, KV events over real ZeroMQ, the load
// scraper over real HTTP, the decision over a real ext_proc gRPC stream.
func TestRoutesCompletionToReplicaHoldingItsBlocks(t *testing.T) {
	a, b := newReplica(t), newReplica(t)
	s, c := startServer(t, a, b)
	tok, _ := routetest.LoadQwen(t)
	prompt := prose(20)
	ids := tok.Encode(prompt, true)
	b.storeBlocks(t, ids)

	h := route(t, c, "/v1/completions", `{"model":"qwen","prompt":`+strconv.Quote(prompt)+`,"max_tokens":4}`, "r1")
	full := len(ids) / blockSize * blockSize
	if h[extproc.HeaderDebugMatchedTokens] != strconv.Itoa(full) || h[extproc.HeaderDebugPromptTokens] != strconv.Itoa(len(ids)) {
		t.Fatalf("matched %s of %s tokens, want %d of %d", h[extproc.HeaderDebugMatchedTokens], h[extproc.HeaderDebugPromptTokens], full, len(ids))
	}
	if h[fakeenvoy.DestinationHeader] != b.http.Listener.Addr().String() {
		t.Fatalf("destination %q, want r1's address", h[fakeenvoy.DestinationHeader])
	}

	resp, err := http.Get("http://" + s.AdminAddr().String() + "/debug/replicas")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Contains(body, []byte(`"r1"`)) {
		t.Fatalf("/debug/replicas: %d %s", resp.StatusCode, body)
	}
	if bytes.Contains(body, []byte("shared system prompt")) {
		t.Fatal("/debug/replicas leaks prompt text")
	}
}

// TestRouterKeysAtTheBlockSizeIngestLearned: with no block_size configured,
// the pool routes by load until ingest learns the engines' block size from
// a BlockStored event; the router then keys requests at that size (the pool's
// one PoolKeys, shared by ingest and the router) and finds the prefix.
func TestRouterKeysAtTheBlockSizeIngestLearned(t *testing.T) {
	a, b := newReplica(t), newReplica(t)
	_, c := startServerBS(t, 0, a, b)
	tok, _ := routetest.LoadQwen(t)
	prompt := prose(20)
	body := `{"model":"qwen","prompt":` + strconv.Quote(prompt) + `,"max_tokens":4}`
	res, err := fakeenvoy.Do(context.Background(), c, fakeenvoy.Config{Mode: fakeenvoy.Buffered, SendProtocolConfig: true},
		fakeenvoy.Request{Method: "POST", Path: "/v1/completions", Body: []byte(body)})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Headers[extproc.HeaderDebugReason]; got != routing.ReasonBlockSizeUnknown {
		t.Fatalf("before any event: reason %q, want %q", got, routing.ReasonBlockSizeUnknown)
	}
	ids := tok.Encode(prompt, true)
	b.storeBlocks(t, ids)
	h := route(t, c, "/v1/completions", body, "r1")
	if full := len(ids) / blockSize * blockSize; h[extproc.HeaderDebugMatchedTokens] != strconv.Itoa(full) {
		t.Fatalf("matched %s tokens, want %d", h[extproc.HeaderDebugMatchedTokens], full)
	}
}

// TestRoutesChatByTheRenderedTemplate: a chat request is rendered with the
// model's own template (tokenizer_config.json) before tokenizing, so the
// blocks an engine stored for the rendered prompt match.
func TestRoutesChatByTheRenderedTemplate(t *testing.T) {
	a, b := newReplica(t), newReplica(t)
	_, c := startServer(t, a, b)
	tokDir := testdata.TokenizerDir(t, "qwen3")
	tok, err := tokenize.Load(tokDir)
	if err != nil {
		t.Fatal(err)
	}
	pp, err := loadPoolParts(&config.Pool{Tokenizer: tokDir}, "", time.Now)
	if err != nil || pp.chat == nil {
		t.Fatalf("chat templates: %v (chat %v)", err, pp.chat != nil)
	}
	body := `{"model":"qwen","messages":[{"role":"system","content":` + strconv.Quote(prose(12)) + `},{"role":"user","content":"What is cached?"}]}`
	rendered, err := pp.chat.AppendChat(nil, []byte(body))
	text := string(rendered)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text, "<|im_start|>system") {
		t.Fatalf("rendered text is not Qwen's chat format: %.80q", text)
	}
	a.storeBlocks(t, tok.Encode(text, false))
	route(t, c, "/v1/chat/completions", body, "r0")
}

// TestNewRejectsBrokenTokenizer: a pool whose tokenizer cannot load stops
// the start with the pool named, rather than silently routing by load.
func TestNewRejectsBrokenTokenizer(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), []byte(`{"model":{"type":"Unigram"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse([]byte("listen: {extproc: \"127.0.0.1:0\"}\npools:\n  - name: p\n    models: [m]\n    tokenizer: tok\n    replicas: [{name: a, address: \"127.0.0.1:1\"}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(Options{Config: cfg, BaseDir: dir + "/..", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err == nil || !strings.Contains(err.Error(), "pools[0] (p)") {
		t.Fatalf("err = %v", err)
	}
	cfg.Pools[0].Tokenizer = filepath.Base(dir)
	_, err = New(Options{Config: cfg, BaseDir: filepath.Dir(dir), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err == nil || !strings.Contains(err.Error(), "Unigram") {
		t.Fatalf("err = %v, want the unsupported model type named", err)
	}
}
