package discovery

import "github.com/prometheus/client_golang/prometheus"

// Refresh results of kvroute_discovery_refreshes_total.
const (
	ResultOK    = "ok"    // the source answered with at least one engine
	ResultEmpty = "empty" // the source answered: no engine (scaled to zero, NXDOMAIN)
	// ResultEmptyHeld: the source answered no engine within its grace
	// period (DNS); the last set is kept.
	ResultEmptyHeld = "empty_held"
	ResultError     = "error" // the source failed; the last set is kept
)

// Metrics are the series every source reports, labelled by pool and source
// kind. One Metrics serves every pool of a server.
type Metrics struct {
	refreshes *prometheus.CounterVec
	targets   *prometheus.GaugeVec
	dropped   *prometheus.CounterVec
}

// NewMetrics registers the discovery series with reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		refreshes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvroute_discovery_refreshes_total",
			Help: "Reads of a pool's discovery source (a DNS resolution, a Kubernetes list or change), by result: ok, empty (no engine), empty_held (no engine within the source's grace period: the last set is kept), error (the last set is kept)."},
			[]string{"pool", "source", "result"}),
		targets: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kvroute_discovery_targets",
			Help: "Engines a pool's discovery source reports now."}, []string{"pool", "source"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvroute_discovery_targets_dropped_total",
			Help: "Engines a discovery source reported that were not used, by reason (over the pool's limit, an invalid annotation)."},
			[]string{"pool", "source", "reason"}),
	}
	if reg != nil {
		reg.MustRegister(m.refreshes, m.targets, m.dropped)
	}
	return m
}

// For is the series of one pool's source.
func (m *Metrics) For(pool, source string) *SourceMetrics {
	if m == nil {
		m = NewMetrics(nil)
	}
	return &SourceMetrics{m: m, pool: pool, source: source}
}

// SourceMetrics are one pool's source's series.
type SourceMetrics struct {
	m            *Metrics
	pool, source string
}

// Refreshed counts one read of the source with its result.
func (s *SourceMetrics) Refreshed(result string) {
	s.m.refreshes.WithLabelValues(s.pool, s.source, result).Inc()
}

// Targets sets the engines the source reports now.
func (s *SourceMetrics) Targets(n int) { s.m.targets.WithLabelValues(s.pool, s.source).Set(float64(n)) }

// Dropped counts n engines left out for reason.
func (s *SourceMetrics) Dropped(reason string, n int) {
	s.m.dropped.WithLabelValues(s.pool, s.source, reason).Add(float64(n))
}
