package extproc

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvroute/kvroute/internal/panics"
)

// Metrics are the ext_proc server's Prometheus metrics. Labels carry pool
// names and fixed outcome/reason enums only.
type Metrics struct {
	decisions       *prometheus.CounterVec
	decisionSeconds prometheus.Histogram
	streams         prometheus.Gauge
	bodyModes       *prometheus.CounterVec
	modeMisfits     *prometheus.CounterVec
	panics          *panics.Counter
}

// Panic components of kvroute_panics_total this package recovers.
const (
	panicGRPC   = "extproc_grpc"   // a gRPC handler (recovery interceptor)
	panicDecide = "extproc_decide" // the routing decision (routed by load)
)

// NewMetrics registers the metrics with reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvroute_route_decisions_total",
			Help: "Routing decisions by pool, outcome (prefix, load, rejected) and reason.",
		}, []string{"pool", "outcome", "reason"}),
		decisionSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "kvroute_route_decision_duration_seconds",
			Help:    "Time from a complete body to the routing decision (parse, tokenize, hash, lookup, choose).",
			Buckets: prometheus.ExponentialBuckets(10e-6, 2.5, 12),
		}),
		streams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kvroute_extproc_streams",
			Help: "Open ext_proc streams (HTTP requests in processing).",
		}),
		bodyModes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvroute_extproc_body_mode_total",
			Help: "Streams by how their request body mode was settled (source: protocol_config, configured, inferred) and the mode.",
		}, []string{"source", "mode"}),
		modeMisfits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvroute_extproc_body_mode_misfits_total",
			Help: "Signs that a stream's body mode was wrong, by kind (config_contradicted, body_after_decision).",
		}, []string{"kind"}),
		panics: panics.NewCounter(reg),
	}
	if reg != nil {
		reg.MustRegister(m.decisions, m.decisionSeconds, m.streams, m.bodyModes, m.modeMisfits)
	}
	return m
}

func (m *Metrics) decision(pool, outcome, reason string) {
	m.decisions.WithLabelValues(pool, outcome, reason).Inc()
}
