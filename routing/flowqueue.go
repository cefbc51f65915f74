package routing

import (
	"container/heap"
	"time"
)

// Flow control holds the requests of a saturated pool in a FlowQueue until
// capacity frees, then decides them with the index as it is then.
//
// Order: strict priority bands (a higher Priority always leaves first, the
// Gateway API Inference Extension's convention); within a band, deficit
// round robin between flows (a fairness key, one per tenant) weighted by each
// request's Cost (its prompt tokens), so each flow gets an equal share of the
// pool's prefill capacity, not of its request count; within a flow, arrival
// order.
//
// Bounds: MaxQueued requests and MaxBytes of bodies per queue (one queue per
// pool). A request that does not fit makes room, when it can, by evicting
// waiters: first of strictly lower priority, from the lowest band up, each
// time the newest request of the flow holding the most cost in that band;
// then, in its own band, the newest request of the flow holding the most
// cost, as long as that flow holds more cost than the newcomer's own flow
// does. So a flow sending ten times another's cannot fill the queue and lock
// the other out, yet a flow never loses a waiter to one holding as much as
// it or more, and higher bands are never evicted. When evicting cannot make
// room, nothing is evicted and the newcomer is refused (ShedQueueFull).
// Every request has a deadline (its band's TTL from when it was pushed);
// past it, Expired hands it back (ShedTTL).
//
// FlowQueue is a plain data structure: it starts no goroutines, reads no
// clock (every call that needs the time takes now) and is not safe for
// concurrent use.

// Shed reasons: label values of kvroute_flow_shed_total{reason}. Bounded.
const (
	// ShedQueueFull: the queue was full of requests of higher priority, or
	// of its band's flows holding no more than the request's own flow.
	ShedQueueFull = "queue_full"
	// ShedEvicted: a waiter made room for a request of higher priority, or
	// of its band from a flow holding less.
	ShedEvicted = "evicted"
	// ShedTTL: the request waited its band's TTL.
	ShedTTL = "ttl"
	// ShedSheddable: a request of negative priority found its pool
	// saturated (negative priorities are never queued).
	ShedSheddable = "sheddable"
	// ShedTooLarge: the request's body alone is over the queue's byte bound.
	ShedTooLarge = "too_large"
	// ShedStopped: the server shut down while the request waited.
	ShedStopped = "stopped"
)

// FlowLimits bound one FlowQueue. Zero MaxQueued or MaxBytes is unbounded;
// a band's TTL is BandTTL[priority] when set, else TTL (zero: no deadline).
type FlowLimits struct {
	MaxQueued int
	MaxBytes  int64
	TTL       time.Duration
	BandTTL   map[int]time.Duration
}

// ttl is the TTL of band priority.
func (l *FlowLimits) ttl(priority int) time.Duration {
	if d, ok := l.BandTTL[priority]; ok {
		return d
	}
	return l.TTL
}

// FlowItem is one waiting request.
type FlowItem[T any] struct {
	// Priority is the request's band: higher leaves first.
	Priority int
	// Flow is the fairness key within the band (a tenant); "" is a flow too.
	Flow string
	// Cost is the request's share of capacity (its prompt tokens); values
	// below 1 count as 1.
	Cost int64
	// Bytes is what the request holds while it waits (its body).
	Bytes int64
	Value T
	// Enqueued and Deadline are set by Push (Deadline zero: none).
	Enqueued time.Time
	Deadline time.Time
}

// FlowTicket names a pushed request for Remove.
type FlowTicket[T any] struct{ n *flowNode[T] }

type flowNode[T any] struct {
	item       FlowItem[T]
	flow       *flowState[T]
	prev, next *flowNode[T] // within the flow, oldest first
	heapIdx    int          // in the deadline heap; -1 when not there
	queued     bool
}

