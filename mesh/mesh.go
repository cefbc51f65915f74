// Package mesh joins the kvroute replicas in front of one fleet: each
// publishes every request it routes and ends — endpoint, uncached prompt
// tokens, block keys — on a ZeroMQ PUB socket, subscribes to the others',
// and puts their requests on its own router's books (routing.Router.BeginPeer).
// Every kvroute already sees every engine's KV events; with the mesh each
// also sees the prefill work the others just sent, which no scrape can show
// until it is under way.
//
// Nothing a peer sends is trusted: frames are capped before zmq4 allocates
// them (ingest.CappedContext), messages are decoded strictly, a peer's
// requests are bounded in number and in age, and a peer that goes silent
// has its requests taken off the books.
package mesh

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvroute/kvroute/ingest"
	"github.com/kvroute/kvroute/routing"
)

// Books is where peers' requests go: the router (routing.Router).
type Books interface {
	BeginPeer(routing.SharedWork) (routing.PeerWork, error)
	EndPeer(routing.PeerWork)
}

// Options configures a Mesh (config.Peers, resolved).
type Options struct {
	// Listen is the PUB endpoint, tcp://host:port (port 0: any; see Addr).
	Listen string
	// Addresses are the peers' PUB endpoints; this kvroute's own may be
	// among them (its messages are ignored).
	Addresses []string
	// Layout is the fingerprint of this kvroute's pools (server computes
	// it); a message with another is dropped: its names and keys would not
	// mean the same here.
	Layout            uint64
	HeartbeatInterval time.Duration
	PeerTimeout       time.Duration
	RequestTimeout    time.Duration
	MaxRequests       int
	MaxMessageBytes   int
	Logger            *slog.Logger
	Registerer        prometheus.Registerer
	// Now is the clock of timeouts; nil → time.Now.
	Now func() time.Time
}

// sendQueue bounds the messages waiting for the PUB socket; a message that
// does not fit is dropped and counted (peers then miss one request, which
// their timeouts forgive).
const sendQueue = 4096

// maxSenders bounds the distinct senders tracked: every configured peer
// restarting a few times over before its old self times out.
const maxSenders = 4 * 64

// reconnect backoff of a peer's SUB socket.
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 5 * time.Second
)

// Mesh is this kvroute's place in the mesh: a Sharer for its router, and
// the subscriber that books the peers' requests.
type Mesh struct {
	o      Options
	books  Books
	log    *slog.Logger
	met    *metrics
	now    func() time.Time
	sender uint64
	seq    atomic.Uint64
	nextID atomic.Uint64
	out    chan []byte
	pub    zmq4.Socket
	closed atomic.Bool

	mu     sync.Mutex
	peers  map[uint64]*peer // by sender id
	booked int              // requests on the books, all peers
}

// peer is one sender's state.
type peer struct {
	lastSeen time.Time
	lastSeq  uint64
	reqs     map[uint64]bookedReq
}

type bookedReq struct {
	work routing.PeerWork
	at   time.Time
}

// New binds the PUB socket (so a taken port fails at start) and returns the
// mesh; Run connects to the peers and serves until its context ends.
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
	m := &Mesh{o: o, books: books, log: o.Logger, met: newMetrics(o.Registerer), now: o.Now,
		sender: randomSender(), out: make(chan []byte, sendQueue), peers: map[uint64]*peer{}}
	ctx := ingest.CappedContext(context.Background(), uint64(o.MaxMessageBytes), m.refused("publisher"))
	m.pub = zmq4.NewPub(ctx, ingest.QuietZMQ)
	if err := m.pub.SetOption(zmq4.OptionHWM, sendQueue); err != nil {
		m.pub.Close()
		return nil, fmt.Errorf("mesh: publisher: %w", err)
	}
	if err := m.pub.Listen(ingest.CappedEndpoint(o.Listen)); err != nil {
		m.pub.Close()
		return nil, fmt.Errorf("peers.listen %s: %w", o.Listen, err)
	}
	return m, nil
}

