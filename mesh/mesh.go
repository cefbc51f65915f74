// Package mesh joins the kvroute replicas in front of one fleet: each
// streams every request it routes and ends — endpoint, uncached prompt
// tokens, block keys — to the others that subscribe to it, subscribes to
// theirs, and puts their requests on its own router's books
// (routing.Router.BeginPeer). Every kvroute already sees every engine's KV events;
// with the mesh each also sees the prefill work the others just sent, which
// no scrape can show until it is under way.
//
// The mesh runs over gRPC streams with mutual TLS (transport.go): a peer is
// trusted iff its certificate chains to the mesh CA. Even a trusted peer's
// input is bounded: messages are capped before they are allocated and
// decoded strictly, booked tokens and keys are clamped to what a request of
// the pool can carry, each sender's bookings are bounded and expire, the
// peers' speculative keys take a bounded share of the index, and a peer
// that goes silent has its requests taken off the books. A subscriber that
// stops reading loses its own messages, never anyone else's.
package mesh

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kvroute/kvroute/index"
	"github.com/kvroute/kvroute/internal/panics"
	"github.com/kvroute/kvroute/routing"
)

// PanicComponent is kvroute_panics_total's component for the mesh.
const PanicComponent = "peer_mesh"

// Books is where peers' requests go: the router (routing.Router).
type Books interface {
	BeginPeer(routing.SharedWork) (routing.PeerWork, error)
	EndPeer(routing.PeerWork)
}

// Index is what the mesh reads of the router's index to keep the peers'
// speculative keys a bounded share of it (index.Index).
type Index interface {
	TotalEntries() int64
	MaxEntries() int64
}

// PoolBounds is what one request of a pool can carry: a peer's booking is
// clamped to it.
type PoolBounds struct {
	MaxTokens int // routing.max_prompt_tokens
	MaxKeys   int // the full blocks of MaxTokens
}

// Options configures a Mesh (config.Peers, resolved).
type Options struct {
	// Listen is the mesh's gRPC listener, host:port (port 0: any; see Addr).
	Listen string
	// Addresses are the peers' listeners, host:port; this kvroute's own
	// may be among them (it does not subscribe to itself).
	Addresses []string
	// TLS are the mutual-TLS credentials; nil only with Insecure.
	TLS *TLSFiles
	// Insecure runs the mesh in plaintext, unauthenticated.
	Insecure bool
	// Layout is the fingerprint of this kvroute's pools (server computes
	// it); a message with another is dropped: its names and keys would not
	// mean the same here.
	Layout            uint64
	HeartbeatInterval time.Duration
	PeerTimeout       time.Duration
	RequestTimeout    time.Duration
	MaxRequests       int
	MaxMessageBytes   int
	// Pools bound the bookings per pool (by name); a pool missing here is
	// not clamped (the books refuse pools they do not know).
	Pools map[string]PoolBounds
	// Index and SpeculativeTTL bound the peers' speculative keys (nil: not
	// bounded by the index's size).
	Index          Index
	SpeculativeTTL time.Duration
	Logger         *slog.Logger
	Registerer     prometheus.Registerer
	// Now is the clock of timeouts; nil → time.Now.
	Now func() time.Time
}

// maxSenders bounds the distinct senders tracked: every configured peer
// restarting a few times over before its old self times out. A new sender
// beyond it evicts the one heard from least recently.
const maxSenders = 4 * 64

// peerKeyShare: the peers' live speculative keys stay under 1/peerKeyShare
// of index.max_entries, and none are stored once the index is that close to
// its cap, so a flood of peer keys can neither fill the index nor push out
// the blocks the engines hold.
const peerKeyShare = 8

// reconnect backoff of a subscription.
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 5 * time.Second
)

// Mesh is this kvroute's place in the mesh: a Sharer for its router, the
// server its peers subscribe to, and the subscriber that books the peers'
// requests.
type Mesh struct {
	o          Options
	books      Books
	log        *slog.Logger
	met        *metrics
	pc         *panics.Counter
	now        func() time.Time
	sender     uint64
	nextID     atomic.Uint64
	closed     atomic.Bool
	lis        *listener
	srv        *grpc.Server
	clientOpts []grpc.DialOption
	perSender  int

	pubMu sync.Mutex // orders seq and the fan-out to subscribers
	seq   uint64
	subs  map[*subscriber]struct{}

	mu     sync.Mutex
	peers  map[uint64]*peer // by sender id
	booked int              // requests on the books, all peers
	keys   keyBudget
}

