//go:build linux

package rhmap

import (
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
	lo := uintptr(p) &^ (hugePageBytes - 1)
	hi := (uintptr(p) + n + hugePageBytes - 1) &^ (hugePageBytes - 1)
	syscall.Syscall(syscall.SYS_MADVISE, lo, hi-lo, syscall.MADV_HUGEPAGE)
}

// collapseHuge asks Linux (6.1 and later; earlier ones refuse, and nothing
// changes) to back the memory around each of the new segments at ps, n
// bytes each, with huge pages now: madvise(MADV_COLLAPSE) on the segment
// rounded out to huge-page boundaries, once per huge page. adviseHuge only
// reaches pages not yet touched, and a segment allocated where the heap has
// written before (make zeroes reused memory) would otherwise stay on base
// pages through every later growth that reuses it (docs/PERFORMANCE.md).
// The kernel copies what the base pages hold; contents do not change.
func collapseHuge(ps []unsafe.Pointer, n uintptr) {
	const madvCollapse = 25 // MADV_COLLAPSE, not in package syscall
	last := ^uintptr(0)
	for _, p := range ps {
		lo := uintptr(p) &^ (hugePageBytes - 1)
		hi := (uintptr(p) + n + hugePageBytes - 1) &^ (hugePageBytes - 1)
		if lo == last {
			lo += hugePageBytes
		}
		if lo < hi {
			syscall.Syscall(syscall.SYS_MADVISE, lo, hi-lo, madvCollapse)
		}
		last = hi - hugePageBytes
	}
}
