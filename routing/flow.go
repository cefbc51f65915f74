package routing

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvroute/kvroute/index"
)

// FlowControl holds the requests of a saturated pool in the pool's
// FlowQueue and decides each, with the index as it is then, when capacity
// frees: one dispatcher per pool (RunPool) releases waiters while the pool is
// not saturated, woken when a request ends, when the pool's endpoints
// change, when a scrape or health probe updates a replica's load
// (index.SetLoadHook), and every flowRecheck while requests wait (a replica's predicted
// queue drains with time, not only with events); it sheds the waiters whose
// TTL passed. A request that may not wait (negative priority, a full queue,
// no decision budget left for its body) is shed at once.
type FlowControl struct {
	r     *Router
	now   func() time.Time
	m     *flowMetrics
	pools map[string]*flowPool
	byID  map[index.PoolID]*flowPool
}

// flowRecheck is how often a dispatcher checks its pool's saturation while
// requests wait.
const flowRecheck = 20 * time.Millisecond

// FlowCancelled is FlowOutcome.Shed for a request whose client went away
// while it waited (kvroute_flow_cancelled_total): nobody is left to answer.
const FlowCancelled = "cancelled"

type flowPool struct {
	name    string
	fc      *FlowControl
	mu      sync.Mutex
	q       *FlowQueue[*waiter]
	waiting atomic.Int64 // q.Len(), read without the lock
	kick    chan struct{}
	stopped bool // the dispatcher stopped: new requests are not queued
}

// waiter is one request in a FlowQueue, and what it learns when it leaves.
type waiter struct {
	pr       Prepared
	rec      *Recorder
	priority int
	ticket   FlowTicket[*waiter]
	done     chan struct{}
	// Set before done is closed.
	d     Decision
	shed  string
	begun bool
}

// FlowOutcome is how FlowControl.Decide ended for a request.
type FlowOutcome struct {
	// Pool is the request's pool (PoolUnknown when it has none).
	Pool string
	// Decision is the decision when Shed is "".
	Decision Decision
	// Shed is why the request was answered without a decision (a Shed*
	// reason, or "cancelled": its client went away).
	Shed string
	// Begun: the request's load is on the books already (BeginLoad ran
	// when the dispatcher released it); End must follow, BeginLoad not.
	Begun bool
	// Waited is the time the request spent queued (0: it never waited).
	Waited time.Duration
}

// NewFlowControl builds flow control over r's pools, registering its
// metrics with reg (nil: unregistered); now nil is time.Now. Router.End and
// SetEndpoints wake its dispatchers from then on.
func NewFlowControl(r *Router, reg prometheus.Registerer, now func() time.Time) *FlowControl {
	if now == nil {
		now = time.Now
	}
	fc := &FlowControl{r: r, now: now, m: newFlowMetrics(reg), pools: map[string]*flowPool{}, byID: map[index.PoolID]*flowPool{}}
	o := r.o()
	for _, p := range r.pools {
		fp := &flowPool{name: p.Name, fc: fc, q: NewFlowQueue[*waiter](o.FlowLimits()), kick: make(chan struct{}, 1)}
		fc.pools[p.Name], fc.byID[p.ID] = fp, fp
	}
	r.flow.Store(fc)
	// A scrape or health probe may have lowered a replica's load.
	r.ix.SetLoadHook(func(p index.PoolID) {
		if fp := fc.byID[p]; fp != nil {
			fp.wake()
		}
	})
	return fc
}

// Enabled reports whether flow control is on (routing.flow_control.enabled).
func (fc *FlowControl) Enabled() bool { return fc.r.o().Flow.Enabled }

// Priority is the priority of objective name under the options now (an
// unknown or empty name: 0).
func (fc *FlowControl) Priority(objective string) int { return fc.r.o().Flow.Priority(objective) }

// Options are the flow options now.
func (fc *FlowControl) Options() FlowOptions { return fc.r.o().Flow }

// Pools are the names of the pools with a queue (each needs RunPool).
func (fc *FlowControl) Pools() []string {
	out := make([]string, 0, len(fc.pools))
	for _, p := range fc.r.pools {
		out = append(out, p.Name)
	}
	return out
}

// wake tells pool's dispatcher that capacity may have freed, when requests
// wait there.
func (fc *FlowControl) wake(pool string) {
	if fp := fc.pools[pool]; fp != nil {
		fp.wake()
	}
}

func (fp *flowPool) wake() {
	if fp.waiting.Load() == 0 {
		return
	}
	select {
	case fp.kick <- struct{}{}:
	default:
	}
}

