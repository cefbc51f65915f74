package ingest

import (
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvroute/kvroute/config"
	"github.com/kvroute/kvroute/index"
	"github.com/kvroute/kvroute/ingest/vllmevent"
)

const (
	benchBlockSize = 16
	benchBlocks    = 16 // blocks per BlockStored event
	benchPayloads  = 1024
	benchLag       = 512 // a batch evicts the blocks stored this many batches earlier
)

// benchPayloads builds steady-state batches as a busy engine publishes them:
// one BlockStored of 16 new blocks (a fresh prompt, 256 tokens) plus one
// BlockRemoved per block evicted from an older prompt (vLLM sends one event
// per evicted hash). Each batch carries 32 block events.
func benchBatches(tb testing.TB) [][]byte {
	rng := rand.New(rand.NewPCG(1, 2))
	hashes := make([][]any, benchPayloads)
	for i := range hashes {
		for range benchBlocks {
			hashes[i] = append(hashes[i], rng.Uint64())
		}
	}
	out := make([][]byte, benchPayloads)
	for i := range out {
		tokens := make([]any, benchBlocks*benchBlockSize)
		for j := range tokens {
			tokens[j] = rng.IntN(150_000)
		}
		extra := make([]any, benchBlocks)
		events := []any{kv{"type", "BlockStored", "block_hashes", hashes[i], "parent_block_hash", nil,
			"token_ids", tokens, "block_size", benchBlockSize, "lora_id", nil, "medium", "GPU", "lora_name", nil,
			"extra_keys", extra, "group_idx", 0, "kv_cache_spec_kind", "full_attention"}}
		for _, h := range hashes[(i+benchPayloads-benchLag)%benchPayloads] {
			events = append(events, kv{"type", "BlockRemoved", "block_hashes", []any{h}, "medium", "GPU", "group_idx", 0})
		}
		out[i] = enc(tb, []any{1767225600.25, events, 0})
	}
	return out
}

func BenchmarkDecode_16BlockStoredPlus16Removed(b *testing.B) {
	payloads := benchBatches(b)
	d := vllmevent.NewDecoder()
	var batch vllmevent.EventBatch
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if err := d.Decode(payloads[i%len(payloads)], &batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(2*benchBlocks)*float64(b.N)/b.Elapsed().Seconds(), "block-events/s")
}

func benchDecodeApply(b *testing.B, keys bool) {
	payloads := benchBatches(b)
	pool := poolConfig("p", keys, replicaSpec{name: "r0"})
	pool.BlockSize = benchBlockSize
	cfg := baseConfig(pool)
	ix := index.New(index.Options{TTL: time.Hour, MaxEntries: 1 << 20})
	m, err := newManager(b, ix, cfg, Options{})
	if err != nil {
		b.Fatal(err)
	}
	m.tuning.noSelfCheck = true // random hashes would all mismatch
	rs := m.allRanks()[0]
	// Warm up: one pass so the index and key map reach steady state.
	for i, p := range payloads {
		rs.applyPayload(uint64(i), p, false)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		rs.applyPayload(uint64(len(payloads)+i), payloads[i%len(payloads)], false)
	}
	b.StopTimer()
	if s := rs.st.get(); s.DecodeErrors != 0 || s.ParentUnknown != 0 {
		b.Fatalf("status %+v", s)
	}
	b.ReportMetric(float64(2*benchBlocks)*float64(b.N)/b.Elapsed().Seconds(), "block-events/s")
}

// BenchmarkDecodeApply_TokensKeys is decode + apply with kvroute's own keys:
// each stored block is rehashed from its tokens and remembered for removal.
func BenchmarkDecodeApply_TokensKeys(b *testing.B) { benchDecodeApply(b, keysTokens) }

// BenchmarkDecodeApply_EngineKeys is decode + apply with vLLM's hashes as keys.
func BenchmarkDecodeApply_EngineKeys(b *testing.B) { benchDecodeApply(b, keysEngine) }

// BenchmarkUnroutableAfterStreamEnd measures, per op, how long a replica
// stays routable after its engine's event stream ends (the process exits):
// from closing the publisher to the index marking the replica unhealthy.
func BenchmarkUnroutableAfterStreamEnd(b *testing.B) {
	var total time.Duration
	for b.Loop() {
		b.StopTimer()
		pub := newPublisher(b, "", 10)
		h := start(b, baseConfig(poolConfig("p", keysTokens, replicaSpec{name: "r0", events: pub.Endpoint()})))
		waitFor(b, "connected", func() bool { return h.rank("r0").connected.Load() })
		b.StartTimer()
		t0 := time.Now()
		pub.Close()
		for {
			if st, _ := h.ix.Replica(h.rank("r0").r); !st.Healthy {
				break
			}
			time.Sleep(100 * time.Microsecond)
		}
		total += time.Since(t0)
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms-to-unroutable")
}

// BenchmarkUnroutableAfterFreeze measures how long a replica whose HTTP
// server stops answering (a SIGSTOPped engine) stays routable, with the
// default 2 s scrape timeout: with config's defaults (1 s scrape interval,
// /health probed every 100 ms), and with scraping alone at 1 s and at 100 ms.
func BenchmarkUnroutableAfterFreeze(b *testing.B) {
	b.Run("scrape=1s,health=100ms", func(b *testing.B) {
		benchFreeze(b, time.Second, 100*time.Millisecond)
	})
	for _, iv := range []time.Duration{time.Second, 100 * time.Millisecond} {
		b.Run("scrape-only,interval="+iv.String(), func(b *testing.B) { benchFreeze(b, iv, 0) })
	}
}

func benchFreeze(b *testing.B, interval, health time.Duration) {
	var total time.Duration
	for b.Loop() {
		b.StopTimer()
		var frozen atomic.Bool
		release := make(chan struct{})
		srv := stallingMetrics(&frozen, release)
		cfg := baseConfig(poolConfig("p", keysTokens, replicaSpec{name: "r0", metrics: srv.URL}))
		cfg.Settings.ScrapeInterval = interval
		cfg.Settings.ScrapeTimeout = 2 * time.Second
		cfg.Settings.HealthInterval = health
		cfg.Settings.StallTimeout = config.Default().Ingest.StallTimeout.Std()
		h := start(b, cfg)
		waitFor(b, "a reading", func() bool { st, _ := h.ix.Replica(h.rank("r0").r); return !st.LoadAt.IsZero() })
		b.StartTimer()
		t0 := time.Now()
		frozen.Store(true)
		for {
			if st, _ := h.ix.Replica(h.rank("r0").r); !st.Healthy {
				break
			}
			time.Sleep(time.Millisecond)
		}
		total += time.Since(t0)
		b.StopTimer()
		close(release)
		srv.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms-to-unroutable")
}
