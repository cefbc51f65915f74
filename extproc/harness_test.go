package extproc

import (
	"context"
	"fmt"
	"github.com/kvroute/kvroute/routing"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kvroute/kvroute/blockhash"
	"github.com/kvroute/kvroute/index"
	"github.com/kvroute/kvroute/internal/fakeenvoy"
	"github.com/kvroute/kvroute/internal/logbuf"
	"github.com/kvroute/kvroute/internal/routetest"
)

const testBlockSize = routetest.BlockSize

// harness is a kvroute ext_proc server on 127.0.0.1 over an index with one
// pool "qwen" (models qwen3, adapter sql-lora) of three replicas.
type harness struct {
	t       *testing.T
	ix      *index.Index
	pool    index.PoolID
	eps     []routing.Endpoint
	reg     *prometheus.Registry
	logs    *logbuf.Buffer
	addr    string
	client  extprocv3.ExternalProcessorClient
	clk     *routetest.Clock
	server  *Server
	srvErrs *errCounter
	router  *routing.Router
	flow    *routing.FlowControl
}

type harnessOptions struct {
	addresses []string // replica addresses; default 127.0.0.1:800{1,2,3}
	failOpen  bool
	debug     bool
	scores    bool
	bodyLimit int
	bodyMode  string // routing.body_mode; "" the server's default (buffered)
	// limits and bytesInFlight go to RouterOptions; tokenizer replaces
	// routetest.WordTokenizer; llamaPool adds a second pool "llama" (model llama3) of
	// two replicas at 127.0.0.1:900{1,2}.
	limits        routing.Limits
	bytesInFlight int64
	tokenizer     routing.Tokenizer
	llamaPool     bool
	// strictPlacement sets routing.placement_slack 0 (the default; the
	// harness otherwise uses 0.5).
	strictPlacement bool
	// flow, when set, turns flow control on with these options (its
	// dispatchers run until the test ends).
	flow *routing.FlowOptions
}

func newHarness(t *testing.T, o harnessOptions) *harness {
	t.Helper()
	if o.addresses == nil {
		o.addresses = []string{"127.0.0.1:8001", "127.0.0.1:8002", "127.0.0.1:8003"}
	}
	if o.bodyLimit == 0 {
		o.bodyLimit = 1 << 20
	}
	h := &harness{t: t, reg: prometheus.NewRegistry(), logs: &logbuf.Buffer{}, clk: routetest.NewClock()}
	var rs []routetest.Replica
	h.ix, h.pool, rs = routetest.NewPool(t, h.clock, o.addresses)
	for _, r := range rs {
		h.eps = append(h.eps, routing.Endpoint{Replica: r.Replica, Name: r.Name, Address: r.Address, DPSize: 1})
	}
	if o.tokenizer == nil {
		o.tokenizer = routetest.WordTokenizer{}
	}
	pools := []routing.PoolConfig{{
		Name: "qwen", ID: h.pool, Models: []string{"qwen3"}, LoRAAdapters: []string{"sql-lora"},
		Tokenizer: o.tokenizer, Chat: routetest.LineChat{}, Keys: routetest.PoolKeys(t, "qwen", testBlockSize),
		Endpoints: h.eps,
	}}
	if o.llamaPool {
		pid, err := h.ix.AddPool("llama")
		if err != nil {
			t.Fatal(err)
		}
		lp := routing.PoolConfig{Name: "llama", ID: pid, Models: []string{"llama3"}, Tokenizer: routetest.WordTokenizer{}, Keys: routetest.PoolKeys(t, "llama", testBlockSize)}
		for i, a := range []string{"127.0.0.1:9001", "127.0.0.1:9002"} {
			r, err := h.ix.AddReplica(pid, fmt.Sprintf("llama-%d", i))
			if err != nil {
				t.Fatal(err)
			}
			lp.Endpoints = append(lp.Endpoints, routing.Endpoint{Replica: r, Name: fmt.Sprintf("llama-%d", i), Address: a, DPSize: 1})
		}
		pools = append(pools, lp)
	}
	slack := 0.5
	if o.strictPlacement {
		slack = 0
	}
	ropts := routing.RouterOptions{PrefillTokensPerSecond: 10000, ForeignRequestTokens: 1024, KVUsageCeiling: 0.95, KVFullPenalty: 0.5, PlacementSlack: slack, FailOpen: o.failOpen, Limits: o.limits, MaxBytesInFlight: o.bytesInFlight}
	if o.flow != nil {
		ropts.Flow = *o.flow
	}
	router, err := routing.NewRouter(h.ix, pools, ropts)
	if err != nil {
		t.Fatal(err)
	}
	h.router = router
	var flow *routing.FlowControl
	if o.flow != nil {
		flow = routing.NewFlowControl(router, h.reg, nil)
		h.flow = flow
	}
	log := slog.New(slog.NewJSONHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h.server = NewServer(router, Options{BodyLimitBytes: o.bodyLimit, DebugHeaders: o.debug, ScoresHeader: o.scores, BodyMode: o.bodyMode, Flow: flow, Logger: log, Metrics: NewMetrics(h.reg)})
	g, _ := NewGRPCServer(h.server, nil)
	h.srvErrs = &errCounter{}
	g = grpcWithErrCount(g, h.server, h.srvErrs)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.addr = ln.Addr().String()
	done := make(chan struct{})
	go func() { defer close(done); _ = g.Serve(ln) }()
	conn, err := grpc.NewClient(h.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(o.bodyLimit+2<<20)))
	if err != nil {
		t.Fatal(err)
	}
	h.client = extprocv3.NewExternalProcessorClient(conn)
	t.Cleanup(func() {
		conn.Close()
		g.Stop()
		<-done
		if n := h.srvErrs.get(); n != 0 {
			t.Errorf("the server ended %d streams with an error", n)
		}
	})
	if flow != nil {
		// Registered last, so it runs first: the dispatchers stop (and
		// shed their waiters) before the server does.
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for _, p := range flow.Pools() {
			wg.Go(func() { flow.RunPool(ctx, p) })
		}
		t.Cleanup(func() { cancel(); wg.Wait() })
	}
	return h
}

