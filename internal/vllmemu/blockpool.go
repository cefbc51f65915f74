package vllmemu

import (
	"github.com/kvroute/kvroute/blockhash"
)

// block is one KV-cache block of blockPool.
type block struct {
	id         int
	ref        int
	hashed     bool
	digest     blockhash.Digest
	prev, next *block // free queue links; nil when not queued
	null       bool
}

// blockPool is vLLM's BlockPool for a single full-attention KV-cache group:
// a fixed set of blocks, block 0 reserved as the null block, a free queue in
// eviction order (freed blocks join the tail, allocation takes the head and
// evicts a cached block it takes), reference counts, and a map from block hash
// to the cached blocks, which may hold several blocks with the same hash
// (vllm/v1/core/block_pool.py and kv_cache_utils.py FreeKVCacheBlockQueue,
// upstream main 5ac26849).
type blockPool struct {
	blocks    []block
	free      block // sentinel of the circular free queue
	numFree   int
	cached    map[string][]*block
	blockSize int
	intHashes bool
	events    []kvEvent
	// silentEvict drops cached blocks without a BlockRemoved event
	// (Options.EvictWithoutEvents).
	silentEvict bool
}

func newBlockPool(numBlocks, blockSize int, intHashes bool) *blockPool {
	p := &blockPool{blocks: make([]block, numBlocks), cached: map[string][]*block{}, blockSize: blockSize, intHashes: intHashes}
	p.free.prev, p.free.next = &p.free, &p.free
	for i := range p.blocks {
		p.blocks[i].id = i
		p.pushTail(&p.blocks[i])
	}
	// vLLM takes the first free block as the null block, never freed.
	null := p.popHead()
	null.null, null.ref = true, 1
	return p
}

func (p *blockPool) pushTail(b *block) {
	b.prev, b.next = p.free.prev, &p.free
	p.free.prev.next = b
	p.free.prev = b
	p.numFree++
}

func (p *blockPool) pushHead(b *block) {
	b.prev, b.next = &p.free, p.free.next
	p.free.next.prev = b
	p.free.next = b
	p.numFree++
}

func (p *blockPool) popHead() *block {
	b := p.free.next
	p.remove(b)
	return b
}

func (p *blockPool) remove(b *block) {
	b.prev.next, b.next.prev = b.next, b.prev
	b.prev, b.next = nil, nil
	p.numFree--
}

// usage is vLLM's get_usage: the fraction of non-null blocks not free.
func (p *blockPool) usage() float64 {
	total := len(p.blocks) - 1
	if total <= 0 {
		return 0
	}
	return 1 - float64(p.numFree)/float64(total)
}

func hashKey(d *blockhash.Digest) string { return string(d.Bytes()) }

// lookup returns a cached block holding digest d, or nil.
func (p *blockPool) lookup(d *blockhash.Digest) *block {
	if bs := p.cached[hashKey(d)]; len(bs) > 0 {
		return bs[0]
	}
	return nil
}

// longestHit returns the cached blocks of the longest run of digests from
// block 0, at most maxBlocks long.
func (p *blockPool) longestHit(digests []blockhash.Digest, maxBlocks int) []*block {
	var hit []*block
	for i := 0; i < len(digests) && i < maxBlocks; i++ {
		b := p.lookup(&digests[i])
		if b == nil {
			break
		}
		hit = append(hit, b)
	}
	return hit
}

// touch takes a reference on hit blocks, pulling free ones out of the queue.
func (p *blockPool) touch(bs []*block) {
	for _, b := range bs {
		if b.ref == 0 && !b.null {
			p.remove(b)
		}
		b.ref++
	}
}

// getNewBlocks takes n blocks from the head of the free queue, evicting the
// cached ones (a BlockRemoved event each). The caller checks numFree.
func (p *blockPool) getNewBlocks(n int) []*block {
	out := make([]*block, 0, n)
	for range n {
		b := p.popHead()
		p.evict(b)
		b.ref = 1
		out = append(out, b)
	}
	return out
}

