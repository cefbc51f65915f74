package tokenize

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Segment cache bounds. A segment is the text between two added tokens
// (the whole text when it has none); its ids depend only on its text and
// on whether it starts the input, so they can be reused exactly. In a chat
// prompt the system prompt and every earlier turn are such segments, sent
// again with every request of a conversation.
const (
	// DefaultSegmentCacheBytes is the segment cache budget when
	// Options.SegmentCacheBytes is 0.
	DefaultSegmentCacheBytes = 16 << 20
	// minCachedSegmentBytes: shorter segments ("user\n", "\n\n") cost less
	// to encode than to look up and are never cached.
	minCachedSegmentBytes = 64
	segmentShards         = 16
	// segmentEntryOverhead approximates the bookkeeping bytes of one entry
	// (map slot, entry struct, ring slot) charged against the budget.
	segmentEntryOverhead = 96
)

// segmentCache maps (segment text, at start) to ids. Each shard holds at
// most its share of the byte budget (text + 4 bytes per id + overhead) and
// evicts with the CLOCK algorithm: a hit sets an entry's reference bit,
// the hand clears set bits and evicts the first entry found clear. Safe
// for concurrent use; entries are immutable once published.
type segmentCache struct {
	seed        maphash.Seed
	shardBudget int
	minBytes    int // shorter segments are not cached
	shards      [segmentShards]segmentShard
}

type segmentShard struct {
	mu    sync.RWMutex
	m     map[uint64]*segmentEntry
	ring  []*segmentEntry // CLOCK ring; nil slots are free
	free  []int           // indices of the nil slots of ring
	hand  int
	bytes int
}

type segmentEntry struct {
	key     uint64
	text    string // shares ids' allocation (after its last id)
	atStart bool
	ids     []int32 // ids are below maxMergeID (2^21), so int32 holds them at half the bytes
	cost    int
	slot    int // index in its shard's ring
	ref     atomic.Bool
}

func newSegmentCache(budgetBytes int) *segmentCache {
	c := &segmentCache{seed: maphash.MakeSeed(), shardBudget: budgetBytes / segmentShards, minBytes: minCachedSegmentBytes}
	for i := range c.shards {
		c.shards[i].m = make(map[uint64]*segmentEntry)
	}
	return c
}

// cacheable reports whether a segment is worth caching and fits.
func (c *segmentCache) cacheable(seg string) bool {
	return len(seg) >= c.minBytes && len(seg)+segmentEntryOverhead < c.shardBudget/4
}

func (c *segmentCache) key(seg string, atStart bool) uint64 {
	h := maphash.String(c.seed, seg)
	if atStart {
		h = ^h
	}
	return h
}

// get returns the ids of seg when cached. The hash picks the entry; the
// text comparison makes a hit exact. On a miss it also returns the key it
// computed, for put: the segment is then hashed once.
func (c *segmentCache) get(seg string, atStart bool) (ids []int32, key uint64, ok bool) {
	k := c.key(seg, atStart)
	s := &c.shards[k%segmentShards]
	s.mu.RLock()
	e := s.m[k]
	s.mu.RUnlock()
	if e == nil || e.atStart != atStart || e.text != seg {
		return nil, k, false
	}
	if !e.ref.Load() {
		e.ref.Store(true)
	}
	return e.ids, k, true
}

// put stores a copy of seg and its ids under k, the key get returned for
// (seg, atStart), evicting until the shard fits its budget. The copy is
// one pointer-free allocation: the ids, then the text's bytes.
func (c *segmentCache) put(k uint64, seg string, atStart bool, ids []int) {
	cost := len(seg) + 4*len(ids) + segmentEntryOverhead
	if cost > c.shardBudget/4 {
		return
	}
	n := len(ids)
	buf := make([]int32, n+(len(seg)+3)/4)
	for i, id := range ids {
		buf[i] = int32(id)
	}
	var text string
	if len(seg) > 0 {
		tb := unsafe.Slice((*byte)(unsafe.Pointer(&buf[n])), len(seg))
		copy(tb, seg) // own the bytes: seg may point into a large request
		text = unsafe.String(&tb[0], len(tb))
	}
	e := &segmentEntry{key: k, text: text, atStart: atStart, ids: buf[:n:n], cost: cost}
	s := &c.shards[k%segmentShards]
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := s.m[k]; old != nil {
		s.remove(old) // a collision or a racing put: the newest wins
	}
	for s.bytes+e.cost > c.shardBudget && s.evictOne() {
	}
	s.m[k] = e
	s.bytes += e.cost
	if n := len(s.free); n > 0 {
		e.slot = s.free[n-1]
		s.free = s.free[:n-1]
		s.ring[e.slot] = e
		return
	}
	e.slot = len(s.ring)
	s.ring = append(s.ring, e)
}

// evictOne advances the CLOCK hand to the first unreferenced entry and
// evicts it; false when the shard is empty.
func (s *segmentShard) evictOne() bool {
	if len(s.m) == 0 {
		return false
	}
	for {
		if s.hand >= len(s.ring) {
			s.hand = 0
		}
		e := s.ring[s.hand]
		if e != nil && !e.ref.Swap(false) {
			s.remove(e)
			return true
		}
		s.hand++
	}
}

func (s *segmentShard) remove(e *segmentEntry) {
	delete(s.m, e.key)
	s.bytes -= e.cost
	s.ring[e.slot] = nil
	s.free = append(s.free, e.slot)
}
