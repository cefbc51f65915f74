package vllmemu

import (
	"testing"

	"github.com/kvroute/kvroute/blockhash"
)

func TestCacheReplayHitsEvictsAndSeparatesNamespaces(t *testing.T) {
	seed := "0"
	h, err := blockhash.NewEngine(blockhash.SHA256, &seed, 2)
	if err != nil {
		t.Fatal(err)
	}
	digests := func(tokens []int, lora, salt string) []blockhash.Digest {
		ds, err := BlockDigests(h, tokens, lora, salt)
		if err != nil {
			t.Fatal(err)
		}
		return ds
	}
	// 6 blocks of 2 tokens, block 0 the null block: 5 usable.
	c := NewCacheReplay(6, 2)
	a := []int{1, 2, 3, 4, 5, 6} // 3 full blocks
	if got := c.Serve(a, digests(a, "", ""), 1); got != 0 {
		t.Fatalf("cold: %d cached tokens", got)
	}
	// Warm: every block but the one holding the last token (vLLM never hits it).
	if got := c.Serve(a, digests(a, "", ""), 1); got != 4 {
		t.Fatalf("warm: %d cached tokens, want 4", got)
	}
	// The same tokens under an adapter or a salt hit nothing: different hashes.
	if got := c.Serve(a, digests(a, "adapter-0", ""), 1); got != 0 {
		t.Fatalf("adapter: %d cached tokens, want 0", got)
	}
	if ds, base := digests(a, "", "tenant"), digests(a, "", ""); ds[0] == base[0] || ds[1] == base[1] {
		t.Fatal("the salt must change block 0 and, chained, every block after it")
	}
	// Filling the pool with other prompts evicts a's blocks, least recently
	// used first.
	for k := range 3 {
		b := []int{100 + 10*k, 101 + 10*k, 102 + 10*k, 103 + 10*k, 104 + 10*k}
		c.Serve(b, digests(b, "", ""), 1)
	}
	if got := c.Serve(a, digests(a, "", ""), 1); got != 0 {
		t.Fatalf("after eviction: %d cached tokens, want 0", got)
	}
	// A request larger than the pool is served uncached, not a panic.
	big := make([]int, 40)
	if got := c.Serve(big, digests(big, "", ""), 1); got != 0 {
		t.Fatalf("oversized: %d", got)
	}
}
