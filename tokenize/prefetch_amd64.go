//go:build !purego

package tokenize

// prefetch asks the CPU to start loading the cache line at addr (PREFETCHT0).
// It never faults, whatever addr is.
//
//go:noescape
func prefetch(addr uintptr)
