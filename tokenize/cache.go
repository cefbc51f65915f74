package tokenize

import (
	"hash/maphash"
	"math/bits"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/kvroute/kvroute/internal/prefetch"
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
//
// Each shard keeps its words and ids in two arenas and finds them through
// an open-addressed table of small fixed-size slots: a put copies bytes
// into the arenas instead of allocating a string and a slice, and nothing
// in a shard holds a pointer for the garbage collector to scan.
type wordCache struct {
	id         uint32 // tells its words apart in the scratches' recentWords
	seed       maphash.Seed
	shardWords int // bound per shard: shardWords, smaller in tests
	shards     [cacheShards]cacheShard
	doors      [cacheShards]doorkeeper // doors[i] admits shards[i]'s words
}

// doorBitsLog is the log2 of a doorkeeper's bits: 16,384 bits (2 KiB) a
// shard, cleared after 2*shardWords first sightings, so at most ~22 % of
// its bits are set, and at most ~22 % of words seen once get in on a bit
// another word set.
const doorBitsLog = 14

// doorkeeper is a shard's admission filter (TinyLFU's doorkeeper): a bit
// per hash bucket, set when a word is first asked for. A word enters the
// shard only when its bit was already set, on its second sighting, so a
// word seen once (a document's names and numbers, a made-up word) takes
// neither the shard's lock nor a probe, and does not fill the shard, which
// is emptied when full, with words that push out those text keeps using.
// Every cached word's bit is set unless the filter was cleared since; such
// a word is merged once more, its bit set again, and found the time after:
// the filter costs time, never a wrong answer.
type doorkeeper struct {
	bits  [1 << doorBitsLog / 64]atomic.Uint64
	marks atomic.Int32 // bits set since the last clear
	_     [60]byte     // doorkeepers on separate cache lines
}

// doorBit returns the word and mask of h's bit: h's top bits, which the
// shard (h's low bits) and the home slot do not use.
func (d *doorkeeper) doorBit(h uint64) (*atomic.Uint64, uint64) {
	i := h >> (64 - doorBitsLog)
	return &d.bits[i/64], 1 << (i % 64)
}

// admit reports whether h's bit was set, and sets it; the call that sets
// the limit-th bit since the last clear clears them all. Loads and stores,
// no read-modify-write: two goroutines setting bits of one word at once
// may lose one of them, or a mark, which costs a word one more merge, or
// the filter a later clear, and saves two locked instructions a word.
func (d *doorkeeper) admit(h uint64, limit int32) bool {
	w, m := d.doorBit(h)
	old := w.Load()
	if old&m != 0 {
		return true
	}
	w.Store(old | m)
	if marks := d.marks.Load() + 1; marks < limit {
		d.marks.Store(marks)
		return false
	}
	for i := range d.bits {
		d.bits[i].Store(0)
	}
	d.marks.Store(0)
	return false
}

type cacheShard struct {
	mu    sync.Mutex // a plain Mutex: two atomics a get or put, where RWMutex's put costs four
	slots []wordSlot // len a power of two, at least twice n; nil until the first put
	words []byte     // the cached words, back to back
	ids   []int32    // their ids, back to back
	n     int        // words held
	// base and mask publish slots (address, len-1) for prefetch, which
	// reads them without the lock (grow sets them under it).
	base atomic.Uintptr
	mask atomic.Uint64
	_    [24]byte // 128 bytes: shards on separate cache lines
}

// wordSlot locates one cached word in its shard's arenas. tag 0 is empty.
type wordSlot struct {
	tag      uint32 // high bits of the word's hash, never 0
	wordOff  uint32
	idsOff   uint32
	wordLen  uint8
	idsCount uint8
}

// wordCacheIDs numbers word caches (never 0).
var wordCacheIDs atomic.Uint32

func newWordCache() *wordCache {
	return &wordCache{id: wordCacheIDs.Add(1), seed: maphash.MakeSeed(), shardWords: shardWords}
}

// hash is the hash of w that appendGet and put take.
func (c *wordCache) hash(w string) uint64 { return maphash.String(c.seed, w) }

// shardOf is the shard of a word's hash: h's low bits; the rest, h /
// cacheShards, picks its home slot.
func shardOf(h uint64) uint64 { return h % cacheShards }

// locate returns the shard, home slot hash and tag of a word's hash.
func (c *wordCache) locate(h uint64) (*cacheShard, uint64, uint32) {
	return &c.shards[shardOf(h)], h / cacheShards, uint32(h>>32) | 1
}

// door returns the doorkeeper of h's shard.
func (c *wordCache) door(h uint64) *doorkeeper { return &c.doors[shardOf(h)] }

// find returns the slot holding w, or the empty slot where w would go.
func (s *cacheShard) find(w string, h uint64, tag uint32) (int, bool) {
	if s.slots == nil {
		return 0, false
	}
	mask := uint64(len(s.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		sl := &s.slots[i]
		if sl.tag == 0 {
			return int(i), false
		}
		if sl.tag == tag && int(sl.wordLen) == len(w) && string(s.words[sl.wordOff:sl.wordOff+uint32(sl.wordLen)]) == w {
			return int(i), true
		}
	}
}

// prefetch asks the CPU to start loading the home slot of a word hashed to
// h, ahead of its lookup. It takes no lock: a table replaced meanwhile only
// makes it fetch a useless line.
func (c *wordCache) prefetch(h uint64) {
	w, _ := c.door(h).doorBit(h)
	prefetch.Line(uintptr(unsafe.Pointer(w)))
	s, h, _ := c.locate(h)
	if base := s.base.Load(); base != 0 {
		prefetch.Line(base + uintptr(h&s.mask.Load())*unsafe.Sizeof(wordSlot{}))
	}
}

// appendGetOrMerge appends the ids of w (hashed to h, at most
// maxCachedWordBytes bytes) to dst: the cached ones, or those b.merge
// makes, which it caches when the shard's doorkeeper admits w. The shard
// stays locked while b merges the word (a few hundred nanoseconds), so a
// miss costs one lock and one probe, and the CPU runs the merge while the
// probe's slot is still being loaded.
func (c *wordCache) appendGetOrMerge(dst []int, w string, h uint64, b *bpeModel, st *scratch) []int {
	if !c.door(h).admit(h, int32(2*c.shardWords)) {
		return b.merge(dst, w, st)
	}
	s, h, tag := c.locate(h)
	s.mu.Lock()
	defer s.mu.Unlock() // deferred: a panic in merge (a bug) must not leave the shard locked
	i, ok := s.find(w, h, tag)
	if ok {
		return s.appendIDs(dst, i)
	}
	start := len(dst)
	dst = b.merge(dst, w, st)
	c.insert(s, w, h, tag, i, dst[start:])
	return dst
}

// appendIDs appends the ids of the word in slot i.
func (s *cacheShard) appendIDs(dst []int, i int) []int {
	sl := s.slots[i]
	for _, id := range s.ids[sl.idsOff : sl.idsOff+uint32(sl.idsCount)] {
		dst = append(dst, int(id))
	}
	return dst
}

// insert caches ids for w, which is not in locked shard s; i is the empty
// slot find returned for it.
func (c *wordCache) insert(s *cacheShard, w string, h uint64, tag uint32, i int, ids []int) {
	if len(w) > maxCachedWordBytes || len(ids) > 255 {
		return
	}
	if s.n >= c.shardWords || 2*(s.n+1) > len(s.slots) {
		if s.n >= c.shardWords {
			clear(s.slots)
			s.words, s.ids, s.n = s.words[:0], s.ids[:0], 0
		}
		if 2*(s.n+1) > len(s.slots) {
			c.grow(s)
		}
		i, _ = s.find(w, h, tag)
	}
	s.slots[i] = wordSlot{tag: tag, wordOff: uint32(len(s.words)), idsOff: uint32(len(s.ids)), wordLen: uint8(len(w)), idsCount: uint8(len(ids))}
	s.words = append(s.words, w...)
	for _, id := range ids {
		s.ids = append(s.ids, int32(id))
	}
	s.n++
}

// grow doubles a shard's slot table (it starts small: a tokenizer that sees
// little text keeps a small cache), placing each word again by its hash.
func (c *wordCache) grow(s *cacheShard) {
	old := s.slots
	s.slots = make([]wordSlot, max(minShardSlots, 2*len(old)))
	mask := uint64(len(s.slots) - 1)
	s.base.Store(uintptr(unsafe.Pointer(&s.slots[0])))
	s.mask.Store(mask)
	for _, sl := range old {
		if sl.tag == 0 {
			continue
		}
		w := s.words[sl.wordOff : sl.wordOff+uint32(sl.wordLen)]
		_, h, _ := c.locate(maphash.Bytes(c.seed, w))
		i := h & mask
		for s.slots[i].tag != 0 {
			i = (i + 1) & mask
		}
		s.slots[i] = sl
	}
}

// minShardSlots is the size of a shard's first slot table.
const minShardSlots = 32

// recentWords sizes: 2^recentWordsBits slots of 48 bytes (48 KiB) per
// scratch; words of at most recentWordBytes bytes and recentWordIDs ids fit.
const (
	recentWordsBits = 10
	recentWordBytes = 16
	recentWordIDs   = 6
)

// recentWords is a direct-mapped cache in front of the word caches, private
// to one scratch and so to one goroutine at a time: a hit takes no lock,
// where the shared cache takes its shard's mutex for every word (a quarter
// of a warm encode's time in BenchmarkDecide_Chat2k). A word is known by its
// length and two loads that cover it (shortWord), which also pick its slot
// inline (no call to maphash), so a hit is exact and costs a few compares.
// Each slot names the word cache it copies (a replaced cache is never
// served from here). Nothing in it is a pointer.
type recentWords [1 << recentWordsBits]recentWord

type recentWord struct {
	lo, hi    uint64 // the word's shortWord
	cache     uint32 // wordCache.id; 0: empty
	n, idsLen uint8
	ids       [recentWordIDs]int32
}

// shortWord is a word of 1 to recentWordBytes bytes as its length and two
// little-endian loads that together cover every byte: its first and last
// eight bytes (8 to 16 bytes), first and last four (4 to 7), or its first,
// middle and last byte (1 to 3). For a given length the loads determine the
// word, so equal keys are equal words.
type shortWord struct {
	lo, hi uint64
	n      uint8
}

// shortWordOf returns w's key; ok is false when w is empty or longer than
// recentWordBytes.
func shortWordOf(w string) (k shortWord, ok bool) {
	n := len(w)
	switch {
	case n >= 8 && n <= recentWordBytes:
		t := w[n-8:]
		k.lo = uint64(w[0]) | uint64(w[1])<<8 | uint64(w[2])<<16 | uint64(w[3])<<24 |
			uint64(w[4])<<32 | uint64(w[5])<<40 | uint64(w[6])<<48 | uint64(w[7])<<56
		k.hi = uint64(t[0]) | uint64(t[1])<<8 | uint64(t[2])<<16 | uint64(t[3])<<24 |
			uint64(t[4])<<32 | uint64(t[5])<<40 | uint64(t[6])<<48 | uint64(t[7])<<56
	case n >= 4 && n < 8:
		t := w[n-4:]
		k.lo = uint64(w[0]) | uint64(w[1])<<8 | uint64(w[2])<<16 | uint64(w[3])<<24
		k.hi = uint64(t[0]) | uint64(t[1])<<8 | uint64(t[2])<<16 | uint64(t[3])<<24
	case n >= 1 && n < 4:
		k.lo = uint64(w[0]) | uint64(w[n/2])<<8 | uint64(w[n-1])<<16
	default:
		return k, false
	}
	k.n = uint8(n)
	return k, true
}

// recentSeed keys the recent words' slot choice, so that which words share
// a slot is not known outside the process (a crafted text can only make
// words miss this cache, never answer wrongly).
var recentSeed = rand.Uint64() | 1

// slot returns k's slot: a multiply-mix of its loads.
func (r *recentWords) slot(k shortWord) *recentWord {
	hi, lo := bits.Mul64(k.lo^recentSeed, k.hi^uint64(k.n)^0x9E3779B97F4A7C15)
	return &r[(hi^lo)>>(64-recentWordsBits)]
}

// appendGet appends the ids of the word keyed k if sl holds it for cache c.
func (sl *recentWord) appendGet(dst []int, c *wordCache, k shortWord) ([]int, bool) {
	if sl.lo != k.lo || sl.hi != k.hi || sl.n != k.n || sl.cache != c.id {
		return dst, false
	}
	for _, id := range sl.ids[:sl.idsLen] {
		dst = append(dst, int(id))
	}
	return dst, true
}

// put makes sl hold the word keyed k and its ids for cache c, when the ids
// fit.
func (sl *recentWord) put(c *wordCache, k shortWord, ids []int) {
	if len(ids) > recentWordIDs {
		return
	}
	sl.lo, sl.hi, sl.n, sl.cache, sl.idsLen = k.lo, k.hi, k.n, c.id, uint8(len(ids))
	for i, id := range ids {
		sl.ids[i] = int32(id)
	}
}
