package extproc

import (
	"context"
	"fmt"
	"github.com/kvroute/kvroute/routing"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/kvroute/kvroute/blockhash"
	"github.com/kvroute/kvroute/index"
	"github.com/kvroute/kvroute/internal/fakeenvoy"
	"github.com/kvroute/kvroute/internal/routetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const sharedPrefix = "You are a careful assistant. Answer in one short paragraph and cite the policy section when it applies to the question asked"

func TestPrefixHolderGetsTheRequest(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			h := newHarness(t, harnessOptions{debug: true})
			prompt := sharedPrefix + " what is the refund window"
			h.ix.Store(h.eps[1].Replica, h.keysOf(sharedPrefix, blockhash.RequestKeys{}), index.TierGPU)
			res := h.do(mode.cfg, completion(prompt))
			if res.Status != 0 {
				t.Fatalf("local reply %d %q", res.Status, res.LocalBody)
			}
			if got := res.Headers[HeaderDestination]; got != h.eps[1].Address {
				t.Fatalf("routed to %q, want the holder %s (reason %s)", got, h.eps[1].Address, res.Headers[HeaderDebugReason])
			}
			if got := res.Metadata["envoy.lb"].GetFields()[HeaderDestination].GetStringValue(); got != h.eps[1].Address {
				t.Errorf("envoy.lb metadata %q, want %s", got, h.eps[1].Address)
			}
			if !res.ClearRouteCache {
				t.Error("clear_route_cache not set with the header mutation")
			}
			if string(res.Body) != string(completion(prompt).Body) {
				t.Errorf("upstream body changed: %q", res.Body)
			}
			if res.Headers[HeaderDebugMatchedTokens] == "0" || res.Headers[HeaderDebugReason] != routing.ReasonHit {
				t.Errorf("debug headers: matched %s reason %s", res.Headers[HeaderDebugMatchedTokens], res.Headers[HeaderDebugReason])
			}
			if h.decisions(routing.OutcomePrefix, routing.ReasonHit) != 1 {
				t.Error("decision metric not counted")
			}
		})
	}
}

func TestHeaderOnlyRequestIsRoutedAtHeaders(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			h := newHarness(t, harnessOptions{})
			res := h.do(mode.cfg, fakeenvoy.Request{Method: "GET", Path: "/v1/models"})
			if res.Status != 0 || res.Headers[HeaderDestination] == "" {
				t.Fatalf("status %d, destination %q", res.Status, res.Headers[HeaderDestination])
			}
			if h.decisions(routing.OutcomeLoad, routing.ReasonNoBody) != 1 {
				t.Error("header-only decision not counted as load/no_body")
			}
		})
	}
}

func TestChunkedBodyIsReassembledAndStreamedBack(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	words := make([]string, 40_000)
	for i := range words {
		words[i] = fmt.Sprintf("w%d", i%997)
	}
	prompt := strings.Join(words, " ") // ~200 KB: many 16 KiB chunks in, 62,000-byte chunks back
	h.ix.Store(h.eps[2].Replica, h.keysOf(prompt, blockhash.RequestKeys{}), index.TierGPU)
	req := completion(prompt)
	for _, mode := range modes[2:] {
		res := h.do(mode.cfg, req)
		if res.Headers[HeaderDestination] != h.eps[2].Address {
			t.Fatalf("%s: routed to %q, want %s", mode.name, res.Headers[HeaderDestination], h.eps[2].Address)
		}
		if string(res.Body) != string(req.Body) {
			t.Fatalf("%s: upstream body differs (%d bytes, want %d)", mode.name, len(res.Body), len(req.Body))
		}
	}
}

func TestTrailersAreAnswered(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			h := newHarness(t, harnessOptions{})
			req := completion(sharedPrefix)
			req.Trailers = map[string]string{"x-checksum": "abc"}
			res := h.do(mode.cfg, req)
			if res.Status != 0 || res.Headers[HeaderDestination] == "" || string(res.Body) != string(req.Body) {
				t.Fatalf("status %d, destination %q, body %d bytes", res.Status, res.Headers[HeaderDestination], len(res.Body))
			}
		})
	}
}

