package testdata

import (
	"fmt"
	"strings"
	"testing"
)

// recorder is a testing.TB that records Fatalf and Skipf instead of ending
// the test.
type recorder struct {
	testing.TB
	fatal, skip string
}

func (r *recorder) Helper()                        {}
func (r *recorder) Fatalf(format string, a ...any) { r.fatal = fmt.Sprintf(format, a...) }
func (r *recorder) Skipf(format string, a ...any)  { r.skip = fmt.Sprintf(format, a...) }

func TestMissingFailsInCIAndSkipsLoudlyElsewhere(t *testing.T) {
	t.Setenv("CI", "true")
	r := &recorder{TB: t}
	Missing(r, "file %s absent", "x")
	if r.skip != "" || !strings.Contains(r.fatal, "file x absent") || !strings.Contains(r.fatal, "CI=true") {
		t.Fatalf("CI=true: fatal %q, skip %q", r.fatal, r.skip)
	}
	t.Setenv("CI", "")
	r = &recorder{TB: t}
	Missing(r, "file %s absent", "x")
	if r.fatal != "" || !strings.HasPrefix(r.skip, SkipMarker) || !strings.Contains(r.skip, "file x absent") {
		t.Fatalf("CI unset: fatal %q, skip %q", r.fatal, r.skip)
	}
}

func TestCommittedDataIsPresent(t *testing.T) {
	if Root() == "" {
		t.Fatal("no module root")
	}
	for _, name := range TokenizerNames {
		if len(TokenizerGolden(t, name)) == 0 {
			t.Fatalf("golden %s is empty", name)
		}
	}
	LoadBlockHashVectors(t)
	LoadLegacyHashVectors(t)
	LoadKVEventVectors(t)
	ChatGoldens(t)
	Jinja2Renders(t)
	Path(t, "traces/mooncake_conversation_trace.jsonl")
	Path(t, "traces/mooncake_synthetic_trace.jsonl")
	Path(t, "traces/LICENSE-APACHE-Mooncake")
}
