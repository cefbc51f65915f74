package mesh

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvroute/kvroute/index"
	"github.com/kvroute/kvroute/routing"
)

// TestBookingsAreClamped: a trusted peer's booking of 4e9 tokens and more
// keys than a prompt of the pool has is booked as the longest prompt this
// kvroute would route itself; matched follows the keys kept.
func TestBookingsAreClamped(t *testing.T) {
	b := &books{}
	m := unstarted(t, b, func(o *Options) { o.Pools = map[string]PoolBounds{"p": {MaxTokens: 1000, MaxKeys: 4}} })
	var st stream
	keys := []index.BlockKey{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	m.receive(appendBegin(nil, header{sender: 5, seq: 1, layout: 77}, 1, 4e9, 8, "p", "e", keys), &st)
	begun, open := b.state()
	if open != 1 {
		t.Fatalf("%d booked, want 1", open)
	}
	if w := begun[0]; w.Uncached != 1000 || len(w.Keys) != 4 || w.Matched != 4 {
		t.Fatalf("booked %d tokens, %d keys, %d matched; want 1000, 4, 4", w.Uncached, len(w.Keys), w.Matched)
	}
	for _, f := range []string{clampTokens, clampKeys} {
		if got := testutil.ToFloat64(m.met.clamped.WithLabelValues(f)); got != 1 {
			t.Errorf("clamped{%s} = %v, want 1", f, got)
		}
	}
}

// TestSenderBookingsAreBounded: a peer that never ends its requests holds
// at most its share of max_requests — its newest — and another peer still
// books its own.
func TestSenderBookingsAreBounded(t *testing.T) {
	b := &books{}
	m := unstarted(t, b, func(o *Options) { o.MaxRequests, o.Addresses = 10, []string{"127.0.0.1:1", "127.0.0.1:2"} })
	var flood, other stream
	for i := range 20 {
		m.receive(appendBegin(nil, header{sender: 5, seq: uint64(i + 1), layout: 77}, uint64(i+1), 10, 0, "p", "e", nil), &flood)
	}
	for i := range 5 {
		m.receive(appendBegin(nil, header{sender: 9, seq: uint64(i + 1), layout: 77}, uint64(i+1), 10, 0, "p", "e", nil), &other)
	}
	if _, open := b.state(); open != 10 {
		t.Fatalf("%d booked, want 10 (5 of each)", open)
	}
	m.mu.Lock()
	p := m.peers[5]
	for id := uint64(16); id <= 20; id++ {
		if _, ok := p.reqs[id]; !ok {
			t.Errorf("request %d, among the flooding peer's newest five, is not booked", id)
		}
	}
	m.mu.Unlock()
	if got := testutil.ToFloat64(m.met.expired.WithLabelValues(expiredSenderCap)); got != 15 {
		t.Fatalf("expired{sender_cap} = %v, want 15", got)
	}
	// Its ends still end what is booked.
	m.receive(appendEnd(nil, header{sender: 5, seq: 21, layout: 77}, 20), &flood)
	if _, open := b.state(); open != 9 {
		t.Fatalf("%d booked after an end, want 9", open)
	}
}

// TestNewSenderEvictsTheOldest: with the sender table full, a new sender
// (a restarted peer) is booked and the sender heard from least recently
// goes, with its requests.
func TestNewSenderEvictsTheOldest(t *testing.T) {
	b := &books{}
	now := time.Unix(1000, 0)
	m := unstarted(t, b, func(o *Options) { o.Now = func() time.Time { return now }; o.MaxRequests = 1 << 20 })
	for s := range uint64(maxSenders) {
		now = now.Add(time.Millisecond)
		m.receive(appendBegin(nil, header{sender: 100 + s, seq: 1, layout: 77}, 1, 10, 0, "p", "e", nil), &stream{})
	}
	now = now.Add(time.Millisecond)
	m.receive(appendBegin(nil, header{sender: 7, seq: 1, layout: 77}, 1, 10, 0, "p", "e", nil), &stream{})
	m.mu.Lock()
	_, booked := m.peers[7]
	_, oldest := m.peers[100]
	n := len(m.peers)
	m.mu.Unlock()
	if !booked || oldest || n != maxSenders {
		t.Fatalf("new sender tracked %v, oldest still tracked %v, %d senders", booked, oldest, n)
	}
	if _, open := b.state(); open != maxSenders {
		t.Fatalf("%d booked, want %d", open, maxSenders)
	}
	if got := testutil.ToFloat64(m.met.expired.WithLabelValues(expiredSenderEvicted)); got != 1 {
		t.Fatalf("expired{sender_evicted} = %v, want 1", got)
	}
}

// TestReceivedCountsWhatTookEffect: a begin the books refuse and an end of
// nothing booked are dropped with a reason, not counted received; a
// stream's messages must keep their first sender.
func TestReceivedCountsWhatTookEffect(t *testing.T) {
	b := &books{}
	m := unstarted(t, b, nil)
	var st stream
	m.receive(appendBegin(nil, header{sender: 5, seq: 1, layout: 77}, 1, 10, 0, "p", "nobody", nil), &st)
	m.receive(appendEnd(nil, header{sender: 5, seq: 2, layout: 77}, 1), &st)
	m.receive(appendBegin(nil, header{sender: 6, seq: 1, layout: 77}, 2, 10, 0, "p", "e", nil), &st)
	for _, k := range []string{"begin", "end"} {
		if got := testutil.ToFloat64(m.met.received.WithLabelValues(k)); got != 0 {
			t.Errorf("received{%s} = %v, want 0", k, got)
		}
	}
	for r, want := range map[string]float64{dropUnknownEndpoint: 1, dropUnbookedEnd: 1, dropSenderChanged: 1} {
		if got := testutil.ToFloat64(m.met.dropped.WithLabelValues(r)); got != want {
			t.Errorf("dropped{%s} = %v, want %v", r, got, want)
		}
	}
	if _, open := b.state(); open != 0 {
		t.Fatalf("%d booked", open)
	}
}

// indexBooks books peers' keys in a real index, as the router's BeginPeer
// does (index.Hold on the endpoint's replica).
type indexBooks struct {
	ix *index.Index
	r  index.Replica
}

func (b indexBooks) BeginPeer(w routing.SharedWork) (routing.PeerWork, error) {
	b.ix.Hold(b.r, w.Keys, w.Matched)
	return routing.PeerWork{}, nil
}

func (indexBooks) EndPeer(routing.PeerWork) {}

// TestPeerKeysCannotEvictEngineBlocks: an index at 80 % of its cap with the
// engines' blocks, then a trusted peer's flood of bookings with new keys
// (ten times the cap): the engines' blocks all stay, and the peers' keys
// stop at their share.
func TestPeerKeysCannotEvictEngineBlocks(t *testing.T) {
	const maxEntries = 10000
	ix := index.New(index.Options{TTL: time.Hour, MaxEntries: maxEntries, SpeculativeTTL: 2 * time.Second, Registerer: prometheus.NewRegistry()})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go ix.Run(ctx)
	pool, err := ix.AddPool("p")
	if err != nil {
		t.Fatal(err)
	}
	engine, err := ix.AddReplica(pool, "vllm-0")
	if err != nil {
		t.Fatal(err)
	}
	other, err := ix.AddReplica(pool, "vllm-1")
	if err != nil {
		t.Fatal(err)
	}
	held := make([]index.BlockKey, maxEntries*8/10)
	for i := range held {
		held[i] = index.BlockKey(1_000_000 + i)
	}
	ix.Store(engine, held, index.TierGPU)
	m := unstarted(t, indexBooks{ix: ix, r: other}, func(o *Options) {
		o.Index, o.SpeculativeTTL, o.MaxRequests = ix, 2*time.Second, 1<<20
		o.Logger = slog.New(slog.DiscardHandler)
	})
	var st stream
	keys := make([]index.BlockKey, 1000)
	for req := range uint64(100) {
		for i := range keys {
			keys[i] = index.BlockKey(req<<32 | uint64(i) | 1<<60)
		}
		m.receive(appendBegin(nil, header{sender: 5, seq: req + 1, layout: 77}, req+1, 10, 0, "p", "e", keys), &st)
	}
	time.Sleep(200 * time.Millisecond) // any eviction the flood triggered runs
	got := ix.LookupRoute(pool, held, nil)
	run := 0
	for _, mt := range got {
		if mt.Replica == engine.ID {
			run = mt.Blocks
		}
	}
	if run != len(held) {
		t.Fatalf("the engine's run is %d of its %d blocks after the peers' flood", run, len(held))
	}
	if total := ix.TotalEntries(); total > maxEntries-maxEntries/peerKeyShare {
		t.Fatalf("%d entries, over the peers' line %d", total, maxEntries-maxEntries/peerKeyShare)
	}
	if testutil.ToFloat64(m.met.clamped.WithLabelValues(clampKeyShare)) == 0 {
		t.Fatal("no booking was clamped to the peers' share")
	}
}
