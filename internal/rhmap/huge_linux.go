//go:build linux

package rhmap

import (
	"sync"
	"syscall"
	"unsafe"
)

// hugePageBytes is the size of a transparent huge page with 4 KiB base
// pages (x86-64, and arm64 built for 4 KiB pages). On a kernel with other
// sizes the advice below covers no whole huge page and changes nothing.
const hugePageBytes = 2 << 20

// adviseHuge asks Linux to back the memory around a new table of n bytes
// at p with transparent huge pages: madvise(MADV_HUGEPAGE) on the range
// rounded out to huge-page boundaries. With THP in "madvise" mode (a
// common default) the Go runtime advises none of its heap, so a large
// table otherwise takes one page fault and one TLB entry per 4 KiB.
//
// The rounded range also covers the Go heap memory next to the table.
// That is safe: the advice changes only which page size backs the memory,
// never its contents, and the range stays inside the runtime's heap arena
// (64 MiB on 64-bit Linux, 4 MiB on 32-bit: both multiples of 2 MiB). Its
// cost is resident memory: a neighbour touched first is backed by a whole
// huge page (docs/PERFORMANCE.md measures it). The error is ignored: where
// the advice does not take (THP not built in, part of the range only
// reserved), the table stays on base pages as before.
func adviseHuge(p unsafe.Pointer, n uintptr) {
	lo, hi := hugeAround(uintptr(p), n)
	syscall.Syscall(syscall.SYS_MADVISE, lo, hi-lo, syscall.MADV_HUGEPAGE)
}

// hugeAround is the n bytes at p rounded out to huge-page boundaries.
func hugeAround(p, n uintptr) (lo, hi uintptr) {
	return p &^ (hugePageBytes - 1), (p + n + hugePageBytes - 1) &^ (hugePageBytes - 1)
}

// collapseHuge asks Linux (6.1 and later; earlier ones refuse, and nothing
// changes) to back the memory around each of the new segments with huge
// pages: madvise(MADV_COLLAPSE) on the segment
// rounded out to huge-page boundaries, once per huge page. adviseHuge only
// reaches pages not yet touched, and a segment allocated where the heap has
// written before (make zeroes reused memory) would otherwise stay on base
// pages through every later growth that reuses it (docs/PERFORMANCE.md).
// The kernel copies what the base pages hold; contents do not change.
//
// The calls are queued for a goroutine of their own (collapses), not made
// here: a collapse copies up to a huge page in the kernel, 0.64 ms on
// average and up to 9.6 ms in BenchmarkGRPCDecisions_2kChat, and the
// goroutine that grows a table holds its owner's lock (an index shard, which
// every lookup of a long prompt needs); it can also enter direct reclaim,
// which is why Go's runtime stopped calling it under its heap lock
// (golang/go#63334). The memory may have been freed or reused by the time
// the call is made; the call is as harmless there, except that it brings
// back pages the runtime had returned within the huge page (resident
// memory, bounded by the advised tables' neighbourhoods).
func collapseHuge(segs []segSpan) {
	last := ^uintptr(0)
	for _, sg := range segs {
		lo, hi := hugeAround(uintptr(sg.p), sg.n)
		if lo == last {
			lo += hugePageBytes
		}
		if lo < hi {
			collapses.queue(hugeRange{lo, hi})
		}
		last = hi - hugePageBytes
	}
}

// hugeRange is memory [lo, hi) to collapse onto huge pages.
type hugeRange struct{ lo, hi uintptr }

// maxQueuedCollapses bounds the ranges waiting for the collapse goroutine
// (16 KiB); a range beyond it is dropped and its memory stays on base pages.
const maxQueuedCollapses = 1024

// collapseQueue holds the ranges waiting to be collapsed. A goroutine
// drains it while it is not empty and ends when it is, so none outlives
// the work (no goroutine to account for while the process is idle).
type collapseQueue struct {
	mu       sync.Mutex
	pending  []hugeRange
	draining bool
	do       func(hugeRange) // madviseCollapse; tests replace it
}

var collapses = collapseQueue{do: madviseCollapse}

// queue adds r, starting a drain when none runs, and reports whether r was
// kept (false: the queue was full).
func (q *collapseQueue) queue(r hugeRange) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.pending) >= maxQueuedCollapses {
		return false
	}
	q.pending = append(q.pending, r)
	if !q.draining {
		q.draining = true
		go q.drain()
	}
	return true
}

// drain collapses the queued ranges in order until none is left, taking
// them a batch at a time (the queue and batch swap buffers).
func (q *collapseQueue) drain() {
	var batch []hugeRange
	for {
		q.mu.Lock()
		batch, q.pending = q.pending, batch[:0]
		if len(batch) == 0 {
			q.draining = false
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
		for _, r := range batch {
			q.do(r)
		}
	}
}

func madviseCollapse(r hugeRange) {
	const madvCollapse = 25 // MADV_COLLAPSE, not in package syscall
	syscall.Syscall(syscall.SYS_MADVISE, r.lo, r.hi-r.lo, madvCollapse)
}
