package server

import (
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"

	"github.com/kvroute/kvroute/config"
	"github.com/kvroute/kvroute/extproc"
	"github.com/kvroute/kvroute/internal/fakeenvoy"
	"github.com/kvroute/kvroute/internal/testdata"
	"github.com/kvroute/kvroute/routing"
	"github.com/kvroute/kvroute/tokenize"
)

// collector is a real OTLP/gRPC trace receiver on 127.0.0.1.
type collector struct {
	collectortrace.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []*tracepb.Span
	attrs []string // every resource and span attribute value, as text
	addr  string
}

func startCollector(t *testing.T) *collector {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &collector{addr: ln.Addr().String()}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, c)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return c
}

func (c *collector) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, a := range rs.GetResource().GetAttributes() {
			c.attrs = append(c.attrs, a.GetValue().String())
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				c.spans = append(c.spans, s)
				for _, a := range s.GetAttributes() {
					c.attrs = append(c.attrs, a.GetValue().String())
				}
			}
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

func (c *collector) snapshot() ([]*tracepb.Span, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*tracepb.Span(nil), c.spans...), append([]string(nil), c.attrs...)
}

// TestDecisionSpansJoinTheIncomingTrace: with tracing on, a routed request's
// decision is exported over OTLP as kvroute.decision with its steps as
// children, in the trace of the request's traceparent, with counts and names
// the operator chose as attributes and nothing the client sent.
func TestDecisionSpansJoinTheIncomingTrace(t *testing.T) {
	col := startCollector(t)
	a := newReplica(t)
	tokDir := testdata.TokenizerDir(t, "qwen3")
	doc := fmt.Sprintf(`listen: {extproc: "127.0.0.1:0", admin: "127.0.0.1:0"}
tracing: {endpoint: %q, insecure: true, service_name: kvroute-test}
ingest: {scrape_interval: 100ms, stall_timeout: 2s}
pools:
  - name: qwen
    models: [qwen]
    lora_adapters: [secret-adapter]
    tokenizer: %q
    block_size: %d
    replicas:
      - {name: r0, address: %q, events: %q}
`, col.addr, tokDir, blockSize, a.http.Listener.Addr().String(), a.pub.Endpoint())
	cfg, err := config.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	s, c := runServer(t, cfg)
	tok, err := tokenize.Load(tokDir)
	if err != nil {
		t.Fatal(err)
	}
	prompt := "The quarterly secret plan: " + prose(8)
	a.storeBlocks(t, tok.Encode(prompt, true))

	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	body := `{"model":"secret-adapter","prompt":` + strconv.Quote(prompt) + `,"cache_salt":"tenant-secret-salt","max_tokens":4}`
	res, err := fakeenvoy.Do(context.Background(), c, fakeenvoy.Config{Mode: fakeenvoy.Buffered, SendProtocolConfig: true},
		fakeenvoy.Request{Method: "POST", Path: "/v1/completions", Body: []byte(body),
			Headers: map[string]string{"traceparent": "00-" + traceID + "-" + parentID + "-01"}})
	if err != nil || res.Headers[fakeenvoy.DestinationHeader] == "" {
		t.Fatalf("exchange: %v %v", err, res.Headers)
	}
	// Flush now rather than after the batcher's delay.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.stopTracing(ctx); err != nil {
		t.Fatal(err)
	}
	spans, attrs := col.snapshot()
	byName := map[string]*tracepb.Span{}
	for _, sp := range spans {
		byName[sp.GetName()] = sp
		if got := hex.EncodeToString(sp.GetTraceId()); got != traceID {
			t.Errorf("span %s in trace %s, want the request's %s", sp.GetName(), got, traceID)
		}
	}
	root := byName[extproc.SpanDecision]
	if root == nil {
		t.Fatalf("no %s span among %d", extproc.SpanDecision, len(spans))
	}
	if got := hex.EncodeToString(root.GetParentSpanId()); got != parentID {
		t.Errorf("decision span's parent %s, want the traceparent's %s", got, parentID)
	}
	for _, step := range []string{"parse", "tokenize", "keys", "lookup", "pick"} {
		sp := byName["kvroute."+step]
		if sp == nil {
			t.Errorf("no kvroute.%s span", step)
			continue
		}
		if string(sp.GetParentSpanId()) != string(root.GetSpanId()) {
			t.Errorf("kvroute.%s is not a child of the decision span", step)
		}
		if sp.GetStartTimeUnixNano() < root.GetStartTimeUnixNano() || sp.GetEndTimeUnixNano() > root.GetEndTimeUnixNano() {
			t.Errorf("kvroute.%s lies outside the decision span", step)
		}
	}
	// The LoRA name and salt enter the block hashes: the stored blocks do
	// not match, the prompt is placed (outcome load, reason no_hit).
	want := map[string]string{extproc.AttrPool: "qwen", extproc.AttrReplica: "r0", extproc.AttrOutcome: routing.OutcomeLoad,
		extproc.AttrReason: routing.ReasonNoHit, extproc.AttrPromptTokens: "", extproc.AttrPromptBlocks: ""}
	for _, kv := range root.GetAttributes() {
		if w, ok := want[kv.GetKey()]; ok && w != "" && kv.GetValue().GetStringValue() != w {
			t.Errorf("%s = %v, want %s", kv.GetKey(), kv.GetValue(), w)
		}
		delete(want, kv.GetKey())
	}
	if len(want) > 0 {
		t.Errorf("decision span lacks %v", want)
	}
	all := strings.Join(attrs, "\n")
	for _, secret := range []string{"secret plan", "secret-adapter", "tenant-secret-salt", "quarterly"} {
		if strings.Contains(all, secret) {
			t.Errorf("an exported attribute carries client input %q", secret)
		}
	}
	if !strings.Contains(all, "kvroute-test") {
		t.Error("service.name not exported")
	}
}

// TestTracingOffRecordsNothing: without tracing.endpoint no tracer exists
// and decisions take the untraced path.
func TestTracingOffRecordsNothing(t *testing.T) {
	tr, stop, err := newTracer(config.Default().Tracing)
	if tr != nil || stop != nil || err != nil {
		t.Fatalf("tracing on by default: %v %v %v", tr, stop != nil, err)
	}
}
