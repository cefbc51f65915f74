package routing

import (
	"fmt"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type qi = FlowItem[int]

// popAll pops every request, returning their values in order.
func popAll(q *FlowQueue[int], now time.Time) []int {
	var out []int
	for {
		it, ok := q.Pop(now)
		if !ok {
			return out
		}
		out = append(out, it.Value)
	}
}

func mustPush(t *testing.T, q *FlowQueue[int], now time.Time, it qi) FlowTicket[int] {
	t.Helper()
	tk, ev, shed := q.Push(now, it)
	if shed != "" || len(ev) != 0 {
		t.Fatalf("push %+v: shed %q, evicted %d", it, shed, len(ev))
	}
	return tk
}

func TestFlowQueueStrictPriority(t *testing.T) {
	q := NewFlowQueue[int](FlowLimits{})
	for i, p := range []int{0, 2, -1, 1, 2, 0} {
		mustPush(t, q, t0, qi{Priority: p, Value: i})
	}
	if got, want := fmt.Sprint(popAll(q, t0)), "[1 4 3 0 5 2]"; got != want {
		t.Fatalf("pop order %s, want %s (highest band first, arrival order within)", got, want)
	}
	if q.Len() != 0 || q.Bytes() != 0 || len(q.bands) != 0 {
		t.Fatalf("drained queue holds len %d bytes %d bands %d", q.Len(), q.Bytes(), len(q.bands))
	}
}

// A tenant sending ten times the requests of another gets an equal share of
// the pops while both wait; a tenant sending prompts ten times longer gets an
// equal share of the tokens, not of the requests.
func TestFlowQueueFairShare(t *testing.T) {
	for _, c := range []struct {
		name          string
		nA, costA     int
		nB, costB     int
		pops          int
		wantA, wantB  int64 // cost served in the first pops
		toleranceCost int64
	}{
		{"10:1 requests, equal cost", 100, 50, 10, 50, 20, 500, 500, 50},
		{"equal requests, 10:1 cost", 50, 1000, 50, 100, 22, 2000, 2000, 1000},
	} {
		t.Run(c.name, func(t *testing.T) {
			q := NewFlowQueue[int](FlowLimits{})
			for i := 0; i < c.nA; i++ {
				mustPush(t, q, t0, qi{Flow: "a", Cost: int64(c.costA), Value: 'a'})
			}
			for i := 0; i < c.nB; i++ {
				mustPush(t, q, t0, qi{Flow: "b", Cost: int64(c.costB), Value: 'b'})
			}
			var served = map[int]int64{}
			for i := 0; i < c.pops; i++ {
				it, ok := q.Pop(t0)
				if !ok {
					t.Fatal("queue ran dry")
				}
				served[it.Value] += it.Cost
			}
			if d := served['a'] - c.wantA; d < -c.toleranceCost || d > c.toleranceCost {
				t.Errorf("flow a served %d tokens, want %d ± %d", served['a'], c.wantA, c.toleranceCost)
			}
			if d := served['b'] - c.wantB; d < -c.toleranceCost || d > c.toleranceCost {
				t.Errorf("flow b served %d tokens, want %d ± %d", served['b'], c.wantB, c.toleranceCost)
			}
		})
	}
}

func TestFlowQueueBounds(t *testing.T) {
	t.Run("full of equals refuses", func(t *testing.T) {
		q := NewFlowQueue[int](FlowLimits{MaxQueued: 2})
		mustPush(t, q, t0, qi{Value: 1})
		mustPush(t, q, t0, qi{Value: 2})
		if _, ev, shed := q.Push(t0, qi{Value: 3}); shed != ShedQueueFull || len(ev) != 0 {
			t.Fatalf("third push: shed %q evicted %d, want queue_full and nothing evicted", shed, len(ev))
		}
		if _, ev, shed := q.Push(t0, qi{Priority: -1, Value: 4}); shed != ShedQueueFull || len(ev) != 0 {
			t.Fatalf("lower push: shed %q evicted %d", shed, len(ev))
		}
	})
	t.Run("higher priority evicts the newest of the biggest lowest flow", func(t *testing.T) {
		q := NewFlowQueue[int](FlowLimits{MaxQueued: 4})
		mustPush(t, q, t0, qi{Priority: 0, Flow: "x", Cost: 10, Value: 1})
		mustPush(t, q, t0, qi{Priority: -1, Flow: "small", Cost: 10, Value: 2})
		mustPush(t, q, t0, qi{Priority: -1, Flow: "big", Cost: 10, Value: 3})
		mustPush(t, q, t0, qi{Priority: -1, Flow: "big", Cost: 10, Value: 4})
		_, ev, shed := q.Push(t0, qi{Priority: 1, Value: 5})
		if shed != "" || len(ev) != 1 || ev[0].Value != 4 {
			t.Fatalf("shed %q evicted %+v, want value 4 evicted", shed, ev)
		}
		if got := fmt.Sprint(popAll(q, t0)); got != "[5 1 2 3]" {
			t.Fatalf("left %s", got)
		}
	})
	t.Run("a smaller flow evicts the newest of its band's biggest flow", func(t *testing.T) {
		q := NewFlowQueue[int](FlowLimits{MaxQueued: 4})
		mustPush(t, q, t0, qi{Flow: "heavy", Cost: 10, Value: 1})
		mustPush(t, q, t0, qi{Flow: "heavy", Cost: 10, Value: 2})
		mustPush(t, q, t0, qi{Flow: "heavy", Cost: 10, Value: 3})
		mustPush(t, q, t0, qi{Flow: "light", Cost: 10, Value: 4})
		// light holds 10 against heavy's 30: heavy's newest makes room.
		_, ev, shed := q.Push(t0, qi{Flow: "light", Cost: 10, Value: 5})
		if shed != "" || len(ev) != 1 || ev[0].Value != 3 {
			t.Fatalf("shed %q evicted %+v, want value 3 evicted", shed, ev)
		}
		// Now 20 each: neither evicts the other.
		if _, ev, shed := q.Push(t0, qi{Flow: "light", Cost: 10, Value: 6}); shed != ShedQueueFull || len(ev) != 0 {
			t.Fatalf("equal flows: shed %q evicted %d, want queue_full and nothing evicted", shed, len(ev))
		}
		if _, ev, shed := q.Push(t0, qi{Flow: "heavy", Cost: 10, Value: 7}); shed != ShedQueueFull || len(ev) != 0 {
			t.Fatalf("heavy newcomer: shed %q evicted %d, want queue_full and nothing evicted", shed, len(ev))
		}
		// A higher band still evicts the lower band first, never the reverse.
		_, ev, shed = q.Push(t0, qi{Priority: 1, Flow: "light", Cost: 10, Value: 8})
		if shed != "" || len(ev) != 1 || ev[0].Priority != 0 {
			t.Fatalf("shed %q evicted %+v, want one priority-0 waiter evicted", shed, ev)
		}
		if _, ev, shed := q.Push(t0, qi{Flow: "new", Cost: 1, Value: 9}); shed != "" || len(ev) != 1 || ev[0].Priority != 0 {
			t.Fatalf("new flow: shed %q evicted %+v, want a priority-0 waiter evicted", shed, ev)
		}
	})
	t.Run("a smaller flow's eviction is all or nothing", func(t *testing.T) {
		q := NewFlowQueue[int](FlowLimits{MaxBytes: 100})
		mustPush(t, q, t0, qi{Flow: "heavy", Cost: 10, Bytes: 50, Value: 1})
		mustPush(t, q, t0, qi{Flow: "light", Cost: 5, Bytes: 40, Value: 2})
		// light (5) may evict heavy (10), not itself: 40 + 70 > 100 even
		// then, so nothing is evicted.
		if _, ev, shed := q.Push(t0, qi{Flow: "light", Cost: 5, Bytes: 70, Value: 3}); shed != ShedQueueFull || len(ev) != 0 {
			t.Fatalf("shed %q evicted %+v, want queue_full and nothing evicted", shed, ev)
		}
		// 40 + 55 fits once heavy's request is gone.
		_, ev, shed := q.Push(t0, qi{Flow: "light", Cost: 5, Bytes: 55, Value: 4})
		if shed != "" || len(ev) != 1 || ev[0].Value != 1 {
			t.Fatalf("shed %q evicted %+v, want value 1 evicted", shed, ev)
		}
	})
	t.Run("bytes", func(t *testing.T) {
		q := NewFlowQueue[int](FlowLimits{MaxBytes: 100})
		if _, _, shed := q.Push(t0, qi{Bytes: 101}); shed != ShedTooLarge {
			t.Fatalf("oversized body: shed %q", shed)
		}
		mustPush(t, q, t0, qi{Priority: 0, Bytes: 60, Value: 1})
		mustPush(t, q, t0, qi{Priority: 0, Bytes: 30, Value: 2})
		if _, _, shed := q.Push(t0, qi{Priority: 0, Bytes: 20}); shed != ShedQueueFull {
			t.Fatalf("over bytes: shed %q", shed)
		}
		// Room for 70 takes both waiters of lower priority.
		_, ev, shed := q.Push(t0, qi{Priority: 3, Bytes: 70, Value: 3})
		if shed != "" || len(ev) != 2 || ev[0].Value != 2 || ev[1].Value != 1 {
			t.Fatalf("shed %q evicted %+v, want values 2 then 1 evicted", shed, ev)
		}
		if q.Bytes() != 70 {
			t.Fatalf("bytes %d over the bound", q.Bytes())
		}
	})
}

func TestFlowQueueTTL(t *testing.T) {
	q := NewFlowQueue[int](FlowLimits{TTL: time.Second, BandTTL: map[int]time.Duration{5: 100 * time.Millisecond, -1: 0}})
	mustPush(t, q, t0, qi{Priority: 0, Value: 1})
	mustPush(t, q, t0.Add(10*time.Millisecond), qi{Priority: 5, Value: 2})
	mustPush(t, q, t0, qi{Priority: -1, Value: 3}) // no deadline
	if d, ok := q.NextDeadline(); !ok || !d.Equal(t0.Add(110*time.Millisecond)) {
		t.Fatalf("next deadline %v %v", d, ok)
	}
	if ex := q.Expired(t0.Add(109 * time.Millisecond)); len(ex) != 0 {
		t.Fatalf("expired early: %+v", ex)
	}
	// Pop at 110 ms skips the expired high band and keeps it for Expired.
	it, ok := q.Pop(t0.Add(110 * time.Millisecond))
	if !ok || it.Value != 1 {
		t.Fatalf("pop %+v %v, want value 1", it, ok)
	}
	ex := q.Expired(t0.Add(110 * time.Millisecond))
	if len(ex) != 1 || ex[0].Value != 2 || !ex[0].Deadline.Equal(t0.Add(110*time.Millisecond)) {
		t.Fatalf("expired %+v", ex)
	}
	if _, ok := q.NextDeadline(); ok {
		t.Fatal("a deadline left: the remaining band has none")
	}
	if ex := q.Expired(t0.Add(time.Hour)); len(ex) != 0 || q.Len() != 1 {
		t.Fatalf("no-TTL band expired: %+v", ex)
	}
}

func TestFlowQueueRemove(t *testing.T) {
	q := NewFlowQueue[int](FlowLimits{TTL: time.Second})
	a := mustPush(t, q, t0, qi{Flow: "f", Value: 1, Bytes: 7})
	mustPush(t, q, t0, qi{Flow: "f", Value: 2})
	if it, ok := q.Remove(a); !ok || it.Value != 1 {
		t.Fatalf("remove %+v %v", it, ok)
	}
	if _, ok := q.Remove(a); ok {
		t.Fatal("removed twice")
	}
	if q.Len() != 1 || q.Bytes() != 0 {
		t.Fatalf("len %d bytes %d", q.Len(), q.Bytes())
	}
	if got := fmt.Sprint(popAll(q, t0)); got != "[2]" {
		t.Fatalf("left %s", got)
	}
	if _, ok := q.Remove(FlowTicket[int]{}); ok {
		t.Fatal("zero ticket removed something")
	}
}

// FuzzFlowQueue runs random operation sequences and checks the invariants:
// bounds hold, a pop never passes over a higher band, nothing is evicted
// for a lower priority, nor within a band from a flow holding no more cost
// than the newcomer's, and every pushed request is popped, expired,
// evicted, removed or still queued, exactly once.
func FuzzFlowQueue(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})
	f.Add([]byte("\x00\x10\x20\x00\x11\x21\x00\x12\x22\x01\x02\x03\x04\x00\x05\x30"))
	// One slot: flow a's second request is refused, flow b's evicts it.
	f.Add([]byte{0, 200, 0, 0, 1, 0, 1, 0, 5})
	f.Fuzz(runFlowOps)
}

