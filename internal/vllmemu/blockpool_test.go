package vllmemu

import (
	"slices"
	"testing"
)

// eventSummary renders events compactly for comparisons: "S:h1,h2" for
// BlockStored, "R:h" for BlockRemoved, "C" for AllBlocksCleared.
func eventSummary(evs []kvEvent) []string {
	var out []string
	for _, ev := range evs {
		s := ""
		switch ev.kind {
		case kindBlockStored:
			s = "S:"
		case kindBlockRemoved:
			s = "R:"
		default:
			out = append(out, "C")
			continue
		}
		for i, h := range ev.hashes {
			if i > 0 {
				s += ","
			}
			s += hashName(h.value)
		}
		out = append(out, s)
	}
	return out
}

// names maps event hash values to readable names during one test.
var names = map[uint64]string{}

func hashName(v uint64) string {
	if n, ok := names[v]; ok {
		return n
	}
	return "?"
}

func nameDigests(prefix string, r *request) {
	for i := range r.digests {
		names[r.digests[i].EventValue()] = prefix + string(rune('0'+i))
	}
}

func freeQueueIDs(p *blockPool) []int {
	var ids []int
	for b := p.free.next; b != &p.free; b = b.next {
		ids = append(ids, b.id)
	}
	return ids
}

func TestNullBlockIsReservedAndNeverFreed(t *testing.T) {
	p := newBlockPool(4, 4, true)
	if got := freeQueueIDs(p); !slices.Equal(got, []int{1, 2, 3}) {
		t.Fatalf("free queue %v, want [1 2 3] (block 0 is the null block)", got)
	}
	if !p.blocks[0].null || p.numFree != 3 || p.usage() != 0 {
		t.Fatalf("null=%v free=%d usage=%v", p.blocks[0].null, p.numFree, p.usage())
	}
	got := p.getNewBlocks(3)
	if p.usage() != 1 || p.numFree != 0 {
		t.Fatalf("all blocks taken: usage %v free %d", p.usage(), p.numFree)
	}
	// Freeing the null block (as a padded block table would) never queues it.
	p.freeBlocks(append(got, &p.blocks[0]))
	if ids := freeQueueIDs(p); slices.Contains(ids, 0) || len(ids) != 3 {
		t.Fatalf("free queue %v after freeing everything", ids)
	}
	if !p.reset() {
		t.Fatal("reset failed with every block free")
	}
}

// TestFreedRequestIsEvictedTailFirst: a finished request's blocks join the
// tail of the free queue last block first, never-used blocks are taken
// before them, and each eviction is one BlockRemoved event.
func TestFreedRequestIsEvictedTailFirst(t *testing.T) {
	opts := fastOptions(t)
	opts.BlockSize, opts.NumBlocks = 4, 8 // 7 usable blocks
	e := newEngine(t, opts)
	a := queue(e, seq(1000, 12), 1)
	nameDigests("a", a)
	_, ev := step(e)
	if got := eventSummary(ev); !slices.Equal(got, []string{"S:a0,a1,a2"}) {
		t.Fatalf("A's prefill events %v", got)
	}
	if len(e.running) != 0 {
		t.Fatal("A should have finished after one token")
	}
	if got := freeQueueIDs(e.pool); !slices.Equal(got, []int{4, 5, 6, 7, 3, 2, 1}) {
		t.Fatalf("free queue %v, want never-used blocks then A's last block first", got)
	}
	b := queue(e, seq(5000, 24), 1)
	nameDigests("b", b)
	_, ev = step(e)
	want := []string{"R:a2", "R:a1", "S:b0,b1,b2,b3,b4,b5"}
	if got := eventSummary(ev); !slices.Equal(got, want) {
		t.Fatalf("B's events %v, want %v", got, want)
	}
	if n := e.CachedPrefixBlocks(seq(1000, 12), "", ""); n != 1 {
		t.Fatalf("A's prefix still cached: %d blocks, want 1 (a0 survives)", n)
	}
}