// peer is one sender's state.
type peer struct {
	lastSeen time.Time
	lastSeq  uint64
	reqs     map[uint64]bookedReq
	order    []uint64 // request ids in booking order (some since ended)
}

type bookedReq struct {
	work routing.PeerWork
	at   time.Time
}

// stream is the state of one subscription: every message on it must come
// from the sender of its first.
type stream struct {
	sender uint64
	dec    message
}

// New binds the listener (so a taken port fails at start) and loads the
// certificates; Run serves and subscribes until its context ends.
func New(o Options, books Books) (*Mesh, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.HeartbeatInterval <= 0 || o.PeerTimeout <= 0 || o.RequestTimeout <= 0 || o.MaxRequests <= 0 || o.MaxMessageBytes < headerLen {
		return nil, errors.New("mesh: every interval, timeout and bound must be positive")
	}
	if (o.TLS == nil) != o.Insecure {
		return nil, errors.New("mesh: either TLS credentials or Insecure")
	}
	m := &Mesh{o: o, books: books, log: o.Logger, met: newMetrics(o.Registerer), pc: panics.NewCounter(o.Registerer), now: o.Now,
		sender: randomSender(), subs: map[*subscriber]struct{}{}, peers: map[uint64]*peer{},
		perSender: max(1, o.MaxRequests/max(1, len(o.Addresses)))}
	if o.Index != nil && o.SpeculativeTTL > 0 {
		capacity := float64(o.Index.MaxEntries()) / (2 * peerKeyShare) // live ≤ twice a bucket
		m.keys = keyBudget{on: true, capacity: capacity, tokens: capacity, per: o.SpeculativeTTL}
	}
	var serverTLS, clientTLS *tls.Config
	if o.TLS != nil {
		s, c, err := o.TLS.tlsConfigs(m.certReloaded)
		if err != nil {
			return nil, err
		}
		serverTLS, clientTLS = s, c
	}
	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return nil, fmt.Errorf("peers.listen %s: %w", o.Listen, err)
	}
	m.lis = &listener{Listener: ln, conns: map[string]*conn{}, refuse: func(r string) { m.refuseConn(r, nil) }}
	m.srv = m.newServer(serverTLS)
	m.clientOpts = m.clientOptions(clientTLS)
	return m, nil
}

// certReloaded logs and counts a certificate reload.
func (m *Mesh) certReloaded(err error) {
	if err != nil {
		m.met.certReloads.WithLabelValues("error").Inc()
		m.log.Error("peer mesh: the certificate files changed but do not load; the previous certificate stays in use", "err", err)
		return
	}
	m.met.certReloads.WithLabelValues("applied").Inc()
	m.log.Info("peer mesh: certificate reloaded")
}

func credentialsInsecure() credentials.TransportCredentials { return insecure.NewCredentials() }

func grpcConnectParams() grpc.ConnectParams {
	return grpc.ConnectParams{
		Backoff:           backoff.Config{BaseDelay: minBackoff, Multiplier: 2, Jitter: 0.2, MaxDelay: maxBackoff},
		MinConnectTimeout: handshakeTimeout,
	}
}

func jitter(d time.Duration) time.Duration { return mrand.N(d + 1) }

// randomSender is this process's sender id: a restarted kvroute is a new
// sender, so its peers never mix its old requests with its new ones.
func randomSender() uint64 {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return mrand.Uint64()
	}
	return binary.LittleEndian.Uint64(b[:]) | 1
}

// Addr is the listener's address (its port when Listen asked for 0).
func (m *Mesh) Addr() string { return m.lis.Addr().String() }