type flowState[T any] struct {
	key        string
	band       *flowBand[T]
	head, tail *flowNode[T]
	n          int
	cost       int64 // of its queued requests
	deficit    int64
	inTurn     bool          // its turn began: the quantum is added
	prev, next *flowState[T] // the band's round-robin ring
}

type flowBand[T any] struct {
	priority int
	flows    map[string]*flowState[T]
	ring     *flowState[T] // the flow whose turn it is; nil when empty
	n        int
	bytes    int64
	quantum  int64 // the largest cost pushed: every turn can pop a request
}

// FlowQueue is one pool's waiting requests (see above).
type FlowQueue[T any] struct {
	lim       FlowLimits
	bands     []*flowBand[T] // by priority, highest first
	n         int
	bytes     int64
	deadlines deadlineHeap[T]
	// expired holds requests Pop found past their deadline until Expired.
	expired []FlowItem[T]
}

// NewFlowQueue returns an empty queue bounded by lim.
func NewFlowQueue[T any](lim FlowLimits) *FlowQueue[T] {
	return &FlowQueue[T]{lim: lim}
}

// SetLimits replaces the bounds for requests pushed from now on (requests
// already queued keep their deadlines and are not evicted).
func (q *FlowQueue[T]) SetLimits(lim FlowLimits) { q.lim = lim }

// Len is the number of queued requests (not counting expired ones not yet
// collected by Expired).
func (q *FlowQueue[T]) Len() int { return q.n }

// Bytes is the sum of the queued requests' Bytes.
func (q *FlowQueue[T]) Bytes() int64 { return q.bytes }

// BandLen is the number of queued requests of priority.
func (q *FlowQueue[T]) BandLen(priority int) int {
	if b := q.band(priority, false); b != nil {
		return b.n
	}
	return 0
}

// Priorities lists the bands holding requests, highest first.
func (q *FlowQueue[T]) Priorities() []int {
	var ps []int
	for _, b := range q.bands {
		if b.n > 0 {
			ps = append(ps, b.priority)
		}
	}
	return ps
}

// NextDeadline is the earliest deadline of a queued request; ok is false
// when no queued request has one. Expired requests not yet collected count:
// their deadline is in the past.
func (q *FlowQueue[T]) NextDeadline() (t time.Time, ok bool) {
	if len(q.expired) > 0 {
		return q.expired[0].Deadline, true
	}
	if len(q.deadlines) == 0 {
		return time.Time{}, false
	}
	return q.deadlines[0].item.Deadline, true
}

// Push queues it. It returns the request's ticket, or the reason it was
// refused (shed non-empty: the request is not queued); evicted are waiters
// removed to make room (see the bounds above), which the caller answers with
// ShedEvicted.
func (q *FlowQueue[T]) Push(now time.Time, it FlowItem[T]) (t FlowTicket[T], evicted []FlowItem[T], shed string) {
	if it.Cost < 1 {
		it.Cost = 1
	}
	if it.Bytes < 0 {
		it.Bytes = 0
	}
	if q.lim.MaxBytes > 0 && it.Bytes > q.lim.MaxBytes {
		return t, nil, ShedTooLarge
	}
	victims, ok := q.evictions(it)
	if !ok {
		return t, nil, ShedQueueFull
	}
	for _, n := range victims {
		evicted = append(evicted, q.remove(n))
	}
	it.Enqueued, it.Deadline = now, time.Time{}
	if ttl := q.lim.ttl(it.Priority); ttl > 0 {
		it.Deadline = now.Add(ttl)
	}
	b := q.band(it.Priority, true)
	f := b.flows[it.Flow]
	if f == nil {
		f = &flowState[T]{key: it.Flow, band: b}
		b.flows[it.Flow] = f
		b.ringInsert(f)
	}
	n := &flowNode[T]{item: it, flow: f, heapIdx: -1, queued: true}
	f.pushBack(n)
	b.n++
	b.bytes += it.Bytes
	b.quantum = max(b.quantum, it.Cost)
	q.n++
	q.bytes += it.Bytes
	if !it.Deadline.IsZero() {
		heap.Push(&q.deadlines, n)
	}
	return FlowTicket[T]{n: n}, evicted, ""
}

