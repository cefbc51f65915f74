package routebench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/kvroute/kvroute/config"
	"github.com/kvroute/kvroute/internal/fakeenvoy"
	"github.com/kvroute/kvroute/internal/loopback"
	"github.com/kvroute/kvroute/internal/panics"
	"github.com/kvroute/kvroute/server"
)

// Replica is how kvroute reaches one engine.
type Replica struct {
	Name    string
	Address string // ip:port of the OpenAI server
	Events  string // ZMQ PUB endpoint
	Replay  string // ZMQ ROUTER replay endpoint ("" = none)
}

// KVRouteConfig describes the kvroute the harness runs in front of a fleet.
type KVRouteConfig struct {
	Model        string
	TokenizerDir string
	BlockSize    int
	Keys         string // config.KeysTokens or config.KeysEngine
	HashAlgo     string // the engines' --prefix-caching-hash-algo
	Seed         string // the engines' PYTHONHASHSEED (needed for engine keys)
	ExtProc      string // listen.extproc, e.g. "127.0.0.1:0"
	Admin        string // listen.admin; "" disables it
	Replicas     []Replica
	LoRAAdapters []string
	// DebugHeaders turns on routing.debug_headers (x-kvroute-* on routed
	// requests; the churn accounting reads them at the engines).
	DebugHeaders bool
	// Routing is extra routing config as a YAML flow mapping, e.g.
	// "{placement_slack: 1}" (kvroute-bench run --routing); "" = defaults.
	Routing string
	// ScrapeInterval is ingest.scrape_interval; 0 is the benchmark's
	// DefaultBenchScrapeInterval.
	ScrapeInterval time.Duration
	// PeersListen and Peers join the peer mesh (peers.listen and
	// peers.addresses; in plaintext, peers.insecure: every kvroute is on
	// loopback); PeersListen "" leaves it off.
	PeersListen string
	Peers       []string
	// PeersTLS, when set, runs the mesh on mutual TLS with these files
	// (peers.tls) instead of in plaintext.
	PeersTLS *PeersTLS
	// NoLoadSignals turns off /metrics scrapes and /health probes
	// (ingest.scrape_interval and health_interval 0): replicas are
	// routable while their event streams are up.
	NoLoadSignals bool
	// MaxEntries is index.max_entries; 0 keeps the default.
	MaxEntries int64
	// LogLevel is log.level; "" is warn.
	LogLevel string
}

// PeersTLS are the peer mesh's certificate files (peers.tls).
type PeersTLS struct {
	CertFile, KeyFile, CAFile string
}

// loopbackPeerEndpoints picks n free loopback endpoints for the peer mesh
// of n kvroutes (each config must name all of them before any starts).
func loopbackPeerEndpoints(n int) ([]string, error) {
	ports, err := loopback.FreePorts(n)
	if err != nil {
		return nil, fmt.Errorf("peer mesh: %w", err)
	}
	var out []string
	for _, p := range ports {
		out = append(out, fmt.Sprintf("127.0.0.1:%d", p))
	}
	return out, nil
}

// DefaultBenchScrapeInterval is how often the benchmark's kvroute reads the
// engines' load, so queue lengths are fresh at benchmark rates.
const DefaultBenchScrapeInterval = 200 * time.Millisecond