// Began publishes a request this kvroute routed (routing.Sharer). It never
// blocks: a subscriber whose queue is full misses it, counted.
func (m *Mesh) Began(w routing.SharedWork) uint64 {
	id := m.nextID.Add(1)
	keys := w.Keys
	if len(w.Pool) == 0 || len(w.Pool) > maxNameLen || len(w.Endpoint) == 0 || len(w.Endpoint) > maxNameLen {
		m.met.dropped.WithLabelValues(dropLongName).Inc()
		return id
	}
	if beginLen(w.Pool, w.Endpoint, len(keys)) > m.o.MaxMessageBytes {
		// The peers would refuse it: send the work without the keys.
		m.met.dropped.WithLabelValues(dropKeysTooMany).Inc()
		keys = nil
	}
	matched := min(max(w.Matched, 0), len(keys))
	m.publish(kindBegin, func(h header) []byte {
		b := make([]byte, 0, beginLen(w.Pool, w.Endpoint, len(keys)))
		return appendBegin(b, h, id, clampU32(w.Uncached), uint32(matched), w.Pool, w.Endpoint, keys)
	})
	return id
}

// Ended publishes the end of a request Began published.
func (m *Mesh) Ended(id uint64) {
	m.publish(kindEnd, func(h header) []byte { return appendEnd(make([]byte, 0, endLen), h, id) })
}

// headerLocked is the next message's header (m.pubMu held); next false
// repeats the current seq (a subscription's first hello).
func (m *Mesh) headerLocked(next bool) header {
	if next {
		m.seq++
	}
	return header{sender: m.sender, seq: m.seq, layout: m.o.Layout, sent: time.Now().UnixNano()}
}

func clampU32(v int) uint32 { return uint32(min(uint64(max(v, 0)), 1<<32-1)) }

// publish offers one message to every subscriber, in seq order.
func (m *Mesh) publish(kind byte, build func(header) []byte) {
	if m.closed.Load() {
		return
	}
	m.pubMu.Lock()
	b := build(m.headerLocked(true))
	for s := range m.subs {
		s.offer(b)
	}
	m.pubMu.Unlock()
	m.met.sent.WithLabelValues(kindNames[kind]).Inc()
}

// Run serves the subscribers, subscribes to every peer and sweeps the books
// until ctx ends; then it closes every connection and takes every peer
// request off the books.
func (m *Mesh) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() {
		defer m.pc.Recover(PanicComponent, m.log, nil)
		if err := m.srv.Serve(m.lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			m.log.Error("peer mesh: listener stopped", "err", err)
		}
	})
	for _, a := range m.o.Addresses {
		wg.Go(func() { m.supervise(ctx, func() { m.subscribe(ctx, a) }) })
	}
	wg.Go(func() { m.supervise(ctx, func() { m.sweep(ctx) }) })
	mode := "mutual TLS"
	if m.o.Insecure {
		mode = "plaintext"
	}
	m.log.Info("peer mesh up", "listen", m.Addr(), "peers", len(m.o.Addresses), "transport", mode)
	<-ctx.Done()
	m.closed.Store(true)
	m.srv.Stop()
	wg.Wait()
	m.mu.Lock()
	for s, p := range m.peers {
		m.forget(s, p, expiredShutdown)
	}
	m.mu.Unlock()
}

// supervise runs f until ctx ends, again after a panic (counted).
func (m *Mesh) supervise(ctx context.Context, f func()) {
	for ctx.Err() == nil {
		func() {
			defer m.pc.Recover(PanicComponent, m.log, nil)
			f()
		}()
		select {
		case <-ctx.Done():
		case <-time.After(minBackoff):
		}
	}
}

