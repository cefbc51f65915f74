package server

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvroute/kvroute/blockhash"
	"github.com/kvroute/kvroute/chattemplate"
	"github.com/kvroute/kvroute/config"
	"github.com/kvroute/kvroute/internal/routetest"
	"github.com/kvroute/kvroute/internal/testdata"
	"github.com/kvroute/kvroute/internal/vllmemu"
	"github.com/kvroute/kvroute/routing"
	"github.com/kvroute/kvroute/tokenize"
)

// emu is one emulated vLLM server on loopback: its OpenAI API with
// /tokenize and /metrics over real HTTP, its KV events over real ZeroMQ.
type emu struct {
	e   *vllmemu.Engine
	srv *httptest.Server
}

// The qwen3 tokenizer and chat template, loaded once for the test binary.
var (
	emuOnce sync.Once
	emuTok  *tokenize.Tokenizer
	emuChat *chattemplate.ChatTemplates
	emuErr  error
)

// emuOptions are an engine that agrees with parityConfig's pool: the qwen3
// tokenizer and chat template, block size 16, sha256, PYTHONHASHSEED 0.
func emuOptions(t *testing.T) vllmemu.Options {
	t.Helper()
	dir := testdata.TokenizerDir(t, "qwen3")
	emuOnce.Do(func() {
		if emuTok, emuErr = tokenize.Load(dir); emuErr == nil {
			emuChat, emuErr = vllmemu.LoadChatTemplates(emuTok, dir, "")
		}
	})
	if emuErr != nil || emuChat == nil {
		t.Fatalf("qwen3 tokenizer and chat template: %v", emuErr)
	}
	seed := "0"
	return vllmemu.Options{Model: "qwen", Tokenizer: emuTok, Chat: emuChat, BlockSize: blockSize, Seed: &seed,
		HashAlgo: blockhash.SHA256, EventsEndpoint: "tcp://127.0.0.1:0",
		PrefillPerToken: time.Microsecond, DecodePerToken: time.Microsecond, Logger: quietLogger()}
}

func startEmu(t *testing.T, opts vllmemu.Options) *emu {
	t.Helper()
	e, srv := routetest.StartEngine(t, opts, nil)
	return &emu{e: e, srv: srv}
}

func (m *emu) addr() string { return m.srv.Listener.Addr().String() }

// complete sends one completion to the engine directly (it stores the
// prompt's blocks and publishes BlockStored from block 0).
func (m *emu) complete(t *testing.T, prompt string) {
	t.Helper()
	body := fmt.Sprintf(`{"model":"qwen","prompt":%q,"max_tokens":1}`, prompt)
	res, err := http.Post(m.srv.URL+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("completion: %d", res.StatusCode)
	}
}

// parityConfig is a one-pool config over engines, with short parity
// intervals.
func parityConfig(t *testing.T, onMismatch string, engines ...*emu) *config.Config {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "listen: {extproc: \"127.0.0.1:0\", admin: \"127.0.0.1:0\"}\n")
	fmt.Fprintf(&b, "ingest: {scrape_interval: 100ms, stall_timeout: 2s}\nparity: {interval: 1s, timeout: 2s, on_mismatch: %s}\n", onMismatch)
	fmt.Fprintf(&b, "pools:\n  - name: qwen\n    models: [qwen]\n    tokenizer: %q\n    block_size: %d\n    hash: {algorithm: sha256, seed: \"0\"}\n    replicas:\n",
		testdata.TokenizerDir(t, "qwen3"), blockSize)
	for i, m := range engines {
		fmt.Fprintf(&b, "      - {name: r%d, address: %q, events: %q, metrics: %q}\n", i, m.addr(), m.e.EventsEndpoint(), m.srv.URL+"/metrics")
	}
	cfg, err := config.Parse([]byte(b.String()))
	if err != nil {
		t.Fatalf("config: %v\n%s", err, b.String())
	}
	return cfg
}

