package fleetsim

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// smallOptions is a 4-engine fleet whose KV (4 × 1,024 × 64 = 262k tokens)
// is smaller than testdata/small_trace.jsonl's working set (12
// conversations growing to ~31k tokens each): eviction happens.
func smallOptions() Options {
	o := DefaultOptions()
	o.Engines, o.KVBlocks, o.MaxModelLen, o.MaxNumSeqs = 4, 1024, 40000, 16
	return o
}

func smallTrace(t *testing.T) *TraceSource {
	t.Helper()
	recs, err := ReadTrace(filepath.Join("testdata", "small_trace.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	return &TraceSource{Records: recs}
}

func TestRunAllWritesTheIssueShape(t *testing.T) {
	src := smallTrace(t)
	rep, err := RunAll(src, AllPolicies, smallOptions())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := rep.Write(dir, "Small trace\n\n"); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	// Exactly the keys results.json promises, no more: without flow
	// control or tenants, a policy's shed count (0) beside its errors.
	var generic map[string]any
	if err := json.Unmarshal(raw, &generic); err != nil {
		t.Fatal(err)
	}
	keys := func(m map[string]any) []string {
		var k []string
		for s := range m {
			k = append(k, s)
		}
		slices.Sort(k)
		return k
	}
	if got := strings.Join(keys(generic), ","); got != "ideal_hit_rate,policies,pooled_hit_rate" {
		t.Fatalf("top-level keys %s", got)
	}
	pols := generic["policies"].([]any)
	if len(pols) != len(AllPolicies) {
		t.Fatalf("%d policies in results.json", len(pols))
	}
	if got := strings.Join(keys(pols[0].(map[string]any)), ","); got != "errors,name,requests,shed,token_hit_rate,ttft_p50_ms,ttft_p90_ms,ttft_p99_ms" {
		t.Fatalf("policy keys %s", got)
	}
	for _, f := range []string{"results.md", "results.svg"} {
		if b, err := os.ReadFile(filepath.Join(dir, f)); err != nil || len(b) == 0 {
			t.Fatalf("%s: %v (%d bytes)", f, err, len(b))
		}
	}
	byName := map[string]*Result{}
	for _, r := range rep.Results {
		byName[r.Name] = r
		t.Logf("%-14s hit %.1f %% p50 %v p90 %v imbalance %.2f", r.Name, 100*r.HitRate(), r.Percentile(0.5), r.Percentile(0.9), r.Imbalance())
		if r.Requests != src.Len() || r.Errors != 0 || len(r.TTFT) != src.Len() {
			t.Fatalf("%s: %d requests, %d errors, %d TTFTs; want %d, 0, %d", r.Name, r.Requests, r.Errors, len(r.TTFT), src.Len(), src.Len())
		}
		if r.HitRate() > rep.Ideal+1e-9 {
			t.Fatalf("%s: hit rate %.3f above the infinite-cache bound %.3f", r.Name, r.HitRate(), rep.Ideal)
		}
	}
	t.Logf("ideal %.1f %%, pooled %.1f %%", 100*rep.Ideal, 100*rep.Pooled.HitRate())
	if rep.Pooled.HitRate() > rep.Ideal+1e-9 || rep.Ideal <= 0 {
		t.Fatalf("pooled %.3f, ideal %.3f", rep.Pooled.HitRate(), rep.Ideal)
	}
	// The point of the exercise: knowing what engines hold beats rotating.
	if kv, rr := byName[PolicyKVRoute], byName[PolicyRoundRobin]; kv.HitRate() <= rr.HitRate()+0.1 {
		t.Fatalf("kvroute hit rate %.3f not 10 points above round-robin's %.3f", kv.HitRate(), rr.HitRate())
	}
	if d := byName[PolicyKVRoute].Decisions; d["prefix/hit"] == 0 || d["rejected/no_eligible_replica"] != 0 {
		t.Fatalf("kvroute decisions %v", d)
	}
}

func TestDecodeTraceRejectsBadLines(t *testing.T) {
	cases := map[string]string{
		"not JSON":           `{"timestamp": 0,`,
		"negative timestamp": `{"timestamp": -1, "input_length": 10, "output_length": 1, "hash_ids": [0]}`,
		"zero input":         `{"timestamp": 0, "input_length": 0, "output_length": 1, "hash_ids": []}`,
		"ids do not cover":   `{"timestamp": 0, "input_length": 1000, "output_length": 1, "hash_ids": [0]}`,
		"negative id":        `{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [-3]}`,
		"huge output":        `{"timestamp": 0, "input_length": 10, "output_length": 100000000, "hash_ids": [0]}`,
		"huge priority":      `{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [0], "priority": 2000000}`,
		"long tenant":        `{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [0], "tenant": "` + strings.Repeat("secret-", 10) + `"}`,
		"time goes back": `{"timestamp": 5, "input_length": 10, "output_length": 1, "hash_ids": [0]}
{"timestamp": 4, "input_length": 10, "output_length": 1, "hash_ids": [0]}`,
		"empty": "",
	}
	for name, in := range cases {
		if _, err := DecodeTrace(strings.NewReader(in)); err == nil {
			t.Errorf("%s: accepted", name)
		} else if strings.Contains(err.Error(), "hash_ids\": [") || strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: error quotes the line: %v", name, err)
		}
	}
}

func TestTracePromptsShareTokensWhereIDsAgree(t *testing.T) {
	src := &TraceSource{Records: []Record{
		{Timestamp: 0, InputLength: 1000, OutputLength: 4, HashIDs: []int64{7, 8}},
		{Timestamp: 2000, InputLength: 700, OutputLength: 4, HashIDs: []int64{7, 9}},
	}, Speedup: 2}
	a, _ := src.Prompt(0)
	b, mt := src.Prompt(1)
	if len(a) != 1000 || len(b) != 700 || mt != 4 {
		t.Fatalf("lengths %d %d", len(a), len(b))
	}
	if !slices.Equal(a[:512], b[:512]) || slices.Equal(a[512:700], b[512:700]) {
		t.Fatal("equal ids must give equal tokens, different ids different tokens")
	}
	if again, _ := src.Prompt(0); !slices.Equal(again, a) {
		t.Fatal("prompt tokens are not deterministic")
	}
	if src.At(1) != time.Second {
		t.Fatalf("speedup 2: arrival %v, want 1s", src.At(1))
	}
	// Request 1 could reuse block 7 (512 tokens) at most.
	if got := src.IdealHit(1, 64); got != 512 {
		t.Fatalf("ideal hit %d, want 512", got)
	}
}

func TestMarkdownNamesTheBounds(t *testing.T) {
	rep := &Report{Ideal: 0.5, Pooled: &Result{Name: policyPooled, PromptTokens: 10, HitTokens: 4, PerEngine: []int{1}},
		Results: []*Result{{Name: PolicyKVRoute, PromptTokens: 10, HitTokens: 3, TTFT: []time.Duration{time.Millisecond}, PerEngine: []int{1, 1}}}}
	var b bytes.Buffer
	rep.WriteMarkdown(&b)
	for _, want := range []string{"| kvroute | 30.0 %", "Ideal (infinite cache) hit rate: 50.0 %", "Pooled-cache bound: 40.0 %"} {
		if !strings.Contains(b.String(), want) {
			t.Fatalf("markdown lacks %q:\n%s", want, b.String())
		}
	}
}

// TestSpreadArrivalsKeepsEveryRequestInItsWindow: spread arrivals are
// sorted, each within its window after its recorded time, repeatable for a
// seed, and every record is kept.
func TestSpreadArrivalsKeepsEveryRequestInItsWindow(t *testing.T) {
	var recs []Record
	for i := range 300 {
		recs = append(recs, Record{Timestamp: int64(i/10) * 3000, InputLength: i + 1})
	}
	out := SpreadArrivals(recs, 3*time.Second, 7)
	if len(out) != len(recs) {
		t.Fatalf("%d records, want %d", len(out), len(recs))
	}
	distinct := map[int64]bool{}
	for i, r := range out {
		orig := recs[r.InputLength-1]
		if r.Timestamp < orig.Timestamp || r.Timestamp >= orig.Timestamp+3000 {
			t.Fatalf("record %d moved from %d to %d ms", r.InputLength-1, orig.Timestamp, r.Timestamp)
		}
		if i > 0 && r.Timestamp < out[i-1].Timestamp {
			t.Fatal("not in arrival order")
		}
		distinct[r.Timestamp] = true
	}
	if len(distinct) < 250 {
		t.Fatalf("only %d distinct arrival times of 300", len(distinct))
	}
	again := SpreadArrivals(recs, 3*time.Second, 7)
	for i := range out {
		if out[i].Timestamp != again[i].Timestamp || out[i].InputLength != again[i].InputLength {
			t.Fatal("not repeatable for a seed")
		}
	}
	if recs[0].Timestamp != 0 || recs[299].Timestamp != 29*3000 {
		t.Fatal("the input was modified")
	}
}
