package routing

import (
	"errors"
	"fmt"

	"github.com/kvroute/kvroute/index"
)

// Several kvroute instances in front of one fleet each see every engine's KV
// events, but only their own requests: a prefill another kvroute just sent
// shows up at best one scrape later, as a running request of unknown size.
// A Sharer (the peer mesh) tells the other kvroutes of every request this
// router begins and ends; they put it on their books with BeginPeer and
// EndPeer, as if they had routed it themselves.

// Sharer hears of every request the router begins and ends.
type Sharer interface {
	// Began is told of a request routed (its id is for Ended).
	Began(w SharedWork) (id uint64)
	Ended(id uint64)
}

// SharedWork is one routed request as the other kvroutes learn of it: the
// pool and endpoint by name (the same names in every kvroute's config), its
// uncached prompt tokens on that endpoint, and its block keys, of which the
// first Matched were already held there (nil keys: placed by load alone).
type SharedWork struct {
	Pool     string
	Endpoint string
	Uncached int
	Matched  int
	Keys     []index.BlockKey
}

// SetSharer makes the router tell s of every request it begins and ends
// from now on (nil: nobody).
func (r *Router) SetSharer(s Sharer) {
	if s == nil {
		r.sharer.Store(nil)
		return
	}
	r.sharer.Store(&s)
}

func (r *Router) share() Sharer {
	if s := r.sharer.Load(); s != nil {
		return *s
	}
	return nil
}

// PeerWork is a request another kvroute routed, on this router's books
// until EndPeer.
type PeerWork struct {
	replica index.Replica
	ticket  index.Ticket
}

// Errors of BeginPeer (a peer's names do not match this router's pools).
var (
	ErrUnknownPool     = errors.New("unknown pool")
	ErrUnknownEndpoint = errors.New("unknown endpoint")
)

// BeginPeer puts a request another kvroute routed on this router's books:
// its uncached tokens join the endpoint's prefill queue and it counts as in
// flight there (so the engine's scraped queue no longer counts it as
// foreign), and its keys are stored as speculative, as Begin does for this
// router's own requests. The endpoint must be one of the pool's now.
func (r *Router) BeginPeer(w SharedWork) (PeerWork, error) {
	p := r.poolNamed(w.Pool)
	if p == nil {
		return PeerWork{}, ErrUnknownPool
	}
	eps := p.endpoints()
	for i := range eps {
		if eps[i].Name == w.Endpoint {
			if w.Uncached < 0 || w.Matched < 0 || w.Matched > len(w.Keys) {
				return PeerWork{}, fmt.Errorf("uncached %d, matched %d of %d keys", w.Uncached, w.Matched, len(w.Keys))
			}
			t := r.beginWork(eps[i].Replica, w.Uncached, w.Keys, w.Matched)
			return PeerWork{replica: eps[i].Replica, ticket: t}, nil
		}
	}
	return PeerWork{}, ErrUnknownEndpoint
}

// EndPeer takes a request begun with BeginPeer off the books (its stream
// ended at the kvroute that routed it, or that kvroute is gone).
func (r *Router) EndPeer(w PeerWork) { r.ix.EndWork(w.replica, w.ticket) }

// beginWork is the bookkeeping of a request sent to replica: its uncached
// tokens queued at the replica's prefill rate, the blocks it will hit kept
// fresh, the rest stored as speculative until the engine's events arrive.
func (r *Router) beginWork(replica index.Replica, uncached int, keys []index.BlockKey, matched int) index.Ticket {
	rate := r.o().PrefillTokensPerSecond
	if st, ok := r.ix.Replica(replica); ok && st.PrefillRate > 0 {
		rate = st.PrefillRate
	}
	t := r.ix.BeginWork(replica, max(uncached, 0), rate)
	r.holdBlocks(replica, keys, matched)
	return t
}

// holdBlocks refreshes the first matched of keys on replica and stores the
// rest (and any matched ones held only speculatively) as speculative there:
// a request is on its way with them (index.Hold).
func (r *Router) holdBlocks(replica index.Replica, keys []index.BlockKey, matched int) {
	if len(keys) > 0 {
		// The request will hit the matched ones on its replica: keep them
		// as fresh as the engine's LRU does; the rest it is about to hold.
		r.ix.Hold(replica, keys, matched)
	}
}

// Begin records the routed request on its endpoint: in flight, its uncached
// prompt tokens in the replica's prefill queue, and speculative ownership of
// its blocks. End must follow when the stream ends.
func (r *Router) Begin(d *Decision) {
	r.BeginLoad(d)
	r.BeginBlocks(d)
}

// BeginLoad is the first half of Begin: the request in flight and its
// uncached tokens queued on its replica (and told to the peers). It is
// cheap and comes before the answer to Envoy, so the request counts as load
// before it can reach its replica.
func (r *Router) BeginLoad(d *Decision) {
	if d.Endpoint == nil {
		return
	}
	uncached := max(d.PromptTokens-d.MatchedTokens, 0)
	d.ticket = r.beginWork(d.Endpoint.Replica, uncached, nil, 0)
	if d.lowBand {
		if p := r.poolNamed(d.Pool); p != nil {
			p.lowBand[d.Endpoint.Replica.ID].Add(1)
		}
	}
	if s := r.share(); s != nil {
		d.sharedID = s.Began(SharedWork{Pool: d.Pool, Endpoint: d.Endpoint.Name, Uncached: uncached, Matched: d.matchedBlocks, Keys: d.Keys})
	}
}

// BeginBlocks is the second half of Begin: the request's matched blocks
// refreshed and the rest stored as speculative on its replica (holdBlocks:
// a lock and a table probe per block). The server runs it just after
// answering Envoy, off the request's path: a decision made in those
// microseconds misses the entries, as one made while this decision ran
// does anyway.
func (r *Router) BeginBlocks(d *Decision) {
	if d.Endpoint == nil {
		return
	}
	r.countFunnel(d)
	r.holdBlocks(d.Endpoint.Replica, d.Keys, d.matchedBlocks)
}

// End releases what Begin recorded.
func (r *Router) End(d *Decision) {
	r.endFunnel(d)
	if d.Endpoint != nil {
		r.ix.EndWork(d.Endpoint.Replica, d.ticket)
		if d.lowBand {
			if p := r.poolNamed(d.Pool); p != nil {
				p.lowBand[d.Endpoint.Replica.ID].Add(-1)
			}
			d.lowBand = false
		}
		if s := r.share(); s != nil {
			s.Ended(d.sharedID)
		}
		if fc := r.flow.Load(); fc != nil {
			fc.wake(d.Pool)
		}
	}
}
