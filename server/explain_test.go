package server

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvroute/kvroute/extproc"
	"github.com/kvroute/kvroute/index"
	"github.com/kvroute/kvroute/internal/routetest"
	"github.com/kvroute/kvroute/routing"
)

// postExplain POSTs body to the admin listener's /debug/explain.
func postExplain(t *testing.T, s *Server, path string, body []byte) (int, []byte) {
	t.Helper()
	resp, err := http.Post("http://"+s.AdminAddr().String()+"/debug/explain?path="+path, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

func replicaStates(t *testing.T, s *Server) []index.ReplicaState {
	t.Helper()
	id, ok := s.ix.PoolByName("qwen")
	if !ok {
		t.Fatal("no pool qwen")
	}
	return s.ix.Replicas(id)
}

// TestExplainOverTheAdminListener: kvroute serve's admin listener explains
// a request with the real tokenizer and KV events over ZeroMQ: the pick is
// the replica holding the prompt, as the decision over ext_proc makes it,
// every replica is listed with its matched blocks, nothing is routed (no
// in-flight request or queued prefill appears), and the answer carries no
// prompt text.
func TestExplainOverTheAdminListener(t *testing.T) {
	a, b := newReplica(t), newReplica(t)
	s, c := startServer(t, a, b)
	tok, _ := routetest.LoadQwen(t)
	prompt := prose(20)
	ids := tok.Encode(prompt, true)
	b.storeBlocks(t, ids)
	body := []byte(`{"model":"qwen","prompt":` + strconv.Quote(prompt) + `,"max_tokens":4}`)

	var x routing.Explanation
	var raw []byte
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		before := replicaStates(t, s)
		var code int
		code, raw = postExplain(t, s, "/v1/completions", body)
		if code != 200 {
			t.Fatalf("status %d: %s", code, raw)
		}
		for i, st := range replicaStates(t, s) {
			if st.InFlight != before[i].InFlight || st.PendingTokens != before[i].PendingTokens {
				t.Fatalf("explain did bookkeeping on %s: %+v, was %+v", st.Name, st, before[i])
			}
		}
		x = routing.Explanation{}
		if err := json.Unmarshal(raw, &x); err != nil {
			t.Fatalf("%v: %s", err, raw)
		}
		if x.Outcome == routing.OutcomePrefix || time.Now().After(deadline) {
			break
		}
	}
	full := len(ids) / blockSize
	if x.Pick != "r1" || x.PickAddress != b.http.Listener.Addr().String() || x.Outcome != routing.OutcomePrefix ||
		x.PromptTokens != len(ids) || x.PromptBlocks != full || x.BlockSize != blockSize || x.MatchedTokens != full*blockSize {
		t.Fatalf("explanation: %s", raw)
	}
	if len(x.Candidates) != 2 || x.Candidates[0].Name != "r0" || x.Candidates[0].MatchedBlocks != 0 ||
		x.Candidates[1].MatchedBlocks != full || !x.Candidates[1].Picked || x.Candidates[0].Picked ||
		!(x.Candidates[0].Cost > x.Candidates[1].Cost) || x.Cost != x.Candidates[1].Cost {
		t.Fatalf("candidates: %s", raw)
	}
	if bytes.Contains(raw, []byte("shared system prompt")) || bytes.Contains(raw, []byte(strconv.Itoa(ids[1])+","+strconv.Itoa(ids[2]))) {
		t.Fatalf("explanation carries prompt text or ids: %s", raw)
	}
	// The decision over ext_proc, on the same index, picks the same replica.
	h := route(t, c, "/v1/completions", string(body), "r1")
	if h[extproc.HeaderDebugMatchedTokens] != strconv.Itoa(x.MatchedTokens) || h[extproc.HeaderDebugPromptTokens] != strconv.Itoa(x.PromptTokens) {
		t.Fatalf("routed %v, explained %s", h, raw)
	}
}

// TestExplainRefusesHostileRequests: the body is bounded by
// routing.body_limit_bytes (413), the path must be an API path (400), and
// only POST is served.
func TestExplainRefusesHostileRequests(t *testing.T) {
	s, _ := startServer(t, newReplica(t))
	big := []byte(`{"model":"qwen","prompt":"` + strings.Repeat("a", s.cfg.Routing.BodyLimitBytes) + `"}`)
	if code, raw := postExplain(t, s, "/v1/completions", big); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("over the body limit: %d %s", code, raw)
	}
	// Chunked (no Content-Length): still cut at the limit.
	resp, err := http.Post("http://"+s.AdminAddr().String()+"/debug/explain?path=/v1/completions", "application/json", io.MultiReader(bytes.NewReader(big)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("chunked over the body limit: %d", resp.StatusCode)
	}
	for _, p := range []string{"", "v1/completions", "/" + strings.Repeat("x", 300), "/v1/completions&objective=" + strings.Repeat("x", 300)} {
		if code, raw := postExplain(t, s, p, []byte(`{}`)); code != http.StatusBadRequest {
			t.Fatalf("path %q: %d %s", p, code, raw)
		}
	}
	resp, err = http.Get("http://" + s.AdminAddr().String() + "/debug/explain?path=/v1/completions")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET: %d", resp.StatusCode)
	}
	// A model no pool serves is explained (fail-open: by load), not an HTTP
	// error, and its name is not echoed.
	code, raw := postExplain(t, s, "/v1/completions", []byte(`{"model":"not-served","prompt":"x"}`))
	var x routing.Explanation
	if err := json.Unmarshal(raw, &x); err != nil || code != 200 || x.Reason != routing.ReasonUnknownModel || bytes.Contains(raw, []byte("not-served")) {
		t.Fatalf("unknown model: %d %s", code, raw)
	}
}