func runFlowOps(t *testing.T, ops []byte) {
	{
		if len(ops) < 4 || len(ops) > 1024 {
			return // the model's checks are quadratic in the operations
		}
		lim := FlowLimits{MaxQueued: 1 + int(ops[0]%8), MaxBytes: 50 + int64(ops[1]), TTL: time.Duration(ops[2]%50) * time.Millisecond,
			BandTTL: map[int]time.Duration{2: 5 * time.Millisecond}}
		q := NewFlowQueue[int](lim)
		now := t0
		state := map[int]string{} // value → where it is
		tickets := map[int]FlowTicket[int]{}
		prio := map[int]int{}
		deadline := map[int]time.Time{}
		size := map[int]int64{}
		next := 0
		leave := func(v int, how string) {
			if state[v] != "queued" {
				t.Fatalf("request %d %s while %q", v, how, state[v])
			}
			state[v] = how
		}
		maxQueuedPriority := func() (int, bool) {
			best, any := 0, false
			for v, s := range state {
				if s == "queued" && (!any || prio[v] > best) {
					best, any = prio[v], true
				}
			}
			return best, any
		}
		for i := 3; i+1 < len(ops); i += 2 {
			op, arg := ops[i], ops[i+1]
			switch op % 5 {
			case 0, 1: // push
				v := next
				next++
				it := qi{Priority: int(arg%4) - 1, Flow: string(rune('a' + arg>>2%3)), Cost: int64(arg >> 4), Bytes: int64(arg % 64), Value: v}
				prio[v] = it.Priority
				held := queuedCost(state, tickets)
				tk, ev, shed := q.Push(now, it)
				for _, e := range ev {
					if e.Priority > it.Priority {
						t.Fatalf("request %d (priority %d) evicted for priority %d", e.Value, e.Priority, it.Priority)
					}
					if e.Priority == it.Priority && held[flowKey{e.Priority, e.Flow}] <= held[flowKey{it.Priority, it.Flow}] {
						t.Fatalf("request %d of a flow holding %d evicted for one holding %d", e.Value,
							held[flowKey{e.Priority, e.Flow}], held[flowKey{it.Priority, it.Flow}])
					}
					leave(e.Value, "evicted")
				}
				if shed != "" {
					if len(ev) != 0 {
						t.Fatal("refused yet evicted")
					}
					state[v] = "refused"
					continue
				}
				state[v] = "queued"
				tickets[v] = tk
				deadline[v], size[v] = tk.n.item.Deadline, tk.n.item.Bytes
			case 2: // pop
				top, any := maxQueuedPriority()
				it, ok := q.Pop(now)
				if !ok {
					// Nothing left but what expired at now.
					for v, s := range state {
						if s == "queued" {
							if d := deadline[v]; d.IsZero() || d.After(now) {
								t.Fatalf("pop found nothing; request %d queued", v)
							}
						}
					}
					continue
				}
				if any && it.Priority < top && hasLiveAbove(q, state, tickets, it.Priority, now) {
					t.Fatalf("popped priority %d past a live request of higher priority", it.Priority)
				}
				if !it.Deadline.IsZero() && !it.Deadline.After(now) {
					t.Fatalf("popped request %d past its deadline", it.Value)
				}
				leave(it.Value, "popped")
			case 3: // time passes, expired collected
				now = now.Add(time.Duration(arg%20) * time.Millisecond)
				if op&8 != 0 {
					for _, it := range q.Expired(now) {
						if it.Deadline.IsZero() || it.Deadline.After(now) {
							t.Fatalf("request %d expired before its deadline", it.Value)
						}
						leave(it.Value, "expired")
					}
				}
			case 4: // a client goes away
				if next == 0 {
					continue
				}
				v := int(arg) % next
				it, ok := q.Remove(tickets[v])
				if !ok && state[v] == "queued" && setAside(q, v) {
					continue // Expired will hand it back
				}
				if ok != (state[v] == "queued") {
					t.Fatalf("remove %d: ok %v, state %q", v, ok, state[v])
				}
				if ok {
					if it.Value != v {
						t.Fatalf("removed %d for %d", it.Value, v)
					}
					leave(v, "removed")
				}
			}
			n, bytes := 0, int64(0)
			for v, s := range state {
				if s == "queued" {
					n++
					bytes += size[v]
				}
			}
			// Expired ones Pop set aside are out of Len and Bytes but not
			// yet collected.
			aside, asideBytes := len(q.expired), int64(0)
			for _, it := range q.expired {
				asideBytes += it.Bytes
			}
			if q.Len()+aside != n || q.Bytes()+asideBytes != bytes || q.Len() > lim.MaxQueued || q.Bytes() > lim.MaxBytes {
				t.Fatalf("len %d (+%d aside) bytes %d; model %d, bounds %d %d", q.Len(), aside, q.Bytes(), n, lim.MaxQueued, lim.MaxBytes)
			}
		}
		for _, it := range q.Expired(now.Add(time.Hour)) {
			leave(it.Value, "expired")
		}
		for {
			it, ok := q.Pop(now.Add(time.Hour))
			if !ok {
				break
			}
			leave(it.Value, "popped")
		}
		for v, s := range state {
			if s == "queued" {
				t.Fatalf("request %d lost: neither popped, expired, evicted nor removed", v)
			}
		}
		if q.Len() != 0 || q.Bytes() != 0 || len(q.deadlines) != 0 {
			t.Fatalf("empty queue holds len %d bytes %d deadlines %d", q.Len(), q.Bytes(), len(q.deadlines))
		}
	}
}

type flowKey struct {
	priority int
	flow     string
}

// queuedCost is the cost each flow holds in the queue (not counting
// expired requests set aside).
func queuedCost(state map[int]string, tickets map[int]FlowTicket[int]) map[flowKey]int64 {
	out := map[flowKey]int64{}
	for v, s := range state {
		if n := tickets[v].n; s == "queued" && n.queued {
			out[flowKey{n.item.Priority, n.item.Flow}] += n.item.Cost
		}
	}
	return out
}

// setAside reports whether request v is among the expired ones Pop set
// aside for Expired.
func setAside(q *FlowQueue[int], v int) bool {
	for _, it := range q.expired {
		if it.Value == v {
			return true
		}
	}
	return false
}

// hasLiveAbove reports whether a queued request of priority above p has a
// deadline after now.
func hasLiveAbove(q *FlowQueue[int], state map[int]string, tickets map[int]FlowTicket[int], p int, now time.Time) bool {
	for v, s := range state {
		if s != "queued" {
			continue
		}
		it := tickets[v].n
		if it.queued && it.item.Priority > p && (it.item.Deadline.IsZero() || it.item.Deadline.After(now)) {
			return true
		}
	}
	return false
}
