package mesh

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Reasons of kvroute_peer_messages_dropped_total.
const (
	dropSendQueueFull   = "send_queue_full"
	dropSendError       = "send_error"
	dropLongName        = "name_too_long"
	dropKeysTooMany     = "keys_over_message_limit" // sent without its keys
	dropFrames          = "frames"
	dropDecode          = "decode_error"
	dropLayout          = "layout_mismatch"
	dropTooManyPeers    = "too_many_peers"
	dropDuplicate       = "duplicate"
	dropBooksFull       = "books_full"
	dropUnknownEndpoint = "unknown_endpoint"
)

// Reasons of kvroute_peer_requests_expired_total.
const (
	expiredRequestTimeout = "request_timeout"
	expiredPeerGone       = "peer_gone"
	expiredShutdown       = "shutdown"
)

type metrics struct {
	sent, received *prometheus.CounterVec
	dropped        *prometheus.CounterVec
	refused        *prometheus.CounterVec
	expired        *prometheus.CounterVec
	lost           prometheus.Counter
	booked, peers  prometheus.Gauge
	delay          prometheus.Histogram
	connected      *prometheus.GaugeVec

	logMu   sync.Mutex
	logLast map[string]time.Time
}

// NewMetrics registers the mesh's series (New does; the dashboard test
// walks them).
func NewMetrics(reg prometheus.Registerer) { newMetrics(reg) }

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvroute_peer_messages_sent_total",
			Help: "Peer-mesh messages queued for the other kvroutes, by kind (begin, end, hello)."}, []string{"kind"}),
		received: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvroute_peer_messages_received_total",
			Help: "Peer-mesh messages read from the other kvroutes and accepted, by kind."}, []string{"kind"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvroute_peer_messages_dropped_total",
			Help: "Peer-mesh messages not sent or not booked, by reason."}, []string{"reason"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvroute_peer_frames_refused_total",
			Help: "Peer-mesh connections closed for a frame over peers.max_message_bytes, by socket and reason."}, []string{"socket", "reason"}),
		expired: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvroute_peer_requests_expired_total",
			Help: "Peers' requests taken off the books without their end, by reason (request_timeout, peer_gone, shutdown)."}, []string{"reason"}),
		lost: prometheus.NewCounter(prometheus.CounterOpts{Name: "kvroute_peer_messages_lost_total",
			Help: "Peer-mesh messages missing from a peer's sequence (never received)."}),
		booked: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kvroute_peer_requests_booked",
			Help: "Requests other kvroutes routed that are on this kvroute's books now."}),
		peers: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kvroute_peers",
			Help: "Peers heard from within peers.peer_timeout."}),
		connected: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kvroute_peer_connected",
			Help: "1 while the subscription to a configured peer address is connected."}, []string{"address"}),
		delay: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kvroute_peer_message_delay_seconds",
			Help:    "Time from a peer's send to this kvroute handling the message, by the two wall clocks (so only as exact as their sync): the mesh helps while this stays well under one prefill.",
			Buckets: []float64{0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 5}}),
		logLast: map[string]time.Time{},
	}
	if reg != nil {
		reg.MustRegister(m.sent, m.received, m.dropped, m.refused, m.expired, m.lost, m.booked, m.peers, m.connected, m.delay)
	}
	for _, k := range kindNames {
		m.sent.WithLabelValues(k)
		m.received.WithLabelValues(k)
	}
	for _, r := range []string{dropSendQueueFull, dropSendError, dropLongName, dropKeysTooMany, dropFrames, dropDecode, dropLayout,
		dropTooManyPeers, dropDuplicate, dropBooksFull, dropUnknownEndpoint} {
		m.dropped.WithLabelValues(r)
	}
	for _, r := range []string{expiredRequestTimeout, expiredPeerGone, expiredShutdown} {
		m.expired.WithLabelValues(r)
	}
	return m
}

// shouldLog rate-limits a log line per key to one a second.
func (m *metrics) shouldLog(key string, now time.Time) bool {
	m.logMu.Lock()
	defer m.logMu.Unlock()
	if now.Sub(m.logLast[key]) < time.Second {
		return false
	}
	m.logLast[key] = now
	return true
}