// randomSender is this process's sender id: a restarted kvroute is a new
// sender, so its peers never mix its old requests with its new ones.
func randomSender() uint64 {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return mrand.Uint64()
	}
	return binary.LittleEndian.Uint64(b[:]) | 1
}

// Addr is the PUB socket's address (its port when Listen asked for 0).
func (m *Mesh) Addr() string { return m.pub.Addr().String() }

// Began publishes a request this kvroute routed (routing.Sharer). It never
// blocks: a full send queue drops the message and counts it.
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
	b := make([]byte, 0, beginLen(w.Pool, w.Endpoint, len(keys)))
	b = appendBegin(b, m.header(), id, clampU32(w.Uncached), uint32(matched), w.Pool, w.Endpoint, keys)
	m.enqueue(kindBegin, b)
	return id
}

// Ended publishes the end of a request Began published.
func (m *Mesh) Ended(id uint64) {
	m.enqueue(kindEnd, appendEnd(make([]byte, 0, endLen), m.header(), id))
}

// header is the next message's header.
func (m *Mesh) header() header {
	return header{sender: m.sender, seq: m.seq.Add(1), layout: m.o.Layout, sent: time.Now().UnixNano()}
}

func clampU32(v int) uint32 { return uint32(min(uint64(max(v, 0)), 1<<32-1)) }

func (m *Mesh) enqueue(kind byte, b []byte) {
	if m.closed.Load() {
		return
	}
	select {
	case m.out <- b:
	default:
		m.met.dropped.WithLabelValues(dropSendQueueFull).Inc()
		return
	}
	m.met.sent.WithLabelValues(kindNames[kind]).Inc()
}

// Run publishes, subscribes to every peer and sweeps the books until ctx
// ends; then it closes the sockets and takes every peer request off the
// books.
func (m *Mesh) Run(ctx context.Context) {
	var wg, pub sync.WaitGroup
	pub.Go(func() { m.publish(ctx) })
	for _, a := range m.o.Addresses {
		wg.Go(func() { m.subscribe(ctx, a) })
	}
	wg.Go(func() { m.sweep(ctx) })
	m.log.Info("peer mesh up", "listen", m.Addr(), "peers", len(m.o.Addresses))
	<-ctx.Done()
	m.closed.Store(true)
	pub.Wait() // the socket is closed once nothing sends on it
	m.pub.Close()
	wg.Wait()
	m.mu.Lock()
	for s, p := range m.peers {
		m.forget(s, p, expiredShutdown)
	}
	m.mu.Unlock()
}

// publish hands queued messages to the PUB socket (which queues them for
// each subscriber, bounded by its HWM).
func (m *Mesh) publish(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case b := <-m.out:
			if err := m.pub.Send(zmq4.NewMsg(b)); err != nil {
				m.met.dropped.WithLabelValues(dropSendError).Inc()
			}
		}
	}
}

