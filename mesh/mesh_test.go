package mesh

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvroute/kvroute/index"
	"github.com/kvroute/kvroute/internal/poll"
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
	ca    *pki
	m     *Mesh
	books *books
	reg   *prometheus.Registry
	stop  context.CancelFunc
	done  chan struct{}
}

func testOptions() Options {
	return Options{
		Listen: "127.0.0.1:0", Layout: 77,
		HeartbeatInterval: 50 * time.Millisecond, PeerTimeout: 400 * time.Millisecond, RequestTimeout: time.Minute,
		MaxRequests: 1000, MaxMessageBytes: 64 << 10, Logger: slog.New(slog.DiscardHandler),
	}
}

// newNodes binds n meshes on loopback with certificates of one CA, each
// told every address (its own included, as one shared list would), and
// runs them.
func newNodes(t *testing.T, n int, tweak func(i int, o *Options)) []*node {
	t.Helper()
	ca := newPKI(t)
	var nodes []*node
	for i := range n {
		o := testOptions()
		o.TLS = ca.issue(t, fmt.Sprintf("kvroute-%d", i))
		if tweak != nil {
			tweak(i, &o)
		}
		nd := &node{ca: ca, books: &books{}, reg: prometheus.NewRegistry(), done: make(chan struct{})}
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
		addrs = append(addrs, nd.m.Addr())
	}
	for _, nd := range nodes {
		nd.m.o.Addresses = addrs
		nd.run(t)
	}
	return nodes
}

func (nd *node) run(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	nd.stop = cancel
	go func() { defer close(nd.done); nd.m.Run(ctx) }()
	t.Cleanup(func() { nd.halt(t) })
}

func (nd *node) halt(t *testing.T) {
	nd.stop()
	select {
	case <-nd.done:
	case <-time.After(5 * time.Second):
		t.Error("mesh did not stop within 5 s")
	}
}

// eventually polls cond (poll.Until).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	poll.Until(t, what, cond)
}

func (m *Mesh) senders() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.peers)
}

// peersHeard waits until every node has heard every other one.
func peersHeard(t *testing.T, nodes []*node) {
	t.Helper()
	eventually(t, "every node hears the others", func() bool {
		for _, nd := range nodes {
			if nd.m.senders() != len(nodes)-1 {
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
		t.Fatalf("the sender booked its own request: %+v", begun)
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
	// Each subscribes to the two others, not to itself.
	for i, nd := range nodes {
		if got := testutil.ToFloat64(nd.m.met.subscribers); got != 2 {
			t.Errorf("node %d serves %v subscribers, want 2", i, got)
		}
	}
}

func TestPlaintextMeshOnlyWhenAskedFor(t *testing.T) {
	if _, err := New(testOptions(), &books{}); err == nil {
		t.Fatal("a mesh with neither TLS credentials nor Insecure was built")
	}
	nodes := newNodes(t, 2, func(_ int, o *Options) { o.TLS, o.Insecure = nil, true })
	peersHeard(t, nodes)
	nodes[0].m.Began(routing.SharedWork{Pool: "fleet", Endpoint: "vllm-0", Uncached: 10})
	eventually(t, "booked in plaintext", func() bool { _, open := nodes[1].books.state(); return open == 1 })
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

// unstarted is a mesh on loopback that is not run: tests feed its receive
// side directly, as a subscription would.
func unstarted(t *testing.T, b Books, tweak func(o *Options)) *Mesh {
	t.Helper()
	o := testOptions()
	o.TLS = newPKI(t).issue(t, "kvroute-0")
	o.Registerer = prometheus.NewRegistry()
	if tweak != nil {
		tweak(&o)
	}
	m, err := New(o, b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

func TestRequestWithoutEndExpires(t *testing.T) {
	b := &books{}
	now := time.Unix(1000, 0)
	m := unstarted(t, b, func(o *Options) { o.RequestTimeout, o.Now = time.Second, func() time.Time { return now } })
	var st stream
	for i, at := range []time.Duration{0, 800 * time.Millisecond} {
		now = time.Unix(1000, 0).Add(at)
		m.receive(appendBegin(nil, header{sender: 5, seq: uint64(i + 1), layout: 77}, uint64(i+1), 10, 0, "p", "e", nil), &st)
	}
	now = time.Unix(1000, 0).Add(1500 * time.Millisecond)
	m.receive(appendHeader(nil, kindHello, header{sender: 5, seq: 3, layout: 77}), &st) // the peer is alive
	m.expire(now)
	if _, open := b.state(); open != 1 {
		t.Fatalf("%d requests on the books; want 1 (the first is 1.5 s old, over request_timeout 1 s)", open)
	}
	if got := testutil.ToFloat64(m.met.expired.WithLabelValues(expiredRequestTimeout)); got != 1 {
		t.Fatalf("expired{request_timeout} = %v", got)
	}
}
