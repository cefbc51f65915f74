package fleetsim

import (
	"time"

	"github.com/kvroute/kvroute/routing"
)

// kvFlow is kvroute with flow control on, on the virtual clock: the
// server's routing.FlowControl step by step, over the same routing.FlowQueue
// (which reads no clock) and the same Router calls. A request that finds
// its pool saturated for its priority (Router.BandSaturated), or requests
// already waiting, waits by priority and fairly between tenants; whenever
// capacity may have freed (a step ends: a prefill or a request ended; a
// scrape; an arrival) the queue is stepped with the dispatcher's own
// routing.FlowStep: the expired shed, waiters decided (Router.DecidePrepared,
// the index as it is then) and booked while the pool has room for them.
type kvFlow struct {
	*kvPicker
	q *routing.FlowQueue[heldDecision]
	// refused are the requests shed since the last release: refused by
	// the queue at arrival or evicted by one of higher priority.
	refused []shedRequest
}

// heldDecision is a waiting request: its id and its prepared decision.
type heldDecision struct {
	id     int
	tokens []int // its prompt (the funnel's ground truth reads it)
	pr     routing.Prepared
}

type shedRequest struct {
	id     int
	reason string
}

// bodyBytesPerToken is a completion body's bytes per prompt token (about
// four characters of English text a token): the simulator has token ids,
// not bodies, and a queued body's bytes count toward the queue's bound
// (routing.max_decide_bytes_in_flight) as in the server.
const bodyBytesPerToken = 4

func newKVFlow(engines int, o Options) (*kvFlow, error) {
	k, err := newKVRoute(engines, o)
	if err != nil {
		return nil, err
	}
	opts := k.router.Options()
	return &kvFlow{kvPicker: k, q: routing.NewFlowQueue[heldDecision](opts.FlowLimits())}, nil
}

// offer decides request id at once when nothing waits and its pool is not
// saturated; otherwise it queues it (a negative priority is never queued:
// it is shed), as FlowControl.Decide does.
func (k *kvFlow) offer(now time.Time, id int, tokens []int, c Class) (int, bool, error) {
	k.now = now
	pr := k.router.PrepareIDs(simModel, tokens)
	pr.SetPriority(c.Priority)
	k.router.NoteFlowPriority(simPool, c.Priority)
	if k.q.Len() == 0 && !k.router.BandSaturated(simPool, nil, c.Priority) {
		e, err := k.placed(id, tokens, k.router.DecidePrepared(&pr, nil))
		return e, false, err
	}
	if c.Priority < 0 {
		pr.Discard()
		k.refused = append(k.refused, shedRequest{id, routing.ShedSheddable})
		return 0, true, nil
	}
	_, evicted, reason := k.q.Push(now, routing.FlowItem[heldDecision]{
		Priority: c.Priority, Flow: c.Tenant, Cost: int64(pr.PromptTokens()), Bytes: int64(bodyBytesPerToken * len(tokens)),
		Value: heldDecision{id: id, tokens: tokens, pr: pr},
	})
	for _, it := range evicted {
		it.Value.pr.Discard()
		k.refused = append(k.refused, shedRequest{it.Value.id, routing.ShedEvicted})
	}
	if reason != "" {
		pr.Discard()
		k.refused = append(k.refused, shedRequest{id, reason})
	}
	return 0, true, nil
}

// release sheds the refused, then steps the queue as the server's
// dispatcher does (routing.FlowStep): the expired shed, waiters decided
// and booked while the pool is not saturated for their priority.
func (k *kvFlow) release(now time.Time, place func(id, e int, err error), shed func(id int, reason string)) {
	k.now = now
	for _, s := range k.refused {
		shed(s.id, s.reason)
	}
	k.refused = k.refused[:0]
	routing.FlowStep(k.router, simPool, k.q, now, func(it routing.FlowItem[heldDecision]) {
		e, err := k.placed(it.Value.id, it.Value.tokens, k.router.DecidePrepared(&it.Value.pr, nil))
		place(it.Value.id, e, err)
	}, func(it routing.FlowItem[heldDecision], reason string) {
		it.Value.pr.Discard()
		shed(it.Value.id, reason)
	})
}

func (k *kvFlow) deadline() (time.Time, bool) { return k.q.NextDeadline() }

// multiFlow is several kvroute instances with flow control behind as many
// gateways: each holds its own requests (request i goes to instance
// i mod N) in its own queue, as each kvroute replica does.
type multiFlow struct{ *multiPicker }

func (m multiFlow) offer(now time.Time, id int, tokens []int, c Class) (int, bool, error) {
	m.advance(now)
	g := id % len(m.ps)
	e, held, err := m.ps[g].(*kvFlow).offer(now, id, tokens, c)
	if !held && err == nil {
		m.of[id] = e
		m.inFlight[g][e]++
	}
	return e, held, err
}

func (m multiFlow) release(now time.Time, place func(id, e int, err error), shed func(id int, reason string)) {
	m.advance(now)
	for g, p := range m.ps {
		p.(*kvFlow).release(now, func(id, e int, err error) {
			if err == nil {
				m.of[id] = e
				m.inFlight[g][e]++
			}
			place(id, e, err)
		}, shed)
	}
}

// deadline is the earliest of the instances' deadlines.
func (m multiFlow) deadline() (time.Time, bool) {
	var at time.Time
	ok := false
	for _, p := range m.ps {
		if t, has := p.(*kvFlow).deadline(); has && (!ok || t.Before(at)) {
			at, ok = t, true
		}
	}
	return at, ok
}
