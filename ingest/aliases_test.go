package ingest

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/kvroute/kvroute/blockhash"
	"github.com/kvroute/kvroute/index"
	"github.com/kvroute/kvroute/internal/vllmzmq"
)

// churnEngine publishes what a busy vLLM engine in keys: tokens mode does:
// root BlockStored runs of new blocks, and BlockRemoved of its oldest blocks
// once it holds more than capacity (vLLM evicts to make room).
type churnEngine struct {
	pub      *vllmzmq.Publisher
	rng      *rand.Rand
	held     [][]any // runs of engine hashes, oldest first
	capacity int     // blocks
	blocks   int
	next     int // run number: makes every run's tokens new
	id       int
}

const churnRunBlocks = 8

// batch is one KV-event batch: a new run, then removals down to capacity.
func (e *churnEngine) batch(t testing.TB) []byte {
	tokens := make([]any, churnRunBlocks*4)
	for i := range tokens {
		tokens[i] = 1000 + e.rng.IntN(30_000)
	}
	tokens[0], tokens[1] = e.id, e.next
	e.next++
	hashes := make([]any, churnRunBlocks)
	for i := range hashes {
		hashes[i] = e.rng.Uint64() >> 1
	}
	events := []any{kv{"type", "BlockStored", "block_hashes", hashes, "parent_block_hash", nil,
		"token_ids", tokens, "block_size", 4, "lora_id", nil, "medium", "GPU", "lora_name", nil}}
	e.held = append(e.held, hashes)
	e.blocks += len(hashes)
	for e.blocks > e.capacity {
		events = append(events, kv{"type", "BlockRemoved", "block_hashes", e.held[0], "medium", "GPU"})
		e.blocks -= len(e.held[0])
		e.held = e.held[1:]
	}
	return enc(t, []any{1767225600.25, events, 0})
}

// churn runs engines publishing batches each over real ZeroMQ sockets into
// a tokens-mode manager whose index caps entries at maxEntries, checking
// the cap after every round; it returns the harness once all are applied.
func churn(t *testing.T, engines, capacity, batches, maxEntries int, tweak ...func(*Manager)) *harness {
	t.Helper()
	var specs []replicaSpec
	var es []*churnEngine
	for i := range engines {
		pub := newPublisher(t, "kv-events", 16)
		es = append(es, &churnEngine{pub: pub, rng: rand.New(rand.NewPCG(uint64(i), 7)), capacity: capacity, id: i})
		specs = append(specs, replicaSpec{name: fmt.Sprintf("r%d", i), events: pub.Endpoint(), topic: "kv-events"})
	}
	ix := index.New(index.Options{TTL: time.Hour, MaxEntries: maxEntries})
	h := startOn(t, ix, baseConfig(poolConfig("p", keysTokens, specs...)), tweak...)
	for _, e := range es {
		waitSubscribed(t, e.pub)
	}
	line := int64(maxEntries + maxEntries/50) // the index's synchronous-eviction line
	for b := range batches {
		for i, e := range es {
			publish(t, e.pub, e.batch(t))
			waitFor(t, "the batch applied", func() bool {
				s := h.status(fmt.Sprintf("r%d", i))
				return s.HasSeq && s.LastSeq == uint64(b)
			})
		}
		if got := ix.TotalEntries(); got > line {
			t.Fatalf("after %d batches per engine the index counts %d entries; cap %d", b+1, got, maxEntries)
		}
	}
	return h
}

// In keys: tokens mode the engine hash → key aliases follow what the engines
// hold: a BlockRemoved drops its alias, so at a cap of three times what the
// engines hold, churn never squeezes blocks out of the index.
func TestTokensAliasesFollowWhatEnginesHold(t *testing.T) {
	const engines, capacity = 4, 64
	h := churn(t, engines, capacity, 60, 3*engines*capacity)
	pid, _ := h.ix.PoolByName("p")
	aliases := h.ix.TotalEntries() - h.ix.Entries(pid)
	if aliases > engines*capacity {
		t.Errorf("%d aliases held; the engines hold %d blocks", aliases, engines*capacity)
	}
	if got := h.ix.Entries(pid); got < engines*capacity {
		t.Errorf("the index holds %d blocks; the engines hold %d", got, engines*capacity)
	}
	if got := h.counter(metricAliasesEvicted); got != 0 {
		t.Errorf("%g aliases evicted below the budget", got)
	}
}

