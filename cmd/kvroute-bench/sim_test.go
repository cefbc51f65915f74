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
	r, raw := readSimResults(t, out)
	if len(r.Policies) != 2 || r.Policies[1].Name != "kvroute" || r.Policies[1].Requests != 60 || r.Policies[1].Errors != 0 || r.Pooled <= 0 {
		t.Fatalf("results.json %s", raw)
	}
}

func TestSimUsage(t *testing.T) {
	for _, args := range [][]string{{"sim"}, {"sim", "--trace", "x", "--engines", "0"}, {"sim", "--trace", "x", "--engines", "65"}, {"sim", "--trace", "x", "--gateways", "0"}, {"sim", "--trace", "x", "--gateways", "17"}} {
		if code, _, errs := runCmd(t, args...); code != 2 || errs == "" {
			t.Errorf("%v: exit %d, stderr %q", args, code, errs)
		}
	}
	if code, _, errs := runCmd(t, "sim", "--trace", filepath.Join(t.TempDir(), "missing.jsonl")); code != 1 || !strings.Contains(errs, "missing.jsonl") {
		t.Errorf("missing trace: exit %d, stderr %q", code, errs)
	}
}

// TestSimGatewaysSplitTheMemory runs the small trace behind one and three
// gateways: three approx-prefix instances, each remembering only its own
// third of the decisions, hit less than one, and every request is answered.
func TestSimGatewaysSplitTheMemory(t *testing.T) {
	trace := filepath.Join("..", "..", "internal", "fleetsim", "testdata", "small_trace.jsonl")
	hit := map[string]float64{}
	for _, g := range []string{"1", "3"} {
		out := t.TempDir()
		code, _, stderr := runCmd(t, "sim", "--trace", trace, "--engines", "4", "--kv-blocks", "1024",
			"--policies", "approx-prefix,kvroute", "--gateways", g, "--seed", "7", "--quiet", "--out", out)
		if code != 0 {
			t.Fatalf("--gateways %s: exit %d: %s", g, code, stderr)
		}
		r, raw := readSimResults(t, out)
		for _, p := range r.Policies {
			if p.Requests == 0 || p.Errors != 0 {
				t.Fatalf("--gateways %s: results.json %s", g, raw)
			}
			hit[p.Name+"/"+g] = p.Hit
		}
	}
	if !(hit["approx-prefix/3"] < hit["approx-prefix/1"]) {
		t.Errorf("approx-prefix hit %.3f behind 3 gateways, %.3f behind 1: --gateways did not split its memory", hit["approx-prefix/3"], hit["approx-prefix/1"])
	}
	t.Logf("token hit rates: %v", hit)
}

// simResults is the part of results.json the tests read.
type simResults struct {
	Policies []struct {
		Name     string  `json:"name"`
		Hit      float64 `json:"token_hit_rate"`
		Requests int     `json:"requests"`
		Errors   int     `json:"errors"`
	} `json:"policies"`
	Pooled float64 `json:"pooled_hit_rate"`
}

// readSimResults decodes dir/results.json and returns it with its raw bytes
// (for failure messages).
func readSimResults(t *testing.T, dir string) (simResults, []byte) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r simResults
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	return r, raw
}

// TestSimSaysWhatHappenedInWords: progress is a line per policy at its end
// (and one per 20 s of wall time while it runs: none on the small trace),
// and kvroute's decisions end in a sentence, not a list of counter names.
func TestSimSaysWhatHappenedInWords(t *testing.T) {
	trace := filepath.Join("..", "..", "internal", "fleetsim", "testdata", "small_trace.jsonl")
	code, out, stderr := runCmd(t, "sim", "--trace", trace, "--engines", "4", "--kv-blocks", "1024",
		"--policies", "round-robin,kvroute", "--seed", "7", "--out", t.TempDir())
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	// The two policies, then the pooled-cache bound.
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "sim round-robin: done, ") || !strings.HasPrefix(lines[1], "sim kvroute: done, ") || !strings.HasPrefix(lines[2], "sim pooled: done, ") {
		t.Errorf("progress:\n%s", stderr)
	}
	if !strings.Contains(out, "\nkvroute: ") || !strings.Contains(out, "the replica holding the most of its prefix") && !strings.Contains(out, "to spread load, giving up") ||
		strings.Contains(out, "moved-from-holder") {
		t.Errorf("no decision summary in words:\n%s", out)
	}
}