// evictions plans the waiters it evicts to fit (see the bounds above),
// without removing them; ok is false when it cannot fit.
func (q *FlowQueue[T]) evictions(it FlowItem[T]) (victims []*flowNode[T], ok bool) {
	n, bytes := q.n, q.bytes
	fits := func() bool {
		return (q.lim.MaxQueued <= 0 || n+1 <= q.lim.MaxQueued) &&
			(q.lim.MaxBytes <= 0 || bytes+it.Bytes <= q.lim.MaxBytes)
	}
	type cand struct {
		cost int64
		tail *flowNode[T]
	}
	for i := len(q.bands) - 1; i >= 0 && !fits(); i-- {
		b := q.bands[i]
		if b.priority > it.Priority {
			break
		}
		floor := int64(-1) // a lower band: every flow may lose waiters
		if b.priority == it.Priority {
			floor = 0
			if f := b.flows[it.Flow]; f != nil {
				floor = f.cost
			}
		}
		// Walk the ring, not the map: the choice among equals is the
		// ring's order, not the map's random one.
		var cs []cand
		f := b.ring
		for {
			cs = append(cs, cand{f.cost, f.tail})
			if f = f.next; f == b.ring {
				break
			}
		}
		for !fits() {
			big := -1
			for j := range cs {
				if cs[j].tail != nil && cs[j].cost > floor && (big < 0 || cs[j].cost > cs[big].cost) {
					big = j
				}
			}
			if big < 0 {
				break
			}
			v := cs[big].tail
			victims = append(victims, v)
			n--
			bytes -= v.item.Bytes
			cs[big].cost -= v.item.Cost
			cs[big].tail = v.prev
		}
	}
	return victims, fits()
}

// Pop removes and returns the next request to decide: from the highest
// non-empty band, the flow whose turn it is. Requests past their deadline at
// now are not returned; they wait for Expired.
func (q *FlowQueue[T]) Pop(now time.Time) (FlowItem[T], bool) {
	q.expire(now)
	for _, b := range q.bands {
		if b.n == 0 {
			continue
		}
		for {
			f := b.ring
			if !f.inTurn {
				f.inTurn = true
				f.deficit += b.quantum
			}
			if c := f.head.item.Cost; c <= f.deficit {
				f.deficit -= c
				if f.n == 1 {
					f.inTurn = false // its turn ends with its queue
				}
				return q.remove(f.head), true
			}
			// Its deficit does not cover its next request: the next
			// flow's turn (quantum ≥ every cost, so a turn always pops).
			f.inTurn = false
			b.ring = f.next
		}
	}
	var zero FlowItem[T]
	return zero, false
}

// Head is the priority of the request Pop would return at now (ok false:
// none). Requests past their deadline at now are set aside for Expired.
func (q *FlowQueue[T]) Head(now time.Time) (priority int, ok bool) {
	q.expire(now)
	for _, b := range q.bands {
		if b.n > 0 {
			return b.priority, true
		}
	}
	return 0, false
}

// Expired removes and returns every request whose deadline is at or before
// now, oldest deadline first.
func (q *FlowQueue[T]) Expired(now time.Time) []FlowItem[T] {
	q.expire(now)
	out := q.expired
	q.expired = nil
	return out
}

func (q *FlowQueue[T]) expire(now time.Time) {
	for len(q.deadlines) > 0 && !q.deadlines[0].item.Deadline.After(now) {
		q.expired = append(q.expired, q.remove(q.deadlines[0]))
	}
}

// Remove takes a queued request out (its client went away). ok is false
// when it already left (popped, expired or evicted).
func (q *FlowQueue[T]) Remove(t FlowTicket[T]) (FlowItem[T], bool) {
	if t.n == nil || !t.n.queued {
		var zero FlowItem[T]
		return zero, false
	}
	return q.remove(t.n), true
}

