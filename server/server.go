// Package server assembles kvroute from a config: the CacheIndex, each
// pool's tokenizer and chat templates, the KV-event ingest and load scraper,
// the routing decision and the ext_proc gRPC server with its health service,
// and the admin HTTP endpoints. `kvroute serve` is a thin shell around it; the
// demo and the benchmark run the same assembly in process.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"

	"github.com/kvroute/kvroute/config"
	"github.com/kvroute/kvroute/discovery"
	"github.com/kvroute/kvroute/extproc"
	"github.com/kvroute/kvroute/index"
	"github.com/kvroute/kvroute/ingest"
	"github.com/kvroute/kvroute/internal/panics"
	"github.com/kvroute/kvroute/mesh"
	"github.com/kvroute/kvroute/routing"
)

// Options configures New.
type Options struct {
	Config *config.Config
	// BaseDir resolves relative tokenizer and chat_template paths (the
	// config file's directory); "" means the working directory.
	BaseDir string
	Logger  *slog.Logger // nil → slog.Default()
	// Registry receives every metric; nil → a new one with the Go runtime
	// and process collectors.
	Registry *prometheus.Registry
	// Now is the clock of chat templates' strftime_now; nil → time.Now.
	Now func() time.Time
}

// Server is kvroute assembled and listening, not yet serving.
type Server struct {
	cfg     *config.Config
	log     *slog.Logger
	reg     *prometheus.Registry
	ix      *index.Index
	ingest  *ingest.Manager
	grpc    *grpc.Server
	health  *health.Server
	tls     bool
	grpcLn  net.Listener
	adminLn net.Listener
	admin   *http.Server
	// adminBounds are the admin listener's bounds (admin.go);
	// explainSlots holds one token per /debug/explain being served and
	// adminConns counts its connections.
	adminBounds  adminBounds
	explainSlots chan struct{}
	adminConns   prometheus.Gauge
	panics       *panics.Counter
	router       *routing.Router
	// flow is flow control: one dispatcher per pool runs in Run.
	flow    *routing.FlowControl
	fleet   *fleet
	sources []poolSource
	// reloadMu serialises Reload; cfg is the running config.
	reloadMu sync.Mutex
	reload   *reloadMetrics
	bind     bool   // ingest.bind is set (a restart-only key)
	baseDir  string // resolves relative paths of the config
	// stopTracing flushes and stops the span exporter (nil: tracing off).
	stopTracing func(context.Context) error
	// mesh is the peer mesh (nil: peers.listen is "").
	mesh *mesh.Mesh
	// parity checks every replica's engine against its pool's config.
	parity *parity
	funnel *routing.Funnel
}

// Panic components of kvroute_panics_total recovered here.
const (
	panicAdmin     = "admin_http"
	panicIndex     = "index_sweeper"
	panicIngest    = "ingest_run"
	panicReadiness = "readiness_watch"
	panicFlow      = "flow_dispatch"
	panicServe     = "listener_serve"
)

// drainTimeout bounds how long open ext_proc streams may take to finish on
// shutdown before they are cut.
const drainTimeout = 10 * time.Second

