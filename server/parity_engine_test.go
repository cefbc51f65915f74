package server

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvroute/kvroute/config"
	"github.com/kvroute/kvroute/internal/fakeenvoy"
	"github.com/kvroute/kvroute/internal/loopback"
	"github.com/kvroute/kvroute/internal/routetest"
	"github.com/kvroute/kvroute/internal/testdata"
	"github.com/kvroute/kvroute/internal/vllmemu"
	"github.com/kvroute/kvroute/routing"
)

// cachedTokensConfig is parityConfig with a cached_tokens window short
// enough for a test.
func cachedTokensConfig(t *testing.T, engines ...*emu) *config.Config {
	t.Helper()
	cfg := parityConfig(t, config.ParityKeepRouting, engines...)
	cfg.Parity.CachedTokensWindow = config.Duration(time.Second)
	cfg.Parity.CachedTokensMinTokens = 64
	return cfg
}

// startGateway runs the loopback Envoy stand-in in front of s: a request
// posted to its URL is routed by s over ext_proc and proxied to the engine s
// picked, and the ext_proc stream stays open until the answer is back.
func startGateway(t *testing.T, s *Server) string {
	t.Helper()
	return routetest.StartGateway(t, s.ExtProcAddr().String(), fakeenvoy.Config{}, quietLogger())
}

// completeVia posts one completion through the gateway.
func completeVia(t *testing.T, gateway, prompt string) {
	t.Helper()
	body := fmt.Sprintf(`{"model":"qwen","prompt":%q,"max_tokens":1}`, prompt)
	res, err := http.Post(gateway+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	msg, _ := io.ReadAll(io.LimitReader(res.Body, 512))
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("completion through the gateway: %d %q", res.StatusCode, msg)
	}
}

// poolTokens is the pool's funnel as /debug/replicas shows it.
func poolTokens(t *testing.T, s *Server) map[string]int64 {
	t.Helper()
	return getReplicas(t, s).Pools[0].PromptTokens
}

// checkFunnelAddsUp: the routing-time outcomes add up to the prompt tokens
// the engine admitted from kvroute (all it admitted less direct; kvroute
// tokenizes as the engine does here), within 0.1 %, and the engine-side
// ones stay parts of what they re-label.
func checkFunnelAddsUp(t *testing.T, s *Server, m *emu, direct int64) {
	t.Helper()
	got := poolTokens(t, s)
	routed := got[routing.TokensCachedPredicted] + got[routing.TokensNew] + got[routing.TokensGivenUpForLoad]
	admitted := m.e.Stats().PromptTokens - direct
	if diff := routed - admitted; diff*1000 > admitted || -diff*1000 > admitted {
		t.Errorf("funnel: %d prompt tokens routed by outcome, the engine admitted %d (%v)", routed, admitted, got)
	}
	if got[routing.TokensStale] > got[routing.TokensCachedPredicted] {
		t.Errorf("stale %d over cached_predicted %d", got[routing.TokensStale], got[routing.TokensCachedPredicted])
	}
	if got[routing.TokensCachedUnpredicted] > got[routing.TokensNew]+got[routing.TokensGivenUpForLoad] {
		t.Errorf("cached_unpredicted %d over new + given_up_for_load %v", got[routing.TokensCachedUnpredicted], got)
	}
}