func TestBodyLimit(t *testing.T) {
	h := newHarness(t, harnessOptions{bodyLimit: 64 << 10})
	big := completion(strings.Repeat("token ", 20_000)) // ~120 KB
	// Full duplex: kvroute enforces the limit with a 413.
	res := h.do(fakeenvoy.Config{Mode: fakeenvoy.FullDuplex, SendProtocolConfig: true}, big)
	if res.Status != 413 {
		t.Fatalf("full duplex: status %d, want 413", res.Status)
	}
	// Buffered: Envoy answers 413 itself and kvroute never sees the body.
	res = h.do(fakeenvoy.Config{Mode: fakeenvoy.Buffered, BodyLimitBytes: 64 << 10}, big)
	if res.Status != 413 {
		t.Fatalf("buffered: status %d, want 413", res.Status)
	}
}

func TestMalformedJSON(t *testing.T) {
	bad := fakeenvoy.Request{Method: "POST", Path: "/v1/completions", Body: []byte(`{"model":"qwen3","prompt":"secret-words`)}
	for _, failOpen := range []bool{true, false} {
		h := newHarness(t, harnessOptions{failOpen: failOpen})
		for _, mode := range modes {
			res := h.do(mode.cfg, bad)
			switch {
			case failOpen && (res.Status != 0 || res.Headers[HeaderDestination] == ""):
				t.Errorf("fail-open %s: status %d, destination %q; want routed by load", mode.name, res.Status, res.Headers[HeaderDestination])
			case !failOpen && res.Status != 400:
				t.Errorf("fail-closed %s: status %d, want 400", mode.name, res.Status)
			}
		}
		if strings.Contains(h.logs.String(), "secret-words") {
			t.Error("prompt text appeared in the logs")
		}
	}
}

func TestUnknownModel(t *testing.T) {
	req := fakeenvoy.Request{Method: "POST", Path: "/v1/completions", Body: []byte(`{"model":"gpt-9","prompt":"hello there"}`)}
	h := newHarness(t, harnessOptions{failOpen: true})
	if res := h.do(modes[0].cfg, req); res.Status != 0 || res.Headers[HeaderDestination] == "" {
		t.Fatalf("fail-open: status %d", res.Status)
	}
	h = newHarness(t, harnessOptions{failOpen: false})
	if res := h.do(modes[0].cfg, req); res.Status != 404 || res.Details == "" {
		t.Fatalf("fail-closed: status %d details %q, want 404 with details", res.Status, res.Details)
	}
}

func TestEmptyPromptRoutesByLoad(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	res := h.do(modes[0].cfg, completion(""))
	if res.Status != 0 || res.Headers[HeaderDestination] == "" || h.decisions(routing.OutcomeLoad, routing.ReasonEmptyPrompt) != 1 {
		t.Fatalf("status %d destination %q", res.Status, res.Headers[HeaderDestination])
	}
}

func TestChatRequestRoutesOnRenderedPrompt(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	body := `{"model":"qwen3","messages":[{"role":"system","content":"` + sharedPrefix + `"},{"role":"user","content":"hi"}]}`
	rendered, _ := routetest.LineChat{}.AppendChat(nil, []byte(body))
	k, _ := blockhash.NewTokenKeyer("qwen", testBlockSize)
	raw, _ := blockhash.AppendKeys(k, nil, k.Root(), routetest.WordTokenizer{}.Encode(string(rendered), false), blockhash.RequestKeys{})
	keys := make([]index.BlockKey, len(raw))
	for i := range raw {
		keys[i] = index.BlockKey(raw[i])
	}
	h.ix.Store(h.eps[0].Replica, keys, index.TierGPU)
	res := h.do(modes[0].cfg, fakeenvoy.Request{Method: "POST", Path: "/v1/chat/completions", Body: []byte(body)})
	if res.Headers[HeaderDestination] != h.eps[0].Address {
		t.Fatalf("routed to %q, want %s", res.Headers[HeaderDestination], h.eps[0].Address)
	}
}

