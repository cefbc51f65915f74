package routing

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvroute/kvroute/index"
)

// flowHarness is the routing harness with flow control on and its
// dispatchers running; every replica starts 1.5 s behind (saturated at the
// 1 s bound) until release frees one.
type flowHarness struct {
	*harness
	fc     *FlowControl
	cancel context.CancelFunc
	busy   []Decision
}

func newFlowHarness(t *testing.T, f FlowOptions) *flowHarness {
	h := &flowHarness{harness: newHarness(t, harnessOptions{})}
	o := h.router.Options()
	if f.SaturationTTFT == 0 {
		f.SaturationTTFT = time.Second
	}
	f.Enabled = true
	o.Flow = f
	h.router.SetOptions(o)
	h.fc = NewFlowControl(h.router, nil, nil)
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	var wg sync.WaitGroup
	for _, p := range h.fc.Pools() {
		wg.Go(func() { h.fc.RunPool(ctx, p) })
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
	for _, ep := range h.eps {
		d := Decision{Pool: "qwen", Endpoint: &ep, PromptTokens: 15000}
		h.router.BeginLoad(&d)
		h.busy = append(h.busy, d)
	}
	return h
}

// release ends the busy request on replica i.
func (h *flowHarness) release(i int) { h.router.End(&h.busy[i]) }

type flowResult struct {
	name string
	out  FlowOutcome
	at   time.Time
}

// decideAsync runs Decide in a goroutine; the result arrives on ch.
func (h *flowHarness) decideAsync(ctx context.Context, name, prompt string, priority int, flow string, ch chan<- flowResult) {
	queued := make(chan struct{})
	go func() {
		out := h.fc.Decide(ctx, "/v1/completions", completion(prompt), nil, priority, flow, nil, func(time.Duration) { close(queued) })
		ch <- flowResult{name, out, time.Now()}
	}()
	select {
	case <-queued:
	case <-time.After(2 * time.Second):
		h.t.Fatalf("%s: not queued", name)
	}
}

func TestFlowControlWaitsUntilCapacityFrees(t *testing.T) {
	h := newFlowHarness(t, FlowOptions{TTL: 10 * time.Second})
	ch := make(chan flowResult, 1)
	h.decideAsync(context.Background(), "a", sharedPrefix, 0, "", ch)
	select {
	case r := <-ch:
		t.Fatalf("decided while saturated: %+v", r.out)
	case <-time.After(100 * time.Millisecond):
	}
	h.release(1)
	r := <-ch
	if r.out.Shed != "" || r.out.Decision.Endpoint == nil || !r.out.Begun {
		t.Fatalf("outcome %+v", r.out)
	}
	if got := r.out.Decision.Endpoint.Address; got != h.eps[1].Address {
		t.Fatalf("released to %s, want the replica that freed (%s)", got, h.eps[1].Address)
	}
	h.router.End(&r.out.Decision)
}

func TestFlowControlShedsAtTTL(t *testing.T) {
	h := newFlowHarness(t, FlowOptions{TTL: 200 * time.Millisecond})
	ch := make(chan flowResult, 1)
	start := time.Now()
	h.decideAsync(context.Background(), "a", sharedPrefix, 0, "", ch)
	r := <-ch
	if r.out.Shed != ShedTTL {
		t.Fatalf("outcome %+v, want shed ttl", r.out)
	}
	if el := r.at.Sub(start); el < 200*time.Millisecond || el > 300*time.Millisecond {
		t.Fatalf("shed after %v, want within [TTL, TTL+100ms]", el)
	}
}

func TestFlowControlShedsWhatCannotWait(t *testing.T) {
	h := newFlowHarness(t, FlowOptions{TTL: 10 * time.Second, MaxQueued: 1})
	ctx := context.Background()
	if out := h.fc.Decide(ctx, "/v1/completions", completion(sharedPrefix), nil, -1, "", nil, nil); out.Shed != ShedSheddable {
		t.Fatalf("negative priority: %+v, want shed sheddable", out)
	}
	ch := make(chan flowResult, 2)
	h.decideAsync(ctx, "first", sharedPrefix, 0, "", ch)
	if out := h.fc.Decide(ctx, "/v1/completions", completion(sharedPrefix), nil, 0, "", nil, nil); out.Shed != ShedQueueFull {
		t.Fatalf("queue full: %+v, want shed queue_full", out)
	}
	// A higher priority evicts the lower waiter.
	h.decideAsync(ctx, "urgent", sharedPrefix, 5, "", ch)
	if r := <-ch; r.name != "first" || r.out.Shed != ShedEvicted {
		t.Fatalf("%s: %+v, want first evicted", r.name, r.out)
	}
	h.release(0)
	if r := <-ch; r.name != "urgent" || r.out.Decision.Endpoint == nil {
		t.Fatalf("%s: %+v", r.name, r.out)
	}
}

func TestFlowControlClientGoesAway(t *testing.T) {
	h := newFlowHarness(t, FlowOptions{TTL: 10 * time.Second})
	body := completion(sharedPrefix)
	o := h.router.Options()
	o.MaxBytesInFlight = int64(len(body))
	h.router.SetOptions(o)
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan flowResult, 1)
	h.decideAsync(ctx, "a", sharedPrefix, 0, "", ch)
	if st := h.fc.Status()[0]; st.Queued != 1 || !st.Saturated {
		t.Fatalf("status %+v", st)
	}
	cancel()
	if r := <-ch; r.out.Shed != FlowCancelled {
		t.Fatalf("outcome %+v, want cancelled", r.out)
	}
	if st := h.fc.Status()[0]; st.Queued != 0 {
		t.Fatalf("still queued: %+v", st)
	}
	// Its body's budget came back: another request fits.
	if pr := h.router.Prepare("/v1/completions", body, nil); pr.Reason() != "" {
		t.Fatalf("budget not returned: %q", pr.Reason())
	} else {
		pr.Discard()
	}
}

