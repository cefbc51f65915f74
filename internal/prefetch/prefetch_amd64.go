//go:build !purego

package prefetch

// Line asks the CPU to start loading the cache line at addr (PREFETCHT0).
// It never faults, whatever addr is.
//
//go:noescape
func Line(addr uintptr)
