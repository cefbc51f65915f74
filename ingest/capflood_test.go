package ingest

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvroute/kvroute/index"
	"github.com/kvroute/kvroute/internal/panics"
	"github.com/kvroute/kvroute/internal/vllmzmq"
)

// floodBatch is one vLLM KV-event batch of n new root BlockStored blocks of
// blockSize tokens each, with random engine hashes.
func floodBatch(tb testing.TB, rng *rand.Rand, n, blockSize int) []byte {
	hashes := make([]any, n)
	for i := range hashes {
		hashes[i] = rng.Uint64()
	}
	tokens := make([]any, n*blockSize)
	for i := range tokens {
		tokens[i] = rng.IntN(150_000)
	}
	ev := kv{"type", "BlockStored", "block_hashes", hashes, "parent_block_hash", nil,
		"token_ids", tokens, "block_size", blockSize, "lora_id", nil, "medium", "GPU", "lora_name", nil}
	return enc(tb, []any{1767225600.25, []any{ev}, 0})
}

// Two engines flood new blocks over ZeroMQ into an index at its entry cap
// while a router looks up, holds and touches a hot prefix. Cap enforcement
// runs against writers that refresh entries after it read the clock (the
// index's clock here moves 40 ms a read, so that happens on every scan):
// no panic, no lock left held, lookups answering throughout and after.
func TestEnginesFloodingAtTheCapNeverStopRouting(t *testing.T) {
	var clock atomic.Int64
	clock.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	ix := index.New(index.Options{TTL: time.Hour, MaxEntries: 4_000, SpeculativeTTL: 2 * time.Second,
		Now: func() time.Time { return time.Unix(0, clock.Add(int64(40*time.Millisecond))) }})
	pubs := []*vllmzmq.Publisher{newPublisher(t, "", 16), newPublisher(t, "", 16)}
	h := startOn(t, ix, baseConfig(poolConfig("p", keysEngine,
		replicaSpec{name: "r0", events: pubs[0].Endpoint(), replay: pubs[0].ReplayEndpoint()},
		replicaSpec{name: "r1", events: pubs[1].Endpoint(), replay: pubs[1].ReplayEndpoint()})))
	for _, p := range pubs {
		waitSubscribed(t, p)
	}
	panicsBefore := h.counter(panics.MetricName)
	pid, _ := ix.PoolByName("p")
	blockSize := 4 // poolConfig's

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	if testing.Short() {
		cancel()
		ctx, cancel = context.WithTimeout(context.Background(), 500*time.Millisecond)
	}
	defer cancel()
	var wg sync.WaitGroup
	var batches, lookups atomic.Int64
	for i, p := range pubs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			for ctx.Err() == nil {
				if _, err := p.Publish(floodBatch(t, rng, 64, blockSize)); err != nil {
					t.Errorf("publish: %v", err)
					return
				}
				batches.Add(1)
			}
		}()
	}
	hot := make([]index.BlockKey, 32)
	for i := range hot {
		hot[i] = index.BlockKey(uint64(i+1) * 0x9E3779B97F4A7C15)
	}
	wg.Add(1)
	go func() { // the router: lookup, then hold what it routed
		defer wg.Done()
		r0 := h.rank("r0").r
		for i := 0; ctx.Err() == nil; i++ {
			ix.LookupRoute(pid, hot, nil)
			ix.Hold(r0, hot, i%len(hot))
			ix.Touch(r0, hot)
			lookups.Add(1)
		}
	}()
	flooded := make(chan struct{})
	go func() { wg.Wait(); close(flooded) }()
	select {
	case <-flooded:
	case <-time.After(10 * time.Second):
		t.Fatal("the engines' appliers and the router did not stop within 10 s of the flood's end: a shard lock is held")
	}

	answered := make(chan struct{})
	go func() {
		ix.LookupRoute(pid, hot, nil)
		ix.Store(h.rank("r1").r, hot, index.TierGPU)
		close(answered)
	}()
	select {
	case <-answered:
	case <-time.After(5 * time.Second):
		t.Fatal("a lookup and a store after the flood did not return within 5 s: a shard lock is held")
	}
	waitFor(t, "r1's engine events applied after the flood", func() bool { return h.status("r1").Batches > 0 })
	if got := h.counter(panics.MetricName) - panicsBefore; got != 0 {
		t.Errorf("kvroute_panics_total rose by %v during the flood", got)
	}
	if got, limit := ix.TotalEntries(), ix.MaxEntries()*3/2; got > limit {
		t.Errorf("entries %d past 1.5× the cap", got)
	}
	t.Logf("%d batches, %d router rounds; %d entries at the end (cap %d)", batches.Load(), lookups.Load(), ix.TotalEntries(), ix.MaxEntries())
}
