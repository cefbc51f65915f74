package vllmemu

import (
	"slices"

	"github.com/kvroute/kvroute/blockhash"
)

// BlockDigests hashes every full block of a prompt as the engine does for a
// request with this LoRA adapter and cache salt ("" for none): the adapter
// name in every block's extra keys, the salt in block 0's.
func BlockDigests(h *blockhash.Engine, tokens []int, lora, salt string) ([]blockhash.Digest, error) {
	r := &request{tokens: tokens, lora: lora, salt: salt}
	if err := r.hashNewBlocks(h); err != nil {
		return nil, err
	}
	return r.digests, nil
}

// CacheReplay is one engine's prefix cache driven offline, one request at a
// time, with the engine's own BlockPool: the same capacity rule, LRU free
// queue and last-block-first freeing. Benchmarks use it for ceilings: a
// replay through a pool the size of the whole fleet is the pooled-cache
// bound no router can beat by much.
type CacheReplay struct {
	pool *blockPool
	bs   int
}

// NewCacheReplay builds a pool of numBlocks blocks (block 0 the null block,
// as in the engine) of blockSize tokens.
func NewCacheReplay(numBlocks, blockSize int) *CacheReplay {
	return &CacheReplay{pool: newBlockPool(numBlocks, blockSize, true), bs: blockSize}
}

// Serve admits a prompt (its tokens and BlockDigests), computes it and
// outputTokens more, caches its full prompt blocks and frees it, and returns
// the prompt tokens taken from the cache (never the last prompt token, as in
// vLLM). A request larger than the whole pool is served uncached.
func (c *CacheReplay) Serve(tokens []int, digests []blockhash.Digest, outputTokens int) int {
	if len(tokens) == 0 {
		return 0
	}
	p := c.pool
	hit := p.longestHit(digests, (len(tokens)-1)/c.bs)
	evictable := 0
	for _, b := range hit {
		if b.ref == 0 {
			evictable++
		}
	}
	need := (len(tokens)+outputTokens+c.bs-1)/c.bs - len(hit)
	if need > p.numFree-evictable {
		return 0
	}
	p.touch(hit)
	r := &request{tokens: tokens, digests: digests}
	r.blocks = append(slices.Clone(hit), p.getNewBlocks(need)...)
	p.cacheFullBlocks(r, len(hit), min(len(digests), len(tokens)/c.bs))
	p.takeEvents()
	rev := slices.Clone(r.blocks)
	slices.Reverse(rev)
	p.freeBlocks(rev)
	return len(hit) * c.bs
}