// Decide prepares and decides a request as Router.DecideRecorded does, but
// when flow control is on and the request's pool is saturated (or requests
// already wait there) the request waits in the pool's queue, at priority,
// in flow (its fairness key), until a dispatcher releases it, its TTL
// passes, or ctx ends (its client went away). queued, when non-nil, is
// called once as the request starts to wait, with the time it may wait
// (the caller asks Envoy for that much more time). rec may be nil.
func (fc *FlowControl) Decide(ctx context.Context, path string, body []byte, subset map[string]bool, priority int, flow string, rec *Recorder, queued func(maxWait time.Duration)) FlowOutcome {
	r := fc.r
	pr := r.prepare(path, body, subset, rec)
	out := fc.decide(ctx, &pr, body, priority, flow, rec, queued)
	out.Pool = pr.Pool()
	return out
}

func (fc *FlowControl) decide(ctx context.Context, prp *Prepared, body []byte, priority int, flow string, rec *Recorder, queued func(time.Duration)) FlowOutcome {
	r := fc.r
	pr := *prp
	fp := fc.pools[pr.Pool()]
	if fp == nil || !r.o().Flow.Enabled || body == nil {
		return FlowOutcome{Decision: r.DecidePrepared(&pr, rec)}
	}
	r.NoteFlowPriority(fp.name, priority)
	prp.SetPriority(priority)
	pr = *prp
	if fp.waiting.Load() == 0 && !r.BandSaturated(fp.name, pr.subset, priority) {
		return FlowOutcome{Decision: r.DecidePrepared(&pr, rec)}
	}
	if priority < 0 {
		// Sheddable: never queued while the pool is saturated.
		return fp.shedNow(&pr, ShedSheddable)
	}
	// A queued body holds its share of the decision budget whether or not
	// it was tokenized.
	if need := len(body) - pr.held; need > 0 {
		if !r.acquire(need) {
			return fp.shedNow(&pr, ShedQueueFull)
		}
		pr.held += need
	}
	cost := int64(pr.promptTokens)
	if cost == 0 {
		cost = int64(len(body)/4 + 1) // untokenized: about four bytes a token
	}
	w := &waiter{pr: pr, rec: rec, priority: priority, done: make(chan struct{})}
	now := fc.now()
	fp.mu.Lock()
	if fp.stopped {
		fp.mu.Unlock()
		return fp.shedNow(&w.pr, ShedStopped)
	}
	fp.q.SetLimits(r.o().FlowLimits())
	t, evicted, shed := fp.q.Push(now, FlowItem[*waiter]{Priority: priority, Flow: flow, Cost: cost, Bytes: int64(len(body)), Value: w})
	for _, e := range evicted {
		fp.finish(e, now, ShedEvicted)
	}
	var deadline time.Time
	if shed == "" {
		w.ticket = t
		deadline = t.n.item.Deadline
		fp.gauges(priority)
	}
	fp.waiting.Store(int64(fp.q.Len()))
	fp.mu.Unlock()
	if shed != "" {
		return fp.shedNow(&w.pr, shed)
	}
	fc.wake(fp.name)
	if queued != nil {
		maxWait := time.Duration(0)
		if !deadline.IsZero() {
			maxWait = deadline.Sub(now)
		}
		queued(maxWait)
	}
	select {
	case <-w.done:
	case <-ctx.Done():
		fp.mu.Lock()
		_, removed := fp.q.Remove(w.ticket)
		if removed {
			fp.waiting.Store(int64(fp.q.Len()))
			fp.gauges(priority)
		}
		fp.mu.Unlock()
		if removed {
			w.pr.Discard()
			fc.m.cancelled.WithLabelValues(fp.name).Inc()
			return FlowOutcome{Shed: FlowCancelled, Waited: fc.now().Sub(now)}
		}
		<-w.done // released or shed meanwhile: done is closed under the lock
		if w.begun {
			r.End(&w.d)
		}
		fc.m.cancelled.WithLabelValues(fp.name).Inc()
		return FlowOutcome{Shed: FlowCancelled, Waited: fc.now().Sub(now)}
	}
	return FlowOutcome{Decision: w.d, Shed: w.shed, Begun: w.begun, Waited: fc.now().Sub(now)}
}

// shedNow answers a request that never waited.
func (fp *flowPool) shedNow(pr *Prepared, reason string) FlowOutcome {
	pr.Discard()
	fp.fc.m.shed.WithLabelValues(fp.name, reason).Inc()
	return FlowOutcome{Shed: reason}
}

// finish ends a waiter that left the queue without a decision (the lock is
// held).
func (fp *flowPool) finish(it FlowItem[*waiter], now time.Time, reason string) {
	w := it.Value
	w.pr.Discard()
	w.shed = reason
	fp.fc.m.shed.WithLabelValues(fp.name, reason).Inc()
	fp.fc.m.wait(fp.name, it.Priority, now.Sub(it.Enqueued))
	fp.gauges(it.Priority)
	close(w.done)
}

