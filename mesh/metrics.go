package mesh

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Reasons of kvroute_peer_messages_dropped_total.
const (
	dropSubscriberQueueFull = "subscriber_queue_full"
	dropLongName            = "name_too_long"
	dropKeysTooMany         = "keys_over_message_limit" // sent without its keys
	dropDecode              = "decode_error"
	dropSenderChanged       = "sender_changed"
	dropLayout              = "layout_mismatch"
	dropDuplicate           = "duplicate"
	dropBooksFull           = "books_full"
	dropUnknownPool         = "unknown_pool"
	dropUnknownEndpoint     = "unknown_endpoint"
	dropUnbookedEnd         = "end_not_booked"
)

// Reasons of kvroute_peer_requests_expired_total.
const (
	expiredRequestTimeout = "request_timeout"
	expiredPeerGone       = "peer_gone"
	expiredSenderCap      = "sender_cap"
	expiredSenderEvicted  = "sender_evicted"
	expiredShutdown       = "shutdown"
)

// Reasons of kvroute_peer_connections_refused_total.
const (
	refusedHandshake          = "tls_handshake"
	refusedNameNotAllowed     = "name_not_allowed"
	refusedTooManyConns       = "too_many_connections"
	refusedTooManySubscribers = "too_many_subscribers"
	refusedBadHello           = "bad_hello"
	refusedLayout             = "layout_mismatch"
	refusedMessageTooLarge    = "message_too_large"
)

// Fields of kvroute_peer_bookings_clamped_total.
const (
	clampTokens   = "tokens"
	clampKeys     = "keys"
	clampKeyShare = "index_share"
)

type metrics struct {
	sent, received  *prometheus.CounterVec
	dropped         *prometheus.CounterVec
	refused         *prometheus.CounterVec
	expired         *prometheus.CounterVec
	clamped         *prometheus.CounterVec
	subscriberDrops *prometheus.CounterVec
	cut             *prometheus.CounterVec
	certReloads     *prometheus.CounterVec
	lost            prometheus.Counter
	sendersEvicted  prometheus.Counter
	booked, peers   prometheus.Gauge
	subscribers     prometheus.Gauge
	delay           prometheus.Histogram
	connected       *prometheus.GaugeVec

	logMu   sync.Mutex
	logLast map[string]time.Time
	labels  map[string]bool
}

// NewMetrics registers the mesh's series (New does; the dashboard test
// walks them).
func NewMetrics(reg prometheus.Registerer) { newMetrics(reg) }

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvroute_peer_messages_sent_total",
			Help: "Peer-mesh messages published to the subscribed kvroutes, by kind (begin, end, hello)."}, []string{"kind"}),
		received: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvroute_peer_messages_received_total",
			Help: "Peer-mesh messages from the other kvroutes that took effect (a begin booked, an end that ended a booking, a hello), by kind."}, []string{"kind"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvroute_peer_messages_dropped_total",
			Help: "Peer-mesh messages not sent or not booked, by reason."}, []string{"reason"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvroute_peer_connections_refused_total",
			Help: "Peer-mesh connections and subscriptions refused or closed, by reason (tls_handshake, name_not_allowed, too_many_connections, too_many_subscribers, bad_hello, layout_mismatch, message_too_large)."}, []string{"reason"}),
		expired: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvroute_peer_requests_expired_total",
			Help: "Peers' requests taken off the books without their end, by reason (request_timeout, peer_gone, sender_cap, sender_evicted, shutdown)."}, []string{"reason"}),
		clamped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvroute_peer_bookings_clamped_total",
			Help: "Peers' bookings cut down to a bound, by field (tokens: over routing.max_prompt_tokens; keys: over the blocks of such a prompt; index_share: peers' speculative keys at their share of index.max_entries)."}, []string{"field"}),
		subscriberDrops: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvroute_peer_subscriber_drops_total",
			Help: "Messages a subscribed peer missed because it did not keep up and its send queue was full, by peer (certificate name@IP, or IP in plaintext)."}, []string{"peer"}),
		cut: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvroute_peer_subscribers_cut_total",
			Help: "Subscribed peers disconnected because a send to them waited longer than peers.peer_timeout, by peer."}, []string{"peer"}),
		certReloads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvroute_peer_certificate_reloads_total",
			Help: "Reloads of peers.tls.cert_file and key_file after they changed on disk, by result (applied, error: the previous certificate stays)."}, []string{"result"}),
		lost: prometheus.NewCounter(prometheus.CounterOpts{Name: "kvroute_peer_messages_lost_total",
			Help: "Peer-mesh messages missing from a peer's sequence (never received)."}),
		sendersEvicted: prometheus.NewCounter(prometheus.CounterOpts{Name: "kvroute_peer_senders_evicted_total",
			Help: "Senders evicted to make room for a new one when the sender table was full."}),
		booked: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kvroute_peer_requests_booked",
			Help: "Requests other kvroutes routed that are on this kvroute's books now."}),
		peers: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kvroute_peers",
			Help: "Peers heard from within peers.peer_timeout."}),
		subscribers: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kvroute_peer_subscribers",
			Help: "Peers subscribed to this kvroute's messages now."}),
		connected: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kvroute_peer_connected",
			Help: "1 while the subscription to a configured peer address is up."}, []string{"address"}),
		delay: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kvroute_peer_message_delay_seconds",
			Help:    "Time from a peer's send to this kvroute handling the message, by the two wall clocks (so only as exact as their sync): the mesh helps while this stays well under one prefill.",
			Buckets: []float64{0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 5}}),
		logLast: map[string]time.Time{},
		labels:  map[string]bool{},
	}
	if reg != nil {
		reg.MustRegister(m.sent, m.received, m.dropped, m.refused, m.expired, m.clamped, m.subscriberDrops, m.cut, m.certReloads, m.lost,
			m.sendersEvicted, m.booked, m.peers, m.subscribers, m.connected, m.delay)
	}
	for _, k := range kindNames {
		m.sent.WithLabelValues(k)
		m.received.WithLabelValues(k)
	}
	for _, r := range []string{dropSubscriberQueueFull, dropLongName, dropKeysTooMany, dropDecode, dropSenderChanged, dropLayout,
		dropDuplicate, dropBooksFull, dropUnknownPool, dropUnknownEndpoint, dropUnbookedEnd} {
		m.dropped.WithLabelValues(r)
	}
	for _, r := range []string{expiredRequestTimeout, expiredPeerGone, expiredSenderCap, expiredSenderEvicted, expiredShutdown} {
		m.expired.WithLabelValues(r)
	}
	for _, r := range []string{refusedHandshake, refusedNameNotAllowed, refusedTooManyConns, refusedTooManySubscribers, refusedBadHello,
		refusedLayout, refusedMessageTooLarge} {
		m.refused.WithLabelValues(r)
	}
	for _, r := range []string{"applied", "error"} {
		m.certReloads.WithLabelValues(r)
	}
	for _, f := range []string{clampTokens, clampKeys, clampKeyShare} {
		m.clamped.WithLabelValues(f)
	}
	return m
}

// peerLabel bounds the distinct peer labels: the first maxLabels names keep
// theirs, later ones share "other".
func (m *metrics) peerLabel(name string) string {
	m.logMu.Lock()
	defer m.logMu.Unlock()
	if name == "" {
		return "unknown"
	}
	if m.labels[name] || len(m.labels) < maxLabels {
		m.labels[name] = true
		return name
	}
	return "other"
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