// receive books one message from a peer's stream.
func (m *Mesh) receive(b []byte, st *stream) {
	dec := &st.dec
	if err := decode(b, dec); err != nil {
		m.drop(dropDecode, "bytes", len(b), "err", err)
		return
	}
	if st.sender == 0 {
		st.sender = dec.sender
	} else if dec.sender != st.sender {
		m.drop(dropSenderChanged, "bytes", len(b))
		return
	}
	if dec.sender == m.sender {
		return // this kvroute's own, through an address that names it
	}
	if dec.layout != m.o.Layout {
		m.drop(dropLayout, "bytes", len(b))
		return
	}
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.peers[dec.sender]
	if p == nil {
		if len(m.peers) >= maxSenders {
			m.evictOldestSender()
		}
		p = &peer{reqs: map[uint64]bookedReq{}}
		m.peers[dec.sender] = p
		m.met.peers.Set(float64(len(m.peers)))
		m.log.Info("peer mesh: a peer joined", "peers", len(m.peers))
	} else if dec.seq > p.lastSeq+1 {
		m.met.lost.Add(float64(dec.seq - p.lastSeq - 1))
	}
	p.lastSeen = now
	p.lastSeq = max(p.lastSeq, dec.seq)
	switch dec.kind {
	case kindHello:
	case kindBegin:
		if !m.begin(p, dec, now) {
			return
		}
	case kindEnd:
		r, ok := p.reqs[dec.request]
		if !ok {
			m.drop(dropUnbookedEnd, "bytes", len(b))
			return
		}
		m.books.EndPeer(r.work)
		delete(p.reqs, dec.request)
		m.booked--
		m.met.booked.Set(float64(m.booked))
	}
	m.met.received.WithLabelValues(kindNames[dec.kind]).Inc()
	// The sender's clock against ours: transit and queueing, plus whatever
	// the clocks differ by (a message "from the future" counts as 0).
	m.met.delay.Observe(max(0, time.Since(time.Unix(0, dec.sent)).Seconds()))
}

// evictOldestSender makes room for a new sender (m.mu held): the one heard
// from least recently goes, with its requests.
func (m *Mesh) evictOldestSender() {
	var oldest uint64
	var op *peer
	for s, p := range m.peers {
		if op == nil || p.lastSeen.Before(op.lastSeen) {
			oldest, op = s, p
		}
	}
	m.log.Warn("peer mesh: sender table full; evicted the sender heard from least recently", "senders", len(m.peers),
		"requests", len(op.reqs), "silent", m.now().Sub(op.lastSeen).Round(time.Millisecond))
	m.met.sendersEvicted.Inc()
	m.forget(oldest, op, expiredSenderEvicted)
}

// begin books a peer's request (m.mu held), clamped to what a request of
// its pool can carry; false: not booked (counted).
func (m *Mesh) begin(p *peer, dec *message, now time.Time) bool {
	if _, dup := p.reqs[dec.request]; dup {
		m.drop(dropDuplicate, "bytes", 0)
		return false
	}
	if m.booked >= m.o.MaxRequests && len(p.reqs) == 0 {
		m.drop(dropBooksFull, "booked", m.booked)
		return false
	}
	if len(p.reqs) >= m.perSender || m.booked >= m.o.MaxRequests {
		// The sender's oldest booking goes: its end was most likely lost,
		// and the newest work is what the decision should see.
		m.endOldest(p)
	}
	uncached, keys, matched := int(dec.uncached), dec.keys, int(dec.matched)
	if b, ok := m.o.Pools[string(dec.pool)]; ok {
		if uncached > b.MaxTokens {
			uncached = b.MaxTokens
			m.clamp(clampTokens)
		}
		if len(keys) > b.MaxKeys {
			keys = keys[:b.MaxKeys]
			m.clamp(clampKeys)
		}
	}
	if n := m.admitKeys(len(keys), now); n < len(keys) {
		keys = keys[:n]
		m.clamp(clampKeyShare)
	}
	w, err := m.books.BeginPeer(routing.SharedWork{
		Pool: string(dec.pool), Endpoint: string(dec.endpoint),
		Uncached: uncached, Matched: min(matched, len(keys)), Keys: keys,
	})
	if err != nil {
		// Names are the peer's config, not a client's, but a peer may be
		// anything: log lengths only.
		reason := dropUnknownEndpoint
		if errors.Is(err, routing.ErrUnknownPool) {
			reason = dropUnknownPool
		}
		m.drop(reason, "pool_bytes", len(dec.pool), "endpoint_bytes", len(dec.endpoint), "err", err)
		return false
	}
	p.reqs[dec.request] = bookedReq{work: w, at: now}
	p.order = append(p.order, dec.request)
	m.booked++
	m.met.booked.Set(float64(m.booked))
	return true
}