func TestLoRAAndSaltEnterTheKeys(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	// Replica 0 holds the plain prefix, replica 2 the salted LoRA one.
	h.ix.Store(h.eps[0].Replica, h.keysOf(sharedPrefix, blockhash.RequestKeys{}), index.TierGPU)
	h.ix.Store(h.eps[2].Replica, h.keysOf(sharedPrefix, blockhash.RequestKeys{LoRAName: "sql-lora", CacheSalt: "tenant-a"}), index.TierGPU)
	body := fmt.Sprintf(`{"model":"sql-lora","prompt":%q,"cache_salt":"tenant-a"}`, sharedPrefix)
	res := h.do(modes[0].cfg, fakeenvoy.Request{Method: "POST", Path: "/v1/completions", Body: []byte(body)})
	if res.Headers[HeaderDestination] != h.eps[2].Address {
		t.Fatalf("routed to %q, want the salted LoRA holder %s", res.Headers[HeaderDestination], h.eps[2].Address)
	}
}

func TestTiesSpreadAcrossReplicas(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	keys := h.keysOf(sharedPrefix, blockhash.RequestKeys{})
	h.ix.Store(h.eps[0].Replica, keys, index.TierGPU)
	h.ix.Store(h.eps[1].Replica, keys, index.TierGPU)
	seen := map[string]int{}
	for i := 0; i < 60; i++ {
		res := h.do(fakeenvoy.Config{Mode: fakeenvoy.Buffered, SendProtocolConfig: true}, completion(sharedPrefix))
		seen[res.Headers[HeaderDestination]]++
		h.ix.EndWork(h.eps[0].Replica, index.Ticket{}) // keep in-flight counts from breaking the tie
	}
	if seen[h.eps[0].Address] == 0 || seen[h.eps[1].Address] == 0 || seen[h.eps[2].Address] != 0 {
		t.Fatalf("tie between two equal holders split %v", seen)
	}
	// A prompt nobody holds is placed by rendezvous hashing of its first
	// block: every request of one new document lands on one replica (the
	// fleet is idle, so the load bound admits all three).
	seen = map[string]int{}
	for i := 0; i < 20; i++ {
		res := h.do(fakeenvoy.Config{Mode: fakeenvoy.Buffered, SendProtocolConfig: true}, completion(fmt.Sprintf("a brand new document nobody holds yet, question %d", i)))
		seen[res.Headers[HeaderDestination]]++
	}
	if len(seen) != 1 {
		t.Fatalf("no-hit requests of one document went %v, want one replica", seen)
	}
	// Equal load and equal caches: load balancing reaches every replica.
	h.ix.Clear(h.eps[0].Replica)
	h.ix.Clear(h.eps[1].Replica)
	seen = map[string]int{}
	for i := 0; i < 60; i++ {
		res := h.do(fakeenvoy.Config{Mode: fakeenvoy.Buffered, SendProtocolConfig: true}, completion(fmt.Sprintf("other prompt %d", i)))
		seen[res.Headers[HeaderDestination]]++
	}
	if len(seen) != 3 {
		t.Fatalf("no-hit requests reached %d replicas: %v", len(seen), seen)
	}
}

// TestNewPrefixesGoToTheLeastLoaded: with no holder, the replica with the
// least queued work wins even when its cache is the fullest.
func TestNewPrefixesGoToTheLeastLoaded(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.ix.Store(h.eps[1].Replica, h.keysOf(sharedPrefix, blockhash.RequestKeys{}), index.TierGPU)
	h.ix.SetLoad(h.eps[0].Replica, index.Load{Running: 1, Waiting: 2}, h.clock())
	h.ix.SetLoad(h.eps[2].Replica, index.Load{Running: 2, Waiting: 1}, h.clock())
	for i := 0; i < 10; i++ {
		res := h.do(modes[0].cfg, completion(fmt.Sprintf("fresh prompt %d", i)))
		if got := res.Headers[HeaderDestination]; got != h.eps[1].Address {
			t.Fatalf("request %d went to %s, want the idle %s", i, got, h.eps[1].Address)
		}
	}
}

