// Package shareddata locates the project's golden data in ../shared (beside the
// repository), for tests and benchmarks. The data is read in place, never copied.
package shareddata

import (
	"os"
	"path/filepath"
	"testing"
)

// Dir returns the absolute path of the shared/ directory that sits beside the
// module root (the directory holding go.mod), or "" when it cannot be found.
func Dir() string {
	wd, err := os.Getwd()
	if err != nil {
		return ""
	}
	for dir := wd; ; {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			shared := filepath.Join(filepath.Dir(dir), "shared")
			if st, err := os.Stat(shared); err == nil && st.IsDir() {
				return shared
			}
			return ""
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

// Path returns the absolute path of rel inside shared/ and fails the test when
// the file is missing: the golden data is part of every checkout's setup.
func Path(tb testing.TB, rel string) string {
	tb.Helper()
	dir := Dir()
	if dir == "" {
		tb.Fatalf("shareddata: ../shared not found beside the module root; clone the repo next to shared/")
	}
	p := filepath.Join(dir, rel)
	if _, err := os.Stat(p); err != nil {
		tb.Fatalf("shareddata: %v", err)
	}
	return p
}

// Read returns the contents of rel inside shared/, failing the test on error.
func Read(tb testing.TB, rel string) []byte {
	tb.Helper()
	b, err := os.ReadFile(Path(tb, rel))
	if err != nil {
		tb.Fatalf("shareddata: %v", err)
	}
	return b
}
