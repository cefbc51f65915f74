package mesh

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	grpcpeer "google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// The mesh runs over gRPC: each kvroute serves one server-streaming method
// on peers.listen, and subscribes to every address in peers.addresses by
// calling it. The subscriber sends one hello (its sender id and layout);
// the server then streams its messages. Each message is one gRPC message
// carrying the mesh's own bounded binary format (wire.go) through a codec
// that copies bytes and nothing else: no protobuf schema or generated code
// to keep, and the one decoder is the fuzzed one.
const (
	serviceName = "kvroute.mesh.v1.Mesh"
	methodName  = "/" + serviceName + "/Subscribe"
)

var subscribeDesc = grpc.StreamDesc{StreamName: "Subscribe", ServerStreams: true}

// Bounds of the transport.
const (
	// handshakeTimeout bounds a connection's TLS and HTTP/2 handshake and a
	// subscriber's hello.
	handshakeTimeout = 5 * time.Second
	// maxConns bounds the connections the mesh listener holds (strangers
	// still shaking hands included); more are closed at once, counted.
	maxConns = 2 * maxSubscribers
	// maxSubscribers bounds the subscription streams served at once.
	maxSubscribers = maxSenders
	// subscriberQueue and subscriberQueueBytes bound the messages waiting
	// for one subscriber: a subscriber that does not keep up loses what
	// does not fit (counted per peer), and nobody else waits for it.
	// Every subscriber's queue is a suffix of the same message sequence, so
	// all of them together hold at most the longest one's bytes.
	subscriberQueue      = 4096
	subscriberQueueBytes = 32 << 20
	// keepaliveTime is the idle time after which either side pings the
	// other; a peer that does not answer within PeerTimeout is cut.
	keepaliveTime = 10 * time.Second
	// maxHeaderBytes bounds a peer's HTTP/2 header lists.
	maxHeaderBytes = 16 << 10
	// maxLabels bounds the distinct peer names kvroute_peer_subscriber_*
	// are labelled with; more share the label "other".
	maxLabels = 64
)

// codec carries []byte messages as they are.
type codec struct{}

func (codec) Name() string { return "kvrm" }

func (codec) Marshal(v any) ([]byte, error) {
	b, ok := v.(*[]byte)
	if !ok {
		return nil, fmt.Errorf("mesh codec: cannot marshal %T", v)
	}
	return *b, nil
}

func (codec) Unmarshal(data []byte, v any) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("mesh codec: cannot unmarshal into %T", v)
	}
	*b = append((*b)[:0], data...) // data is gRPC's buffer, reused after
	return nil
}

// listener tracks the mesh's connections so that a stalled subscriber's
// connection can be cut, and bounds how many there are.
type listener struct {
	net.Listener
	refuse func(reason string)
	mu     sync.Mutex
	conns  map[string]*conn // by remote address
}

type conn struct {
	net.Conn
	l    *listener
	once sync.Once
}

func (c *conn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		if c.l.conns[c.RemoteAddr().String()] == c {
			delete(c.l.conns, c.RemoteAddr().String())
		}
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

func (l *listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.mu.Lock()
		if len(l.conns) >= maxConns {
			l.mu.Unlock()
			c.Close()
			l.refuse(refusedTooManyConns)
			continue
		}
		tc := &conn{Conn: c, l: l}
		l.conns[c.RemoteAddr().String()] = tc
		l.mu.Unlock()
		return tc, nil
	}
}

// cut closes the connection from addr (a stalled subscriber's): gRPC then
// fails its streams, which unblocks their senders.
func (l *listener) cut(addr string) {
	l.mu.Lock()
	c := l.conns[addr]
	l.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

// countedCreds counts the handshakes the server side refuses.
type countedCreds struct {
	credentials.TransportCredentials
	refuse func(reason string, remote net.Addr)
}

func (c countedCreds) ServerHandshake(nc net.Conn) (net.Conn, credentials.AuthInfo, error) {
	out, ai, err := c.TransportCredentials.ServerHandshake(nc)
	if err != nil {
		reason := refusedHandshake
		if errors.Is(err, errNameNotAllowed) {
			reason = refusedNameNotAllowed
		}
		c.refuse(reason, nc.RemoteAddr())
	}
	return out, ai, err
}

func (c countedCreds) Clone() credentials.TransportCredentials {
	return countedCreds{TransportCredentials: c.TransportCredentials.Clone(), refuse: c.refuse}
}

// subscriber is one stream this kvroute serves its messages on.
type subscriber struct {
	q       chan []byte
	bytes   atomic.Int64
	sending atomic.Int64 // when the send under way began, Unix ns; 0: none
	addr    string       // the connection's remote address (listener.cut)
	label   string       // the peer's name in metrics
	m       *Mesh
}

// offer queues b unless the queue is full; it never blocks.
func (s *subscriber) offer(b []byte) {
	if s.bytes.Add(int64(len(b))) > subscriberQueueBytes {
		s.bytes.Add(-int64(len(b)))
		s.m.subscriberDrop(s)
		return
	}
	select {
	case s.q <- b:
	default:
		s.bytes.Add(-int64(len(b)))
		s.m.subscriberDrop(s)
	}
}

// newServer builds the gRPC server of the mesh listener.
func (m *Mesh) newServer(serverTLS *tls.Config) *grpc.Server {
	opts := []grpc.ServerOption{
		grpc.ForceServerCodec(codec{}),
		grpc.MaxRecvMsgSize(headerLen), // a subscriber sends one hello
		grpc.MaxSendMsgSize(m.o.MaxMessageBytes),
		grpc.MaxConcurrentStreams(4),
		grpc.MaxHeaderListSize(maxHeaderBytes),
		grpc.ConnectionTimeout(handshakeTimeout),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: keepaliveTime, Timeout: m.o.PeerTimeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: keepaliveTime / 2}),
	}
	if serverTLS != nil {
		opts = append(opts, grpc.Creds(countedCreds{TransportCredentials: credentials.NewTLS(serverTLS), refuse: m.refuseConn}))
	}
	srv := grpc.NewServer(opts...)
	srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: serviceName,
		HandlerType: (*any)(nil),
		Streams: []grpc.StreamDesc{{StreamName: subscribeDesc.StreamName, ServerStreams: true,
			Handler: func(_ any, ss grpc.ServerStream) error { return m.serveSubscriber(ss) }}},
	}, struct{}{})
	return srv
}

