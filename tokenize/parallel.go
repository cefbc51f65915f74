package tokenize

import (
	"runtime"
	"sync/atomic"
)

// A segment of at least parallelMinWords words (~16k tokens of made-up
// words, ~5k of English) is encoded in chunks of parallelChunkWords words
// that one helper goroutine takes from the same counter as the caller, when
// fewer than GOMAXPROCS-1 helpers run. Words are independent once
// pre-tokenized, so the ids do not depend on who encoded which chunk. At
// 2,000 words (Decide_Chat8kCold) a helper cost more than it saved on the
// 2-vCPU VM of docs/PERFORMANCE.md: waking it and running two
// threads at once took ~50 % more CPU and no less time.
const (
	parallelMinWords   = 4096
	parallelChunkWords = 256
)

// encodeHelpers counts the helper goroutines running, bounded by
// GOMAXPROCS-1 so that helpers never outnumber the spare cores.
var encodeHelpers atomic.Int32

// Helper states: a helper that has not started when the caller runs out of
// chunks is cancelled (the caller does not wait for it to be scheduled); one
// that has started is waited for, its chunk being needed.
const (
	helperPending int32 = iota
	helperRunning
	helperCancelled
)

// chunkedWords is one parallel encode: the words, the next chunk to take,
// and where each chunk's ids are: bufs[0] is the caller's, bufs[1] the
// helper's, both kept in the caller's scratch between encodes.
type chunkedWords struct {
	words  []piece
	next   atomic.Int32
	chunks []chunkIDs
	bufs   [2][]int
	state  atomic.Int32
	done   chan struct{} // closed when a started helper has finished
	panick any           // what the helper panicked with (a bug), re-raised by the caller
}

// chunkIDs locates a chunk's ids: bufs[buf][start:end].
type chunkIDs struct {
	buf        uint8
	start, end int32
}

// maxKeptChunkIDs bounds the chunk buffers a scratch keeps between encodes
// (512 KiB each); a longer segment's are left to the collector.
const maxKeptChunkIDs = 64 << 10

func newChunkedWords(words []piece, st *scratch) *chunkedWords {
	return &chunkedWords{words: words, chunks: make([]chunkIDs, (len(words)+parallelChunkWords-1)/parallelChunkWords),
		bufs: [2][]int{st.chunkIDs[:0], st.helperIDs[:0]}, done: make(chan struct{})}
}

// encodeWordListParallel is encodeWordList with a helper goroutine, when a
// core is spare, encoding chunks beside the caller. The caller never waits
// for a chunk nobody has started: it takes every chunk the helper has not,
// so at worst (the helper not scheduled in time) it encodes them all, as
// encodeWordList would. A helper's panic is re-raised on the caller.
func (b *bpeModel) encodeWordListParallel(ids []int, words []piece, st *scratch) []int {
	if n := int32(runtime.GOMAXPROCS(0)) - 1; encodeHelpers.Add(1) > n {
		encodeHelpers.Add(-1)
		return b.encodeWordList(ids, words, st)
	}
	c := newChunkedWords(words, st)
	go b.helpEncode(c)
	c.encodeChunks(b, 0, st)
	ids = c.join(ids)
	if cap(c.bufs[0]) <= maxKeptChunkIDs && cap(c.bufs[1]) <= maxKeptChunkIDs {
		st.chunkIDs, st.helperIDs = c.bufs[0][:0], c.bufs[1][:0]
	}
	return ids
}

// join, once the caller has run out of chunks, cancels the helper if it has
// not started or waits for it, re-raises its panic, and appends the chunks'
// ids in order.
func (c *chunkedWords) join(ids []int) []int {
	if !c.state.CompareAndSwap(helperPending, helperCancelled) {
		<-c.done
	}
	if c.panick != nil {
		panic(c.panick)
	}
	for _, ch := range c.chunks {
		ids = append(ids, c.bufs[ch.buf][ch.start:ch.end]...)
	}
	return ids
}

// helpEncode is the helper goroutine: it encodes chunks into bufs[1] until
// none is left, unless the caller finished first.
func (b *bpeModel) helpEncode(c *chunkedWords) {
	defer encodeHelpers.Add(-1)
	if !c.state.CompareAndSwap(helperPending, helperRunning) {
		return
	}
	defer close(c.done)
	defer func() {
		if v := recover(); v != nil {
			c.panick = v
		}
	}()
	st := getScratch()
	c.encodeChunks(b, 1, st)
	putScratch(st)
}

// encodeChunks takes chunks and appends each one's ids to bufs[buf] until
// none is left.
func (c *chunkedWords) encodeChunks(b *bpeModel, buf uint8, st *scratch) {
	for {
		i := int(c.next.Add(1) - 1)
		if i >= len(c.chunks) {
			return
		}
		words := c.words[i*parallelChunkWords : min((i+1)*parallelChunkWords, len(c.words))]
		start := len(c.bufs[buf])
		c.bufs[buf] = b.encodeWordList(c.bufs[buf], words, st)
		c.chunks[i] = chunkIDs{buf: buf, start: int32(start), end: int32(len(c.bufs[buf]))}
	}
}
