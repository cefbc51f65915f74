package fleetsim

import (
	"testing"
	"time"

	"github.com/kvroute/kvroute/internal/routebench"
	"github.com/kvroute/kvroute/tokenize"
)

// benchmarkWorkload generates w and tokenizes its prompts as the engines do
// (completions add special tokens): a real-socket benchmark workload as the
// simulator's input.
func benchmarkWorkload(t *testing.T, tok *tokenize.Tokenizer, w routebench.WorkloadParams) SliceSource {
	t.Helper()
	reqs, err := routebench.Generate(w)
	if err != nil {
		t.Fatal(err)
	}
	src := make(SliceSource, 0, len(reqs))
	for _, r := range reqs {
		src = append(src, Request{At: r.At, Tokens: tok.Encode(r.Prompt, true), MaxTokens: r.MaxTokens})
	}
	return src
}

// benchmarkFleet is the real-socket benchmark's fleet in the simulator
// (docs/BENCHMARKS.md, Set-up): 4 engines of 256 blocks × 16 tokens, 8
// sequences each, 100 µs per uncached prompt token, 5 ms per decode step,
// scraped every scrape.
func benchmarkFleet(scrape time.Duration) Options {
	o := DefaultOptions()
	o.Engines, o.KVBlocks, o.BlockSize, o.MaxNumSeqs, o.MaxModelLen = 4, 256, 16, 8, 255*16
	o.Prefill, o.Decode, o.ScrapeInterval = 100*time.Microsecond, 5*time.Millisecond, scrape
	return o
}