// getReplicas reads GET /debug/replicas over HTTP.
func getReplicas(t *testing.T, s *Server) ReplicasView {
	t.Helper()
	res, err := http.Get("http://" + s.AdminAddr().String() + "/debug/replicas")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var v ReplicasView
	if err := json.NewDecoder(res.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// waitParity polls /debug/replicas until replica's check reaches state
// (within the 30 s a mismatching replica must be flagged in).
func waitParity(t *testing.T, s *Server, replica, check, state string, during func()) ParityState {
	t.Helper()
	var last ParityState
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if during != nil {
			during()
		}
		for _, r := range getReplicas(t, s).Replicas {
			if r.Replica == replica {
				last = r.Parity[check]
			}
		}
		if last.State == state {
			return last
		}
	}
	t.Fatalf("%s %s: never %s; last %+v", replica, check, state, last)
	return last
}

// TestParityFlagsEachDisagreement runs one matching engine and one per
// disagreement with the pool (tokenizer, chat template, block size, seed,
// hash algorithm) in one pool, and expects each disagreeing replica flagged
// on exactly the checks its difference breaks, the matching one on none.
func TestParityFlagsEachDisagreement(t *testing.T) {
	otherTemplate := filepath.Join(t.TempDir(), "other.jinja")
	if err := os.WriteFile(otherTemplate, []byte("{% for m in messages %}<{{ m.role }}>{{ m.content }}\n{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		want []string // the checks that must mismatch, sorted by name
		mod  func(o *vllmemu.Options)
	}{
		{"matching", nil, func(*vllmemu.Options) {}},
		{"tokenizer", []string{checkTokens}, func(o *vllmemu.Options) {
			tok, err := tokenize.Load(testdata.TokenizerDir(t, "llama3_1"))
			if err != nil {
				t.Fatal(err)
			}
			o.Tokenizer = tok
			o.Chat = nil // the completion canary tells
		}},
		{"chat template", []string{checkTokens}, func(o *vllmemu.Options) {
			ct, err := vllmemu.LoadChatTemplates(o.Tokenizer, testdata.TokenizerDir(t, "qwen3"), otherTemplate)
			if err != nil {
				t.Fatal(err)
			}
			o.Chat = ct
		}},
		{"block size", []string{checkBlockSize}, func(o *vllmemu.Options) { o.BlockSize = 2 * blockSize }},
		{"seed", []string{checkHashes}, func(o *vllmemu.Options) { s := "1"; o.Seed = &s }},
		{"hash algorithm", []string{checkHashAlgorithm, checkHashes}, func(o *vllmemu.Options) { o.HashAlgo = blockhash.XXHash }},
	}
	engines := make([]*emu, len(cases))
	for i, tc := range cases {
		o := emuOptions(t)
		tc.mod(&o)
		engines[i] = startEmu(t, o)
	}
	begin := time.Now()
	s, _ := runServer(t, parityConfig(t, config.ParityKeepRouting, engines...))
	start := time.Now() // the replicas joined when the server started
	t.Logf("server ready after %s", start.Sub(begin).Round(time.Millisecond))
	// Traffic: a new prompt to every engine now and then, so each publishes
	// BlockStored runs from block 0 (the hashes and events' block_size
	// checks read them).
	n, last := 0, time.Time{}
	traffic := func() {
		if time.Since(last) < 300*time.Millisecond {
			return
		}
		last = time.Now()
		n++
		for _, m := range engines {
			m.complete(t, fmt.Sprintf("Request %d. %s", n, prose(4)))
		}
	}
	for i, tc := range cases {
		name := fmt.Sprintf("r%d", i)
		for _, c := range tc.want {
			st := waitParity(t, s, name, c, parityMismatch, traffic)
			if st.Evidence == "" {
				t.Errorf("%s (%s): %s mismatch without evidence", name, tc.name, c)
			}
			t.Logf("%s (%s) flagged on %s after %s: %s", name, tc.name, c, time.Since(start).Round(time.Millisecond), st.Evidence)
		}
	}
	// The matching engine: every check matches (but cached_tokens, which
	// needs requests routed by kvroute: TestParityCachedTokens).
	for _, c := range parityChecks {
		if c == checkCachedTokens {
			continue
		}
		waitParity(t, s, "r0", c, parityMatch, traffic)
	}
	t.Logf("r0 matches on every check after %s", time.Since(start).Round(time.Millisecond))
	v := getReplicas(t, s)
	got := map[string][]string{}
	for _, f := range v.Pools[0].ParityMismatches {
		got[f.Replica] = append(got[f.Replica], f.Check)
	}
	for i, tc := range cases {
		name := fmt.Sprintf("r%d", i)
		if !slices.Equal(got[name], tc.want) {
			t.Errorf("%s (%s): mismatches %v, want %v", name, tc.name, got[name], tc.want)
		}
	}
	if v.Pools[0].Routing != "prefix" {
		t.Errorf("keep_routing: pool routing %s", v.Pools[0].Routing)
	}
	flagged := map[string]bool{}
	for _, line := range strings.Split(metricsText(t, s), "\n") {
		if strings.HasPrefix(line, "kvroute_parity_mismatch{") && strings.HasSuffix(line, " 1") {
			flagged[line] = true
		}
	}
	for i, tc := range cases {
		for _, c := range tc.want {
			want := fmt.Sprintf(`kvroute_parity_mismatch{check=%q,pool="qwen",replica="r%d"} 1`, c, i)
			if !flagged[want] {
				t.Errorf("metrics lack %s", want)
			}
			delete(flagged, want)
		}
	}
	if len(flagged) > 0 {
		t.Errorf("false flags in metrics: %v", flagged)
	}
}

// TestParityRouteByLoad: with on_mismatch route_by_load a mismatching
// replica makes its pool route by load (explain says parity_mismatch,
// /readyz names the check) and prefix routing returns with parity.
func TestParityRouteByLoad(t *testing.T) {
	good := startEmu(t, emuOptions(t))
	o := emuOptions(t)
	o.BlockSize = 2 * blockSize
	bad := startEmu(t, o)
	s, _ := runServer(t, parityConfig(t, config.ParityRouteByLoad, good, bad))
	waitParity(t, s, "r1", checkBlockSize, parityMismatch, func() { bad.complete(t, prose(8)) })
	for deadline := time.Now().Add(5 * time.Second); getReplicas(t, s).Pools[0].Routing != "load_only"; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("pool never routed by load")
		}
	}
	res, err := http.Post("http://"+s.AdminAddr().String()+"/debug/explain?path=/v1/completions", "application/json",
		strings.NewReader(`{"model":"qwen","prompt":"`+prose(4)+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	var x struct {
		Reason string          `json:"reason"`
		Parity []ParityFinding `json:"parity_mismatches"`
	}
	err = json.NewDecoder(res.Body).Decode(&x)
	res.Body.Close()
	if err != nil || x.Reason != routing.ReasonParityMismatch || len(x.Parity) == 0 || x.Parity[0].Check != checkBlockSize {
		t.Fatalf("explain: %+v, %v", x, err)
	}
	res, err = http.Get("http://" + s.AdminAddr().String() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.Contains(string(body), "pool qwen replica r1: block_size mismatch") ||
		!strings.Contains(string(body), "pool qwen routes by load only") {
		t.Fatalf("readyz %d: %s", res.StatusCode, body)
	}
	// The replica leaves: parity returns, and so does prefix routing.
	if err := s.SetReplicas("qwen", []Replica{{Config: parityConfig(t, config.ParityKeepRouting, good).Pools[0].Replicas[0]}}); err != nil {
		t.Fatal(err)
	}
	if v := getReplicas(t, s); v.Pools[0].Routing != "prefix" || len(v.Pools[0].ParityMismatches) != 0 {
		t.Fatalf("after the replica left: %+v", v.Pools[0])
	}
}

func metricsText(t *testing.T, s *Server) string {
	t.Helper()
	res, err := http.Get("http://" + s.AdminAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return string(b)
}