// serveSubscriber streams this kvroute's messages to one subscriber until
// it leaves, the mesh stops, or its connection is cut for stalling.
func (m *Mesh) serveSubscriber(ss grpc.ServerStream) (err error) {
	defer m.pc.Recover(PanicComponent, m.log, func(error) { err = status.Error(codes.Internal, "internal error") })
	ctx := ss.Context()
	p, _ := grpcpeer.FromContext(ctx)
	var remote net.Addr
	addr := ""
	if p != nil && p.Addr != nil {
		remote, addr = p.Addr, p.Addr.String()
	}
	// The hello must come within the handshake timeout.
	silent := time.AfterFunc(handshakeTimeout, func() { m.lis.cut(addr) })
	var b []byte
	err = ss.RecvMsg(&b)
	silent.Stop()
	if err != nil {
		return err
	}
	var hello message
	if err := decode(b, &hello); err != nil || hello.kind != kindHello {
		m.refuseConn(refusedBadHello, remote)
		return status.Error(codes.InvalidArgument, "the first message must be a mesh hello")
	}
	if hello.sender == m.sender {
		return status.Error(codes.AlreadyExists, errSelf.Error())
	}
	if hello.layout != m.o.Layout {
		m.refuseConn(refusedLayout, remote)
		return status.Error(codes.FailedPrecondition, "the pools' layout differs")
	}
	s := &subscriber{q: make(chan []byte, subscriberQueue), addr: addr, label: m.met.peerLabel(peerName(p)), m: m}
	if !m.addSubscriber(s) {
		m.refuseConn(refusedTooManySubscribers, remote)
		return status.Error(codes.ResourceExhausted, "too many subscribers")
	}
	defer m.removeSubscriber(s)
	if err := ss.SendHeader(nil); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case b := <-s.q:
			s.bytes.Add(-int64(len(b)))
			s.sending.Store(time.Now().UnixNano())
			err := ss.SendMsg(&b)
			s.sending.Store(0)
			if err != nil {
				return err
			}
		}
	}
}

// errSelf: a subscription to this kvroute's own address.
var errSelf = errors.New("this is the subscriber itself")

// peerName is how metrics name the peer of a stream: its IP, after its
// certificate's first URI or DNS name (or common name) under mutual TLS —
// the name alone may be shared (one wildcard certificate for every
// replica).
func peerName(p *grpcpeer.Peer) string {
	if p == nil {
		return ""
	}
	ip := ""
	if ta, ok := p.Addr.(*net.TCPAddr); ok {
		ip = ta.IP.String()
	}
	if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.PeerCertificates) > 0 {
		c := ti.State.PeerCertificates[0]
		name := c.Subject.CommonName
		switch {
		case len(c.URIs) > 0:
			name = c.URIs[0].String()
		case len(c.DNSNames) > 0:
			name = c.DNSNames[0]
		}
		return name + "@" + ip
	}
	return ip
}

func (m *Mesh) addSubscriber(s *subscriber) bool {
	m.pubMu.Lock()
	defer m.pubMu.Unlock()
	if len(m.subs) >= maxSubscribers {
		return false
	}
	m.subs[s] = struct{}{}
	m.met.subscribers.Set(float64(len(m.subs)))
	// Heard at once, in sequence with what follows (the current seq: the
	// next message is one more).
	s.offer(appendHeader(make([]byte, 0, headerLen), kindHello, m.headerLocked(false)))
	return true
}

