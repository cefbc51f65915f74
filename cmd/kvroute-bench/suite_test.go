package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSuiteCommand runs `kvroute-bench suite` on the first 40 requests of
// the simulator package's small trace alone (one gateway, seed and load)
// and checks the goals it prints and the summary it writes.
func TestSuiteCommand(t *testing.T) {
	out := t.TempDir()
	traces := t.TempDir()
	src := filepath.Join("..", "..", "internal", "fleetsim", "testdata", "small_trace.jsonl")
	raw, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfterN(string(raw), "\n", 41)
	if err := os.WriteFile(filepath.Join(traces, "small_trace.jsonl"), []byte(strings.Join(lines[:40], "")), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCmd(t, "suite", "--traces", traces, "--workloads", "small", "--gateways", "1",
		"--seeds", "1", "--loads", "1", "--curve", "", "--quiet", "--out", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "the whole suite runs in ≤ 30 minutes") {
		t.Fatalf("stdout %q", stdout)
	}
	md, err := os.ReadFile(filepath.Join(out, "summary.md"))
	if err != nil || !strings.Contains(string(md), "| small | 1 gw | 1× |") {
		t.Fatalf("summary.md %q, %v", md, err)
	}
}

func TestSuiteUsage(t *testing.T) {
	code, _, errs := runCmd(t, "suite", "--help")
	if code != 2 || !strings.Contains(errs, "--quick") || !strings.Contains(errs, "2–3 minute") {
		t.Fatalf("suite --help: exit %d, stderr %q", code, errs)
	}
	for _, args := range [][]string{{"suite", "--gateways", "x"}, {"suite", "--seeds", "0"}, {"suite", "--loads", "-1"}} {
		if code, _, errs := runCmd(t, args...); code != 2 || errs == "" {
			t.Errorf("%v: exit %d, stderr %q", args, code, errs)
		}
	}
	if code, _, errs := runCmd(t, "suite", "--workloads", "nope", "--traces", t.TempDir()); code != 1 || !strings.Contains(errs, "known workloads") {
		t.Errorf("unknown workload: exit %d, stderr %q", code, errs)
	}
}
