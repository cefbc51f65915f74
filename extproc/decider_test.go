package extproc

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kvroute/kvroute/internal/fakeenvoy"
	"github.com/kvroute/kvroute/internal/poll"
	"github.com/kvroute/kvroute/routing"
)

// fakeDecider answers every decision with d (after panicking once when
// panicNext is set) and records what the stream asked of it.
type fakeDecider struct {
	d         routing.Decision
	panicNext bool

	mu                            sync.Mutex
	bodies                        []string
	subsets                       []map[string]bool
	recovered, begun, blocks, end int
}

func (f *fakeDecider) Decide(path string, body []byte, subset map[string]bool) routing.Decision {
	f.mu.Lock()
	f.bodies = append(f.bodies, path+" "+string(body))
	f.subsets = append(f.subsets, subset)
	p, d := f.panicNext, f.d
	f.panicNext = false
	f.mu.Unlock()
	if p {
		panic("fake decider bug")
	}
	return d
}

// set makes d the next decisions' answer, after a panic when panicNext.
func (f *fakeDecider) set(d routing.Decision, panicNext bool) {
	f.mu.Lock()
	f.d, f.panicNext = d, panicNext
	f.mu.Unlock()
}

func (f *fakeDecider) DecideRecorded(path string, body []byte, subset map[string]bool, _ *routing.Recorder) routing.Decision {
	return f.Decide(path, body, subset)
}

func (f *fakeDecider) Recovered(map[string]bool, error) routing.Decision {
	f.mu.Lock()
	f.recovered++
	f.mu.Unlock()
	return routing.Decision{Pool: routing.PoolUnknown, Outcome: routing.OutcomeRejected, Reason: routing.ReasonInternalError, Status: 500, Err: errors.New("internal error")}
}

func (f *fakeDecider) BeginLoad(*routing.Decision)   { f.mu.Lock(); f.begun++; f.mu.Unlock() }
func (f *fakeDecider) BeginBlocks(*routing.Decision) { f.mu.Lock(); f.blocks++; f.mu.Unlock() }
func (f *fakeDecider) End(*routing.Decision)         { f.mu.Lock(); f.end++; f.mu.Unlock() }

func (f *fakeDecider) counts() (recovered, begun, blocks, end int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.recovered, f.begun, f.blocks, f.end
}

// serveDecider serves the ext_proc service over dec on a loopback port and
// returns a client of it.
func serveDecider(t *testing.T, dec Decider) extprocv3.ExternalProcessorClient {
	t.Helper()
	s := NewServer(dec, Options{BodyLimitBytes: 1 << 20, Metrics: NewMetrics(nil)})
	g, _ := NewGRPCServer(s, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = g.Serve(ln) }()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		g.Stop()
		<-done
	})
	return extprocv3.NewExternalProcessorClient(conn)
}

// TestStreamAgainstAFakeDecider: the stream machine needs nothing of the
// decision but Decider. In every body mode it hands the decider the
// reassembled body, path and subset hint, answers with the endpoint it
// returns (header, dynamic metadata, the DP-rank pin), keeps the books in
// order (BeginLoad, BeginBlocks, then End when the stream is over), turns a
// rejection into a local reply and a panic into Recovered's answer.
func TestStreamAgainstAFakeDecider(t *testing.T) {
	ep := &routing.Endpoint{Name: "e1", Address: "127.0.0.1:9100", DPRank: 1, DPSize: 2}
	body := []byte(`{"model":"m","prompt":"anything: the fake does not parse it"}`)
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			f := &fakeDecider{d: routing.Decision{Pool: "p", Endpoint: ep, Outcome: routing.OutcomeLoad, Reason: routing.ReasonNoHit}}
			client := serveDecider(t, f)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			cfg := mode.cfg
			cfg.ChunkBytes = 7
			res, err := fakeenvoy.Do(ctx, client, cfg, fakeenvoy.Request{Method: "POST", Path: "/v1/completions", Body: body, SubsetHint: []string{ep.Address}})
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != 0 || res.Headers[HeaderDestination] != ep.Address || res.Headers[dpRankHeader] != "1" || string(res.Body) != string(body) {
				t.Fatalf("status %d, destination %q, rank %q, body %q", res.Status, res.Headers[HeaderDestination], res.Headers[dpRankHeader], res.Body)
			}
			if got := res.Metadata[MetadataNamespaceLB].GetFields()[HeaderDestination].GetStringValue(); got != ep.Address {
				t.Fatalf("metadata destination %v", got)
			}
			f.mu.Lock()
			bodies, subsets := f.bodies, f.subsets
			f.mu.Unlock()
			if len(bodies) != 1 || bodies[0] != "/v1/completions "+string(body) || !subsets[0][ep.Address] || len(subsets[0]) != 1 {
				t.Fatalf("decider saw %q with subsets %v", bodies, subsets)
			}
			waitFor(t, func() bool { _, b, bl, e := f.counts(); return b == 1 && bl == 1 && e == 1 })

			// A rejection is a local reply; nothing is begun.
			rejected := routing.Decision{Pool: "p", Outcome: routing.OutcomeRejected, Reason: routing.ReasonNoEligible, Status: 503, Err: errors.New("no eligible replica")}
			f.set(rejected, false)
			if res, _ := fakeenvoy.Do(ctx, client, cfg, fakeenvoy.Request{Method: "POST", Path: "/v1/completions", Body: body}); res.Status != 503 {
				t.Fatalf("rejection: status %d, want 503", res.Status)
			}
			// A panicking decision is answered by Recovered.
			f.set(rejected, true)
			if res, _ := fakeenvoy.Do(ctx, client, cfg, fakeenvoy.Request{Method: "POST", Path: "/v1/completions", Body: body}); res.Status != 500 {
				t.Fatalf("panic: status %d, want Recovered's 500", res.Status)
			}
			if r, b, bl, e := f.counts(); r != 1 || b != 1 || bl != 1 || e != 1 {
				t.Fatalf("recovered %d, begun %d, blocks %d, ended %d; want 1 each", r, b, bl, e)
			}
		})
	}
}

// waitFor polls cond (poll.Until): End runs when the server sees the
// stream end, just after the client has its answer.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	poll.Until(t, "the condition", cond)
}
