package extproc

import (
	"testing"
	"time"

	"github.com/kvroute/kvroute/blockhash"
	"github.com/kvroute/kvroute/index"
)

// TestLoadedHolderIsAvoidedOverGRPC: the holder of a prompt's prefix has a
// long queue of this router's own routed prefill (no scrape involved); the
// request goes elsewhere over a real ext_proc stream. Once those requests'
// streams end, the holder wins again.
func TestLoadedHolderIsAvoidedOverGRPC(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	keys := h.keysOf(sharedPrefix, blockhash.RequestKeys{})
	h.ix.Store(h.eps[0].Replica, keys, index.TierGPU)
	if res := h.do(modes[0].cfg, completion(sharedPrefix)); res.Headers[HeaderDestination] != h.eps[0].Address {
		t.Fatalf("idle holder not chosen: %s", res.Headers[HeaderDestination])
	}
	var tickets []index.Ticket
	for i := 0; i < 5; i++ { // 5 × 10,000 uncached tokens: 5 s at 10k tokens/s
		tickets = append(tickets, h.ix.BeginWork(h.eps[0].Replica, 10000, 10000))
	}
	for _, mode := range modes {
		if res := h.do(mode.cfg, completion(sharedPrefix)); res.Headers[HeaderDestination] == h.eps[0].Address {
			t.Fatalf("%s: routed to the holder with 5 s of prefill queued", mode.name)
		}
	}
	// Half of it drains with time at the default rate; still avoided.
	h.advance(2 * time.Second)
	if res := h.do(modes[0].cfg, completion(sharedPrefix)); res.Headers[HeaderDestination] == h.eps[0].Address {
		t.Fatal("routed to the holder with 3 s of prefill left")
	}
	// The last routed request's stream ended: all queued before it is done
	// (the pending prefill is 0 from here on); then the others end too.
	h.ix.EndWork(h.eps[0].Replica, tickets[len(tickets)-1])
	if st, _ := h.ix.Replica(h.eps[0].Replica); st.PendingTokens != 0 {
		t.Fatalf("pending prefill %g tokens after the last routed request ended", st.PendingTokens)
	}
	for _, tk := range tickets[:len(tickets)-1] {
		h.ix.EndWork(h.eps[0].Replica, tk)
	}
	h.ix.Clear(h.eps[1].Replica) // the detours' speculative entries
	h.ix.Clear(h.eps[2].Replica)
	if res := h.do(modes[0].cfg, completion(sharedPrefix)); res.Headers[HeaderDestination] != h.eps[0].Address {
		t.Fatalf("holder not chosen once its queue ended: %s", res.Headers[HeaderDestination])
	}
}
