package fleetsim

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// tinySuite is two small workloads on a 4-engine fleet: a few seconds.
func tinySuite(t *testing.T) SuiteOptions {
	t.Helper()
	o := DefaultOptions()
	o.Engines, o.KVBlocks, o.MaxNumSeqs = 4, 512, 8
	tenants := Family{Name: FamilyTenants, Requests: 40, Rate: 8, OutputMin: 4, OutputMax: 16,
		Documents: 6, DocBlocks: 2, DocBlocksMax: 6, ZipfS: 1, QueryBlocks: 1, QueryBlocksMax: 2}
	unique := Family{Name: FamilyNoSharing, Requests: 30, Rate: 8, OutputMin: 4, OutputMax: 16, QueryBlocks: 1, QueryBlocksMax: 4}
	// A recorded trace, cut short: the suite's trace path.
	dir := t.TempDir()
	recs, err := unique.Generate(9)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, r := range recs {
		line, _ := json.Marshal(r)
		b.Write(line)
		b.WriteByte('\n')
	}
	if err := os.WriteFile(filepath.Join(dir, "tiny_trace.jsonl"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	ws, err := TraceWorkloads(dir, 0, 20)
	if err != nil {
		t.Fatal(err)
	}
	ws = append(ws, FamilyWorkloads([]Family{tenants, unique})...)
	return SuiteOptions{Fleet: o, Workloads: ws, Gateways: []int{1, 2}, Mesh: true, Seeds: []uint64{1}, Loads: []float64{1},
		Policies: SuitePolicies, Curve: []int{1, 2}, CurveWorkload: FamilyTenants, Jobs: 2}
}

func TestSuiteSmoke(t *testing.T) {
	so := tinySuite(t)
	out := t.TempDir()
	res, err := RunSuite(so, out)
	if err != nil {
		t.Fatal(err)
	}
	// 3 workloads × (1 gateway, 2 gateways, 2 gateways + mesh).
	if len(res.Cells) != 9 {
		t.Fatalf("%d cells, want 9", len(res.Cells))
	}
	for _, c := range res.Cells {
		for _, p := range SuitePolicies {
			st, ok := c.Policy(p)
			if !ok {
				t.Fatalf("%s %s: policy %s missing", c.Workload, c.Setup(), p)
			}
			if st.Requests == 0 || st.Errors != 0 {
				t.Fatalf("%s %s %s: %d requests, %d errors", c.Workload, c.Setup(), p, st.Requests, st.Errors)
			}
		}
		for _, f := range []string{"results.json", "results.md"} {
			if _, err := os.Stat(filepath.Join(out, c.Dir, f)); err != nil {
				t.Fatal(err)
			}
		}
	}
	again, err := LoadCells(out)
	if err != nil || len(again) != len(res.Cells) {
		t.Fatalf("LoadCells: %d cells, %v", len(again), err)
	}
	for i, c := range again {
		want := res.Cells[i]
		kv, _ := c.Policy(PolicyKVRoute)
		wkv, _ := want.Policy(PolicyKVRoute)
		if c.Workload != want.Workload || c.Gateways != want.Gateways || c.Mesh != want.Mesh || c.Seed != want.Seed ||
			c.Load != want.Load || kv.HitRate != wkv.HitRate || kv.P90 != wkv.P90 || c.Pooled != want.Pooled {
			t.Fatalf("cell %d read back as %+v, want %+v", i, c, want)
		}
	}
	if n := len(res.Curve); n != 6 {
		t.Fatalf("%d gateway-curve points, want 2 counts × 3 lines", n)
	}
	goals := res.Goals()
	if len(goals) != 9 {
		t.Fatalf("%d goals, want 9", len(goals))
	}
	if err := res.Write(out, "kvroute-bench suite (test)"); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(out, "summary.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| goal | met? | cells |", "## Gateway curve", "tiny", FamilyTenants} {
		if !strings.Contains(string(md), want) {
			t.Errorf("summary.md lacks %q", want)
		}
	}
	for _, f := range []string{"summary.json", "summary.svg", "curve.svg"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSuiteGoalsJudgeCells(t *testing.T) {
	cell := func(w string, g int, mesh bool, kvHit, kvP90, kvP99 float64) *Cell {
		return &Cell{Workload: w, Gateways: g, Mesh: mesh, Seed: 1, Load: 1, Pooled: 0.5, Policies: []PolicyStats{
			{Name: PolicyRoundRobin, HitRate: 0.1, P90: 100, P99: 200},
			{Name: PolicyApproxPrefix, HitRate: 0.4, P90: 90, P99: 150},
			{Name: PolicyKVRoute, HitRate: kvHit, P90: kvP90, P99: kvP99, Parity: &ParityResult{WindowsJudged: 4}},
		}}
	}
	res := &SuiteResult{Workloads: []SuiteWorkload{{Name: Synthetic, Trace: true}, {Name: FamilyNoSharing}}, Wall: time.Minute,
		Cells: []*Cell{
			cell(Synthetic, 1, false, 0.48, 80, 160),       // all met; 96 % of pooled
			cell(Synthetic, 8, true, 0.455, 91, 166),       // 94.8 % of 1 gw: missed; p90 > 90: missed; p99 > 165: missed
			cell(FamilyNoSharing, 1, false, 0.395, 95, 10), // hits ≥ 0.39: met; p90 95 ≤ 105 of round-robin's
		}}
	res.Cells[1].Policies[2].Parity.Flags = 1 // a false flag: missed
	got := map[string]bool{}
	for _, g := range res.Goals() {
		got[g.Goal] = g.Met
	}
	want := map[string]bool{
		"every cell: kvroute token hit rate ≥ best other policy's − 1 point":                                                 true,
		"every cell: kvroute TTFT p90 ≤ every other policy's":                                                                false,
		"every cell: kvroute TTFT p99 ≤ 1.1 × best other policy's":                                                           false,
		"synthetic trace, 1 gateway: kvroute ≥ 95 % of the pooled bound":                                                     true,
		"every trace, 1 gateway: kvroute ≥ 90 % of the pooled bound":                                                         true,
		"8 gateways with the mesh: kvroute hit rate ≥ 95 % of its 1-gateway figure":                                          false,
		"no-sharing cells: kvroute TTFT p90 ≤ 1.05 × round-robin's":                                                          true,
		"the whole suite runs in ≤ 30 minutes":                                                                               true,
		"every cell where it judged a window: kvroute's cached_tokens parity check flags no engine (its engines are honest)": false,
	}
	for k, v := range want {
		if m, ok := got[k]; !ok || m != v {
			t.Errorf("%s: met %v (present %v), want %v", k, m, ok, v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("goals %v", slices.Sorted(func(yield func(string) bool) {
			for k := range got {
				if !yield(k) {
					return
				}
			}
		}))
	}
}