func TestOverloadedHolderIsAvoided(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.ix.Store(h.eps[1].Replica, h.keysOf(sharedPrefix, blockhash.RequestKeys{}), index.TierGPU)
	h.ix.SetLoad(h.eps[1].Replica, index.Load{Running: 64, Waiting: 200, KVUsage: 0.5}, h.clock())
	res := h.do(modes[0].cfg, completion(sharedPrefix))
	if res.Headers[HeaderDestination] == h.eps[1].Address {
		t.Fatal("routed to a holder with 264 queued requests")
	}
	// Above the KV-usage ceiling the holder costs kv_full_penalty (0.5 s)
	// more: more than this short prompt's prefill elsewhere.
	h.ix.SetLoad(h.eps[1].Replica, index.Load{KVUsage: 0.99}, h.clock())
	if res := h.do(modes[0].cfg, completion(sharedPrefix)); res.Headers[HeaderDestination] == h.eps[1].Address {
		t.Fatal("routed to a holder above the KV-usage ceiling")
	}
}

func TestNoEligibleReplicaIs503(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	for _, ep := range h.eps {
		h.ix.SetHealthy(ep.Replica, false)
	}
	for _, mode := range modes {
		res := h.do(mode.cfg, completion(sharedPrefix))
		if res.Status != 503 || res.Details == "" {
			t.Fatalf("%s: status %d details %q, want 503 with details", mode.name, res.Status, res.Details)
		}
	}
}

func TestSubsetHintRestrictsCandidates(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.ix.Store(h.eps[1].Replica, h.keysOf(sharedPrefix, blockhash.RequestKeys{}), index.TierGPU)
	req := completion(sharedPrefix)
	req.SubsetHint = []string{h.eps[2].Address}
	if res := h.do(modes[0].cfg, req); res.Headers[HeaderDestination] != h.eps[2].Address {
		t.Fatalf("routed to %q outside the subset", res.Headers[HeaderDestination])
	}
	req.SubsetHint = []string{"10.9.9.9:1"}
	if res := h.do(modes[0].cfg, req); res.Status != 503 {
		t.Fatalf("empty subset: status %d, want 503", res.Status)
	}
}

