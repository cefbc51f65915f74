package ingest

import (
	"math/rand/v2"
	"testing"

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

func benchDecodeApply(b *testing.B, keys string) {
	payloads := benchBatches(b)
	pool := poolConfig("p", keys, replicaSpec{name: "r0"})
	pool.BlockSize = benchBlockSize
	pool.Hash.Seed = nil // no self-check: random hashes would all mismatch
	cfg := baseConfig(pool)
	ix := index.New(index.Options{})
	pid, _ := ix.AddPool("p")
	ix.AddReplica(pid, "r0")
	m, err := New(Options{Config: cfg, Index: ix, Logger: quietLog})
	if err != nil {
		b.Fatal(err)
	}
	rs := m.ranks[0]
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
func BenchmarkDecodeApply_TokensKeys(b *testing.B) { benchDecodeApply(b, config.KeysTokens) }

// BenchmarkDecodeApply_EngineKeys is decode + apply with vLLM's hashes as keys.
func BenchmarkDecodeApply_EngineKeys(b *testing.B) { benchDecodeApply(b, config.KeysEngine) }
