package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSimWritesResults runs `kvroute-bench sim` on the simulator package's
// generated trace (its first 60 requests) and reads results.json back.
func TestSimWritesResults(t *testing.T) {
	out := t.TempDir()
	trace := filepath.Join("..", "..", "internal", "fleetsim", "testdata", "small_trace.jsonl")
	code, stdout, stderr := runCmd(t, "sim", "--trace", trace, "--engines", "4", "--kv-blocks", "1024",
		"--requests", "60", "--policies", "round-robin,kvroute", "--out", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "| kvroute |") {
		t.Fatalf("stdout %q", stdout)
	}
	raw, err := os.ReadFile(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Policies []struct {
			Name     string `json:"name"`
			Requests int    `json:"requests"`
			Errors   int    `json:"errors"`
		} `json:"policies"`
		Pooled float64 `json:"pooled_hit_rate"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Policies) != 2 || r.Policies[1].Name != "kvroute" || r.Policies[1].Requests != 60 || r.Policies[1].Errors != 0 || r.Pooled <= 0 {
		t.Fatalf("results.json %s", raw)
	}
}

func TestSimUsage(t *testing.T) {
	for _, args := range [][]string{{"sim"}, {"sim", "--trace", "x", "--engines", "0"}, {"sim", "--trace", "x", "--engines", "65"}} {
		if code, _, errs := runCmd(t, args...); code != 2 || errs == "" {
			t.Errorf("%v: exit %d, stderr %q", args, code, errs)
		}
	}
	if code, _, errs := runCmd(t, "sim", "--trace", filepath.Join(t.TempDir(), "missing.jsonl")); code != 1 || !strings.Contains(errs, "missing.jsonl") {
		t.Errorf("missing trace: exit %d, stderr %q", code, errs)
	}
}
