package extproc

import (
	"context"
	"fmt"
	"github.com/kvroute/kvroute/routing"
	"math"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/kvroute/kvroute/blockhash"
	"github.com/kvroute/kvroute/index"
	"github.com/kvroute/kvroute/internal/fakeenvoy"
	"github.com/kvroute/kvroute/internal/panics"
	"github.com/kvroute/kvroute/internal/routetest"
)

// panicsOf reads kvroute_panics_total{component} from reg.
func panicsOf(t *testing.T, reg *prometheus.Registry, component string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != panics.MetricName {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "component" && l.GetValue() == component {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// TestNonFiniteLoadStillRoutes: NaN or ±Inf queued work on every replica (a
// scraper bug, a hostile /metrics) must still give every request an endpoint;
// it used to leave the decision without endpoint or error and crash the
// process on d.Err.Error().
func TestNonFiniteLoadStillRoutes(t *testing.T) {
	for _, v := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		for _, mode := range modes {
			t.Run(fmt.Sprintf("%v/%s", v, mode.name), func(t *testing.T) {
				h := newHarness(t, harnessOptions{})
				h.ix.Store(h.eps[1].Replica, h.keysOf(sharedPrefix, blockhash.RequestKeys{}), index.TierGPU)
				for _, ep := range h.eps {
					h.ix.SetLoad(ep.Replica, index.Load{Running: v, Waiting: v}, h.clock())
				}
				for _, req := range []fakeenvoy.Request{completion(sharedPrefix + " and a question"), completion("nothing cached here at all")} {
					res := h.do(mode.cfg, req)
					if res.Status != 0 || res.Headers[HeaderDestination] == "" {
						t.Fatalf("status %d %q, destination %q", res.Status, res.LocalBody, res.Headers[HeaderDestination])
					}
				}
			})
		}
	}
}

// panickingTokenizer stands for a bug in the decision path.
type panickingTokenizer struct{ calls atomic.Int64 }

func (p *panickingTokenizer) Encode(string, bool) []int {
	p.calls.Add(1)
	panic("tokenizer bug")
}

// TestPanicInDecisionFailsOpenAndIsCounted: a panic while deciding ends
// neither the process nor the stream; the request routes by load with
// reason internal_error and kvroute_panics_total counts it.
func TestPanicInDecisionFailsOpenAndIsCounted(t *testing.T) {
	tok := &panickingTokenizer{}
	h := newHarness(t, harnessOptions{failOpen: true, tokenizer: tok})
	for _, mode := range modes {
		res := h.do(mode.cfg, completion("any prompt at all"))
		if res.Status != 0 || res.Headers[HeaderDestination] == "" {
			t.Fatalf("%s: status %d, destination %q; want routed by load", mode.name, res.Status, res.Headers[HeaderDestination])
		}
	}
	if got := panicsOf(t, h.reg, panicDecide); got != float64(len(modes)) || tok.calls.Load() != int64(len(modes)) {
		t.Fatalf("kvroute_panics_total{extproc_decide} = %v after %d panics", got, tok.calls.Load())
	}
	if got := h.decisions(routing.OutcomeLoad, routing.ReasonInternalError); got != float64(len(modes)) {
		t.Fatalf("load/internal_error decisions = %v", got)
	}
	if strings.Contains(h.logs.String(), "any prompt") {
		t.Fatal("the panic log quotes the prompt")
	}
}

// TestRecoveryInterceptorEndsOnlyThatCall: a panic in any handler of the
// ext_proc gRPC server (unary or streaming) becomes an Internal error for
// that call, is counted, and the server keeps serving.
func TestRecoveryInterceptorEndsOnlyThatCall(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	g, hs := NewGRPCServer(h.server, nil)
	g.RegisterService(&grpc.ServiceDesc{
		ServiceName: "kvroute.test.Panic",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Unary", Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			in := new(emptypb.Empty)
			if err := dec(in); err != nil {
				return nil, err
			}
			info := &grpc.UnaryServerInfo{Server: srv, FullMethod: "/kvroute.test.Panic/Unary"}
			return ic(ctx, in, info, func(context.Context, any) (any, error) { panic("unary bug") })
		}}},
		Streams: []grpc.StreamDesc{{StreamName: "Stream", ClientStreams: true, ServerStreams: true, Handler: func(any, grpc.ServerStream) error {
			panic("stream bug")
		}}},
	}, struct{}{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = g.Serve(ln) }()
	t.Cleanup(func() { g.Stop(); <-done })
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = conn.Invoke(ctx, "/kvroute.test.Panic/Unary", &emptypb.Empty{}, &emptypb.Empty{})
	if status.Code(err) != codes.Internal {
		t.Fatalf("unary: %v, want Internal", err)
	}
	cs, err := conn.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, "/kvroute.test.Panic/Stream")
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.RecvMsg(&emptypb.Empty{}); status.Code(err) != codes.Internal {
		t.Fatalf("stream: %v, want Internal", err)
	}
	if got := panicsOf(t, h.reg, panicGRPC); got != 2 {
		t.Fatalf("kvroute_panics_total{extproc_grpc} = %v, want 2", got)
	}
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("server stopped serving after the panics: %v", err)
	}
}