// evict drops b from the prefix cache if it is there.
func (p *blockPool) evict(b *block) {
	if !b.hashed {
		return
	}
	k := hashKey(&b.digest)
	bs := p.cached[k]
	for i, c := range bs {
		if c == b {
			bs = append(bs[:i], bs[i+1:]...)
			break
		}
	}
	if len(bs) == 0 {
		delete(p.cached, k)
	} else {
		p.cached[k] = bs
	}
	if !p.silentEvict {
		p.events = append(p.events, kvEvent{kind: kindBlockRemoved, hashes: []blockHash{p.eventHash(&b.digest)}, hasGroupIdx: true})
	}
	b.hashed, b.digest = false, blockhash.Digest{}
}

// evictBlocks is vLLM's BlockPool.evict_blocks: drop the given blocks from
// the prefix cache (they stay allocated or free as they were).
func (p *blockPool) evictBlocks(ids []int) {
	for _, id := range ids {
		if id > 0 && id < len(p.blocks) {
			p.evict(&p.blocks[id])
		}
	}
}

// cacheFullBlocks registers blocks [numCached, numFull) of a request in the
// prefix cache and records one BlockStored event for the run.
func (p *blockPool) cacheFullBlocks(r *request, numCached, numFull int) {
	if numFull <= numCached {
		return
	}
	ev := kvEvent{kind: kindBlockStored, blockSize: p.blockSize, loraID: r.loraID, hasGroupIdx: true,
		specKind: specFullAttention, hasExtraKey: true}
	if r.lora != "" {
		name := r.lora
		ev.loraName = &name
	}
	if numCached > 0 {
		h := p.eventHash(&r.digests[numCached-1])
		ev.parent = &h
	}
	for i := numCached; i < numFull; i++ {
		b := r.blocks[i]
		b.hashed, b.digest = true, r.digests[i]
		k := hashKey(&b.digest)
		p.cached[k] = append(p.cached[k], b)
		ev.hashes = append(ev.hashes, p.eventHash(&b.digest))
		ev.extraKeys = append(ev.extraKeys, r.extraKeys(i))
	}
	ev.tokenIDs = append([]int(nil), r.tokens[numCached*p.blockSize:numFull*p.blockSize]...)
	if len(ev.hashes) > 0 {
		p.events = append(p.events, ev)
	}
}

// freeBlocks drops one reference from each block, given in eviction order
// (vLLM frees a request's blocks last block first, so its tail is evicted
// before its prefix). Blocks reaching zero that hold a hash join the tail of
// the free queue in that order; blocks without a hash can never be hit, so
// they go to the head, in that order, to be reused first (BlockPool.free_blocks).
func (p *blockPool) freeBlocks(bs []*block) {
	var head []*block
	for _, b := range bs {
		b.ref--
		if b.ref != 0 || b.null {
			continue
		}
		if b.hashed {
			p.pushTail(b)
		} else {
			head = append(head, b)
		}
	}
	for i := len(head) - 1; i >= 0; i-- {
		p.pushHead(head[i])
	}
}

// reset is vLLM's reset_prefix_cache: it fails while any block is in use,
// otherwise forgets every hash and records AllBlocksCleared.
func (p *blockPool) reset() bool {
	if p.numFree != len(p.blocks)-1 {
		return false
	}
	clear(p.cached)
	for i := range p.blocks {
		p.blocks[i].hashed, p.blocks[i].digest = false, blockhash.Digest{}
	}
	p.events = append(p.events, kvEvent{kind: kindAllBlocksCleared})
	return true
}

func (p *blockPool) takeEvents() []kvEvent {
	ev := p.events
	p.events = nil
	return ev
}

// eventHash converts a digest as maybe_convert_block_hash does.
func (p *blockPool) eventHash(d *blockhash.Digest) blockHash {
	if p.intHashes {
		return blockHash{value: d.EventValue()}
	}
	return blockHash{digest: append([]byte(nil), d.Bytes()...)}
}
