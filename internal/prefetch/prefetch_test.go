package prefetch

import (
	"testing"
	"unsafe"
)

// TestLineNeverFaults: a prefetch of any address, mapped or not, returns.
func TestLineNeverFaults(t *testing.T) {
	var x [64]byte
	for _, addr := range []uintptr{0, 1, ^uintptr(0), uintptr(unsafe.Pointer(&x[0])), uintptr(unsafe.Pointer(&x[0])) + 1<<30} {
		Line(addr)
	}
}