// TestFailOpenStaysInsideTheModelsPool: with several pools, fail-open never
// sends a request to a replica of another model: a known model's malformed
// prompt routes within its pool; an unknown model or a body without one is
// rejected even with fail-open on.
func TestFailOpenStaysInsideTheModelsPool(t *testing.T) {
	h := newHarness(t, harnessOptions{failOpen: true, llamaPool: true})
	deep := `{"model":"llama3","prompt":[` + strings.Repeat("[", 100_000) + strings.Repeat("]", 100_000) + `]}`
	for _, mode := range modes {
		res := h.do(mode.cfg, fakeenvoy.Request{Method: "POST", Path: "/v1/completions", Body: []byte(deep)})
		if dst := res.Headers[HeaderDestination]; res.Status != 0 || !strings.HasPrefix(dst, "127.0.0.1:900") {
			t.Errorf("%s: too-deep llama3 prompt: status %d, destination %q; want a llama replica", mode.name, res.Status, dst)
		}
		res = h.do(mode.cfg, fakeenvoy.Request{Method: "POST", Path: "/v1/completions", Body: []byte(`{"model":"gpt-9","prompt":"hi"}`)})
		if res.Status != 404 || res.Headers[HeaderDestination] != "" {
			t.Errorf("%s: unknown model: status %d, destination %q; want 404", mode.name, res.Status, res.Headers[HeaderDestination])
		}
		res = h.do(mode.cfg, fakeenvoy.Request{Method: "POST", Path: "/v1/completions", Body: []byte(`{"model":"llama3","prompt":`)})
		if res.Status != 400 || res.Headers[HeaderDestination] != "" {
			t.Errorf("%s: bad JSON: status %d, destination %q; want 400", mode.name, res.Status, res.Headers[HeaderDestination])
		}
	}
}

// TestClientValuesStayOutOfLogs: an unknown model name and token id values
// reach neither the logs nor the error text, a client's x-request-id is
// logged cut short; a token id ≥ 2^32 is the client's mistake (400), not
// kvroute's (500).
func TestClientValuesStayOutOfLogs(t *testing.T) {
	const model = "model-name-zebra-quokka-7731"
	const bigID = "98765432109876543210987"
	const id32 = "4294967296"
	for _, failOpen := range []bool{true, false} {
		h := newHarness(t, harnessOptions{failOpen: failOpen, llamaPool: true})
		for _, mode := range modes {
			res := h.do(mode.cfg, fakeenvoy.Request{Method: "POST", Path: "/v1/completions", Headers: map[string]string{HeaderRequestID: strings.Repeat("y", 10_000)},
				Body: []byte(`{"model":"` + model + strings.Repeat("x", 10_000) + `","prompt":"hi"}`)})
			if res.Status != 404 || strings.Contains(res.LocalBody, model) {
				t.Errorf("%s: unknown model: status %d, body %.80q", mode.name, res.Status, res.LocalBody)
			}
			for _, id := range []string{bigID, id32} {
				res = h.do(mode.cfg, fakeenvoy.Request{Method: "POST", Path: "/v1/completions", Body: []byte(`{"model":"qwen3","prompt":[1,2,3,` + id + `,5]}`)})
				switch {
				case failOpen && (res.Status != 0 || res.Headers[HeaderDestination] == ""):
					t.Errorf("%s fail-open: token id %s: status %d, want routed by load", mode.name, id, res.Status)
				case !failOpen && res.Status != 400:
					t.Errorf("%s fail-closed: token id %s: status %d, want 400", mode.name, id, res.Status)
				}
				if strings.Contains(res.LocalBody, id) {
					t.Errorf("%s: the reply quotes token id %s: %q", mode.name, id, res.LocalBody)
				}
			}
		}
		logs := h.logs.String()
		if !strings.Contains(logs, "yyyy") {
			t.Error("the request id is not logged at all")
		}
		for _, v := range []string{model, bigID, id32, strings.Repeat("y", 100)} {
			if strings.Contains(logs, v) {
				t.Errorf("fail-open %v: logs hold the client's %q", failOpen, v)
			}
		}
		if got := h.decisions(routing.OutcomeLoad, routing.ReasonHashError) + h.decisions(routing.OutcomeRejected, routing.ReasonHashError); got != 0 {
			t.Errorf("%v hash_error decisions: a token id out of range reached the hasher", got)
		}
	}
}

