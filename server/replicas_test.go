package server

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvroute/kvroute/config"
	"github.com/kvroute/kvroute/extproc"
	"github.com/kvroute/kvroute/internal/fakeenvoy"
	"github.com/kvroute/kvroute/internal/routetest"
)

func (r *replica) config(name string) config.Replica {
	return config.Replica{Name: name, Address: r.http.Listener.Addr().String(), Events: r.pub.Endpoint(), DataParallelSize: 1}
}

// blocksOf is the blocks the index holds for pool qwen's replica name (0
// when it is not registered).
func blocksOf(s *Server, name string) (int64, bool) {
	pid, _ := s.ix.PoolByName("qwen")
	for _, st := range s.ix.Replicas(pid) {
		if st.Name == name {
			return st.Blocks, true
		}
	}
	return 0, false
}

// TestSetReplicasJoinLeaveReplace is a fleet changing under a running
// kvroute: a replica that joins is subscribed and routed to by prefix; one
// that leaves is never routed to again and its blocks are gone; the same
// name with a new UID is a new engine whose old blocks do not count; a set
// that does not validate is refused whole and changes nothing.
func TestSetReplicasJoinLeaveReplace(t *testing.T) {
	a, b := newReplica(t), newReplica(t)
	s, c := startServer(t, a)
	tok, _ := routetest.LoadQwen(t)
	prompt := prose(20)
	ids := tok.Encode(prompt, true)
	body := `{"model":"qwen","prompt":` + strconv.Quote(prompt) + `,"max_tokens":4}`

	// Join: b (as r1) holds the prompt's blocks.
	if err := s.SetReplicas("qwen", []Replica{{Config: a.config("r0")}, {Config: b.config("r1"), UID: "uid-1"}}); err != nil {
		t.Fatal(err)
	}
	b.storeBlocks(t, ids)
	route(t, c, "/v1/completions", body, "r1")
	if got := metricValue(t, s, "kvroute_replica_changes_total", `change="join"`); got != 1 {
		t.Errorf("joins counted: %v", got)
	}

	// Replace: r1 is a new pod (new UID) at the same address; its blocks are
	// gone until its engine publishes again.
	if err := s.SetReplicas("qwen", []Replica{{Config: a.config("r0")}, {Config: b.config("r1"), UID: "uid-2"}}); err != nil {
		t.Fatal(err)
	}
	if n, ok := blocksOf(s, "r1"); !ok || n != 0 {
		t.Fatalf("replaced replica holds %d blocks (registered %v)", n, ok)
	}
	b.storeBlocks(t, ids)
	route(t, c, "/v1/completions", body, "r1")

	// An invalid set (a duplicate name) is refused whole.
	if err := s.SetReplicas("qwen", []Replica{{Config: a.config("r0")}, {Config: a.config("r0")}}); err == nil || !strings.Contains(err.Error(), "already the name") {
		t.Fatalf("invalid set: %v", err)
	}
	route(t, c, "/v1/completions", body, "r1")

	// Leave: r1 goes; nothing routes there and its blocks are dropped.
	if err := s.SetReplicas("qwen", []Replica{{Config: a.config("r0")}}); err != nil {
		t.Fatal(err)
	}
	if _, ok := blocksOf(s, "r1"); ok {
		t.Fatal("r1 still registered in the index after it left")
	}
	for range 20 {
		res, err := fakeenvoy.Do(context.Background(), c, fakeenvoy.Config{Mode: fakeenvoy.Buffered, SendProtocolConfig: true},
			fakeenvoy.Request{Method: "POST", Path: "/v1/completions", Body: []byte(body)})
		if err != nil {
			t.Fatal(err)
		}
		if got := res.Headers[extproc.HeaderDebugReplica]; got != "r0" {
			t.Fatalf("routed to %q after r1 left", got)
		}
	}
	if got := metricValue(t, s, "kvroute_replica_ranks", `pool="qwen"`); got != 1 {
		t.Errorf("kvroute_replica_ranks %v, want 1", got)
	}
	if got := metricValue(t, s, "kvroute_replica_changes_total", `change="leave"`); got != 1 {
		t.Errorf("leaves counted: %v", got)
	}
	if err := s.SetReplicas("nope", nil); err == nil {
		t.Error("an unknown pool was accepted")
	}
}

// TestSetReplicasUnderConcurrentDecisions churns the replica set while
// decisions run on many goroutines: no decision may name a replica outside
// the sets it could have seen, and -race must stay quiet.
func TestSetReplicasUnderConcurrentDecisions(t *testing.T) {
	a, b := newReplica(t), newReplica(t)
	s, _ := startServer(t, a)
	body := []byte(`{"model":"qwen","prompt":` + strconv.Quote(prose(5)) + `,"max_tokens":4}`)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for ctx.Err() == nil {
				d := s.router.Decide("/v1/completions", body, nil)
				if d.Endpoint != nil {
					if n := d.Endpoint.Name; n != "r0" && n != "r1" {
						t.Errorf("decision named %q", n)
						return
					}
				}
				s.router.Begin(&d)
				s.router.End(&d)
			}
		})
	}
	sets := [][]Replica{
		{{Config: a.config("r0")}, {Config: b.config("r1")}},
		{{Config: a.config("r0")}},
		{{Config: b.config("r1"), UID: "x"}},
	}
	for i := 0; ctx.Err() == nil; i++ {
		if err := s.SetReplicas("qwen", sets[i%len(sets)]); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	wg.Wait()
	pid, _ := s.ix.PoolByName("qwen")
	for _, st := range s.ix.Replicas(pid) {
		if st.InFlight != 0 {
			t.Errorf("%s: %d requests still in flight after every decision ended", st.Name, st.InFlight)
		}
	}
}

// metricValue sums the series of metric whose labels contain every match
// (`name="value"` fragments), read from the server's /metrics.
func metricValue(t *testing.T, s *Server, metric string, match ...string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + s.AdminAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	sum := 0.0
lines:
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, metric+"{") && !strings.HasPrefix(line, metric+" ") {
			continue
		}
		for _, m := range match {
			if !strings.Contains(line, m) {
				continue lines
			}
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		sum += v
	}
	return sum
}

// TestRemovingAFrozenEngineReturnsAtOnce: a replica whose engine accepted
// kvroute's event connection and never answered the ZMTP handshake leaves
// the pool at once (SetReplicas holds the pool's lock while the replica's
// goroutines stop), not after the 30 s handshake timeout.
func TestRemovingAFrozenEngineReturnsAtOnce(t *testing.T) {
	a := newReplica(t)
	s, _ := startServer(t, a)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- c
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		select {
		case c := <-accepted:
			c.Close()
		default:
		}
	})
	frozen := config.Replica{Name: "frozen", Address: "127.0.0.2:8000", Events: "tcp://" + ln.Addr().String(), DataParallelSize: 1}
	if err := s.SetReplicas("qwen", []Replica{{Config: a.config("r0")}, {Config: frozen}}); err != nil {
		t.Fatal(err)
	}
	var c net.Conn
	select {
	case c = <-accepted:
	case <-time.After(10 * time.Second):
		t.Fatal("kvroute never connected to the frozen engine")
	}
	accepted <- c // closed at cleanup
	time.Sleep(50 * time.Millisecond)
	began := time.Now()
	if err := s.SetReplicas("qwen", []Replica{{Config: a.config("r0")}}); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(began); took > 2*time.Second {
		t.Fatalf("removing the frozen engine took %s", took)
	}
}