// TestParityCachedTokens routes real traffic through the loopback gateway
// to one engine per case. An engine that evicts without BlockRemoved events
// leaves kvroute predicting hits it recomputes: its blocks stored again are
// counted stale and the cached_tokens check flags it. An honest engine
// serving the same requests keeps the check at match and stale at 0.
func TestParityCachedTokens(t *testing.T) {
	// Eight prompts of about 13 blocks cycle through a cache of 47 usable
	// blocks: each comes back after the engine evicted it. The honest case
	// repeats two that fit.
	prompts := make([]string, 8)
	for i := range prompts {
		prompts[i] = fmt.Sprintf("Conversation %d. %s", i, prose(16))
	}
	for _, tc := range []struct {
		name     string
		silent   bool
		noEvents bool // kvroute does not subscribe to the engine's events
		prompts  []string
		want     string // "": the check is not waited for
	}{
		{"honest engine", false, false, prompts[:2], parityMatch},
		{"evicts without events", true, false, prompts, parityMismatch},
		{"events not followed", false, true, prompts[:2], ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := emuOptions(t)
			o.NumBlocks = 48
			o.EvictWithoutEvents = tc.silent
			m := startEmu(t, o)
			cfg := cachedTokensConfig(t, m)
			if tc.noEvents {
				cfg.Pools[0].Replicas[0].Events = ""
			}
			s, _ := runServer(t, cfg)
			gw := startGateway(t, s)
			n, direct := 0, int64(0)
			traffic := func() {
				completeVia(t, gw, tc.prompts[n%len(tc.prompts)])
				n++
			}
			if tc.want != "" {
				st := waitParity(t, s, "r0", checkCachedTokens, tc.want, traffic)
				t.Logf("cached_tokens %s after %d requests: %s", st.State, n, st.Evidence)
			} else {
				// Once kvroute reads the engine's counter (the check opens
				// its first window then) and a poll later (the funnel's
				// base), each prompt reaches the engine directly first,
				// then through kvroute: cached there, unknown to kvroute.
				for deadline := time.Now().Add(30 * time.Second); !strings.HasPrefix(getReplicas(t, s).Replicas[0].Parity[checkCachedTokens].Evidence, "no window judged yet"); time.Sleep(50 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatal("kvroute never read the engine's cached tokens counter")
					}
				}
				time.Sleep(2 * parityPoll)
				for i := range 20 {
					prompt := fmt.Sprintf("Fresh prompt %d. %s", i, prose(16))
					before := m.e.Stats().PromptTokens
					m.complete(t, prompt)
					direct += m.e.Stats().PromptTokens - before
					completeVia(t, gw, prompt)
				}
			}
			// Let requests in flight settle and the last stored blocks reach
			// the funnel.
			time.Sleep(2 * parityPoll)
			got := poolTokens(t, s)
			t.Logf("funnel %v; engine admitted %d prompt tokens, %d cached", got, m.e.Stats().PromptTokens, m.e.Stats().CachedPromptTokens)
			if tc.silent && got[routing.TokensStale] == 0 {
				t.Errorf("no stale tokens although the engine recomputed blocks kvroute predicted cached")
			}
			if !tc.silent && got[routing.TokensStale] != 0 {
				t.Errorf("stale %d from an engine that publishes every eviction", got[routing.TokensStale])
			}
			if c := got[routing.TokensCachedUnpredicted]; tc.noEvents && c == 0 {
				t.Errorf("no cached_unpredicted tokens although the engine served %d from a cache kvroute does not follow", m.e.Stats().CachedPromptTokens)
			} else if c > m.e.Stats().CachedPromptTokens {
				t.Errorf("cached_unpredicted %d over the engine's %d cached tokens", c, m.e.Stats().CachedPromptTokens)
			}
			if !tc.noEvents && got[routing.TokensCachedUnpredicted] != 0 {
				t.Errorf("cached_unpredicted %d although kvroute follows every event", got[routing.TokensCachedUnpredicted])
			}
			checkFunnelAddsUp(t, s, m, direct)
			if tc.silent || tc.noEvents {
				return
			}
			// Another client's hits while kvroute routes nothing there are
			// not kvroute's to count.
			before := m.e.Stats().CachedPromptTokens
			for range 40 {
				m.complete(t, tc.prompts[0])
			}
			time.Sleep(3 * parityPoll)
			if got := poolTokens(t, s)[routing.TokensCachedUnpredicted]; got != 0 {
				t.Errorf("cached_unpredicted %d after another client's %d cached tokens while kvroute was idle", got, m.e.Stats().CachedPromptTokens-before)
			}
		})
	}
}

