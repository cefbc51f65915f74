package routing

import (
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/kvroute/kvroute/blockhash"
	"github.com/kvroute/kvroute/index"
)

// recordingSharer records what a router tells its peers.
type recordingSharer struct {
	mu    sync.Mutex
	began []SharedWork
	ended []uint64
}

func (s *recordingSharer) Began(w SharedWork) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	w.Keys = slices.Clone(w.Keys)
	s.began = append(s.began, w)
	return uint64(len(s.began))
}

func (s *recordingSharer) Ended(id uint64) {
	s.mu.Lock()
	s.ended = append(s.ended, id)
	s.mu.Unlock()
}

// TestRoutedRequestsAreShared: every request routed and begun is told to
// the Sharer with its endpoint, uncached tokens and keys,
// and its end once it ends.
func TestRoutedRequestsAreShared(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	s := &recordingSharer{}
	h.router.SetSharer(s)
	keys := h.keysOf(sharedPrefix, blockhash.RequestKeys{})
	h.ix.Store(h.eps[1].Replica, keys[:2], index.TierGPU)
	if dest := h.route(completion(sharedPrefix)); dest != h.eps[1].Address {
		t.Fatalf("routed to %s, want the holder", dest)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.began) != 1 || len(s.ended) != 1 || s.ended[0] != 1 {
		t.Fatalf("began %d, ended %v; want one of each", len(s.began), s.ended)
	}
	w := s.began[0]
	if w.Pool != "qwen" || w.Endpoint != h.eps[1].Name || w.Matched != 2 || !slices.Equal(w.Keys, keys) {
		t.Fatalf("shared %+v", w)
	}
	if want := len(keys)*testBlockSize - 2*testBlockSize; w.Uncached < want {
		t.Fatalf("shared %d uncached tokens, want at least %d", w.Uncached, want)
	}
}

// TestPeerWorkSteersLikeOwnWork: a request another kvroute sent to the
// holder of a prompt's prefix, booked with BeginPeer, weighs like this
// router's own: with 5 s of peers' prefill queued there the request goes
// elsewhere; once EndPeer takes it off, the holder wins again. The peer's
// requests count as known in flight, not as foreign queue.
func TestPeerWorkSteersLikeOwnWork(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	r := h.router
	keys := h.keysOf(sharedPrefix, blockhash.RequestKeys{})
	h.ix.Store(h.eps[0].Replica, keys, index.TierGPU)
	var works []PeerWork
	for range 5 {
		w, err := r.BeginPeer(SharedWork{Pool: "qwen", Endpoint: h.eps[0].Name, Uncached: 10000})
		if err != nil {
			t.Fatal(err)
		}
		works = append(works, w)
	}
	if st, _ := h.ix.Replica(h.eps[0].Replica); st.InFlight != 5 || st.PendingTokens != 50000 {
		t.Fatalf("peer work on the books: in flight %d, pending %g tokens; want 5 and 50000", st.InFlight, st.PendingTokens)
	}
	if dest := h.route(completion(sharedPrefix)); dest == h.eps[0].Address {
		t.Fatal("routed to the holder with 5 s of peers' prefill queued")
	}
	for _, w := range works {
		r.EndPeer(w)
	}
	h.ix.Clear(h.eps[1].Replica) // the detour's speculative entries
	h.ix.Clear(h.eps[2].Replica)
	if dest := h.route(completion(sharedPrefix)); dest != h.eps[0].Address {
		t.Fatalf("holder not chosen once the peers' work ended: %s", dest)
	}
}

func TestBeginPeerRefusesWhatItCannotBook(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	r := h.router
	for _, c := range []struct {
		name string
		w    SharedWork
		want error
	}{
		{"unknown pool", SharedWork{Pool: "nope", Endpoint: h.eps[0].Name}, ErrUnknownPool},
		{"unknown endpoint", SharedWork{Pool: "qwen", Endpoint: "nope"}, ErrUnknownEndpoint},
		{"negative tokens", SharedWork{Pool: "qwen", Endpoint: h.eps[0].Name, Uncached: -1}, nil},
		{"matched beyond keys", SharedWork{Pool: "qwen", Endpoint: h.eps[0].Name, Matched: 2, Keys: []index.BlockKey{1}}, nil},
	} {
		_, err := r.BeginPeer(c.w)
		if err == nil || (c.want != nil && !errors.Is(err, c.want)) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if st, _ := h.ix.Replica(h.eps[0].Replica); st.InFlight != 0 {
		t.Fatalf("refused work booked: %d in flight", st.InFlight)
	}
}