// countingTokenizer counts Encode calls (work done per request).
type countingTokenizer struct {
	routetest.WordTokenizer
	calls atomic.Int64
}

func (c *countingTokenizer) Encode(text string, addSpecial bool) []int {
	c.calls.Add(1)
	return c.WordTokenizer.Encode(text, addSpecial)
}

// TestRequestsOverTheLimitsRouteByLoadUntokenized: a prompt, token list or
// message list over the per-request limits, and a body that does not fit the
// in-flight budget, route by load at once with their reason: no tokenizing,
// no hashing.
func TestRequestsOverTheLimitsRouteByLoadUntokenized(t *testing.T) {
	tok := &countingTokenizer{}
	lim := routing.Limits{MaxPromptBytes: 2000, MaxPromptTokens: 50, MaxMessages: 4}
	h := newHarness(t, harnessOptions{limits: lim, tokenizer: tok, debug: true, bytesInFlight: 2500})
	h.ix.Store(h.eps[1].Replica, h.keysOf(sharedPrefix, blockhash.RequestKeys{}), index.TierGPU)
	words := func(n int) string { return strings.TrimSpace(strings.Repeat("word ", n)) }
	ids := func(n int) string {
		s := make([]string, n)
		for i := range s {
			s[i] = strconv.Itoa(i + 2)
		}
		return "[" + strings.Join(s, ",") + "]"
	}
	chat := func(n int) string {
		m := make([]string, n)
		for i := range m {
			m[i] = `{"role":"user","content":"hi"}`
		}
		return `{"model":"qwen3","messages":[` + strings.Join(m, ",") + `]}`
	}
	for _, c := range []struct {
		name, path, body, reason string
		tokenized                bool
	}{
		{"within limits", "/v1/completions", `{"model":"qwen3","prompt":"` + sharedPrefix + `"}`, routing.ReasonHit, true},
		{"prompt bytes", "/v1/completions", `{"model":"qwen3","prompt":"` + sharedPrefix + words(400) + `"}`, routing.ReasonPromptTooLarge, false},
		{"prompt tokens", "/v1/completions", `{"model":"qwen3","prompt":"` + words(60) + `"}`, routing.ReasonPromptTooLarge, true},
		{"token ids", "/v1/completions", `{"model":"qwen3","prompt":` + ids(60) + `}`, routing.ReasonPromptTooLarge, false},
		{"messages", "/v1/chat/completions", chat(5), routing.ReasonTooManyMessages, false},
		{"chat bytes", "/v1/chat/completions", chat(4)[:len(chat(4))-2] + `],"tools":"` + strings.Repeat("t", 2000) + `"}`, routing.ReasonPromptTooLarge, false},
		{"in-flight budget", "/v1/completions", `{"model":"qwen3","prompt":"` + sharedPrefix + `","pad":"` + strings.Repeat(" ", 2500) + `"}`, routing.ReasonDecideBudget, false},
	} {
		before := tok.calls.Load()
		res := h.do(modes[0].cfg, fakeenvoy.Request{Method: "POST", Path: c.path, Body: []byte(c.body)})
		if res.Status != 0 || res.Headers[HeaderDestination] == "" || res.Headers[HeaderDebugReason] != c.reason {
			t.Errorf("%s: status %d, destination %q, reason %q; want routed with reason %s", c.name, res.Status, res.Headers[HeaderDestination], res.Headers[HeaderDebugReason], c.reason)
		}
		if tokenized := tok.calls.Load() != before; tokenized != c.tokenized {
			t.Errorf("%s: tokenized %v, want %v", c.name, tokenized, c.tokenized)
		}
	}
	if got := h.decisions(routing.OutcomeLoad, routing.ReasonPromptTooLarge); got != 4 {
		t.Errorf("load/prompt_too_large = %v, want 4", got)
	}
}