// TestSimFamilyAndTenants replays a goal family with --family, cut to one
// tenant by --tenants: every request replayed is that tenant's, and
// results.json breaks the run down by tenant.
func TestSimFamilyAndTenants(t *testing.T) {
	out := t.TempDir()
	code, stdout, stderr := runCmd(t, "sim", "--family", "priority-flood", "--tenants", "interactive", "--requests", "40",
		"--engines", "2", "--policies", "round-robin", "--quiet", "--out", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "| round-robin | interactive | 1 | 40 | 40 | 0 |") {
		t.Errorf("no tenant table:\n%s", stdout)
	}
	_, raw := readSimResults(t, out)
	var r struct {
		Policies []struct {
			Shed    *int `json:"shed"`
			Tenants []struct {
				Tenant   string `json:"tenant"`
				Requests int    `json:"requests"`
			} `json:"tenants"`
		} `json:"policies"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	if p := r.Policies[0]; p.Shed == nil || *p.Shed != 0 || len(p.Tenants) != 1 || p.Tenants[0].Tenant != "interactive" || p.Tenants[0].Requests != 40 {
		t.Errorf("results.json %s", raw)
	}
	for _, args := range [][]string{{"sim", "--family", "nope"}, {"sim", "--family", "tenant-pair", "--tenants", "nobody"}} {
		if code, _, errs := runCmd(t, append(args, "--out", t.TempDir())...); code != 1 || errs == "" {
			t.Errorf("%v: exit %d, stderr %q", args, code, errs)
		}
	}
	if code, _, errs := runCmd(t, "sim", "--family", "tenant-pair", "--trace", "x"); code != 2 || errs == "" {
		t.Errorf("--family with --trace: exit %d, stderr %q", code, errs)
	}
}

// TestSimFlowControl runs kvroute with --flow-control on a saturating
// tenant pair: results.json marks it, gives its shed count and reasons,
// and every request is served or shed; without the flag nothing is shed.
func TestSimFlowControl(t *testing.T) {
	type policy struct {
		Name        string         `json:"name"`
		Requests    int            `json:"requests"`
		Errors      int            `json:"errors"`
		Shed        int            `json:"shed"`
		ShedBy      map[string]int `json:"shed_by_reason"`
		FlowControl bool           `json:"flow_control"`
		Tenants     []struct {
			Served int `json:"served"`
		} `json:"tenants"`
	}
	for _, on := range []bool{false, true} {
		out := t.TempDir()
		args := []string{"sim", "--family", "tenant-pair", "--requests", "300", "--engines", "2", "--policies", "kvroute",
			"--routing", "{flow_control: {ttl: 2s}}", "--quiet", "--out", out}
		if on {
			args = append(args, "--flow-control")
		}
		code, stdout, stderr := runCmd(t, args...)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		_, raw := readSimResults(t, out)
		var r struct{ Policies []policy }
		if err := json.Unmarshal(raw, &r); err != nil {
			t.Fatal(err)
		}
		p := r.Policies[0]
		served := 0
		for _, tn := range p.Tenants {
			served += tn.Served
		}
		if p.Requests != 300 || served+p.Shed+p.Errors != p.Requests || p.FlowControl != on {
			t.Fatalf("flow control %v: results.json %s", on, raw)
		}
		if on != (p.Shed > 0) || on != strings.Contains(stdout, "kvroute with flow control: of 300 requests") {
			t.Fatalf("flow control %v: shed %d (%v); stdout:\n%s", on, p.Shed, p.ShedBy, stdout)
		}
	}
}