// YAML renders the config file kvroute serve reads (see docs/CONFIG.md).
func (c KVRouteConfig) YAML() string {
	var b strings.Builder
	fmt.Fprintf(&b, "listen: {extproc: %q, admin: %q}\n", c.ExtProc, c.Admin)
	level := c.LogLevel
	if level == "" {
		level = "warn"
	}
	fmt.Fprintf(&b, "log: {level: %s, format: text}\n", level)
	if c.MaxEntries > 0 {
		fmt.Fprintf(&b, "index: {max_entries: %d}\n", c.MaxEntries)
	}
	scrape := c.ScrapeInterval
	if scrape <= 0 {
		scrape = DefaultBenchScrapeInterval
	}
	if c.NoLoadSignals {
		b.WriteString("ingest: {scrape_interval: 0s, health_interval: 0s}\n")
	} else {
		fmt.Fprintf(&b, "ingest: {scrape_interval: %s}\n", scrape)
	}
	var routing []string
	if c.DebugHeaders {
		routing = append(routing, "debug_headers: true")
	}
	if extra := strings.TrimSpace(c.Routing); extra != "" {
		routing = append(routing, strings.TrimSuffix(strings.TrimPrefix(extra, "{"), "}"))
	}
	if len(routing) > 0 {
		fmt.Fprintf(&b, "routing: {%s}\n", strings.Join(routing, ", "))
	}
	switch {
	case c.PeersListen != "" && c.PeersTLS != nil:
		fmt.Fprintf(&b, "peers: {listen: %q, addresses: [%s], tls: {cert_file: %q, key_file: %q, ca_file: %q}}\n",
			c.PeersListen, strings.Join(quoteAll(c.Peers), ", "), c.PeersTLS.CertFile, c.PeersTLS.KeyFile, c.PeersTLS.CAFile)
	case c.PeersListen != "":
		fmt.Fprintf(&b, "peers: {listen: %q, insecure: true, addresses: [%s]}\n", c.PeersListen, strings.Join(quoteAll(c.Peers), ", "))
	}
	b.WriteString("pools:\n")
	fmt.Fprintf(&b, "  - name: %s\n    models: [%q]\n    tokenizer: %q\n    block_size: %d\n    keys: %s\n",
		"fleet", c.Model, c.TokenizerDir, c.BlockSize, c.Keys)
	if len(c.LoRAAdapters) > 0 {
		fmt.Fprintf(&b, "    lora_adapters: [%s]\n", strings.Join(quoteAll(c.LoRAAdapters), ", "))
	}
	fmt.Fprintf(&b, "    hash: {algorithm: %s", c.HashAlgo)
	if c.Seed != "" {
		fmt.Fprintf(&b, ", seed: %q", c.Seed)
	}
	b.WriteString("}\n    replicas:\n")
	for _, r := range c.Replicas {
		fmt.Fprintf(&b, "      - {name: %s, address: %q, events: %q", r.Name, r.Address, r.Events)
		if r.Replay != "" {
			fmt.Fprintf(&b, ", replay: %q", r.Replay)
		}
		b.WriteString("}\n")
	}
	return b.String()
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = strconv.Quote(s)
	}
	return out
}

// KVRoute is kvroute running in process behind the fake Envoy gateway.
type KVRoute struct {
	URL string // the gateway clients send to

	srv    *server.Server
	reg    *prometheus.Registry
	stopGW func()
	cancel context.CancelFunc
	wg     sync.WaitGroup
	runErr error
}

// StartKVRoute builds kvroute from c with server.New (exactly what
// `kvroute serve` runs), waits until it is ready (every pool has a live
// replica) within readyTimeout, and puts a fakeenvoy gateway in front.
func StartKVRoute(ctx context.Context, c KVRouteConfig, readyTimeout time.Duration, log *slog.Logger) (*KVRoute, error) {
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	cfg, err := config.Parse([]byte(c.YAML()))
	if err != nil {
		return nil, fmt.Errorf("kvroute config: %w", err)
	}
	reg := prometheus.NewRegistry()
	srv, err := server.New(server.Options{Config: cfg, Logger: log, Registry: reg})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	k := &KVRoute{srv: srv, reg: reg, cancel: cancel}
	k.wg.Go(func() { k.runErr = srv.Run(ctx) })
	deadline := time.Now().Add(readyTimeout)
	for !srv.Ready() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			k.Close()
			return nil, fmt.Errorf("kvroute not ready after %v (no replica connected or scraped)", readyTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
	url, stopGW, err := StartGateway(srv.ExtProcAddr().String(), log)
	if err != nil {
		k.Close()
		return nil, err
	}
	k.stopGW, k.URL = stopGW, url
	return k, nil
}

// Decisions returns kvroute_route_decisions_total by "outcome/reason",
// summed over pools: why kvroute routed as it did.
func (k *KVRoute) Decisions() map[string]float64 {
	out := map[string]float64{}
	for _, m := range k.series("kvroute_route_decisions_total") {
		var outcome, reason string
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "outcome":
				outcome = l.GetValue()
			case "reason":
				reason = l.GetValue()
			}
		}
		out[outcome+"/"+reason] += m.GetCounter().GetValue()
	}
	return out
}