// grpcWithErrCount rebuilds the gRPC server with NewGRPCServer's options and
// an interceptor counting streams the server ended with an error (Envoy
// would turn those into 500s); a recovered panic is counted by the metric.
func grpcWithErrCount(old *grpc.Server, s *Server, c *errCounter) *grpc.Server {
	old.Stop()
	g := grpc.NewServer(append(serverOptions(s, nil), grpc.ChainStreamInterceptor(
		func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
			err := handler(srv, ss)
			if err != nil {
				c.add()
			}
			return err
		}))...)
	extprocv3.RegisterExternalProcessorServer(g, s)
	return g
}

type errCounter struct {
	mu sync.Mutex
	n  int
}

func (c *errCounter) add() { c.mu.Lock(); c.n++; c.mu.Unlock() }
func (c *errCounter) get() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

func (h *harness) clock() time.Time        { return h.clk.Now() }
func (h *harness) advance(d time.Duration) { h.clk.Advance(d) }

// keysOf computes a prompt's block keys as the router does (token keys).
func (h *harness) keysOf(prompt string, rk blockhash.RequestKeys) []index.BlockKey {
	return routetest.WordKeys(h.t, prompt, rk)
}

func (h *harness) do(cfg fakeenvoy.Config, req fakeenvoy.Request) fakeenvoy.Result {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := fakeenvoy.Do(ctx, h.client, cfg, req)
	if err != nil {
		h.t.Fatalf("exchange: %v (status %d %s)", err, res.Status, res.Details)
	}
	return res
}

func (h *harness) decisions(outcome, reason string) float64 {
	return testutil.ToFloat64(h.server.m.decisions.WithLabelValues("qwen", outcome, reason))
}

func completion(prompt string) fakeenvoy.Request {
	return fakeenvoy.Request{Method: "POST", Path: "/v1/completions", Headers: map[string]string{"content-type": "application/json"},
		Body: []byte(fmt.Sprintf(`{"model":"qwen3","prompt":%q,"max_tokens":8}`, prompt))}
}

// modes lists the protocol variants every routing test runs under.
var modes = []struct {
	name string
	cfg  fakeenvoy.Config
}{
	{"buffered", fakeenvoy.Config{Mode: fakeenvoy.Buffered, SendProtocolConfig: true, ReceivingNamespaces: []string{"envoy.lb"}}},
	{"buffered_without_protocol_config", fakeenvoy.Config{Mode: fakeenvoy.Buffered, ReceivingNamespaces: []string{"envoy.lb"}}},
	{"full_duplex", fakeenvoy.Config{Mode: fakeenvoy.FullDuplex, SendProtocolConfig: true, ReceivingNamespaces: []string{"envoy.lb"}}},
}
