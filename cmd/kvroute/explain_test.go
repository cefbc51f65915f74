package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvroute/kvroute/routing"
)

// TestExplainAgainstServe: `kvroute explain` asks a live `kvroute serve`'s
// admin listener, as JSON and as a table; every endpoint (DP ranks included)
// is listed, the pick is one of them, nothing is left in flight, and the
// prompt text appears nowhere.
func TestExplainAgainstServe(t *testing.T) {
	addrA, addrB := idleEngineMetrics(t), idleEngineMetrics(t)
	_, admin, logs := startServe(t, fmt.Sprintf(`
listen: {extproc: "127.0.0.1:0", admin: "127.0.0.1:0"}
log: {level: debug}
ingest: {scrape_interval: 100ms, stall_timeout: 2s}
routing: {body_limit_bytes: 4096}
pools:
  - name: p
    models: [m]
    block_size: 16
    replicas:
      - {name: a, address: %q}
      - {name: b, address: %q, data_parallel_size: 2}
`, addrA, addrB))
	bodyFile := filepath.Join(t.TempDir(), "req.json")
	if err := os.WriteFile(bodyFile, []byte(`{"model":"m","messages":[{"role":"user","content":"classified launch codes"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	explain := func(args ...string) int {
		out.Reset()
		errOut.Reset()
		return run(t.Context(), append([]string{"explain", "--admin", admin, "--body", bodyFile}, args...), stdio{strings.NewReader(""), &out, &errOut})
	}
	if code := explain("--json"); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var x routing.Explanation
	if err := json.Unmarshal(out.Bytes(), &x); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if x.Pool != "p" || x.Outcome != routing.OutcomeLoad || x.Reason != routing.ReasonNoTokenizer || len(x.Candidates) != 3 {
		t.Fatalf("explanation: %s", out.String())
	}
	picked := 0
	for _, c := range x.Candidates {
		if !c.Eligible || !c.Weighed || c.InFlight != 0 {
			t.Fatalf("candidate %+v", c)
		}
		if c.Picked {
			picked++
			if c.Name != x.Pick || c.Address != x.PickAddress {
				t.Fatalf("picked candidate %+v, pick %s %s", c, x.Pick, x.PickAddress)
			}
		}
	}
	if picked != 1 || (x.PickAddress != addrA && x.PickAddress != addrB) {
		t.Fatalf("pick: %s", out.String())
	}
	// The first explain routed nothing: the second sees nothing in flight.
	if code := explain(); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	table := out.String()
	for _, want := range []string{"pool p: prompt not tokenized", "reason no_tokenizer", "ENDPOINT", addrA, addrB, "<-"} {
		if !strings.Contains(table, want) {
			t.Fatalf("table lacks %q:\n%s", want, table)
		}
	}
	if strings.Contains(table+logs.String(), "launch codes") {
		t.Fatalf("prompt text in the table or the server's log:\n%s\n%s", table, logs.String())
	}
	if !strings.Contains(logs.String(), `"msg":"explain"`) {
		t.Fatalf("no explain log line: %s", logs.String())
	}
	// Over routing.body_limit_bytes: the server's 413 is the CLI's error.
	if err := os.WriteFile(bodyFile, []byte(`{"model":"m","prompt":"`+strings.Repeat("x", 5000)+`"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if code := explain(); code != 1 || !strings.Contains(errOut.String(), "413") {
		t.Fatalf("over the body limit: exit %d: %s", code, errOut.String())
	}
	if code := run(t.Context(), []string{"explain", "--body", bodyFile}, stdio{strings.NewReader(""), &out, &errOut}); code != 2 {
		t.Fatalf("no --admin: exit %d", code)
	}
}
