package ingest

import (
	"net"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/kvroute/kvroute/blockhash"
)

// TestReplicaJoinsAndLeavesWhileRunning: a replica added to a running
// Manager is subscribed (first-contact replay included) and its events reach
// the index; removed, its goroutines stop (the publisher sees its subscriber
// go), nothing of it is written afterwards and its metric series are gone.
func TestReplicaJoinsAndLeavesWhileRunning(t *testing.T) {
	st := steps(t)
	pub0 := newPublisher(t, "kv", 100)
	h := start(t, baseConfig(poolConfig("p", keysTokens,
		replicaSpec{name: "r0", events: pub0.Endpoint(), replay: pub0.ReplayEndpoint(), topic: "kv"})))
	waitSubscribed(t, pub0)

	// r1 published before it joined: first contact replays it.
	pub1 := newPublisher(t, "kv", 100)
	publish(t, pub1, st[stepPrompt])
	pid, _ := h.ix.PoolByName("p")
	before := goleak.IgnoreCurrent() // every goroutine r1 starts must be gone after RemoveReplica
	r1, err := h.ix.AddReplica(pid, "r1")
	if err != nil {
		t.Fatal(err)
	}
	join := []Rank{{Replica: r1, Name: "r1", ReplicaName: "r1", Address: "10.0.0.9:8000", DPSize: 1,
		Events: pub1.Endpoint(), Replay: pub1.ReplayEndpoint(), Topic: "kv"}}
	if err := h.mgr.AddReplica("p", join); err != nil {
		t.Fatal(err)
	}
	if err := h.mgr.AddReplica("p", join); err == nil {
		t.Fatal("the same replica was added twice")
	}
	keys := tokenKeys(t, "p", promptTokens, blockhash.RequestKeys{})
	waitFor(t, "r1's replayed prompt in the index", func() bool { return h.held("p", "r1", keys) == 2 })
	waitSubscribed(t, pub1)
	publish(t, pub1, st[stepDecode])
	waitFor(t, "r1's live batch", func() bool { return h.held("p", "r1", keys) == 3 })
	if h.counter(metricBatches, "replica", "r1", "source", "live") != 1 {
		t.Fatalf("r1 live batches %v", h.counter(metricBatches, "replica", "r1", "source", "live"))
	}

	h.mgr.RemoveReplica("p", "r1")
	if err := goleak.Find(before); err != nil {
		t.Fatalf("goroutines of the removed replica still run: %v", err)
	}
	for _, rs := range h.mgr.allRanks() {
		if rs.name == "r1" {
			t.Fatal("r1 still listed after RemoveReplica")
		}
	}
	if n := h.counter(metricBatches, "replica", "r1"); n != 0 {
		t.Errorf("r1's series survived its removal: %v", n)
	}
	// Its goroutines have stopped: what the engine publishes now is not read.
	h.ix.RemoveReplica(r1)
	publish(t, pub1, st[stepLoRA])
	waitFor(t, "r0 still follows its engine", func() bool {
		publish(t, pub0, st[stepPrompt])
		return h.held("p", "r0", keys) == 2
	})
	if st, ok := h.ix.Replica(r1); ok {
		t.Errorf("r1 still in the index: %+v", st)
	}
	h.mgr.RemoveReplica("p", "r1") // unknown now: a no-op
	if err := h.mgr.AddReplica("nope", join); err == nil {
		t.Error("a replica was added to an unknown pool")
	}
}

// frozenEngine is an engine that accepts TCP connections and never speaks:
// a process stopped (SIGSTOP) or wedged after its listener was set up. It
// returns its tcp:// endpoint and a channel that hears of each connection.
func frozenEngine(t *testing.T) (string, <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan struct{}, 16)
	var conns []net.Conn
	var mu sync.Mutex
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			select {
			case accepted <- struct{}{}:
			default:
			}
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return "tcp://" + ln.Addr().String(), accepted
}

// TestRemovingAFrozenEngineDoesNotWaitForItsHandshake: removing a replica
// whose engine accepted the event connection but never answered the ZMTP
// handshake returns at once, not after the handshake
// timeout, and leaves none of its goroutines behind.
func TestRemovingAFrozenEngineDoesNotWaitForItsHandshake(t *testing.T) {
	h := start(t, baseConfig(poolConfig("p", keysTokens)))
	events, accepted := frozenEngine(t)
	replay, _ := frozenEngine(t)
	pid, _ := h.ix.PoolByName("p")
	before := goleak.IgnoreCurrent()
	r1, err := h.ix.AddReplica(pid, "r1")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.mgr.AddReplica("p", []Rank{{Replica: r1, Name: "r1", ReplicaName: "r1", Address: "10.0.0.9:8000", DPSize: 1,
		Events: events, Replay: replay, Topic: "kv"}}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-accepted:
	case <-time.After(10 * time.Second):
		t.Fatal("kvroute never connected to the frozen engine")
	}
	time.Sleep(50 * time.Millisecond) // the dial is in its handshake
	began := time.Now()
	h.mgr.RemoveReplica("p", "r1")
	if took := time.Since(began); took > 2*time.Second {
		t.Fatalf("removing the frozen engine took %s", took)
	}
	h.ix.RemoveReplica(r1)
	if err := goleak.Find(before); err != nil {
		t.Fatalf("goroutines of the removed replica still run: %v", err)
	}
}
