package mesh

import (
	"context"
	"crypto/tls"
	"net"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/kvroute/kvroute/index"
	"github.com/kvroute/kvroute/routing"
)

// fakePeer serves the mesh's Subscribe method with the given credentials
// and streams frames to each subscriber after its hello: a peer address
// answered by someone else.
func fakePeer(t *testing.T, f *TLSFiles, frames [][]byte) string {
	t.Helper()
	srvTLS, _, err := f.tlsConfigs(nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(srvTLS)), grpc.ForceServerCodec(codec{}))
	srv.RegisterService(&grpc.ServiceDesc{ServiceName: serviceName, HandlerType: (*any)(nil),
		Streams: []grpc.StreamDesc{{StreamName: "Subscribe", ServerStreams: true, Handler: func(_ any, ss grpc.ServerStream) error {
			var hello []byte
			if err := ss.RecvMsg(&hello); err != nil {
				return err
			}
			for _, b := range frames {
				if err := ss.SendMsg(&b); err != nil {
					return err
				}
			}
			<-ss.Context().Done()
			return nil
		}}}}, struct{}{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	return ln.Addr().String()
}

// dialSubscriber subscribes to addr as a raw gRPC client with creds and
// returns the stream (nil and the error when refused).
func dialSubscriber(ctx context.Context, addr string, creds credentials.TransportCredentials, opts ...grpc.DialOption) (*grpc.ClientConn, grpc.ClientStream, error) {
	cc, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(codec{}))}, opts...)...)
	if err != nil {
		return nil, nil, err
	}
	cs, err := cc.NewStream(ctx, &subscribeDesc, methodName)
	if err == nil {
		hello := appendHeader(nil, kindHello, header{sender: 4242, seq: 1, layout: 77})
		err = cs.SendMsg(&hello)
	}
	if err == nil {
		err = cs.CloseSend()
	}
	if err == nil {
		_, err = cs.Header()
	}
	if err != nil {
		cc.Close()
		return nil, nil, err
	}
	return cc, cs, nil
}