// gauges sets the queue-length gauge of band priority (the lock is held).
func (fp *flowPool) gauges(priority int) {
	fp.fc.m.queued.WithLabelValues(fp.name, strconv.Itoa(priority)).Set(float64(fp.q.BandLen(priority)))
}

// RunPool is pool's dispatcher: it runs until ctx ends, then sheds every
// waiter (ShedStopped) and queues none after.
func (fc *FlowControl) RunPool(ctx context.Context, pool string) {
	fp := fc.pools[pool]
	if fp == nil {
		return
	}
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		next := fp.tick()
		var tick <-chan time.Time
		if next >= 0 {
			t.Reset(next)
			tick = t.C
		}
		select {
		case <-ctx.Done():
			fp.stop()
			return
		case <-fp.kick:
		case <-tick:
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
	}
}

// tick runs step and returns how long the dispatcher may sleep (-1: until
// woken).
func (fp *flowPool) tick() time.Duration {
	fp.mu.Lock()
	defer fp.mu.Unlock() // also when a decision panics (the supervisor restarts RunPool)
	fp.step(fp.fc.now())
	if fp.q.Len() == 0 {
		return -1
	}
	next := flowRecheck
	if d, ok := fp.q.NextDeadline(); ok {
		next = min(next, max(d.Sub(fp.fc.now()), 0))
	}
	return next
}

// FlowStep is one step of pool's dispatcher over its queue q at now: it
// sheds the requests whose TTL passed (shed, ShedTTL), then releases
// requests, highest priority first and fairly within a band, while the
// pool is not saturated for the next one's priority (BandSaturated; all of
// them when flow control is off). release must decide its request and put
// its load on the books (BeginLoad) before it returns: the next saturation
// check counts it. The server's dispatcher (RunPool) and the simulator
// both step their queues with it.
func FlowStep[T any](r *Router, pool string, q *FlowQueue[T], now time.Time, release func(FlowItem[T]), shed func(it FlowItem[T], reason string)) {
	for _, it := range q.Expired(now) {
		shed(it, ShedTTL)
	}
	enabled := r.o().Flow.Enabled
	for {
		p, ok := q.Head(now)
		if !ok || (enabled && r.BandSaturated(pool, nil, p)) {
			break
		}
		it, ok := q.Pop(now)
		if !ok {
			break
		}
		release(it)
	}
	// Head and Pop may have set expired ones aside.
	for _, it := range q.Expired(now) {
		shed(it, ShedTTL)
	}
}

// step is FlowStep on the pool's queue (the lock is held).
func (fp *flowPool) step(now time.Time) {
	r := fp.fc.r
	FlowStep(r, fp.name, fp.q, now, func(it FlowItem[*waiter]) {
		w := it.Value
		fp.release(w)
		if w.d.Endpoint != nil {
			// On the books before the next saturation check.
			r.BeginLoad(&w.d)
			w.begun = true
		}
		fp.fc.m.released.WithLabelValues(fp.name).Inc()
		fp.fc.m.wait(fp.name, it.Priority, now.Sub(it.Enqueued))
		fp.gauges(it.Priority)
		close(w.done)
	}, func(it FlowItem[*waiter], reason string) { fp.finish(it, now, reason) })
	fp.waiting.Store(int64(fp.q.Len()))
}

// release decides w. Should the decision panic (a bug), w is answered as
// Router.Recovered decides, so its stream does not wait for a decision that
// will never come, and the panic goes on to the dispatcher's supervisor.
func (fp *flowPool) release(w *waiter) {
	defer func() {
		if p := recover(); p != nil {
			w.d = fp.fc.r.Recovered(w.pr.subset, fmt.Errorf("flow control: the decision panicked"))
			w.pr.Discard()
			fp.fc.m.released.WithLabelValues(fp.name).Inc()
			close(w.done)
			panic(p)
		}
	}()
	w.d = fp.fc.r.DecidePrepared(&w.pr, w.rec)
}

// stop sheds every waiter and refuses new ones (shutdown).
func (fp *flowPool) stop() {
	fp.mu.Lock()
	defer fp.mu.Unlock()
	fp.stopped = true
	now := fp.fc.now()
	for _, it := range fp.q.Expired(now.Add(100 * 365 * 24 * time.Hour)) {
		fp.finish(it, now, ShedStopped)
	}
	for {
		it, ok := fp.q.Pop(now)
		if !ok {
			break
		}
		fp.finish(it, now, ShedStopped)
	}
	fp.waiting.Store(0)
}