// TestParityDataParallelReplica: the checks of a replica with two DP ranks
// read both ranks' status (named NAME/dpR) under the replica's name, so a
// matching engine reaches match on every check that traffic evaluates and
// each rank row shows the replica's states.
func TestParityDataParallelReplica(t *testing.T) {
	o := emuOptions(t)
	var engines []*vllmemu.Engine
	base, err := loopback.BindConsecutive(2, func(base int) error {
		var err error
		engines, err = vllmemu.NewDataParallel(o, 2, vllmemu.KVEventsConfig{EnableKVCacheEvents: true, Publisher: "zmq", Endpoint: fmt.Sprintf("tcp://127.0.0.1:%d", base)})
		if err != nil {
			return err
		}
		if err := vllmemu.StartAll(context.Background(), engines); err != nil {
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = vllmemu.CloseAll(engines) })
	srv := httptest.NewServer(vllmemu.DPHandler(engines))
	t.Cleanup(srv.Close)
	cfg, err := config.Parse(fmt.Appendf(nil, `listen: {extproc: "127.0.0.1:0", admin: "127.0.0.1:0"}
ingest: {scrape_interval: 100ms, stall_timeout: 2s}
parity: {interval: 1s, timeout: 2s}
pools:
  - name: qwen
    models: [qwen]
    tokenizer: %q
    block_size: %d
    hash: {algorithm: sha256, seed: "0"}
    replicas:
      - {name: dp, address: %q, events: "tcp://127.0.0.1:%d", metrics: %q, data_parallel_size: 2}
`, testdata.TokenizerDir(t, "qwen3"), blockSize, srv.Listener.Addr().String(), base, srv.URL+"/metrics"))
	if err != nil {
		t.Fatal(err)
	}
	s, _ := runServer(t, cfg)
	n := 0
	traffic := func() {
		for rank := range 2 {
			body := fmt.Sprintf(`{"model":"qwen","prompt":%q,"max_tokens":1}`, fmt.Sprintf("Request %d. %s", n, prose(4)))
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/completions", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set(vllmemu.HeaderDataParallelRank, fmt.Sprint(rank))
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			n++
		}
	}
	for _, c := range []string{checkHashes, checkBlockSize, checkHashAlgorithm} {
		for _, rank := range []string{"dp/dp0", "dp/dp1"} {
			waitParity(t, s, rank, c, parityMatch, traffic)
		}
	}
}

// TestParityCanariesStayUnderOnePercent counts the engine's POST /tokenize
// requests: with no traffic the periodic rounds (parity.interval 1s here)
// wait, so the only canaries are the start round's; once kvroute has routed
// requestsPerCanary requests per canary to the replica, a round runs again.
func TestParityCanariesStayUnderOnePercent(t *testing.T) {
	var tokenizes atomic.Int64
	e, srv := routetest.StartEngine(t, emuOptions(t), func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/tokenize" {
				tokenizes.Add(1)
			}
			h.ServeHTTP(w, r)
		})
	})
	m := &emu{e: e, srv: srv}
	s, _ := runServer(t, parityConfig(t, "keep_routing", m))
	gw := startGateway(t, s)
	waitParity(t, s, "r0", checkTokens, parityMatch, nil)
	perRound := int64(len(canaries("qwen")))
	start := tokenizes.Load()
	time.Sleep(3500 * time.Millisecond) // three periodic ticks, no traffic
	if n := tokenizes.Load() - start; n != 0 {
		t.Fatalf("%d canary requests in 3 idle intervals; want 0 (no routed traffic to be 1 %% of)", n)
	}
	routed := int(requestsPerCanary * perRound)
	for i := range routed {
		completeVia(t, gw, fmt.Sprintf("Request %d. %s", i, prose(4)))
	}
	for deadline := time.Now().Add(10 * time.Second); tokenizes.Load()-start < perRound; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no periodic canary round after %d routed requests", routed)
		}
	}
	if n := tokenizes.Load() - start; n*100 > int64(routed) {
		t.Errorf("%d canary requests for %d routed: over 1 %%", n, routed)
	}
}