// TestStrangersCannotReadOrSteer: the mesh trusts only certificates of its
// CA (and, with allowed_names, only those names). A client without a
// certificate, with one of another CA, or with an unlisted name is refused
// at the handshake and reads nothing; a peer address answered by a server
// of another CA books nothing; the same forged bookings from a server the
// CA vouches for are booked (the control).
func TestStrangersCannotReadOrSteer(t *testing.T) {
	ca, other := newPKI(t), newPKI(t)
	b := &books{}
	o := testOptions()
	o.PeerTimeout = time.Minute // the fake peers say hello once
	o.TLS = ca.issue(t, "kvroute-0")
	o.TLS.AllowedNames = []string{"kvroute-0", "kvroute-1", "impostor"}
	forged := [][]byte{
		appendHeader(nil, kindHello, header{sender: 99, seq: 1, layout: 77}),
		appendBegin(nil, header{sender: 99, seq: 2, layout: 77}, 1, 4e9, 0, "fleet", "vllm-0", []index.BlockKey{1, 2}),
	}
	impostor := fakePeer(t, other.issue(t, "impostor"), forged)
	trusted := fakePeer(t, ca.issue(t, "kvroute-1"), forged)
	o.Addresses = []string{impostor, trusted}
	nd := &node{books: b, reg: nil, done: make(chan struct{})}
	o.Registerer = prometheus.NewRegistry()
	m, err := New(o, b)
	if err != nil {
		t.Fatal(err)
	}
	nd.m = m
	nd.run(t)
	eventually(t, "the trusted fake peer's booking", func() bool { _, open := b.state(); return open == 1 })
	time.Sleep(300 * time.Millisecond) // the impostor had as long
	if _, open := b.state(); open != 1 {
		t.Fatalf("%d booked, want the trusted peer's 1 (the impostor's must not be)", open)
	}
	if got := testutil.ToFloat64(m.met.connected.WithLabelValues(impostor)); got != 0 {
		t.Fatal("subscribed to a server of another CA")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	strangers := map[string]*tls.Config{
		"no certificate":        {RootCAs: clientTLS(t, o.TLS).RootCAs, MinVersion: tls.VersionTLS13},
		"another CA":            clientTLS(t, other.issue(t, "kvroute-9")),
		"a name not allowed":    clientTLS(t, ca.issue(t, "intruder")),
		"skips server checking": {InsecureSkipVerify: true, MinVersion: tls.VersionTLS13},
	}
	for name, c := range strangers {
		cc, cs, err := dialSubscriber(ctx, m.Addr(), credentials.NewTLS(c))
		if err == nil {
			var got []byte
			err = cs.RecvMsg(&got)
			cc.Close()
			if err == nil {
				t.Errorf("%s: read a %d-byte mesh message", name, len(got))
			}
		}
	}
	// Counted as the server side's handshakes end (a client that refused
	// the server's certificate may have left first).
	eventually(t, "every stranger's handshake counted", func() bool {
		return testutil.ToFloat64(m.met.refused.WithLabelValues(refusedHandshake)) >= 3 &&
			testutil.ToFloat64(m.met.refused.WithLabelValues(refusedNameNotAllowed)) >= 1
	})
	// A certificate of the CA with an allowed name subscribes.
	cc, cs, err := dialSubscriber(ctx, m.Addr(), credentials.NewTLS(clientTLS(t, ca.issue(t, "kvroute-1"))))
	if err != nil {
		t.Fatalf("a trusted subscriber was refused: %v", err)
	}
	defer cc.Close()
	var hello []byte
	if err := cs.RecvMsg(&hello); err != nil || len(hello) != headerLen {
		t.Fatalf("a trusted subscriber's first message: %d bytes, %v", len(hello), err)
	}
}

// TestOversizeMessageIsRefused: a trusted peer sending a message over
// max_message_bytes is cut before it is allocated; the subscription comes
// back.
func TestOversizeMessageIsRefused(t *testing.T) {
	ca := newPKI(t)
	b := &books{}
	o := testOptions()
	o.MaxMessageBytes = 4096
	o.TLS = ca.issue(t, "kvroute-0")
	o.Addresses = []string{fakePeer(t, ca.issue(t, "kvroute-1"), [][]byte{make([]byte, 8192)})}
	o.Registerer = prometheus.NewRegistry()
	m, err := New(o, b)
	if err != nil {
		t.Fatal(err)
	}
	nd := &node{m: m, books: b, done: make(chan struct{})}
	nd.run(t)
	eventually(t, "refused twice (it came back)", func() bool {
		return testutil.ToFloat64(m.met.refused.WithLabelValues(refusedMessageTooLarge)) >= 2
	})
}

// freezableConn stops reading once frozen, as a stopped process does: its
// socket buffers fill and the sender's writes stall. Closing it ends a
// frozen Read.
type freezableConn struct {
	net.Conn
	frozen, closed chan struct{}
	once           sync.Once
}

func (c *freezableConn) Read(p []byte) (int, error) {
	select {
	case <-c.frozen:
		<-c.closed
		return 0, net.ErrClosed
	default:
	}
	return c.Conn.Read(p)
}

func (c *freezableConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// TestStoppedSubscriberSilencesNobody: three kvroutes and a fourth peer
// that subscribes to two of them and then stops reading (its TCP receive
// buffer is 4 KiB). The three keep booking each other's requests at once,
// and the stopped one's drops are counted (and it is cut).
func TestStoppedSubscriberSilencesNobody(t *testing.T) {
	// A peer_timeout longer than the test: the stopped peer's queue
	// overflows rather than its connection being cut
	// (TestStalledSubscriberIsCut).
	nodes := newNodes(t, 3, func(_ int, o *Options) { o.MaxRequests, o.PeerTimeout = 1<<20, time.Hour })
	peersHeard(t, nodes)
	stuck := nodes[0].ca.issue(t, "kvroute-3")
	for _, nd := range nodes[:2] {
		stopReading(t, nd.m.Addr(), stuck)
	}
	eventually(t, "the stopped peer subscribed", func() bool {
		return testutil.ToFloat64(nodes[0].m.met.subscribers) == 3 && testutil.ToFloat64(nodes[1].m.met.subscribers) == 3
	})
	// More than a subscriber's queue holds, from two of the three, in
	// batches the running peers take as they come (a healthy subscriber
	// slower than a tight loop would overflow its own queue too).
	const n, batch = subscriberQueue + 2000, 500
	keys := make([]index.BlockKey, 64)
	var slowest time.Duration
	for sent := 0; sent < n; {
		k := min(batch, n-sent)
		start := time.Now()
		for range k {
			nodes[0].m.Began(routing.SharedWork{Pool: "fleet", Endpoint: "vllm-0", Uncached: 100, Keys: keys})
			nodes[1].m.Began(routing.SharedWork{Pool: "fleet", Endpoint: "vllm-1", Uncached: 100, Keys: keys})
		}
		sent += k
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			_, open0 := nodes[0].books.state()
			_, open1 := nodes[1].books.state()
			_, open2 := nodes[2].books.state()
			if open0 == sent && open1 == sent && open2 == 2*sent {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("after %d each: booked %d, %d, %d", sent, open0, open1, open2)
			}
		}
		slowest = max(slowest, time.Since(start))
	}
	t.Logf("%d bookings from each of two peers, in batches of %d: the slowest batch was sent and booked everywhere in %s",
		n, batch, slowest.Round(time.Millisecond))
	for i, nd := range nodes[:2] {
		if got := testutil.ToFloat64(nd.m.met.subscriberDrops.WithLabelValues("kvroute-3@127.0.0.1")); got == 0 {
			t.Errorf("node %d counted no drops for the stopped peer", i)
		}
	}
	// And a request afterwards arrives as fast as ever.
	sent := time.Now()
	nodes[0].m.Began(routing.SharedWork{Pool: "fleet", Endpoint: "vllm-0", Uncached: 100})
	eventually(t, "one more booking", func() bool { _, open := nodes[2].books.state(); return open == 2*n+1 })
	if d := time.Since(sent); d > time.Second {
		t.Fatalf("a booking took %s to arrive", d)
	}
}

// TestConnectionsLeaveNothingBehind: 1,000 connections each send one
// message and close — trusted subscribers, and strangers sending bytes that
// are no TLS handshake — and the process's file descriptors and goroutines
// come back to where they were.
func TestConnectionsLeaveNothingBehind(t *testing.T) {
	nodes := newNodes(t, 1, nil)
	m := nodes[0].m
	cert := clientTLS(t, nodes[0].ca.issue(t, "kvroute-1"))
	time.Sleep(100 * time.Millisecond)
	fds0, gs0 := openFDs(t), runtime.NumGoroutine()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := range 1000 {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if i%2 == 0 {
				cc, _, err := dialSubscriber(ctx, m.Addr(), credentials.NewTLS(cert))
				if err != nil {
					t.Error(err)
					return
				}
				cc.Close()
				return
			}
			c, err := net.Dial("tcp", m.Addr())
			if err != nil {
				t.Error(err)
				return
			}
			_, _ = c.Write([]byte("KVRM not a TLS client hello\r\n"))
			c.Close()
		})
	}
	wg.Wait()
	var fds, gs int
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		fds, gs = openFDs(t), runtime.NumGoroutine()
		if fds <= fds0+5 && gs <= gs0+10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 1,000 connections: %d fds (was %d), %d goroutines (was %d)", fds, fds0, gs, gs0)
		}
	}
	t.Logf("fds %d → %d, goroutines %d → %d", fds0, fds, gs0, gs)
	if got := testutil.ToFloat64(m.met.refused.WithLabelValues(refusedHandshake)); got < 500 {
		t.Errorf("refused{tls_handshake} = %v, want ≥ 500", got)
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	return len(ents)
}

