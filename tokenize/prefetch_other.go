//go:build !amd64 || purego

package tokenize

// prefetch does nothing where there is no prefetch instruction in assembly.
func prefetch(uintptr) {}
