package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvroute/kvroute/internal/routetest"
	"github.com/kvroute/kvroute/internal/testdata"
	"github.com/kvroute/kvroute/internal/vllmemu"
	"github.com/kvroute/kvroute/server"
	"github.com/kvroute/kvroute/tokenize"
)

// statusEngine runs an emulated vLLM (qwen3) with block size bs: its HTTP
// API and KV events on loopback.
func statusEngine(t *testing.T, tok *tokenize.Tokenizer, bs int) (addr, events string) {
	t.Helper()
	e, srv := routetest.StartEngine(t, vllmemu.Options{Model: "m", Tokenizer: tok, BlockSize: bs, EventsEndpoint: "tcp://127.0.0.1:0",
		PrefillPerToken: time.Microsecond, DecodePerToken: time.Microsecond}, nil)
	return srv.Listener.Addr().String(), e.EventsEndpoint()
}

// TestStatusAgainstServe: `kvroute status` asks a live `kvroute serve`'s
// admin listener; a replica whose engine runs another block size than its
// pool's shows the block_size mismatch with its evidence, the matching one
// its tokens check matching, as a table and as JSON.
func TestStatusAgainstServe(t *testing.T) {
	dir := testdata.TokenizerDir(t, "qwen3")
	tok, err := tokenize.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	goodAddr, goodEvents := statusEngine(t, tok, 16)
	badAddr, badEvents := statusEngine(t, tok, 32)
	_, admin, _ := startServe(t, fmt.Sprintf(`
listen: {extproc: "127.0.0.1:0", admin: "127.0.0.1:0"}
ingest: {scrape_interval: 100ms, stall_timeout: 2s}
parity: {interval: 1s}
pools:
  - name: p
    models: [m]
    tokenizer: %q
    block_size: 16
    replicas:
      - {name: good, address: %q, events: %q, metrics: "http://%s/metrics"}
      - {name: bad, address: %q, events: %q, metrics: "http://%s/metrics"}
`, dir, goodAddr, goodEvents, goodAddr, badAddr, badEvents, badAddr))
	var out, errOut bytes.Buffer
	status := func(args ...string) int {
		out.Reset()
		errOut.Reset()
		return run(t.Context(), append([]string{"status", "--admin", admin}, args...), stdio{strings.NewReader(""), &out, &errOut})
	}
	var text string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if code := status(); code != 0 {
			t.Fatalf("exit %d: %s", code, errOut.String())
		}
		text = out.String()
		if strings.Contains(text, "bad block_size mismatch") && rowHas(text, "good", "match") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status never showed the mismatch:\n%s", text)
		}
	}
	for _, want := range []string{"pool p: routing by prefix and load", "1 parity mismatches", "prompt tokens routed 0: cached_predicted 0",
		"flow control: off, not saturated, 0 waiting (0 body bytes)",
		"  priority 0 and above: busy past 1s, not saturated; below: busy past 50ms, not saturated",
		"REPLICA", "TOKENS", "BLOCK_SIZE", "engine announces block_size", "the pool's is 16 (configured)"} {
		if !strings.Contains(text, want) {
			t.Errorf("status lacks %q:\n%s", want, text)
		}
	}
	if code := status("--json"); code != 0 {
		t.Fatalf("--json exit %d: %s", code, errOut.String())
	}
	var v server.ReplicasView
	if err := json.Unmarshal(out.Bytes(), &v); err != nil || len(v.Pools) != 1 || len(v.Replicas) != 2 {
		t.Fatalf("--json: %v: %s", err, out.String())
	}
	if f := v.Pools[0].Flow; f == nil || f.Enabled || f.Queued != 0 || f.Bands == nil {
		t.Errorf("--json: flow %+v", f)
	}
	if st := v.Replicas[1].Parity["block_size"]; v.Replicas[1].Replica != "bad" || st.State != "mismatch" {
		t.Errorf("--json: bad's block_size %+v", st)
	}
	// kvroute explain names the pool's mismatches too.
	bodyFile := filepath.Join(t.TempDir(), "req.json")
	if err := os.WriteFile(bodyFile, []byte(`{"model":"m","prompt":"hello"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if code := run(t.Context(), []string{"explain", "--admin", admin, "--path", "/v1/completions", "--body", bodyFile},
		stdio{strings.NewReader(""), &out, &errOut}); code != 0 || !strings.Contains(out.String(), "parity mismatches in the pool") ||
		!strings.Contains(out.String(), "bad block_size: engine announces") ||
		!strings.Contains(out.String(), "flow control off: pool not saturated, 0 waiting; this request would be decided at once") {
		t.Errorf("explain exit %d: %s%s", code, out.String(), errOut.String())
	}
	out.Reset()
	if code := run(t.Context(), []string{"status"}, stdio{strings.NewReader(""), &out, &errOut}); code == 0 {
		t.Error("status without --admin succeeded")
	}
}

// rowHas reports whether the table row of replica has its tokens check in
// state (the first check column).
func rowHas(text, replica, state string) bool {
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) > 10 && f[0] == replica {
			return f[10] == state
		}
	}
	return false
}