// Released one at a time (each release saturates the pool again), waiters
// leave by priority, then fairly between flows by prompt tokens: tenant a
// sends ten requests for each of b's, and while both wait they alternate.
func TestFlowControlOrder(t *testing.T) {
	h := newFlowHarness(t, FlowOptions{TTL: 30 * time.Second})
	long := strings.Repeat("tok ", 12000) // 1.2 s of prefill: one release saturates again
	ch := make(chan flowResult, 64)
	ctx := context.Background()
	for i := 0; i < 10; i++ {
		h.decideAsync(ctx, fmt.Sprintf("a%d", i), long, 0, "a", ch)
	}
	h.decideAsync(ctx, "b0", long, 0, "b", ch)
	h.decideAsync(ctx, "b1", long, 0, "b", ch)
	h.decideAsync(ctx, "hi", long, 3, "a", ch)
	var order []string
	free := 0
	for len(order) < 13 {
		h.release(free)
		r := <-ch
		if r.out.Decision.Endpoint == nil {
			t.Fatalf("%s: %+v", r.name, r.out)
		}
		order = append(order, r.name)
		for i, ep := range h.eps {
			if ep.Address == r.out.Decision.Endpoint.Address {
				free = i
			}
		}
		h.busy[free] = r.out.Decision
		select {
		case r2 := <-ch:
			t.Fatalf("%s released with %s: one release should saturate the pool again", r2.name, r.name)
		case <-time.After(60 * time.Millisecond):
		}
	}
	if got := strings.Join(order[:5], " "); got != "hi a0 b0 a1 b1" {
		t.Fatalf("release order %v, want hi first, then a and b alternating", order)
	}
}

// Stopping a dispatcher (shutdown) sheds its waiters and every request that
// would wait after.
func TestFlowControlStopShedsWaiters(t *testing.T) {
	h := newFlowHarness(t, FlowOptions{TTL: 10 * time.Second})
	ch := make(chan flowResult, 1)
	h.decideAsync(context.Background(), "a", sharedPrefix, 0, "", ch)
	h.cancel()
	if r := <-ch; r.out.Shed != ShedStopped {
		t.Fatalf("outcome %+v, want shed stopped", r.out)
	}
	if out := h.fc.Decide(context.Background(), "/v1/completions", completion(sharedPrefix), nil, 0, "", nil, nil); out.Shed != ShedStopped {
		t.Fatalf("after stop: %+v, want shed stopped", out)
	}
}

