package server

import (
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/netutil"
)

// The admin listener's bounds. Its clients are scrapers, probes and
// operators: a request is small and quick, so a client that takes longer is
// cut rather than held, and however many connect, the listener holds a
// bounded number of connections (further ones wait in the kernel's accept
// queue) and /debug/explain a bounded number of bodies.
const (
	adminReadHeaderTimeout = 5 * time.Second
	// adminReadTimeout bounds reading a whole request, body included: a
	// body of routing.body_limit_bytes arrives well within it on any link
	// an operator uses.
	adminReadTimeout = 30 * time.Second
	// adminWriteTimeout bounds a response, from the end of the request's
	// headers (the largest is /metrics).
	adminWriteTimeout = 30 * time.Second
	adminIdleTimeout  = 60 * time.Second
	// adminMaxConns bounds the connections the listener holds at once.
	adminMaxConns = 256
	// explainConcurrency bounds the /debug/explain requests served at once
	// (each may hold a body of routing.body_limit_bytes); one more is
	// answered 503 with Retry-After.
	explainConcurrency = 4
)

// adminBounds are the admin listener's bounds, the constants above; tests
// shorten them.
type adminBounds struct {
	readHeaderTimeout, readTimeout, writeTimeout, idleTimeout time.Duration
	maxConns, explainSlots                                    int
}

var defaultAdminBounds = adminBounds{readHeaderTimeout: adminReadHeaderTimeout, readTimeout: adminReadTimeout,
	writeTimeout: adminWriteTimeout, idleTimeout: adminIdleTimeout, maxConns: adminMaxConns, explainSlots: explainConcurrency}

// serveAdmin serves the admin HTTP endpoints on ln within b until the
// server is shut down.
func (s *Server) serveAdmin(ln net.Listener, b adminBounds) error {
	s.explainSlots = make(chan struct{}, b.explainSlots)
	srv := s.admin
	srv.ReadHeaderTimeout, srv.ReadTimeout, srv.WriteTimeout, srv.IdleTimeout = b.readHeaderTimeout, b.readTimeout, b.writeTimeout, b.idleTimeout
	conns := s.adminConns
	srv.ConnState = func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			conns.Inc()
		case http.StateClosed, http.StateHijacked:
			conns.Dec()
		}
	}
	return srv.Serve(netutil.LimitListener(ln, b.maxConns))
}

// NewAdminConnsGauge registers kvroute_admin_connections, the admin
// listener's open connections.
func NewAdminConnsGauge(reg prometheus.Registerer) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "kvroute_admin_connections",
		Help: fmt.Sprintf("Connections the admin listener holds (at most %d; further ones wait to be accepted).", adminMaxConns)})
	reg.MustRegister(g)
	return g
}