// endOldest takes a sender's oldest booking off the books (m.mu held).
func (m *Mesh) endOldest(p *peer) {
	for len(p.order) > 0 {
		id := p.order[0]
		p.order = p.order[1:]
		if r, ok := p.reqs[id]; ok {
			m.books.EndPeer(r.work)
			delete(p.reqs, id)
			m.booked--
			m.met.expired.WithLabelValues(expiredSenderCap).Inc()
			if m.met.shouldLog("sender_cap", m.now()) {
				m.log.Warn("peer mesh: a peer is at its share of peers.max_requests; its oldest request came off the books", "limit", m.perSender)
			}
			break
		}
	}
	if len(p.order) > 2*len(p.reqs)+64 {
		// Compact the ended ids away (amortised: the slice at least halves).
		kept := p.order[:0:0]
		for _, id := range p.order {
			if _, ok := p.reqs[id]; ok {
				kept = append(kept, id)
			}
		}
		p.order = kept
	}
}

// keyBudget is a token bucket of peer keys per speculative TTL.
type keyBudget struct {
	on               bool
	capacity, tokens float64
	per              time.Duration
	last             time.Time
}

// admitKeys says how many of n keys a peer's booking may store (m.mu held):
// within the bucket, and none once the index is within 1/peerKeyShare of its
// cap.
func (m *Mesh) admitKeys(n int, now time.Time) int {
	if !m.keys.on || n == 0 {
		return n
	}
	k := &m.keys
	if !k.last.IsZero() {
		k.tokens = min(k.capacity, k.tokens+k.capacity*now.Sub(k.last).Seconds()/k.per.Seconds())
	}
	k.last = now
	limit := m.o.Index.MaxEntries()
	room := limit - limit/peerKeyShare - m.o.Index.TotalEntries()
	a := int(max(0, min(float64(n), k.tokens, float64(room))))
	k.tokens -= float64(a)
	return a
}

func (m *Mesh) clamp(field string) {
	m.met.clamped.WithLabelValues(field).Inc()
	if m.met.shouldLog("clamp_"+field, m.now()) {
		m.log.Warn("peer mesh: clamped a peer's booking", "field", field)
	}
}

// sweep says hello every heartbeat, takes off the books the requests of
// peers gone silent and requests whose end never came, and cuts stalled
// subscribers.
func (m *Mesh) sweep(ctx context.Context) {
	t := time.NewTicker(m.o.HeartbeatInterval)
	defer t.Stop()
	for {
		m.publish(kindHello, func(h header) []byte { return appendHeader(make([]byte, 0, headerLen), kindHello, h) })
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		m.expire(m.now())
		m.cutStalled()
	}
}

// expire applies the peer and request timeouts at now.
func (m *Mesh) expire(now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for s, p := range m.peers {
		if now.Sub(p.lastSeen) > m.o.PeerTimeout {
			m.log.Info("peer mesh: a peer went silent; its requests are off the books", "requests", len(p.reqs), "silent", now.Sub(p.lastSeen).Round(time.Millisecond))
			m.forget(s, p, expiredPeerGone)
			continue
		}
		for id, r := range p.reqs {
			if now.Sub(r.at) > m.o.RequestTimeout {
				m.books.EndPeer(r.work)
				delete(p.reqs, id)
				m.booked--
				m.met.expired.WithLabelValues(expiredRequestTimeout).Inc()
			}
		}
	}
	m.met.booked.Set(float64(m.booked))
}

// forget takes a sender's requests off the books and drops it (m.mu held).
func (m *Mesh) forget(sender uint64, p *peer, reason string) {
	for _, r := range p.reqs {
		m.books.EndPeer(r.work)
	}
	m.booked -= len(p.reqs)
	m.met.expired.WithLabelValues(reason).Add(float64(len(p.reqs)))
	delete(m.peers, sender)
	m.met.peers.Set(float64(len(m.peers)))
	m.met.booked.Set(float64(m.booked))
}

// drop counts a message not booked and logs it, at most once a second per
// reason (lengths and reasons only).
func (m *Mesh) drop(reason string, attrs ...any) {
	m.met.dropped.WithLabelValues(reason).Inc()
	if m.met.shouldLog(reason, m.now()) {
		m.log.Warn("peer mesh: dropped a message", append([]any{"reason", reason}, attrs...)...)
	}
}

var _ routing.Sharer = (*Mesh)(nil)

// Close releases the listener of a mesh that never ran (Run releases it
// otherwise).
func (m *Mesh) Close() {
	m.closed.Store(true)
	m.srv.Stop()
	m.lis.Close()
}

// index.Index is what server passes as Options.Index.
var _ Index = (*index.Index)(nil)