// TestUnhashedBlocksAreReusedFirst: a partial block has no hash and goes to
// the head of the free queue, so it is reused before any cached block.
func TestUnhashedBlocksAreReusedFirst(t *testing.T) {
	opts := fastOptions(t)
	opts.BlockSize, opts.NumBlocks = 4, 4
	e := newEngine(t, opts)
	a := queue(e, seq(1000, 6), 1) // one full block, one partial
	step(e)
	if len(e.running) != 0 {
		t.Fatal("A did not finish")
	}
	ids := freeQueueIDs(e.pool)
	if len(ids) != 3 || ids[0] != 2 || ids[len(ids)-1] != 1 {
		t.Fatalf("free queue %v: want A's partial block 2 at the head, its full block 1 at the tail", ids)
	}
	if got := e.pool.getNewBlocks(1); got[0].id != 2 || len(e.pool.takeEvents()) != 0 {
		t.Fatalf("got block %d, want the unhashed block 2 without eviction", got[0].id)
	}
	_ = a
}

// TestDuplicateHashesAreKept: a prompt that is exactly full blocks must
// recompute its last block (the last token is never a hit), so a second
// request stores a second block with the same hash; vLLM keeps both.
func TestDuplicateHashesAreKept(t *testing.T) {
	opts := fastOptions(t)
	opts.BlockSize, opts.NumBlocks = 4, 16
	e := newEngine(t, opts)
	a := queue(e, seq(1000, 8), 10)
	nameDigests("a", a)
	step(e)
	b := queue(e, seq(1000, 8), 10)
	_, ev := step(e)
	if got := eventSummary(ev); !slices.Equal(got, []string{"S:a1"}) {
		t.Fatalf("B's events %v, want a second BlockStored of a1", got)
	}
	if ev[0].parent == nil || ev[0].parent.value != a.digests[0].EventValue() {
		t.Fatalf("B's BlockStored parent %+v, want a0", ev[0].parent)
	}
	if b.hitTokens != 4 || b.blocks[0] != a.blocks[0] || b.blocks[1] == a.blocks[1] {
		t.Fatalf("B hit %d tokens, blocks %d,%d vs A %d,%d", b.hitTokens, b.blocks[0].id, b.blocks[1].id, a.blocks[0].id, a.blocks[1].id)
	}
	h1 := a.digests[1].EventValue()
	count := 0
	for _, h := range e.CachedBlockHashes() {
		if h == h1 {
			count++
		}
	}
	if count != 2 {
		t.Fatalf("a1 cached %d times, want 2", count)
	}
	// Evicting one copy is a BlockRemoved although the other still serves hits.
	e.pool.evictBlocks([]int{b.blocks[1].id})
	if got := eventSummary(e.pool.takeEvents()); !slices.Equal(got, []string{"R:a1"}) {
		t.Fatalf("evict events %v", got)
	}
	if n := e.CachedPrefixBlocks(seq(1000, 9), "", ""); n != 2 {
		t.Fatalf("prefix hit %d blocks after evicting the duplicate, want 2", n)
	}
}

func TestResetFailsWhileBlocksAreInUse(t *testing.T) {
	opts := fastOptions(t)
	opts.BlockSize, opts.NumBlocks = 4, 16
	e := newEngine(t, opts)
	queue(e, seq(1000, 8), 10)
	step(e)
	if err := e.ResetPrefixCache(false); err != ErrReset {
		t.Fatalf("reset with a running request: %v, want ErrReset", err)
	}
	if e.Stats().CachedBlocks != 2 {
		t.Fatalf("failed reset dropped blocks: %+v", e.Stats())
	}
	// reset_running_requests preempts the request, then the reset succeeds.
	if err := e.ResetPrefixCache(true); err != nil {
		t.Fatalf("reset with reset_running_requests: %v", err)
	}
	st := e.Stats()
	if st.CachedBlocks != 0 || st.Running != 0 || st.Waiting != 1 || st.Preemptions != 1 || st.KVUsage != 0 {
		t.Fatalf("after reset: %+v", st)
	}
	// Idle pool: reset succeeds and records AllBlocksCleared.
	if !e.pool.reset() {
		t.Fatal("idle reset failed")
	}
	if got := eventSummary(e.pool.takeEvents()); !slices.Equal(got, []string{"C"}) {
		t.Fatalf("idle reset events %v", got)
	}
}
