package routing

import (
	"fmt"
	"testing"
	"time"

	"github.com/kvroute/kvroute/blockhash"
	"github.com/kvroute/kvroute/index"
	"github.com/kvroute/kvroute/internal/routetest"
)

const testBlockSize = routetest.BlockSize

// sharedPrefix is a prompt of several blocks at testBlockSize.
const sharedPrefix = "You are a careful assistant. Answer in one short paragraph and cite the policy section when it applies to the question asked"

// harness is a router over an index with one pool "qwen" (models qwen3,
// adapter sql-lora) of three replicas, on a clock the test moves; route
// makes a decision with its bookkeeping as an ext_proc stream does.
type harness struct {
	t      *testing.T
	ix     *index.Index
	pool   index.PoolID
	eps    []Endpoint
	router *Router
	clk    *routetest.Clock
}

type harnessOptions struct {
	// slack, when set, is routing.placement_slack (the harness otherwise
	// uses 0.5).
	slack *float64
}

func newHarness(t *testing.T, o harnessOptions) *harness {
	t.Helper()
	h := &harness{t: t, clk: routetest.NewClock()}
	var rs []routetest.Replica
	h.ix, h.pool, rs = routetest.NewPool(t, h.clock, []string{"127.0.0.1:8001", "127.0.0.1:8002", "127.0.0.1:8003"})
	for _, r := range rs {
		h.eps = append(h.eps, Endpoint{Replica: r.Replica, Name: r.Name, Address: r.Address, DPSize: 1})
	}
	pools := []PoolConfig{{
		Name: "qwen", ID: h.pool, Models: []string{"qwen3"}, LoRAAdapters: []string{"sql-lora"},
		Tokenizer: routetest.WordTokenizer{}, Chat: routetest.LineChat{}, Keys: routetest.PoolKeys(t, "qwen", testBlockSize),
		Endpoints: h.eps,
	}}
	slack := 0.5
	if o.slack != nil {
		slack = *o.slack
	}
	var err error
	h.router, err = NewRouter(h.ix, pools, RouterOptions{PrefillTokensPerSecond: 10000, ForeignRequestTokens: 1024, KVUsageCeiling: 0.95, KVFullPenalty: 0.5, PlacementSlack: slack})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func (h *harness) clock() time.Time { return h.clk.Now() }

// keysOf computes a prompt's block keys as the router does (token keys).
func (h *harness) keysOf(prompt string, rk blockhash.RequestKeys) []index.BlockKey {
	return routetest.WordKeys(h.t, prompt, rk)
}

// route decides a /v1/completions body and keeps the books as the ext_proc
// stream does (Begin, then End when the request is over), and returns the
// chosen address ("" when rejected).
func (h *harness) route(body []byte) string {
	h.t.Helper()
	d := h.router.Decide("/v1/completions", body, nil)
	if d.Endpoint == nil {
		return ""
	}
	h.router.Begin(&d)
	h.router.End(&d)
	return d.Endpoint.Address
}

// completion is a /v1/completions body for prompt.
func completion(prompt string) []byte {
	return fmt.Appendf(nil, `{"model":"qwen3","prompt":%q,"max_tokens":8}`, prompt)
}
