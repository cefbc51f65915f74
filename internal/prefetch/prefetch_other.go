//go:build !amd64 || purego

package prefetch

// Line does nothing where there is no prefetch instruction in assembly.
func Line(uintptr) {}
