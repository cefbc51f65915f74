package index

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"
)

// BenchmarkLookupRoute_256Blocks_64Replicas looks up a 256-block prompt in a
// pool of 64 replicas where every replica holds a different-length prefix of
// it, so the walk visits all 256 blocks and every replica drops out somewhere.
func BenchmarkLookupRoute_256Blocks_64Replicas(b *testing.B) {
	f := newFixture(b, 64, Options{})
	prompt := make([]BlockKey, 256)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range prompt {
		prompt[i] = BlockKey(rng.Uint64())
	}
	for i, r := range f.r {
		f.ix.Store(r, prompt[:4*(i+1)], TierGPU) // replica i holds 4(i+1) blocks
	}
	// Unrelated entries so the maps are not trivially small.
	for i := 0; i < 100_000; i++ {
		f.ix.Store(f.r[i%64], []BlockKey{BlockKey(rng.Uint64())}, TierGPU)
	}
	dst := make([]Match, 0, MaxReplicas)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		dst = f.ix.LookupRoute(f.pool, prompt, dst)
	}
	b.StopTimer()
	if len(dst) != 64 || dst[63].Blocks != 256 {
		b.Fatalf("unexpected result %+v", dst[len(dst)-1])
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/256, "ns/block")
}

// BenchmarkLookupRoute_2kChat is the lookup of a routing decision for a
// 2k-token chat request, as extproc's decision benchmarks make it: 128
// block keys, the first 94 (a shared system prompt) held by replica 3 and,
// speculatively, by the replicas earlier requests went to; the last 34 (a
// new user turn) held by nobody. Each request is then held speculatively on
// a replica (outside the timer), so the tables grow through the run as in
// those benchmarks: compare runs of one fixed count (-benchtime Nx).
func BenchmarkLookupRoute_2kChat(b *testing.B) {
	const shared = 94
	f := newFixture(b, 8, Options{MaxEntries: 1 << 30, SpeculativeTTL: time.Hour})
	rng := rand.New(rand.NewPCG(11, 12))
	keys := make([]BlockKey, 128)
	for i := range keys {
		keys[i] = BlockKey(rng.Uint64())
	}
	f.ix.Store(f.r[3], keys[:shared], TierGPU)
	dst := make([]Match, 0, MaxReplicas)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		for j := shared; j < len(keys); j++ {
			keys[j] = BlockKey(rng.Uint64())
		}
		b.StartTimer()
		dst = f.ix.LookupRoute(f.pool, keys, dst)
		b.StopTimer()
		if len(dst) == 0 || dst[0].Blocks != shared {
			b.Fatalf("lookup = %+v, want runs of %d blocks", dst, shared)
		}
		f.ix.StoreSpeculative(f.r[i%8], keys)
		b.StartTimer()
	}
}

// BenchmarkStoreBlocks measures ingest of block stores on one goroutine:
// BlockStored events of 16 new blocks each, as vLLM emits per scheduler step.
func BenchmarkStoreBlocks(b *testing.B) {
	f := newFixture(b, 8, Options{MaxEntries: 1 << 30})
	rng := rand.New(rand.NewPCG(3, 4))
	batch := make([]BlockKey, 16)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		for j := range batch {
			batch[j] = BlockKey(rng.Uint64())
		}
		f.ix.Store(f.r[i%8], batch, TierGPU)
	}
	b.ReportMetric(float64(b.N*len(batch))/b.Elapsed().Seconds(), "blocks/s")
}

// BenchmarkBytesPerEntry fills a pool of 64 replicas with 10M (block,
// replica) pairs and reports heap bytes per pair (runtime.MemStats after GC).
// "holders" is how many replicas share each block.
func BenchmarkBytesPerEntry(b *testing.B) {
	const pairs = 10_000_000
	for _, holders := range []int{1, 4} {
		b.Run(fmt.Sprintf("10M_pairs/holders=%d", holders), func(b *testing.B) {
			for b.Loop() {
				runtime.GC()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				f := newFixture(b, 64, Options{MaxEntries: pairs})
				rng := rand.New(rand.NewPCG(5, 6))
				batch := make([]BlockKey, 16)
				for n := 0; n < pairs/holders; n += len(batch) {
					for j := range batch {
						batch[j] = BlockKey(rng.Uint64())
					}
					for h := 0; h < holders; h++ {
						f.ix.Store(f.r[(n/16+h*7)%64], batch, TierGPU)
					}
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/pairs, "bytes/pair")
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(f.ix.TotalEntries()), "bytes/block")
				runtime.KeepAlive(f)
			}
		})
	}
}

// BenchmarkStoreBlocks_SteadyState is ingest as it runs once an engine's KV
// cache is full: every 16-block BlockStored comes with a BlockRemoved of 16
// older blocks, so the index holds a constant 1M entries and its maps no
// longer grow. Reported blocks/s counts stored blocks.
func BenchmarkStoreBlocks_SteadyState(b *testing.B) {
	const resident = 1 << 20
	f := newFixture(b, 8, Options{MaxEntries: 1 << 30})
	ring := make([]BlockKey, resident)
	rng := rand.New(rand.NewPCG(7, 8))
	for i := range ring {
		ring[i] = BlockKey(rng.Uint64())
	}
	for i := 0; i < resident; i += 16 {
		f.ix.Store(f.r[(i/16)%8], ring[i:i+16], TierGPU)
	}
	b.ReportAllocs()
	b.ResetTimer()
	pos := 0
	for i := 0; b.Loop(); i++ {
		old := ring[pos : pos+16]
		f.ix.Remove(f.r[(pos/16)%8], old, TierGPU)
		for j := range old {
			old[j] = BlockKey(rng.Uint64())
		}
		f.ix.Store(f.r[(pos/16)%8], old, TierGPU)
		pos = (pos + 16) % resident
	}
	b.ReportMetric(float64(b.N*16)/b.Elapsed().Seconds(), "blocks/s")
}

// BenchmarkStoreSpeculative_128Blocks is the index's part of a routing
// decision for a 2k-token chat request: StoreSpeculative of its 128 block
// keys, of which the first 96 (a shared system prompt) were stored by the
// previous requests too and the last 32 are new. Nothing sweeps, as in the
// extproc decision benchmarks, so the speculative tables grow through the
// run: compare runs of one fixed count (-benchtime Nx).
func BenchmarkStoreSpeculative_128Blocks(b *testing.B) {
	f := newFixture(b, 8, Options{MaxEntries: 1 << 30, SpeculativeTTL: time.Hour})
	rng := rand.New(rand.NewPCG(9, 10))
	keys := make([]BlockKey, 128)
	for i := range keys {
		keys[i] = BlockKey(rng.Uint64())
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		for j := 96; j < len(keys); j++ {
			keys[j] = BlockKey(rng.Uint64())
		}
		f.ix.StoreSpeculative(f.r[i%8], keys)
	}
}