// When the engines hold more than the cap, the aliases stay within their
// budget (half the cap), the total within the cap, and the index keeps
// blocks to route on.
func TestTokensAliasesStayWithinTheirBudget(t *testing.T) {
	const engines, capacity, maxEntries = 4, 256, 400
	h := churn(t, engines, capacity, 40, maxEntries)
	pid, _ := h.ix.PoolByName("p")
	if aliases := h.ix.TotalEntries() - h.ix.Entries(pid); aliases > h.ix.AliasBudget() {
		t.Errorf("%d aliases held; budget %d", aliases, h.ix.AliasBudget())
	}
	if got := h.ix.Entries(pid); got < maxEntries/4 {
		t.Errorf("the index holds %d blocks under a cap of %d", got, maxEntries)
	}
	if got := h.counter(metricAliasesEvicted); got == 0 {
		t.Error("no alias eviction counted")
	}
}

// aliasesWithin reports, per rank, the aliases its key map holds beyond the
// blocks the index holds for the rank ("" when none holds more): an alias
// has no block to point at beyond that.
func aliasesWithin(h *harness) string {
	var over []string
	for _, rs := range h.mgr.allRanks() {
		st, _ := h.ix.Replica(rs.r)
		if a := rs.aliases.Load(); a > st.Blocks {
			over = append(over, fmt.Sprintf("%s: %d aliases, %d blocks", rs.name, a, st.Blocks))
		}
	}
	return strings.Join(over, "; ")
}

// When the index evicts blocks at its cap, their aliases go too: no rank
// keeps more aliases than the index holds blocks for it.
func TestTokensAliasesGoWithBlocksEvictedAtTheCap(t *testing.T) {
	const engines, capacity, maxEntries = 4, 256, 400
	h := churn(t, engines, capacity, 40, maxEntries, func(m *Manager) { m.tuning.orphanSweep = 20 * time.Millisecond })
	over := aliasesWithin(h)
	for deadline := time.Now().Add(5 * time.Second); over != "" && time.Now().Before(deadline); over = aliasesWithin(h) {
		time.Sleep(10 * time.Millisecond)
	}
	if over != "" {
		t.Errorf("more aliases than blocks: %s", over)
	}
	if got := h.counter(metricAliasesOrphan); got == 0 {
		t.Errorf("%s 0 after evictions at the cap", metricAliasesOrphan)
	}
}

// When the index sweeps blocks past its TTL, their aliases go too.
func TestTokensAliasesGoWithExpiredBlocks(t *testing.T) {
	st := steps(t)
	pub := newPublisher(t, "", 100)
	ix := index.New(index.Options{TTL: 300 * time.Millisecond, MaxEntries: 1 << 20})
	h := startOn(t, ix, baseConfig(poolConfig("p", keysTokens, replicaSpec{name: "r0", events: pub.Endpoint()})),
		func(m *Manager) { m.tuning.orphanSweep = 20 * time.Millisecond })
	waitSubscribed(t, pub)
	publish(t, pub, st[stepPrompt])
	prompt := tokenKeys(t, "p", promptTokens[:8], blockhash.RequestKeys{})
	waitFor(t, "the blocks", func() bool { return h.held("p", "r0", prompt) == 2 })
	pid, _ := ix.PoolByName("p")
	if got := ix.TotalEntries() - ix.Entries(pid); got != 2 {
		t.Fatalf("%d aliases for 2 blocks", got)
	}
	time.Sleep(500 * time.Millisecond)
	ix.SweepExpired()
	if got := ix.Entries(pid); got != 0 {
		t.Fatalf("%d blocks left after the TTL", got)
	}
	waitFor(t, "the aliases gone", func() bool { return ix.TotalEntries() == 0 })
}