// TestCertificateRotates: new certificate files (a rotated Secret) are
// served from the next handshake on; files that do not load leave the last
// good certificate in use, counted.
func TestCertificateRotates(t *testing.T) {
	nodes := newNodes(t, 1, nil)
	m := nodes[0].m
	client := clientTLS(t, nodes[0].ca.issue(t, "kvroute-1"))
	served := func() string {
		t.Helper()
		c, err := tls.Dial("tcp", m.Addr(), client)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].DNSNames[0]
	}
	if got := served(); got != "kvroute-0" {
		t.Fatalf("serves %q", got)
	}
	rotated := nodes[0].ca.issue(t, "kvroute-0-rotated")
	copyFile := func(from, to string) {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	copyFile(rotated.CertFile, m.o.TLS.CertFile)
	copyFile(rotated.KeyFile, m.o.TLS.KeyFile)
	time.Sleep(1100 * time.Millisecond) // checked at most once a second
	if got := served(); got != "kvroute-0-rotated" {
		t.Fatalf("serves %q after the rotation", got)
	}
	if err := os.WriteFile(m.o.TLS.CertFile, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond)
	if got := served(); got != "kvroute-0-rotated" {
		t.Fatalf("serves %q after a broken rotation", got)
	}
	if a, e := testutil.ToFloat64(m.met.certReloads.WithLabelValues("applied")), testutil.ToFloat64(m.met.certReloads.WithLabelValues("error")); a != 1 || e != 1 {
		t.Fatalf("reloads applied %v, error %v; want 1, 1", a, e)
	}
}

// stopReading subscribes to addr with f's certificate and then stops
// reading, as a stopped process would: 4 KiB TCP receive buffer, reads
// frozen after the subscription is up.
func stopReading(t *testing.T, addr string, f *TLSFiles) {
	t.Helper()
	frozen := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cc, _, err := dialSubscriber(ctx, addr, credentials.NewTLS(clientTLS(t, f)),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
			if err != nil {
				return nil, err
			}
			_ = c.(*net.TCPConn).SetReadBuffer(4096)
			return &freezableConn{Conn: c, frozen: frozen, closed: make(chan struct{})}, nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	close(frozen)
}

// TestStalledSubscriberIsCut: a subscriber that a send has waited on for
// peers.peer_timeout is disconnected, counted, and the mesh serves on.
func TestStalledSubscriberIsCut(t *testing.T) {
	nodes := newNodes(t, 2, func(_ int, o *Options) { o.MaxRequests = 1 << 20 }) // peer_timeout 400 ms
	peersHeard(t, nodes)
	stopReading(t, nodes[0].m.Addr(), nodes[0].ca.issue(t, "kvroute-3"))
	eventually(t, "subscribed", func() bool { return testutil.ToFloat64(nodes[0].m.met.subscribers) == 2 })
	keys := make([]index.BlockKey, 64)
	for range 2000 { // well past a stream's flow-control window
		nodes[0].m.Began(routing.SharedWork{Pool: "fleet", Endpoint: "vllm-0", Uncached: 100, Keys: keys})
	}
	eventually(t, "the stalled subscriber is cut", func() bool {
		return testutil.ToFloat64(nodes[0].m.met.cut.WithLabelValues("kvroute-3@127.0.0.1")) >= 1 &&
			testutil.ToFloat64(nodes[0].m.met.subscribers) == 1
	})
	eventually(t, "the running peer booked everything", func() bool { _, open := nodes[1].books.state(); return open == 2000 })
}