// FlowStatus is one pool's flow control state (kvroute status, explain).
type FlowStatus struct {
	Pool    string `json:"pool"`
	Enabled bool   `json:"enabled"`
	// Saturated is Saturated: the pool is saturated for its top priority.
	Saturated bool         `json:"saturated"`
	Queued    int          `json:"queued"`
	Bytes     int64        `json:"queued_bytes"`
	Bands     []BandStatus `json:"bands"`
	// Top is the test for the pool's top priority and above, BelowTop the
	// one for every priority below it (BandSaturated).
	Top      BandTest `json:"top"`
	BelowTop BandTest `json:"below_top"`
}

// BandTest is the saturation test flow control applies to a priority in a
// pool (BandSaturated) and its answer now.
type BandTest struct {
	Priority int `json:"priority"`
	// SaturationTTFT is the predicted wait, in seconds, past which a
	// replica is busy (0: that test is off).
	SaturationTTFT Figure `json:"saturation_ttft_seconds"`
	// ReservedReplicas are the replicas the priority leaves free of its
	// band for higher ones.
	ReservedReplicas int  `json:"reserved_replicas"`
	Saturated        bool `json:"saturated"`
}

// BandTest is pool's saturation test for a request of priority now; ok is
// false for an unknown pool.
func (r *Router) BandTest(pool string, priority int) (BandTest, bool) {
	p := r.poolNamed(pool)
	if p == nil {
		return BandTest{}, false
	}
	return BandTest{Priority: priority, SaturationTTFT: Figure(r.bandBound(p, priority).Seconds()), ReservedReplicas: r.reserveFor(p, priority),
		Saturated: r.saturatedBand(p, nil, priority)}, true
}

// BandStatus is one priority band's queued requests.
type BandStatus struct {
	Priority int `json:"priority"`
	Queued   int `json:"queued"`
}

// Status is every pool's flow control state now.
func (fc *FlowControl) Status() []FlowStatus {
	out := make([]FlowStatus, 0, len(fc.pools))
	for _, name := range fc.Pools() {
		s, _ := fc.PoolStatus(name)
		out = append(out, s)
	}
	return out
}

// PoolStatus is pool's flow control state now; ok is false for an unknown
// pool.
func (fc *FlowControl) PoolStatus(pool string) (s FlowStatus, ok bool) {
	fp := fc.pools[pool]
	if fp == nil {
		return s, false
	}
	s = FlowStatus{Pool: pool, Enabled: fc.Enabled(), Saturated: fc.r.Saturated(pool, nil), Bands: []BandStatus{}}
	top := fc.r.topPriority(fc.r.poolNamed(pool))
	s.Top, _ = fc.r.BandTest(pool, top)
	s.BelowTop, _ = fc.r.BandTest(pool, top-1)
	fp.mu.Lock()
	s.Queued, s.Bytes = fp.q.Len(), fp.q.Bytes()
	for _, p := range fp.q.Priorities() {
		s.Bands = append(s.Bands, BandStatus{Priority: p, Queued: fp.q.BandLen(p)})
	}
	fp.mu.Unlock()
	return s, true
}

// flowMetrics are flow control's Prometheus metrics. Labels: pool names,
// priority bands (configured priorities and 0) and fixed reasons; never a
// client's objective name or fairness key.
type flowMetrics struct {
	queued    *prometheus.GaugeVec
	waitHist  *prometheus.HistogramVec
	shed      *prometheus.CounterVec
	released  *prometheus.CounterVec
	cancelled *prometheus.CounterVec
}

func newFlowMetrics(reg prometheus.Registerer) *flowMetrics {
	m := &flowMetrics{
		queued: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kvroute_flow_queued_requests",
			Help: "Requests waiting in flow control, by pool and priority band."}, []string{"pool", "priority"}),
		waitHist: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "kvroute_flow_wait_seconds",
			Help:    "Time requests waited in flow control until released or shed, by pool and priority band.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 13)}, []string{"pool", "priority"}),
		shed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvroute_flow_shed_total",
			Help: "Requests flow control answered without routing, by pool and reason (queue_full, evicted, ttl, sheddable, too_large, stopped)."}, []string{"pool", "reason"}),
		released: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvroute_flow_released_total",
			Help: "Queued requests released to a decision when capacity freed, by pool."}, []string{"pool"}),
		cancelled: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvroute_flow_cancelled_total",
			Help: "Queued requests whose client went away while they waited, by pool."}, []string{"pool"}),
	}
	if reg != nil {
		reg.MustRegister(m.queued, m.waitHist, m.shed, m.released, m.cancelled)
	}
	return m
}

func (m *flowMetrics) wait(pool string, priority int, d time.Duration) {
	m.waitHist.WithLabelValues(pool, strconv.Itoa(priority)).Observe(d.Seconds())
}