// remove unlinks n from its flow, band and the deadline heap, dropping a
// flow that empties (its deficit with it, as deficit round robin does).
func (q *FlowQueue[T]) remove(n *flowNode[T]) FlowItem[T] {
	f := n.flow
	b := f.band
	f.unlink(n)
	if n.heapIdx >= 0 {
		heap.Remove(&q.deadlines, n.heapIdx)
	}
	n.queued = false
	b.n--
	b.bytes -= n.item.Bytes
	q.n--
	q.bytes -= n.item.Bytes
	if f.n == 0 {
		b.ringRemove(f)
		delete(b.flows, f.key)
	}
	if b.n == 0 {
		// Drop the empty band: the bands queued are bounded by the
		// priorities configured, not by all the priorities ever seen.
		for i := range q.bands {
			if q.bands[i] == b {
				q.bands = append(q.bands[:i], q.bands[i+1:]...)
				break
			}
		}
	}
	it := n.item
	n.item = FlowItem[T]{} // drop the caller's value
	return it
}

// band returns band priority, creating it when create is set.
func (q *FlowQueue[T]) band(priority int, create bool) *flowBand[T] {
	i := 0
	for ; i < len(q.bands) && q.bands[i].priority > priority; i++ {
	}
	if i < len(q.bands) && q.bands[i].priority == priority {
		return q.bands[i]
	}
	if !create {
		return nil
	}
	b := &flowBand[T]{priority: priority, flows: map[string]*flowState[T]{}}
	q.bands = append(q.bands, nil)
	copy(q.bands[i+1:], q.bands[i:])
	q.bands[i] = b
	return b
}

func (f *flowState[T]) pushBack(n *flowNode[T]) {
	n.prev, n.next = f.tail, nil
	if f.tail != nil {
		f.tail.next = n
	} else {
		f.head = n
	}
	f.tail = n
	f.n++
	f.cost += n.item.Cost
}

func (f *flowState[T]) unlink(n *flowNode[T]) {
	if n.prev != nil {
		n.prev.next = n.next
	} else {
		f.head = n.next
	}
	if n.next != nil {
		n.next.prev = n.prev
	} else {
		f.tail = n.prev
	}
	n.prev, n.next = nil, nil
	f.n--
	f.cost -= n.item.Cost
}

// ringInsert adds f just before the flow whose turn it is: last in the
// round.
func (b *flowBand[T]) ringInsert(f *flowState[T]) {
	if b.ring == nil {
		f.prev, f.next = f, f
		b.ring = f
		return
	}
	last := b.ring.prev
	f.prev, f.next = last, b.ring
	last.next = f
	b.ring.prev = f
}

func (b *flowBand[T]) ringRemove(f *flowState[T]) {
	if f.next == f {
		b.ring = nil
	} else {
		f.prev.next = f.next
		f.next.prev = f.prev
		if b.ring == f {
			b.ring = f.next
		}
	}
	f.prev, f.next = nil, nil
}

// deadlineHeap orders queued requests by deadline, then arrival.
type deadlineHeap[T any] []*flowNode[T]

func (h deadlineHeap[T]) Len() int { return len(h) }
func (h deadlineHeap[T]) Less(i, j int) bool {
	a, b := &h[i].item, &h[j].item
	if !a.Deadline.Equal(b.Deadline) {
		return a.Deadline.Before(b.Deadline)
	}
	return a.Enqueued.Before(b.Enqueued)
}
func (h deadlineHeap[T]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIdx, h[j].heapIdx = i, j
}
func (h *deadlineHeap[T]) Push(x any) {
	n := x.(*flowNode[T])
	n.heapIdx = len(*h)
	*h = append(*h, n)
}
func (h *deadlineHeap[T]) Pop() any {
	old := *h
	n := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	n.heapIdx = -1
	return n
}
