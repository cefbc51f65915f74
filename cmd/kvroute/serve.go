package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kvroute/kvroute/config"
	"github.com/kvroute/kvroute/extproc"
	"github.com/kvroute/kvroute/index"
)

// runServe loads the config, builds the parts and runs until ctx ends.
func runServe(ctx context.Context, args []string, io stdio) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.err)
	path := fs.String("config", "kvroute.yaml", "YAML config file (see docs/CONFIG.md)")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	cfg, err := config.Load(*path)
	if err != nil {
		return fmt.Errorf("config %s:\n%w", *path, err)
	}
	log := newLogger(cfg.Log, io.err)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	ix, err := buildIndex(cfg, reg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { ix.Run(ctx) })

	router, err := buildRouter(cfg, ix, nil)
	if err != nil {
		return err
	}
	tlsConf, err := serverTLS(cfg.Listen.TLS)
	if err != nil {
		return err
	}
	ep := extproc.NewServer(router, extproc.Options{
		BodyLimitBytes: cfg.Routing.BodyLimitBytes,
		DebugHeaders:   cfg.Routing.DebugHeaders,
		BodyMode:       cfg.Routing.BodyMode,
		Logger:         log,
		Metrics:        extproc.NewMetrics(reg),
	})
	grpcSrv, health := extproc.NewGRPCServer(ep, tlsConf)
	grpcLn, err := net.Listen("tcp", cfg.Listen.ExtProc)
	if err != nil {
		return fmt.Errorf("listen.extproc: %w", err)
	}
	ready := func() bool { return true }
	wg.Go(func() { extproc.WatchReadiness(ctx, health, ready, time.Second) })
	wg.Go(func() {
		if err := grpcSrv.Serve(grpcLn); err != nil {
			log.Error("ext_proc server stopped", "err", err)
		}
	})
	context.AfterFunc(ctx, func() {
		// Let open streams (requests in flight) finish, within bounds.
		stopped := make(chan struct{})
		go func() { grpcSrv.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(10 * time.Second):
			grpcSrv.Stop()
		}
	})
	log.Info("ext_proc listening", "addr", grpcLn.Addr().String(), "tls", tlsConf != nil)

	if cfg.Listen.Admin != "" {
		ln, err := net.Listen("tcp", cfg.Listen.Admin)
		if err != nil {
			return fmt.Errorf("listen.admin: %w", err)
		}
		srv := &http.Server{Handler: adminMux(reg, ready), ReadHeaderTimeout: 5 * time.Second}
		wg.Go(func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("admin server stopped", "err", err)
			}
		})
		context.AfterFunc(ctx, func() {
			sctx, c := context.WithTimeout(context.Background(), 5*time.Second)
			defer c()
			_ = srv.Shutdown(sctx)
		})
		log.Info("admin listening", "addr", ln.Addr().String())
	}
	log.Info("kvroute started", "pools", len(cfg.Pools), "config", *path)
	<-ctx.Done()
	log.Info("kvroute stopping")
	cancel()
	wg.Wait()
	return nil
}

// buildIndex registers every pool and replica rank of cfg in a new index.
func buildIndex(cfg *config.Config, reg prometheus.Registerer) (*index.Index, error) {
	ix := index.New(index.Options{
		TTL:            cfg.Index.TTL.Std(),
		MaxEntries:     cfg.Index.MaxEntries,
		CPUTierWeight:  cfg.Index.CPUTierWeight,
		SpeculativeTTL: cfg.Index.SpeculativeTTL.Std(),
		Registerer:     reg,
	})
	for i, p := range cfg.Pools {
		pid, err := ix.AddPool(p.Name)
		if err != nil {
			return nil, fmt.Errorf("pools[%d]: %w", i, err)
		}
		for j, r := range p.Replicas {
			for rank := 0; rank < r.DataParallelSize; rank++ {
				if _, err := ix.AddReplica(pid, r.RankName(rank)); err != nil {
					return nil, fmt.Errorf("pools[%d].replicas[%d]: %w", i, j, err)
				}
			}
		}
	}
	return ix, nil
}

func adminMux(reg *prometheus.Registry, ready func() bool) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready() {
			http.Error(w, "not ready: no pool has a replica with live events or load data yet", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	return mux
}

func newLogger(c config.Log, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(strings.ToUpper(c.Level)))
	opts := &slog.HandlerOptions{Level: level}
	if c.Format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}