// TestRoutedBlocksAreHeldInEveryMode: the blocks of a routed request are
// stored as speculative on its replica (after the answer is sent, so for a
// client that cancels at once they may land a moment after its exchange).
func TestRoutedBlocksAreHeldInEveryMode(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	for i, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			prompt := fmt.Sprintf("%s and question %d nobody asked before", sharedPrefix, i)
			keys := h.keysOf(prompt, blockhash.RequestKeys{})
			dest := h.do(mode.cfg, completion(prompt)).Headers[HeaderDestination]
			i := slices.IndexFunc(h.eps, func(ep routing.Endpoint) bool { return ep.Address == dest })
			if i < 0 {
				t.Fatalf("destination %q is no endpoint", dest)
			}
			want := h.eps[i].Replica.ID
			deadline := time.Now().Add(5 * time.Second)
			for {
				m := h.ix.LookupRoute(h.pool, keys, nil)
				if len(m) == 1 && m[0].Replica == want && m[0].Blocks == len(keys) {
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("after routing to replica %d, the index holds %+v of %d blocks", want, m, len(keys))
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
}

func TestSpeculativeEntriesHoldABurstThenExpire(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	prompt := sharedPrefix + " a brand new question nobody asked before"
	first := h.do(modes[0].cfg, completion(prompt)).Headers[HeaderDestination]
	for i := 0; i < 10; i++ {
		if got := h.do(modes[0].cfg, completion(prompt)).Headers[HeaderDestination]; got != first {
			t.Fatalf("burst request %d went to %s, first went to %s", i, got, first)
		}
	}
	h.advance(3 * time.Second)
	h.ix.SweepExpired()
	if m := h.ix.LookupRoute(h.pool, h.keysOf(prompt, blockhash.RequestKeys{}), nil); len(m) != 0 {
		t.Fatalf("speculative entries survived their TTL: %+v", m)
	}
}

func TestInFlightCountDropsWhenStreamEnds(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	for _, mode := range modes {
		h.do(mode.cfg, completion(sharedPrefix))
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		total := int64(0)
		for _, ep := range h.eps {
			st, _ := h.ix.Replica(ep.Replica)
			total += st.InFlight
		}
		if total == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d requests still in flight after their streams ended", total)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestThousandConcurrentStreams(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.ix.Store(h.eps[0].Replica, h.keysOf(sharedPrefix, blockhash.RequestKeys{}), index.TierGPU)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var failures atomic.Int64
	// Buffered and full-duplex streams, each stating its mode. What this
	// test holds is that every stream is answered, not how fast: 1,000
	// streams under -race on a loaded machine can queue past the fake
	// Envoy's default 5 s message timeout, so each gets 30 s.
	explicit := []fakeenvoy.Config{modes[0].cfg, modes[2].cfg}
	for i := range explicit {
		explicit[i].MessageTimeout = 30 * time.Second
	}
	for i := 0; i < 1000; i++ {
		mode := struct {
			name string
			cfg  fakeenvoy.Config
		}{fmt.Sprint(i), explicit[i%2]}
		if i%4 == 3 {
			mode.cfg.End = fakeenvoy.EndCancel
		}
		wg.Go(func() {
			res, err := fakeenvoy.Do(ctx, h.client, mode.cfg, completion(fmt.Sprintf("%s question %d", sharedPrefix, i)))
			if err != nil || res.Status != 0 || res.Headers[HeaderDestination] == "" {
				if failures.Add(1) < 5 {
					t.Logf("%s: %v status %d %s", mode.name, err, res.Status, res.Details)
				}
			}
		})
	}
	wg.Wait()
	if n := failures.Load(); n != 0 {
		t.Fatalf("%d of 1000 concurrent streams failed", n)
	}
}

func TestNoPromptTextInLogs(t *testing.T) {
	h := newHarness(t, harnessOptions{failOpen: true})
	const marker = "zebra-quokka-7731"
	for _, mode := range modes {
		h.do(mode.cfg, completion(marker+" tell me everything"))
		h.do(mode.cfg, fakeenvoy.Request{Method: "POST", Path: "/v1/completions", Body: []byte(`{"prompt":"` + marker + `"`)})
		h.do(mode.cfg, fakeenvoy.Request{Method: "POST", Path: "/v1/chat/completions", Body: []byte(`{"model":"qwen3","messages":"` + marker + `"}`)})
	}
	if logs := h.logs.String(); logs == "" || strings.Contains(logs, marker) {
		t.Fatalf("logs empty or contain the prompt: %q", logs)
	}
}

// TestGatewayEndToEnd sends real HTTP requests through the ORIGINAL_DST-style
// gateway to fake replicas and checks which replica served them.
func TestGatewayEndToEnd(t *testing.T) {
	var addrs []string
	var hp atomic.Pointer[harness]
	var inFlightWhileServing atomic.Int64
	for i := 0; i < 3; i++ {
		name := fmt.Sprintf("vllm-%d", i)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// As with Envoy, the ext_proc stream stays open while the
			// upstream serves, so the router still counts the request.
			if h := hp.Load(); h != nil {
				st, _ := h.ix.Replica(h.eps[i].Replica)
				inFlightWhileServing.Store(st.InFlight)
			}
			w.Header().Set("x-served-by", name)
			if r.Header.Get(fakeenvoy.DestinationHeader) == "" {
				w.WriteHeader(500)
			}
			fmt.Fprint(w, `{"choices":[{"text":"ok"}]}`)
		}))
		t.Cleanup(srv.Close)
		addrs = append(addrs, strings.TrimPrefix(srv.URL, "http://"))
	}
	h := newHarness(t, harnessOptions{addresses: addrs})
	hp.Store(h)
	h.ix.Store(h.eps[2].Replica, h.keysOf(sharedPrefix, blockhash.RequestKeys{}), index.TierGPU)
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			base := routetest.StartGateway(t, h.addr, mode.cfg, nil)
			req, _ := http.NewRequest("POST", base+"/v1/completions",
				strings.NewReader(fmt.Sprintf(`{"model":"qwen3","prompt":%q}`, sharedPrefix+" and more")))
			req.Header.Set(fakeenvoy.DestinationHeader, addrs[0]) // a client trying to steer: stripped
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 || resp.Header.Get("x-served-by") != "vllm-2" {
				t.Fatalf("status %d served by %q, want 200 from vllm-2", resp.StatusCode, resp.Header.Get("x-served-by"))
			}
			if n := inFlightWhileServing.Swap(0); n != 1 {
				t.Errorf("router counted %d requests in flight on vllm-2 while it served, want 1", n)
			}
			http.DefaultClient.CloseIdleConnections()
		})
	}
}

