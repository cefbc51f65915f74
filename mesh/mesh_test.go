package mesh

import (
	"context"
	"encoding/binary"
	"log/slog"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvroute/kvroute/index"
	"github.com/kvroute/kvroute/ingest"
	"github.com/kvroute/kvroute/routing"
)

// books records what a mesh puts on and takes off its router's books.
type books struct {
	mu     sync.Mutex
	begun  []routing.SharedWork
	open   int
	refuse bool
}

func (b *books) BeginPeer(w routing.SharedWork) (routing.PeerWork, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.refuse || w.Endpoint == "nobody" {
		return routing.PeerWork{}, routing.ErrUnknownEndpoint
	}
	w.Keys = slices.Clone(w.Keys) // the decoder reuses its buffer
	b.begun = append(b.begun, w)
	b.open++
	return routing.PeerWork{}, nil
}

func (b *books) EndPeer(routing.PeerWork) {
	b.mu.Lock()
	b.open--
	b.mu.Unlock()
}

func (b *books) state() (begun []routing.SharedWork, open int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.begun), b.open
}

type node struct {
	m     *Mesh
	books *books
	reg   *prometheus.Registry
	stop  context.CancelFunc
	done  chan struct{}
}

func testOptions() Options {
	return Options{
		Listen: "tcp://127.0.0.1:0", Layout: 77,
		HeartbeatInterval: 50 * time.Millisecond, PeerTimeout: 400 * time.Millisecond, RequestTimeout: time.Minute,
		MaxRequests: 1000, MaxMessageBytes: 64 << 10, Logger: slog.New(slog.DiscardHandler),
	}
}

// newNodes binds n meshes on loopback, each told every address (its own
// included, as one shared list would), and runs them.
func newNodes(t *testing.T, n int, tweak func(i int, o *Options)) []*node {
	t.Helper()
	var nodes []*node
	for i := range n {
		o := testOptions()
		if tweak != nil {
			tweak(i, &o)
		}
		nd := &node{books: &books{}, reg: prometheus.NewRegistry(), done: make(chan struct{})}
		o.Registerer = nd.reg
		m, err := New(o, nd.books)
		if err != nil {
			t.Fatal(err)
		}
		nd.m = m
		nodes = append(nodes, nd)
	}
	var addrs []string
	for _, nd := range nodes {
		addrs = append(addrs, "tcp://"+nd.m.Addr())
	}
	for _, nd := range nodes {
		nd.m.o.Addresses = addrs
		ctx, cancel := context.WithCancel(context.Background())
		nd.stop = cancel
		go func() { defer close(nd.done); nd.m.Run(ctx) }()
		t.Cleanup(func() { nd.halt(t) })
	}
	return nodes
}

func (nd *node) halt(t *testing.T) {
	nd.stop()
	select {
	case <-nd.done:
	case <-time.After(5 * time.Second):
		t.Error("mesh did not stop within 5 s")
	}
}

// eventually polls cond for up to 5 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("not within 5 s: %s", what)
}

// peersHeard waits until every node has heard every other one's hello
// (PUB/SUB drops what is sent before a subscription is up).
func peersHeard(t *testing.T, nodes []*node) {
	t.Helper()
	eventually(t, "every node hears the others", func() bool {
		for _, nd := range nodes {
			nd.m.mu.Lock()
			n := len(nd.m.peers)
			nd.m.mu.Unlock()
			if n != len(nodes)-1 {
				return false
			}
		}
		return true
	})
}

func TestPeersBookEachOthersRequests(t *testing.T) {
	nodes := newNodes(t, 3, nil)
	peersHeard(t, nodes)
	w := routing.SharedWork{Pool: "fleet", Endpoint: "vllm-2", Uncached: 900, Matched: 1, Keys: []index.BlockKey{11, 12, 13}}
	id := nodes[0].m.Began(w)
	for _, nd := range nodes[1:] {
		eventually(t, "the others book the request", func() bool { _, open := nd.books.state(); return open == 1 })
		begun, _ := nd.books.state()
		if got := begun[0]; got.Pool != w.Pool || got.Endpoint != w.Endpoint || got.Uncached != 900 || got.Matched != 1 || !slices.Equal(got.Keys, w.Keys) {
			t.Fatalf("booked %+v, want %+v", got, w)
		}
	}
	if begun, _ := nodes[0].books.state(); len(begun) != 0 {
		t.Fatalf("the sender booked its own request (it hears itself through its own address): %+v", begun)
	}
	nodes[0].m.Ended(id)
	for _, nd := range nodes[1:] {
		eventually(t, "the others take it off the books", func() bool { _, open := nd.books.state(); return open == 0 })
	}
	if got := testutil.ToFloat64(nodes[1].m.met.received.WithLabelValues("begin")); got != 1 {
		t.Fatalf("kvroute_peer_messages_received_total{kind=begin} = %v, want 1", got)
	}
	if n, err := testutil.GatherAndCount(nodes[1].reg, "kvroute_peer_message_delay_seconds"); err != nil || n != 1 {
		t.Fatalf("kvroute_peer_message_delay_seconds: %d series, %v", n, err)
	}
}

func TestSilentPeerComesOffTheBooks(t *testing.T) {
	nodes := newNodes(t, 2, nil)
	peersHeard(t, nodes)
	for range 3 {
		nodes[0].m.Began(routing.SharedWork{Pool: "fleet", Endpoint: "vllm-0", Uncached: 10})
	}
	eventually(t, "booked", func() bool { _, open := nodes[1].books.state(); return open == 3 })
	nodes[0].halt(t) // no end, no more hellos
	eventually(t, "a silent peer's requests come off the books", func() bool { _, open := nodes[1].books.state(); return open == 0 })
	if got := testutil.ToFloat64(nodes[1].m.met.expired.WithLabelValues(expiredPeerGone)); got != 3 {
		t.Fatalf("expired{peer_gone} = %v, want 3", got)
	}
}