// Turning flow control off (a reload) releases every waiter.
func TestFlowControlTurnedOffReleasesWaiters(t *testing.T) {
	h := newFlowHarness(t, FlowOptions{TTL: 10 * time.Second})
	ch := make(chan flowResult, 2)
	h.decideAsync(context.Background(), "a", sharedPrefix, 0, "", ch)
	h.decideAsync(context.Background(), "b", sharedPrefix, 0, "", ch)
	o := h.router.Options()
	o.Flow.Enabled = false
	h.router.SetOptions(o)
	for range 2 {
		if r := <-ch; r.out.Shed != "" || r.out.Decision.Endpoint == nil {
			t.Fatalf("%s: %+v", r.name, r.out)
		}
	}
}

// A scrape showing a replica's waiting queue gone releases a waiter there.
func TestFlowControlScrapeFreesCapacity(t *testing.T) {
	h := newFlowHarness(t, FlowOptions{TTL: 10 * time.Second, SaturationWaiting: 5})
	for i := range h.busy {
		h.release(i)
		h.ix.SetLoad(h.eps[i].Replica, index.Load{Waiting: 6}, h.clock())
	}
	ch := make(chan flowResult, 1)
	h.decideAsync(context.Background(), "a", sharedPrefix, 0, "", ch)
	h.ix.SetLoad(h.eps[1].Replica, index.Load{}, h.clock())
	r := <-ch
	if r.out.Decision.Endpoint == nil || r.out.Decision.Endpoint.Address != h.eps[1].Address {
		t.Fatalf("outcome %+v, want routed to the replica whose queue emptied", r.out)
	}
}

// Queued bodies hold their bytes of routing.max_decide_bytes_in_flight: a
// burst larger than the budget queues what fits, sheds the rest at once
// (queue_full), never holds more bytes than the budget, and gives every
// byte back when its waiters leave.
func TestFlowControlQueuedBytesStayWithinTheBudget(t *testing.T) {
	h := newFlowHarness(t, FlowOptions{TTL: 10 * time.Second, MaxQueued: 1000})
	bodyOf := func(i int) []byte { return completion(fmt.Sprintf("%04d %s", i, sharedPrefix)) }
	o := h.router.Options()
	o.MaxBytesInFlight = int64(10 * len(bodyOf(0)))
	h.router.SetOptions(o)
	ctx, cancel := context.WithCancel(context.Background())
	const n = 40
	outs := make(chan FlowOutcome, n)
	queued := make(chan struct{}, n)
	for i := range n {
		go func() {
			outs <- h.fc.Decide(ctx, "/v1/completions", bodyOf(i), nil, 0, "", nil, func(time.Duration) { queued <- struct{}{} })
		}()
	}
	shed, waiting := 0, 0
	for shed+waiting < n {
		select {
		case out := <-outs:
			if out.Shed != ShedQueueFull {
				t.Fatalf("outcome %+v, want queue_full", out)
			}
			shed++
		case <-queued:
			waiting++
		case <-time.After(5 * time.Second):
			t.Fatalf("%d shed, %d waiting of %d", shed, waiting, n)
		}
	}
	s, _ := h.fc.PoolStatus("qwen")
	if s.Queued != waiting || s.Queued > 10 || s.Bytes > o.MaxBytesInFlight || h.router.bytesInFlight.Load() > o.MaxBytesInFlight {
		t.Fatalf("%d queued holding %d bytes (budget in use %d) of %d", s.Queued, s.Bytes, h.router.bytesInFlight.Load(), o.MaxBytesInFlight)
	}
	if waiting == 0 || shed == 0 {
		t.Fatalf("%d waiting, %d shed: the burst did not fill the budget", waiting, shed)
	}
	cancel()
	for range waiting {
		if out := <-outs; out.Shed != FlowCancelled {
			t.Fatalf("waiter ended %+v, want cancelled", out)
		}
	}
	if b := h.router.bytesInFlight.Load(); b != 0 {
		t.Fatalf("%d bytes of the budget still held after every waiter left", b)
	}
}