// TestBodyModeDefaultAndProtocolConfig: nothing configured means BUFFERED,
// the mode of envoy/envoy.yaml, settled without waiting for a message; and
// Envoy's protocol_config, when sent, wins over routing.body_mode (a
// contradiction is counted as a misfit instead of breaking the stream).
func TestBodyModeDefaultAndProtocolConfig(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	res := h.do(fakeenvoy.Config{Mode: fakeenvoy.Buffered}, completion(sharedPrefix))
	if res.Status != 0 || res.Headers[HeaderDestination] == "" {
		t.Fatalf("default mode, buffered Envoy without protocol_config: status %d", res.Status)
	}
	if got := testutil.ToFloat64(h.server.m.bodyModes.WithLabelValues(ModeSourceConfigured, modeLabelBuffered)); got != 1 {
		t.Fatalf("body_mode_total{configured,buffered} = %v, want 1", got)
	}
	if got := testutil.CollectAndCount(h.server.m.bodyModes); got != 1 {
		t.Fatalf("%d body-mode series, want only configured/buffered (no inference)", got)
	}
	for _, c := range []struct {
		configured string
		envoy      fakeenvoy.Config
	}{
		{"buffered", fakeenvoy.Config{Mode: fakeenvoy.FullDuplex, SendProtocolConfig: true}},
		{"", fakeenvoy.Config{Mode: fakeenvoy.FullDuplex, SendProtocolConfig: true}},
		{"full_duplex", fakeenvoy.Config{Mode: fakeenvoy.Buffered, SendProtocolConfig: true}},
	} {
		h := newHarness(t, harnessOptions{bodyMode: c.configured})
		res := h.do(c.envoy, completion(sharedPrefix))
		if res.Status != 0 || res.Headers[HeaderDestination] == "" {
			t.Errorf("configured %s, Envoy says %v: status %d, destination %q", c.configured, c.envoy.Mode, res.Status, res.Headers[HeaderDestination])
		}
		if got := testutil.ToFloat64(h.server.m.modeMisfits.WithLabelValues(MisfitConfigContradicted)); got != 1 {
			t.Errorf("configured %s: config_contradicted misfits = %v, want 1", c.configured, got)
		}
	}
}

// TestStreamedBodyAfterBufferedDecisionIsAMisfit: an Envoy that streams the
// body (FULL_DUPLEX_STREAMED, no protocol_config) to a server left at the
// buffered default gets its decision on the first chunk; the next chunk is
// counted as a misfit, and the stream is still answered, not hung.
func TestStreamedBodyAfterBufferedDecisionIsAMisfit(t *testing.T) {
	h := newHarness(t, harnessOptions{failOpen: true})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := h.client.Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	body := completion(sharedPrefix).Body
	send := func(m *extprocv3.ProcessingRequest) {
		t.Helper()
		if err := stream.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	recv := func(want string) {
		t.Helper()
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("waiting for the %s answer: %v", want, err)
		}
		if got := fmt.Sprintf("%T", resp.GetResponse()); !strings.Contains(got, want) {
			t.Fatalf("got %s, want the %s answer", got, want)
		}
	}
	send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
		Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":path", RawValue: []byte("/v1/completions")}, {Key: ":method", RawValue: []byte("POST")}}}}}})
	recv("RequestHeaders")
	send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: body[:10]}}})
	recv("RequestBody")
	send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: body[10:], EndOfStream: true}}})
	recv("RequestBody")
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(h.server.m.modeMisfits.WithLabelValues(MisfitBodyAfterDecision)); got != 1 {
		t.Fatalf("body_after_decision misfits = %v, want 1", got)
	}
}
