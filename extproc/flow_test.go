package extproc

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvroute/kvroute/internal/fakeenvoy"
	"github.com/kvroute/kvroute/routing"
)

// flowEnvoy is Envoy's filter as envoy/*.yaml configures it for flow
// control, with the default 200 ms message timeout: a queued request
// outlives it only through override_message_timeout.
var flowEnvoy = fakeenvoy.Config{Mode: fakeenvoy.Buffered, SendProtocolConfig: true, ReceivingNamespaces: []string{"envoy.lb"},
	MessageTimeout: 200 * time.Millisecond, MaxMessageTimeout: 30 * time.Second}

// newFlowHarness is a harness with flow control on (saturated at a 1 s
// predicted wait) and five replicas, each 1.5 s behind until a test frees
// it.
func newFlowHarness(t *testing.T, f routing.FlowOptions) (*harness, []routing.Decision) {
	f.Enabled = true
	if f.SaturationTTFT == 0 {
		f.SaturationTTFT = time.Second
	}
	if f.ShedStatus == 0 {
		f.ShedStatus = 429
	}
	if f.RetryAfter == 0 {
		f.RetryAfter = 1500 * time.Millisecond
	}
	h := newHarness(t, harnessOptions{flow: &f, bodyMode: "default",
		addresses: []string{"127.0.0.1:8001", "127.0.0.1:8002", "127.0.0.1:8003", "127.0.0.1:8004", "127.0.0.1:8005"}})
	var busy []routing.Decision
	for _, ep := range h.eps {
		d := routing.Decision{Pool: "qwen", Endpoint: &ep, PromptTokens: 15000}
		h.router.BeginLoad(&d)
		busy = append(busy, d)
	}
	return h, busy
}

type flowDone struct {
	name string
	res  fakeenvoy.Result
	err  error
	at   time.Time
}

// start runs one request through the fake Envoy in the background; the
// request's upstream part (the stream held open) ends at once.
func (h *harness) start(ctx context.Context, cfg fakeenvoy.Config, name string, req fakeenvoy.Request, ch chan<- flowDone) {
	h.startHeld(ctx, cfg, name, req, ch, nil)
}

// startHeld is start with the upstream part lasting until hold is closed
// (the request stays on its replica's books until then); the result is
// reported as the exchange completes.
func (h *harness) startHeld(ctx context.Context, cfg fakeenvoy.Config, name string, req fakeenvoy.Request, ch chan<- flowDone, hold <-chan struct{}) {
	go func() {
		reported := false
		res, err := fakeenvoy.DoWhile(ctx, h.client, cfg, req, func(r fakeenvoy.Result) {
			if hold != nil {
				reported = true
				ch <- flowDone{name, r, nil, time.Now()}
				<-hold
			}
		})
		if !reported {
			ch <- flowDone{name, res, err, time.Now()}
		}
	}()
}

