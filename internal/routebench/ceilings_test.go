package routebench

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvroute/kvroute/internal/testdata"
	"github.com/kvroute/kvroute/internal/vllmemu"
	"github.com/kvroute/kvroute/tokenize"
)

// TestCeilingFloorsByHand replays four 40-token prompts (one token per word)
// through the ceilings of a one-replica fleet with 4 usable blocks of 16
// tokens and 100µs per uncached token, and checks each request's TTFT floor
// against arithmetic:
//
//  1. P cold: 40 tokens prefilled = 4.0 ms under both caches.
//  2. P again: 2 blocks hit (never the block of the last prompt token), 8
//     tokens = 0.8 ms under both.
//  3. Q (other words) cold: 4.0 ms; in the pooled cache its 3 blocks evict
//     P's second block (the free queue's order: P's unhashed tail block,
//     the never-used block, then P's blocks last-first).
//  4. P again: infinite 0.8 ms; pooled 1 block hit, 24 tokens = 2.4 ms.
func TestCeilingFloorsByHand(t *testing.T) {
	dir := testdata.TokenizerDir(t, "qwen3")
	tok, err := tokenize.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	p := strings.TrimSpace(strings.Repeat("the ", 40))
	q := strings.TrimSpace(strings.Repeat("a ", 40))
	for _, s := range []string{p, q} {
		if n := len(tok.Encode(s, true)); n != 40 {
			t.Fatalf("%q… encodes to %d tokens, the test assumes 40", s[:8], n)
		}
	}
	o := BenchOptions{Model: "qwen3", Replicas: 1, NumBlocks: 5, BlockSize: 16, MaxNumSeqs: 4,
		Prefill: 100 * time.Microsecond, Decode: 5 * time.Millisecond, Seed: "0"}
	var reqs []Request
	for i, s := range []string{p, p, q, p} {
		reqs = append(reqs, Request{At: time.Duration(i) * time.Second, Prompt: s, MaxTokens: 2})
	}
	bounds, err := Ceilings(tok, nil, o, reqs)
	if err != nil {
		t.Fatal(err)
	}
	inf, pooled := bounds[0], bounds[1]
	const ms = time.Millisecond
	wantInf := []time.Duration{4 * ms, 800 * time.Microsecond, 4 * ms, 800 * time.Microsecond}
	wantPooled := []time.Duration{4 * ms, 800 * time.Microsecond, 4 * ms, 2400 * time.Microsecond}
	if inf.Policy != BoundInfinite || !slices.Equal(inf.TTFT, wantInf) {
		t.Errorf("%s floors %v, want %v", inf.Policy, inf.TTFT, wantInf)
	}
	if pooled.Policy != BoundPooled || !slices.Equal(pooled.TTFT, wantPooled) {
		t.Errorf("%s estimates %v, want %v", pooled.Policy, pooled.TTFT, wantPooled)
	}
	if inf.CachedTokens != 64 || pooled.CachedTokens != 48 || inf.PromptTokens != 160 {
		t.Errorf("cached tokens %d (infinite) and %d (pooled) of %d, want 64 and 48 of 160", inf.CachedTokens, pooled.CachedTokens, inf.PromptTokens)
	}
	// Quantiles by nearest rank; a request faster than its floor is counted.
	if got := inf.Percentile(0.9); got != 4*ms {
		t.Errorf("infinite p90 %v, want 4ms", got)
	}
	samples := []Sample{{TTFT: 5 * ms}, {TTFT: 700 * time.Microsecond}, {TTFT: time.Millisecond, Err: errors.New("refused")}, {TTFT: 800 * time.Microsecond}}
	if n := BelowFloor(inf.TTFT, samples); n != 1 {
		t.Errorf("BelowFloor = %d, want 1 (request 2; request 3 failed)", n)
	}
	// The floors come from the engines' own time model.
	if got, want := o.fleetOptions().TimeModel(), (vllmemu.Options{PrefillPerToken: o.Prefill, DecodePerToken: o.Decode}).TimeModel(); got != want {
		t.Errorf("fleet time model %+v, want %+v", got, want)
	}
}