// New loads every pool's tokenizer and chat templates, builds the index, the
// router and the ingest manager, and binds the listeners (":0" ports work;
// see ExtProcAddr and AdminAddr). A pool whose tokenizer cannot be loaded
// is an error: starting with it would silently route by load only.
func New(opts Options) (*Server, error) {
	cfg := opts.Config
	if cfg == nil {
		return nil, errors.New("server: Config is required")
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	reg := opts.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	ix, lay, err := buildIndex(cfg, reg)
	if err != nil {
		return nil, err
	}
	mgr, err := ingest.New(ingest.Options{
		Settings: ingestSettings(cfg.Ingest), Pools: lay.ingestPools(),
		Index: ix, Logger: log, Registerer: reg,
	})
	if err != nil {
		return nil, err
	}
	parts, err := loadAllPoolParts(cfg, opts.BaseDir, now)
	if err != nil {
		return nil, err
	}
	for i := range cfg.Pools {
		p := &cfg.Pools[i]
		name := p.Name
		pp := parts[name]
		if pp.tokenizer == nil {
			log.Warn("pool has no tokenizer: it routes by load only", "pool", name)
		} else {
			log.Info("pool tokenizer loaded", "pool", name, "tokenizer", p.Tokenizer, "chat", pp.chat != nil)
		}
	}
	router, err := buildRouter(cfg, ix, lay, parts)
	if err != nil {
		return nil, err
	}
	tlsConf, err := serverTLS(cfg.Listen.TLS)
	if err != nil {
		return nil, err
	}
	tracer, stopTracing, err := newTracer(cfg.Tracing)
	if err != nil {
		return nil, err
	}
	if tracer != nil {
		log.Info("tracing decisions over OTLP", "endpoint", cfg.Tracing.Endpoint, "protocol", cfg.Tracing.Protocol,
			"sample_ratio", cfg.Tracing.SampleRatio)
	}
	flow := routing.NewFlowControl(router, reg, nil)
	epOpts := extprocOptions(cfg.Routing)
	epOpts.Flow, epOpts.Tracer, epOpts.Logger, epOpts.Metrics = flow, tracer, log, extproc.NewMetrics(reg)
	ep := extproc.NewServer(router, epOpts)
	s := &Server{cfg: cfg, log: log, reg: reg, ix: ix, ingest: mgr, tls: tlsConf != nil, panics: panics.NewCounter(reg), router: router, flow: flow,
		fleet: newFleet(lay, reg), reload: newReloadMetrics(reg), bind: cfg.Ingest.Bind != "", baseDir: opts.BaseDir,
		stopTracing: stopTracing}
	s.startParity(reg)
	if s.sources, err = s.buildSources(discovery.NewMetrics(reg)); err != nil {
		return nil, err
	}
	if s.mesh, err = s.buildMesh(cfg); err != nil {
		return nil, err
	}
	s.grpc, s.health = extproc.NewGRPCServer(ep, tlsConf)
	if s.grpcLn, err = net.Listen("tcp", cfg.Listen.ExtProc); err != nil {
		s.closeMesh()
		return nil, fmt.Errorf("listen.extproc: %w", err)
	}
	if cfg.Listen.Admin != "" {
		if s.adminLn, err = net.Listen("tcp", cfg.Listen.Admin); err != nil {
			s.grpcLn.Close()
			s.closeMesh()
			return nil, fmt.Errorf("listen.admin: %w", err)
		}
		s.admin = &http.Server{Handler: s.recoverHTTP(s.adminMux())}
		s.adminBounds, s.adminConns = defaultAdminBounds, NewAdminConnsGauge(reg)
	}
	return s, nil
}

// ExtProcAddr is the ext_proc gRPC listener's address.
func (s *Server) ExtProcAddr() net.Addr { return s.grpcLn.Addr() }

// Ready reports whether every pool has a replica with a live event stream
// or fresh load data.
func (s *Server) Ready() bool { return s.ingest.Ready() }

// Run serves until ctx ends, then lets open streams drain (bounded) and
// returns once everything has stopped.
func (s *Server) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { s.supervise(ctx, panicIndex, func() { s.ix.Run(ctx) }) })
	wg.Go(func() {
		// Counted, not restarted: ingest recovers its own goroutines, and a
		// second Run beside the first one's survivors would double them.
		defer s.panics.Recover(panicIngest, s.log, nil)
		if err := s.ingest.Run(ctx); err != nil {
			s.log.Error("ingest stopped", "err", err)
		}
	})
	for _, ps := range s.sources {
		wg.Go(func() { s.supervise(ctx, panicDiscovery, func() { s.runSource(ctx, ps) }) })
	}
	if s.mesh != nil {
		wg.Go(func() {
			// Counted, not restarted: Run owns the sockets it closes.
			defer s.panics.Recover(mesh.PanicComponent, s.log, nil)
			s.mesh.Run(ctx)
		})
	}
	wg.Go(func() { s.parity.run(ctx) })
	for _, pool := range s.flow.Pools() {
		// Stopping sheds the pool's waiters, so the streams they hold end
		// before the drain below waits for them.
		wg.Go(func() { s.supervise(ctx, panicFlow, func() { s.flow.RunPool(ctx, pool) }) })
	}
	wg.Go(func() {
		s.supervise(ctx, panicReadiness, func() { extproc.WatchReadiness(ctx, s.health, s.Ready, time.Second) })
	})
	wg.Go(func() {
		defer s.panics.Recover(panicServe, s.log, nil)
		if err := s.grpc.Serve(s.grpcLn); err != nil {
			s.log.Error("ext_proc server stopped", "err", err)
		}
	})
	s.log.Info("ext_proc listening", "addr", s.grpcLn.Addr().String(), "tls", s.tls)
	if s.admin != nil {
		wg.Go(func() {
			defer s.panics.Recover(panicServe, s.log, nil)
			if err := s.serveAdmin(s.adminLn, s.adminBounds); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.log.Error("admin server stopped", "err", err)
			}
		})
		s.log.Info("admin listening", "addr", s.adminLn.Addr().String())
	}
	s.warnExposed()
	s.log.Info("kvroute started", "pools", len(s.fleet.pools))
	<-ctx.Done()
	s.log.Info("kvroute stopping")

	stopped := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(drainTimeout):
		s.grpc.Stop()
		<-stopped
	}
	if s.admin != nil {
		sctx, c := context.WithTimeout(context.Background(), 5*time.Second)
		_ = s.admin.Shutdown(sctx)
		c()
	}
	wg.Wait()
	if s.stopTracing != nil {
		sctx, c := context.WithTimeout(context.Background(), tracingShutdownTimeout)
		if err := s.stopTracing(sctx); err != nil {
			s.log.Warn("tracing: spans not flushed at shutdown", "err", err)
		}
		c()
	}
	return nil
}

// supervise runs fn under panics.Counter.Supervise.
func (s *Server) supervise(ctx context.Context, component string, fn func()) {
	s.panics.Supervise(ctx, component, s.log, fn)
}

// recoverHTTP answers 500 for a handler that panics and counts it (net/http
// would recover too, but silently and by dropping the connection).
func (s *Server) recoverHTTP(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer s.panics.Recover(panicAdmin, s.log, func(error) {
			http.Error(w, "internal error", http.StatusInternalServerError)
		})
		h.ServeHTTP(w, r)
	})
}

func (s *Server) adminMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", s.serveReadyz)
	mux.HandleFunc("GET /debug/replicas", s.serveReplicas)
	mux.Handle("POST /debug/explain", explainHandler(s.router, s.parity, s.cfg.Routing.BodyLimitBytes, func() chan struct{} { return s.explainSlots }, s.log, s.reg))
	return mux
}
