package tokenize

import (
	"runtime"
	"sync/atomic"
)

// A segment of at least parallelMinWords words (~4k tokens of prose) is
// encoded in chunks of parallelChunkWords words that one helper goroutine
// takes from the same counter as the caller, when fewer than GOMAXPROCS-1
// helpers run. Words are independent once pre-tokenized, so the ids do not
// depend on who encoded which chunk.
const (
	parallelMinWords   = 1024
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
// and each chunk's ids.
type chunkedWords struct {
	words  []piece
	next   atomic.Int32
	ids    [][]int
	state  atomic.Int32
	done   chan struct{} // closed when a started helper has finished
	panick any           // what the helper panicked with (a bug), re-raised by the caller
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
	c := &chunkedWords{words: words, ids: make([][]int, (len(words)+parallelChunkWords-1)/parallelChunkWords), done: make(chan struct{})}
	go b.helpEncode(c)
	c.encodeChunks(b, st)
	return c.join(ids)
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
	for _, chunk := range c.ids {
		ids = append(ids, chunk...)
	}
	return ids
}

// helpEncode is the helper goroutine: it encodes chunks until none is left,
// unless the caller finished first.
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
	c.encodeChunks(b, st)
	putScratch(st)
}

// encodeChunks takes chunks and encodes each into its own ids until none
// is left.
func (c *chunkedWords) encodeChunks(b *bpeModel, st *scratch) {
	for {
		i := int(c.next.Add(1) - 1)
		if i >= len(c.ids) {
			return
		}
		words := c.words[i*parallelChunkWords : min((i+1)*parallelChunkWords, len(c.words))]
		c.ids[i] = b.encodeWordList(make([]int, 0, 2*len(words)), words, st)
	}
}