func TestRequestWithoutEndExpires(t *testing.T) {
	b := &books{}
	o := testOptions()
	o.RequestTimeout = time.Second
	now := time.Unix(1000, 0)
	o.Now = func() time.Time { return now }
	m, err := New(o, b)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var dec message
	for i, at := range []time.Duration{0, 800 * time.Millisecond} {
		now = time.Unix(1000, 0).Add(at)
		m.receive([][]byte{appendBegin(nil, header{sender: 5, seq: uint64(i + 1), layout: 77}, uint64(i+1), 10, 0, "p", "e", nil)}, &dec)
	}
	now = time.Unix(1000, 0).Add(1500 * time.Millisecond)
	m.receive([][]byte{appendHeader(nil, kindHello, header{sender: 5, seq: 3, layout: 77})}, &dec) // the peer is alive
	m.expire(now)
	if _, open := b.state(); open != 1 {
		t.Fatalf("%d requests on the books; want 1 (the first is 1.5 s old, over request_timeout 1 s)", open)
	}
	if got := testutil.ToFloat64(m.met.expired.WithLabelValues(expiredRequestTimeout)); got != 1 {
		t.Fatalf("expired{request_timeout} = %v", got)
	}
}

// TestHostilePublisherIsDropped: a peer address answered by something that
// sends garbage, another layout, duplicates, unknown endpoints, more
// requests than the books hold and oversize frames: each is dropped and
// counted, nothing is booked twice, and the mesh goes on.
func TestHostilePublisherIsDropped(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hostile := zmq4.NewPub(ctx, ingest.QuietZMQ)
	defer hostile.Close()
	if err := hostile.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	b := &books{}
	reg := prometheus.NewRegistry()
	o := testOptions()
	o.MaxRequests, o.MaxMessageBytes, o.Registerer = 2, 4096, reg
	o.Addresses = []string{"tcp://" + hostile.Addr().String()}
	m, err := New(o, b)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	eventually(t, "subscribed", func() bool { return testutil.ToFloat64(m.met.connected.WithLabelValues(o.Addresses[0])) == 1 })
	seq := uint64(0)
	send := func(b []byte) {
		if err := hostile.Send(zmq4.NewMsg(b)); err != nil {
			t.Fatal(err)
		}
	}
	begin := func(req uint64, endpoint string, layout uint64) []byte {
		seq++
		return appendBegin(nil, header{sender: 99, seq: seq, layout: layout, sent: time.Now().UnixNano()}, req, 10, 0, "fleet", endpoint, nil)
	}
	// The subscription may be up before the PUB side knows it: repeat a
	// hello until it is heard.
	eventually(t, "hello heard", func() bool {
		seq++
		send(appendHeader(nil, kindHello, header{sender: 99, seq: seq, layout: 77}))
		return testutil.ToFloat64(m.met.received.WithLabelValues("hello")) > 0
	})
	send([]byte("not a mesh message at all"))
	send(begin(1, "vllm-0", 12345)) // another layout
	send(begin(2, "vllm-0", 77))
	send(begin(2, "vllm-0", 77)) // duplicate
	send(begin(3, "nobody", 77)) // unknown endpoint
	send(begin(4, "vllm-0", 77))
	send(begin(5, "vllm-0", 77)) // books full (2)
	must := map[string]float64{dropDecode: 1, dropLayout: 1, dropDuplicate: 1, dropUnknownEndpoint: 1, dropBooksFull: 1}
	eventually(t, "every hostile message counted", func() bool {
		for r, n := range must {
			if testutil.ToFloat64(m.met.dropped.WithLabelValues(r)) != n {
				return false
			}
		}
		return true
	})
	if _, open := b.state(); open != 2 {
		t.Fatalf("%d requests booked, want 2", open)
	}
	// An oversize frame: the connection is closed before zmq4 allocates it;
	// the subscriber reconnects.
	send(make([]byte, 8192))
	eventually(t, "oversize frame refused", func() bool {
		return testutil.ToFloat64(m.met.refused.WithLabelValues("subscriber", "frame_too_large"))+
			testutil.ToFloat64(m.met.refused.WithLabelValues("subscriber", "message_too_large")) >= 1
	})
	eventually(t, "the subscriber reconnects", func() bool { return testutil.ToFloat64(m.met.connected.WithLabelValues(o.Addresses[0])) == 1 })
	cancel()
	<-done
	if _, open := b.state(); open != 0 {
		t.Fatalf("%d requests still booked after shutdown", open)
	}
}

// TestHostileSubscriberIsCut: something connecting to the PUB port and
// announcing a 1 TiB frame is disconnected before anything is allocated.
func TestHostileSubscriberIsCut(t *testing.T) {
	nodes := newNodes(t, 1, nil)
	c, err := net.Dial("tcp", nodes[0].m.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	greeting := make([]byte, 64)
	greeting[0], greeting[9], greeting[10] = 0xff, 0x7f, 3
	copy(greeting[12:], "NULL")
	frame := []byte{0x02} // long frame
	frame = binary.BigEndian.AppendUint64(frame, 1<<40)
	if _, err := c.Write(append(greeting, frame...)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the connection is refused", func() bool {
		return testutil.ToFloat64(nodes[0].m.met.refused.WithLabelValues("publisher", "frame_too_large"))+
			testutil.ToFloat64(nodes[0].m.met.refused.WithLabelValues("publisher", "message_too_large")) >= 1
	})
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 1024)
	for {
		if _, err := c.Read(buf); err != nil {
			break // closed by the mesh
		}
	}
}