// waitQueued waits until n requests wait in the pool's queue.
func (h *harness) waitQueued(n int) {
	h.t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if h.flow.Status()[0].Queued == n {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
	h.t.Fatalf("queued %d, want %d", h.flow.Status()[0].Queued, n)
}

func withHeaders(req fakeenvoy.Request, kv ...string) fakeenvoy.Request {
	hs := map[string]string{}
	for k, v := range req.Headers {
		hs[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		hs[kv[i]] = kv[i+1]
	}
	req.Headers = hs
	return req
}

// A request arriving at a saturated pool waits past Envoy's 200 ms message
// timeout (kvroute asked for more time) and is routed, to the replica that
// freed, when a stream there ends.
func TestFlowSaturatedRequestWaitsAndRoutesWhenAStreamEnds(t *testing.T) {
	for _, mode := range []struct {
		name string
		cfg  fakeenvoy.Config
	}{
		{"buffered", flowEnvoy},
		{"full_duplex", fakeenvoy.Config{Mode: fakeenvoy.FullDuplex, SendProtocolConfig: true, ReceivingNamespaces: []string{"envoy.lb"}}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			h, busy := newFlowHarness(t, routing.FlowOptions{TTL: 10 * time.Second})
			ch := make(chan flowDone, 1)
			h.start(context.Background(), mode.cfg, "a", completion(sharedPrefix), ch)
			h.waitQueued(1)
			select {
			case d := <-ch:
				t.Fatalf("answered while saturated: status %d %s err %v", d.res.Status, d.res.Details, d.err)
			case <-time.After(400 * time.Millisecond):
			}
			h.router.End(&busy[2])
			d := <-ch
			if d.err != nil || d.res.Status != 0 {
				t.Fatalf("status %d %s err %v", d.res.Status, d.res.Details, d.err)
			}
			if got := d.res.Headers[HeaderDestination]; got != h.eps[2].Address {
				t.Fatalf("routed to %q, want %s (the replica whose stream ended)", got, h.eps[2].Address)
			}
			if mode.cfg.Mode == fakeenvoy.Buffered && d.res.TimeoutOverrides != 1 {
				t.Fatalf("timeout overrides honoured: %d, want 1", d.res.TimeoutOverrides)
			}
			if mode.cfg.Mode == fakeenvoy.FullDuplex && d.res.TimeoutOverrides+d.res.TimeoutOverridesIgnored != 0 {
				t.Fatal("an override sent in full-duplex mode, where no message timer runs")
			}
			if n := testutil.ToFloat64(h.server.m.decisions.WithLabelValues("qwen", routing.OutcomePrefix, routing.ReasonHit)) +
				testutil.ToFloat64(h.server.m.decisions.WithLabelValues("qwen", routing.OutcomeLoad, routing.ReasonNoHit)); n != 1 {
				t.Fatalf("decisions counted %v, want 1", n)
			}
		})
	}
}

// Without max_message_timeout Envoy ignores the override and fails the
// queued request at its 200 ms message timeout: the override is what keeps
// it alive.
func TestFlowWithoutMaxMessageTimeoutEnvoyFailsTheWait(t *testing.T) {
	h, _ := newFlowHarness(t, routing.FlowOptions{TTL: 10 * time.Second})
	cfg := flowEnvoy
	cfg.MaxMessageTimeout = 0
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := fakeenvoy.Do(ctx, h.client, cfg, completion(sharedPrefix))
	if err == nil || res.Status != 504 || res.TimeoutOverridesIgnored != 1 {
		t.Fatalf("status %d (%s), overrides ignored %d, err %v; want 504 after an ignored override", res.Status, res.Details, res.TimeoutOverridesIgnored, err)
	}
}

// A request that waits its TTL is answered 429 with Retry-After within
// TTL + 100 ms; one that finds the queue full, at once.
func TestFlowShedsWithRetryAfter(t *testing.T) {
	h, _ := newFlowHarness(t, routing.FlowOptions{TTL: 300 * time.Millisecond, MaxQueued: 1})
	ch := make(chan flowDone, 2)
	start := time.Now()
	h.start(context.Background(), flowEnvoy, "first", completion(sharedPrefix), ch)
	h.waitQueued(1)
	t0 := time.Now()
	res := h.do(flowEnvoy, completion(sharedPrefix))
	if res.Status != 429 || res.Details != "kvroute_flow_queue_full" || res.LocalHeaders["retry-after"] != "2" {
		t.Fatalf("queue full: status %d details %q headers %v", res.Status, res.Details, res.LocalHeaders)
	}
	if el := time.Since(t0); el > 100*time.Millisecond {
		t.Fatalf("queue full answered after %v", el)
	}
	d := <-ch
	if d.res.Status != 429 || d.res.Details != "kvroute_flow_ttl" || d.res.LocalHeaders["retry-after"] != "2" {
		t.Fatalf("ttl: status %d details %q headers %v err %v", d.res.Status, d.res.Details, d.res.LocalHeaders, d.err)
	}
	if el := d.at.Sub(start); el < 300*time.Millisecond || el > 400*time.Millisecond {
		t.Fatalf("TTL shed after %v, want within [300, 400] ms", el)
	}
	for reason, want := range map[string]float64{"flow_queue_full": 1, "flow_ttl": 1} {
		if got := h.decisions(routing.OutcomeRejected, reason); got != want {
			t.Errorf("decisions{rejected,%s} = %v, want %v", reason, got, want)
		}
	}
}

// A client that goes away leaves the queue at once.
func TestFlowClientGoneLeavesTheQueue(t *testing.T) {
	h, _ := newFlowHarness(t, routing.FlowOptions{TTL: 10 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan flowDone, 1)
	h.start(ctx, flowEnvoy, "a", completion(sharedPrefix), ch)
	h.waitQueued(1)
	cancel()
	<-ch
	h.waitQueued(0)
	if st := h.flow.Status()[0]; st.Bytes != 0 {
		t.Fatalf("status %+v", st)
	}
}

// Released one at a time (each routed request saturates the pool again),
// a higher objective goes first, then two tenants alternate though one sends
// ten times the other's requests.
func TestFlowPriorityAndFairShare(t *testing.T) {
	h, busy := newFlowHarness(t, routing.FlowOptions{TTL: 20 * time.Second, Objectives: map[string]int{"interactive": 10, "batch": 0}})
	// 1.2 s of prefill each, no two sharing a block.
	long := strings.Repeat("tok ", 12000)
	ch := make(chan flowDone, 32)
	ctx := context.Background()
	hold := make(chan struct{})
	defer close(hold)
	n := 0
	for i := range 10 {
		h.startHeld(ctx, flowEnvoy, fmt.Sprintf("a%d", i), withHeaders(completion(fmt.Sprintf("a%d %s", i, long)), HeaderFairnessID, "tenant-a", HeaderObjective, "batch"), ch, hold)
		n++
		h.waitQueued(n)
	}
	for i := range 2 {
		h.startHeld(ctx, flowEnvoy, fmt.Sprintf("b%d", i), withHeaders(completion(fmt.Sprintf("b%d %s", i, long)), HeaderFairnessID, "tenant-b"), ch, hold)
		n++
		h.waitQueued(n)
	}
	h.startHeld(ctx, flowEnvoy, "chat", withHeaders(completion("chat "+long), HeaderObjective, "interactive"), ch, hold)
	n++
	h.waitQueued(n)
	var order []string
	for i := range 5 {
		// The request released to the replica freed here saturates it
		// again (its stream stays open): one release per freed replica.
		h.router.End(&busy[i])
		d := <-ch
		if d.err != nil || d.res.Status != 0 {
			t.Fatalf("%s: status %d %s err %v", d.name, d.res.Status, d.res.Details, d.err)
		}
		if got := d.res.Headers[HeaderDestination]; got != h.eps[i].Address {
			t.Fatalf("%s routed to %s, want the freed %s", d.name, got, h.eps[i].Address)
		}
		order = append(order, d.name)
	}
	if got := strings.Join(order, " "); got != "chat a0 b0 a1 b1" {
		t.Fatalf("release order %q, want the interactive objective first, then the tenants alternating", got)
	}
}
