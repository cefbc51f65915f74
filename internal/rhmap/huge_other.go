//go:build !linux

package rhmap

import "unsafe"

// adviseHuge does nothing off Linux (huge_linux.go).
func adviseHuge(unsafe.Pointer, uintptr) {}

// collapseHuge does nothing off Linux (huge_linux.go).
func collapseHuge([]segSpan) {}