func (m *Mesh) removeSubscriber(s *subscriber) {
	m.pubMu.Lock()
	delete(m.subs, s)
	m.met.subscribers.Set(float64(len(m.subs)))
	m.pubMu.Unlock()
}

// cutStalled cuts the connection of every subscriber whose current send
// has waited longer than PeerTimeout: it stopped reading (stopped, frozen,
// partitioned), and by now it has given this kvroute up anyway.
func (m *Mesh) cutStalled() {
	limit := time.Now().Add(-m.o.PeerTimeout).UnixNano()
	m.pubMu.Lock()
	var stalled []*subscriber
	for s := range m.subs {
		if t := s.sending.Load(); t != 0 && t < limit {
			stalled = append(stalled, s)
		}
	}
	m.pubMu.Unlock()
	for _, s := range stalled {
		m.met.cut.WithLabelValues(s.label).Inc()
		m.log.Warn("peer mesh: a subscriber stopped reading; cut its connection", "peer", s.label, "stalled_for", m.o.PeerTimeout)
		m.lis.cut(s.addr)
	}
}

// subscriberDrop counts a message a subscriber's full queue could not take.
func (m *Mesh) subscriberDrop(s *subscriber) {
	m.met.subscriberDrops.WithLabelValues(s.label).Inc()
	m.met.dropped.WithLabelValues(dropSubscriberQueueFull).Inc()
	if m.met.shouldLog("subscriber_full_"+s.label, time.Now()) {
		m.log.Warn("peer mesh: a subscriber does not keep up; dropping its messages", "peer", s.label, "queued", len(s.q), "queued_bytes", s.bytes.Load())
	}
}

// refuseConn counts and logs a connection or subscription refused.
func (m *Mesh) refuseConn(reason string, remote net.Addr) {
	m.met.refused.WithLabelValues(reason).Inc()
	if m.met.shouldLog("refused_"+reason, time.Now()) {
		var from string
		if remote != nil {
			from = remote.String()
		}
		m.log.Warn("peer mesh: refused a connection", "reason", reason, "remote", from)
	}
}

// clientOptions are the dial options of every subscription.
func (m *Mesh) clientOptions(clientTLS *tls.Config) []grpc.DialOption {
	creds := credentialsInsecure()
	if clientTLS != nil {
		creds = credentials.NewTLS(clientTLS)
	}
	return []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(codec{}), grpc.MaxCallRecvMsgSize(m.o.MaxMessageBytes), grpc.MaxCallSendMsgSize(headerLen)),
		grpc.WithMaxHeaderListSize(maxHeaderBytes),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: keepaliveTime, Timeout: m.o.PeerTimeout}),
		grpc.WithConnectParams(grpcConnectParams()),
	}
}

// subscribe keeps a subscription to one peer and books what it reads; a
// failed subscription is retried with backoff.
func (m *Mesh) subscribe(ctx context.Context, addr string) {
	conn := m.met.connected.WithLabelValues(addr)
	cc, err := grpc.NewClient(addr, m.clientOpts...)
	if err != nil {
		// Only a malformed target fails here (config validates them).
		m.log.Error("peer mesh: cannot subscribe to a peer address", "peer", addr, "err", err)
		<-ctx.Done()
		return
	}
	defer cc.Close()
	backoff := minBackoff
	for ctx.Err() == nil {
		up, err := m.subscribeOnce(ctx, cc, conn)
		if ctx.Err() != nil {
			return
		}
		if up {
			backoff = minBackoff
		}
		wait := backoff/2 + jitter(backoff/2)
		if status.Code(err) == codes.AlreadyExists {
			wait = selfRetry // this kvroute's own address
		} else {
			m.log.Debug("peer mesh: subscription to a peer down; retrying", "peer", addr, "err", err, "backoff", backoff)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// selfRetry is how often a subscription to this kvroute's own address is
// tried again (the address may name another kvroute later).
const selfRetry = 30 * time.Second

// subscribeOnce runs one subscription until it fails; up says whether the
// peer accepted it.
func (m *Mesh) subscribeOnce(ctx context.Context, cc *grpc.ClientConn, connected interface{ Set(float64) }) (up bool, err error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cs, err := cc.NewStream(sctx, &subscribeDesc, methodName)
	if err != nil {
		return false, err
	}
	m.pubMu.Lock()
	hello := appendHeader(make([]byte, 0, headerLen), kindHello, m.headerLocked(false))
	m.pubMu.Unlock()
	if err := cs.SendMsg(&hello); err != nil {
		return false, err
	}
	if err := cs.CloseSend(); err != nil {
		return false, err
	}
	if _, err := cs.Header(); err != nil {
		return false, err
	}
	connected.Set(1)
	defer connected.Set(0)
	var st stream
	var b []byte
	for {
		if err := cs.RecvMsg(&b); err != nil {
			if status.Code(err) == codes.ResourceExhausted {
				m.refuseConn(refusedMessageTooLarge, nil)
			}
			return true, err
		}
		m.receive(b, &st)
	}
}
