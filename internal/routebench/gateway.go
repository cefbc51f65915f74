package routebench

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"
)

// PolicyGateway is the gateway the baselines run behind: an HTTP reverse
// proxy that picks the upstream itself with a gateway-side Policy instead of
// asking kvroute over ext_proc. Requests therefore take one proxy hop under
// every policy, and only the choice differs.
type PolicyGateway struct {
	policy    Policy
	upstreams []*url.URL
	proxy     *httputil.ReverseProxy

	// Down, when set, reports replicas the gateway knows are down (it skips
	// them, as a gateway does with endpoints the orchestrator removed).
	Down func(i int) bool

	mu       sync.Mutex
	inFlight []int
	served   []int
}

// NewPolicyGateway proxies to upstreams (ip:port each) as policy picks.
func NewPolicyGateway(policy Policy, upstreams []string) *PolicyGateway {
	g := &PolicyGateway{policy: policy, inFlight: make([]int, len(upstreams)), served: make([]int, len(upstreams))}
	for _, u := range upstreams {
		g.upstreams = append(g.upstreams, &url.URL{Scheme: "http", Host: u})
	}
	g.proxy = &httputil.ReverseProxy{
		Rewrite:       func(*httputil.ProxyRequest) {},
		Transport:     &http.Transport{MaxIdleConnsPerHost: 256, IdleConnTimeout: 30 * time.Second},
		FlushInterval: -1,
	}
	return g
}

// ServeHTTP reads the OpenAI body's prompt, picks an upstream and proxies.
func (g *PolicyGateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "read body: "+err.Error(), http.StatusBadRequest)
		return
	}
	var fields struct {
		Model     string        `json:"model"`
		Prompt    string        `json:"prompt"`
		Messages  []ChatMessage `json:"messages"`
		CacheSalt string        `json:"cache_salt"`
	}
	_ = json.Unmarshal(body, &fields) // malformed: the policy sees empty fields
	g.mu.Lock()
	view := FleetView{InFlight: append([]int(nil), g.inFlight...)}
	g.mu.Unlock()
	if g.Down != nil {
		view.Down = make([]bool, len(view.InFlight))
		for i := range view.Down {
			view.Down[i] = g.Down(i)
		}
	}
	pr := PickRequest{Model: fields.Model, CacheSalt: fields.CacheSalt, Prompt: fields.Prompt, Messages: fields.Messages, Body: body}
	var i int
	if t, ok := g.policy.(Tracker); ok {
		var end func()
		i, end = t.Begin(pr, view)
		defer end()
	} else {
		i = g.policy.Pick(pr, view)
	}
	g.mu.Lock()
	g.inFlight[i]++
	g.served[i]++
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.inFlight[i]--
		g.mu.Unlock()
	}()
	out := r.Clone(r.Context())
	out.URL = &url.URL{Scheme: "http", Host: g.upstreams[i].Host, Path: r.URL.Path, RawQuery: r.URL.RawQuery}
	out.RequestURI = ""
	out.Body = io.NopCloser(bytes.NewReader(body))
	out.ContentLength = int64(len(body))
	g.proxy.ServeHTTP(w, out)
}

// Served returns how many requests went to each upstream.
func (g *PolicyGateway) Served() []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]int(nil), g.served...)
}