// PromptTokens returns kvroute_prompt_tokens_total by outcome, summed over
// pools: where the prompt tokens kvroute routed went.
func (k *KVRoute) PromptTokens() map[string]float64 {
	out := map[string]float64{}
	for _, m := range k.series("kvroute_prompt_tokens_total") {
		for _, l := range m.GetLabel() {
			if l.GetName() == "outcome" {
				out[l.GetValue()] += m.GetCounter().GetValue()
			}
		}
	}
	return out
}

// ParityChecks returns kvroute_parity_checks_total by "check/result",
// summed over pools: how often each parity check ran and what it found.
func (k *KVRoute) ParityChecks() map[string]float64 {
	out := map[string]float64{}
	for _, m := range k.series("kvroute_parity_checks_total") {
		var check, result string
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "check":
				check = l.GetValue()
			case "result":
				result = l.GetValue()
			}
		}
		out[check+"/"+result] += m.GetCounter().GetValue()
	}
	return out
}

// MeshDelay is kvroute_peer_message_delay_seconds as read now: messages
// handled, their summed delay and how many took over 20 ms (zero without
// the peer mesh).
type MeshDelay struct {
	Messages, Over20ms float64
	Seconds            float64
}

// meshDelaySlow is the bucket bound MeshDelay counts above.
const meshDelaySlow = 0.02

// MeshDelay reads the peer mesh's delay histogram.
func (k *KVRoute) MeshDelay() MeshDelay {
	var d MeshDelay
	for _, m := range k.series("kvroute_peer_message_delay_seconds") {
		h := m.GetHistogram()
		d.Messages += float64(h.GetSampleCount())
		d.Seconds += h.GetSampleSum()
		for _, b := range h.GetBucket() {
			if b.GetUpperBound() == meshDelaySlow {
				d.Over20ms += float64(h.GetSampleCount() - b.GetCumulativeCount())
			}
		}
	}
	return d
}

// Panics is kvroute_panics_total summed over components: panics kvroute
// recovered (0 in every benchmark).
func (k *KVRoute) Panics() float64 {
	var n float64
	for _, m := range k.series(panics.MetricName) {
		n += m.GetCounter().GetValue()
	}
	return n
}

// series is every series of the metric called name, as gathered now (none
// when gathering fails).
func (k *KVRoute) series(name string) []*dto.Metric {
	fams, err := k.reg.Gather()
	if err != nil {
		return nil
	}
	for _, f := range fams {
		if f.GetName() == name {
			return f.GetMetric()
		}
	}
	return nil
}

// Close stops the gateway and kvroute and waits for both.
func (k *KVRoute) Close() error {
	if k.stopGW != nil {
		k.stopGW()
	}
	k.cancel()
	k.wg.Wait()
	return k.runErr
}

// StartGateway runs a fakeenvoy gateway (Envoy as configured by
// envoy/envoy.yaml: BUFFERED ext_proc, ORIGINAL_DST on the header) on a
// loopback port and returns its base URL and a stop function.
func StartGateway(extProcAddr string, log *slog.Logger) (string, func(), error) {
	gw, err := fakeenvoy.NewGateway(extProcAddr, fakeenvoy.Config{Mode: fakeenvoy.Buffered, SendProtocolConfig: true}, log)
	if err != nil {
		return "", nil, err
	}
	url, stop, err := ServeLoopback(gw)
	if err != nil {
		gw.Close()
		return "", nil, err
	}
	return url, func() { stop(); gw.Close() }, nil
}

// ServeLoopback serves h on a free 127.0.0.1 port and returns its base URL
// and a stop function that shuts the server down (open requests get 2 s) and
// waits for it.
func ServeLoopback(h http.Handler) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	return "http://" + ln.Addr().String(), serveListener(ln, h), nil
}

// serveListener serves h on ln; the returned stop shuts the server down
// (open requests get 2 s) and waits for it.
func serveListener(ln net.Listener, h http.Handler) func() {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln) // ErrServerClosed after stop
	}()
	stop := func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if srv.Shutdown(sctx) != nil {
			srv.Close()
		}
		<-done
	}
	return stop
}