// TestConfiguredBodyModeNeedsNoInference: with routing.body_mode set, old
// Envoy (no protocol_config) is served correctly under concurrency.
func TestConfiguredBodyModeNeedsNoInference(t *testing.T) {
	for _, c := range []struct {
		mode string
		cfg  fakeenvoy.Config
	}{{"full_duplex", fakeenvoy.Config{Mode: fakeenvoy.FullDuplex}}, {"buffered", fakeenvoy.Config{Mode: fakeenvoy.Buffered}}} {
		h := newHarness(t, harnessOptions{bodyMode: c.mode})
		var wg sync.WaitGroup
		var failures atomic.Int64
		for i := 0; i < 200; i++ {
			wg.Go(func() {
				res, err := fakeenvoy.Do(context.Background(), h.client, c.cfg, completion(fmt.Sprint(sharedPrefix, i)))
				if err != nil || res.Headers[HeaderDestination] == "" {
					failures.Add(1)
				}
			})
		}
		wg.Wait()
		if n := failures.Load(); n != 0 {
			t.Fatalf("%s: %d of 200 streams failed", c.mode, n)
		}
	}
}

// TestScoresHeaderListsEveryWeighedCost: with routing.scores_header the
// routed request carries every weighed endpoint's cost, the holder's lowest;
// without it, no such header.
func TestScoresHeaderListsEveryWeighedCost(t *testing.T) {
	h := newHarness(t, harnessOptions{scores: true})
	prompt := sharedPrefix + " what is the refund window"
	h.ix.Store(h.eps[1].Replica, h.keysOf(sharedPrefix, blockhash.RequestKeys{}), index.TierGPU)
	res := h.do(modes[0].cfg, completion(prompt))
	got := res.Headers[HeaderScores]
	costs := map[string]float64{}
	for _, kv := range strings.Split(got, ",") {
		name, v, ok := strings.Cut(kv, "=")
		f, err := strconv.ParseFloat(v, 64)
		if !ok || err != nil {
			t.Fatalf("%s: %q is not name=ms", HeaderScores, got)
		}
		costs[name] = f
	}
	if len(costs) != len(h.eps) {
		t.Fatalf("%s = %q: %d endpoints, want %d", HeaderScores, got, len(costs), len(h.eps))
	}
	for _, ep := range h.eps {
		if ep.Name != h.eps[1].Name && costs[ep.Name] <= costs[h.eps[1].Name] {
			t.Errorf("%s costs %v ms, not above the holder's %v ms", ep.Name, costs[ep.Name], costs[h.eps[1].Name])
		}
	}
	if strings.Contains(got, "refund") {
		t.Fatal("the scores header carries prompt text")
	}
	if plain := newHarness(t, harnessOptions{}).do(modes[0].cfg, completion(prompt)); plain.Headers[HeaderScores] != "" {
		t.Fatalf("%s without scores_header: %q", HeaderScores, plain.Headers[HeaderScores])
	}
}
