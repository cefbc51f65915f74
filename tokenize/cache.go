package tokenize

import (
	"hash/maphash"
	"strings"
	"sync"
)

// Word cache bounds: words longer than maxCachedWordBytes are not cached;
// each of the cacheShards shards holds at most shardWords words and is
// emptied when full (cheap, and the working set refills it at once).
const (
	maxCachedWordBytes = 64
	cacheShards        = 64
	shardWords         = 2048
)

// wordCache maps a pre-tokenized word to its ids. Bounded at
// cacheShards*shardWords entries; safe for concurrent use.
type wordCache struct {
	seed       maphash.Seed
	shardWords int // bound per shard: shardWords, smaller in tests
	shards     [cacheShards]cacheShard
}

type cacheShard struct {
	mu sync.RWMutex
	m  map[string][]int
	_  [40]byte // keep shards on separate cache lines
}

func newWordCache() *wordCache {
	c := &wordCache{seed: maphash.MakeSeed(), shardWords: shardWords}
	for i := range c.shards {
		c.shards[i].m = make(map[string][]int)
	}
	return c
}

func (c *wordCache) shard(w string) *cacheShard {
	return &c.shards[maphash.String(c.seed, w)%cacheShards]
}

func (c *wordCache) get(w string) ([]int, bool) {
	s := c.shard(w)
	s.mu.RLock()
	ids, ok := s.m[w]
	s.mu.RUnlock()
	return ids, ok
}

func (c *wordCache) put(w string, ids []int) {
	v := append([]int(nil), ids...)
	s := c.shard(w)
	s.mu.Lock()
	if len(s.m) >= c.shardWords {
		clear(s.m)
	}
	s.m[strings.Clone(w)] = v
	s.mu.Unlock()
}