// subscribe keeps a SUB socket connected to one peer and books what it
// reads; a failed connection is retried with backoff.
func (m *Mesh) subscribe(ctx context.Context, addr string) {
	conn := m.met.connected.WithLabelValues(addr)
	backoff := minBackoff
	var dec message
	for ctx.Err() == nil {
		sctx, cancel := context.WithCancel(ingest.CappedContext(ctx, uint64(m.o.MaxMessageBytes), m.refused("subscriber")))
		sub := zmq4.NewSub(sctx, ingest.QuietZMQ, zmq4.WithDialerMaxRetries(0), zmq4.WithDialerTimeout(2*time.Second))
		err := sub.SetOption(zmq4.OptionSubscribe, "")
		if err == nil {
			err = sub.Dial(ingest.CappedEndpoint(addr))
		}
		if err == nil {
			conn.Set(1)
			backoff = minBackoff
			for {
				msg, rerr := sub.Recv()
				if rerr != nil {
					err = rerr
					break
				}
				if msg.Type == zmq4.CmdMsg {
					continue
				}
				m.receive(msg.Frames, &dec)
			}
			conn.Set(0)
		}
		sub.Close()
		cancel()
		if ctx.Err() != nil {
			return
		}
		m.log.Debug("peer mesh: connection to a peer down; retrying", "peer", addr, "err", err, "backoff", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff/2 + mrand.N(backoff/2+1)):
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// receive books one message from a peer.
func (m *Mesh) receive(frames [][]byte, dec *message) {
	if len(frames) != 1 {
		m.drop(dropFrames, "frames", len(frames))
		return
	}
	if err := decode(frames[0], dec); err != nil {
		m.drop(dropDecode, "bytes", len(frames[0]), "err", err)
		return
	}
	if dec.sender == m.sender {
		return // this kvroute's own, through an address that names it
	}
	if dec.layout != m.o.Layout {
		m.drop(dropLayout, "bytes", len(frames[0]))
		return
	}
	m.met.received.WithLabelValues(kindNames[dec.kind]).Inc()
	// The sender's clock against ours: transit and queueing, plus whatever
	// the clocks differ by (a message "from the future" counts as 0).
	m.met.delay.Observe(max(0, time.Since(time.Unix(0, dec.sent)).Seconds()))
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.peers[dec.sender]
	if p == nil {
		if len(m.peers) >= maxSenders {
			m.drop(dropTooManyPeers, "senders", len(m.peers))
			return
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
	case kindBegin:
		m.begin(p, dec, now)
	case kindEnd:
		if r, ok := p.reqs[dec.request]; ok {
			m.books.EndPeer(r.work)
			delete(p.reqs, dec.request)
			m.booked--
			m.met.booked.Set(float64(m.booked))
		}
	}
}

func (m *Mesh) begin(p *peer, dec *message, now time.Time) {
	if _, dup := p.reqs[dec.request]; dup {
		m.drop(dropDuplicate, "bytes", 0)
		return
	}
	if m.booked >= m.o.MaxRequests {
		m.drop(dropBooksFull, "booked", m.booked)
		return
	}
	w, err := m.books.BeginPeer(routing.SharedWork{
		Pool: string(dec.pool), Endpoint: string(dec.endpoint),
		Uncached: int(dec.uncached), Matched: int(dec.matched), Keys: dec.keys,
	})
	if err != nil {
		// Names are the peer's config, not a client's, but a peer may be
		// anything: log lengths only.
		m.drop(dropUnknownEndpoint, "pool_bytes", len(dec.pool), "endpoint_bytes", len(dec.endpoint), "err", err)
		return
	}
	p.reqs[dec.request] = bookedReq{work: w, at: now}
	m.booked++
	m.met.booked.Set(float64(m.booked))
}

// sweep says hello every heartbeat and takes off the books the requests of
// peers gone silent and requests whose end never came.
func (m *Mesh) sweep(ctx context.Context) {
	t := time.NewTicker(m.o.HeartbeatInterval)
	defer t.Stop()
	for {
		m.enqueue(kindHello, appendHeader(make([]byte, 0, headerLen), kindHello, m.header()))
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		m.expire(m.now())
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

// refused counts and logs a connection closed for an oversize frame.
func (m *Mesh) refused(socket string) func(ingest.Refusal) {
	return func(r ingest.Refusal) {
		m.met.refused.WithLabelValues(socket, r.Reason).Inc()
		if m.met.shouldLog("refused_"+socket, time.Now()) {
			m.log.Warn("peer mesh: refused an oversize ZeroMQ frame; closed the connection", "socket", socket, "reason", r.Reason,
				"peer", r.Peer, "frame_bytes", r.FrameBytes, "message_bytes", r.MessageBytes, "limit_bytes", r.LimitBytes)
		}
	}
}

var _ routing.Sharer = (*Mesh)(nil)

// Close releases the PUB socket of a mesh that never ran (Run closes it
// otherwise).
func (m *Mesh) Close() {
	m.closed.Store(true)
	m.pub.Close()
}
