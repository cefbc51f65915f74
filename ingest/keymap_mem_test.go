package ingest

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/kvroute/kvroute/blockhash"
	"github.com/kvroute/kvroute/index"
	"github.com/kvroute/kvroute/ingest/vllmevent"
)

// tokensManager builds a tokens-mode manager over n replicas writing to a
// fresh index with the given cap.
func tokensManager(tb testing.TB, replicas, maxEntries int) (*Manager, *index.Index, index.PoolID) {
	tb.Helper()
	var specs []replicaSpec
	for i := range replicas {
		specs = append(specs, replicaSpec{name: fmt.Sprintf("r%d", i)})
	}
	pool := poolConfig("p", keysTokens, specs...)
	pool.BlockSize = benchBlockSize
	pool.Seed = nil
	ix := index.New(index.Options{TTL: time.Hour, MaxEntries: maxEntries})
	m, err := newManager(tb, ix, baseConfig(pool), Options{})
	if err != nil {
		tb.Fatal(err)
	}
	pid, _ := ix.PoolByName("p")
	return m, ix, pid
}

// storedEvent is a root BlockStored run of blocks new random blocks.
func storedEvent(rng *rand.Rand, blocks int) *vllmevent.Event {
	ev := &vllmevent.Event{Type: vllmevent.EventBlockStored, BlockSize: benchBlockSize, TokenIDs: make([]uint32, blocks*benchBlockSize)}
	for i := range ev.TokenIDs {
		ev.TokenIDs[i] = uint32(rng.IntN(150_000))
	}
	for range blocks {
		ev.BlockHashes = append(ev.BlockHashes, blockhash.EventHash{Value: rng.Uint64()})
	}
	return ev
}

// In keys: tokens mode the engine hash → key map holds one entry per (block,
// replica) on the index's behalf: it counts toward index.max_entries.
func TestTokensKeyMapCountsTowardIndexCap(t *testing.T) {
	m, ix, pid := tokensManager(t, 1, 1<<20)
	rs := m.allRanks()[0]
	rng := rand.New(rand.NewPCG(1, 2))
	for range 10 {
		rs.applyStored(storedEvent(rng, 16))
	}
	if got, want := ix.TotalEntries(), ix.Entries(pid)+int64(rs.keys.len()); got != want || rs.keys.len() != 160 {
		t.Fatalf("index counts %d entries; blocks %d + key map %d", got, ix.Entries(pid), rs.keys.len())
	}
	// With a small cap the two together stay bounded.
	m, ix, _ = tokensManager(t, 1, 1000)
	rs = m.allRanks()[0]
	for range 200 {
		rs.applyStored(storedEvent(rng, 16))
	}
	if got := ix.TotalEntries(); got > 1000+1000/50 {
		t.Fatalf("index counts %d entries with cap 1000", got)
	}
	if got := rs.keys.len(); got > 1000 {
		t.Fatalf("key map holds %d entries with cap 1000", got)
	}
}

// BenchmarkBytesPerPair_TokensKeys is the memory held per (block, replica)
// in keys: tokens mode counting every map — the index's entries and the
// per-rank engine hash → key maps — as ingest fills them from BlockStored
// events: 64 replicas, 16-block events, one holder per block.
func BenchmarkBytesPerPair_TokensKeys(b *testing.B) {
	const replicas = 64
	for _, pairs := range []int{1 << 20, 10_000_000} {
		b.Run(fmt.Sprintf("pairs=%d", pairs), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(5, 6))
			events := make([]*vllmevent.Event, 64)
			for i := range events {
				events[i] = storedEvent(rng, benchBlocks)
			}
			for b.Loop() {
				runtime.GC()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				m, ix, _ := tokensManager(b, replicas, 2*pairs)
				for n := 0; n < pairs; n += benchBlocks {
					ev := events[(n/benchBlocks)%len(events)]
					for j := range ev.BlockHashes {
						ev.BlockHashes[j].Value = rng.Uint64()
					}
					ev.TokenIDs[0] = uint32(n / benchBlocks) // new chain: new keys
					m.allRanks()[(n/benchBlocks)%replicas].applyStored(ev)
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(pairs), "B/pair")
				b.ReportMetric(float64(ix.TotalEntries())/float64(pairs), "counted/pair")
				runtime.KeepAlive(m)
			}
		})
	}
}
