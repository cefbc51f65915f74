package routebench

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/kvroute/kvroute/blockhash"
	"github.com/kvroute/kvroute/internal/fakeenvoy"
	"github.com/kvroute/kvroute/internal/panics"
	"github.com/kvroute/kvroute/internal/testpki"
	"github.com/kvroute/kvroute/tokenize"
)

// SoakOptions configure Soak: three kvroute processes joined by the peer
// mesh on mutual TLS in front of emulated vLLM engines that publish KV
// events, under Streams concurrent ext_proc streams for Duration, while one
// kvroute is frozen (SIGSTOP) and thawed (SIGCONT), strangers hammer the
// mesh ports, and the index stays at a small index.max_entries. Zero values
// take DefaultSoakOptions.
type SoakOptions struct {
	// KVRoute runs one kvroute: the program and the arguments before
	// "serve --config FILE" (bin/kvroute; a test binary that runs kvroute's
	// main when KVRouteEnv says so).
	KVRoute    []string
	KVRouteEnv []string
	// EngineBin, when set, is vllm-emu: the engines run as processes of
	// their own. Empty: they run in this process.
	EngineBin string
	// TokenizerDir is the engines' and kvroute's tokenizer (qwen3).
	TokenizerDir string
	Model        string
	Duration     time.Duration // the load phase
	// Streams ext_proc streams are open at once, split over the two
	// kvroutes that are never frozen. Each starts a request every Period and
	// holds its stream open after the decision until the period ends, as
	// Envoy holds it while the upstream answers: Streams ÷ Period decisions
	// a second.
	Streams int
	Period  time.Duration
	// Engines emulated vLLM engines of NumBlocks blocks of BlockSize tokens.
	Engines, NumBlocks, BlockSize int
	// MaxEntries is every kvroute's index.max_entries: below what the
	// engines hold, so the index works at its cap throughout.
	MaxEntries int64
	// FeedRate is the rate (per second) of real requests with new prompts
	// sent through the first kvroute to the engines, so their KV events
	// keep the index churning at its cap.
	FeedRate float64
	// MinShare is the least share of the decisions asked (Streams ÷
	// Period) that must be made for the load to count as applied.
	MinShare float64
	// HangAfter is how long one exchange may take before it counts as hung.
	HangAfter time.Duration
	// Settle bounds the wait for descriptors and goroutines to come back.
	Settle time.Duration
	// NoLoadSignals turns the kvroutes' scrapes and health probes of the
	// engines off: a -race build of the engines cannot answer them within
	// the 300 ms that marks a replica frozen on a loaded machine.
	NoLoadSignals bool
	// Dir keeps the kvroutes' configs, certificates and logs; "" is a
	// temporary directory removed after a passing run.
	Dir      string
	Out, Err io.Writer // the checks; progress
}

// DefaultSoakOptions is the full soak: 1,000 streams for 60 s (4,000
// decisions a second), three engines of 512 blocks, an index capped at
// 1,500 entries.
func DefaultSoakOptions() SoakOptions {
	return SoakOptions{
		KVRoute: []string{"bin/kvroute"}, TokenizerDir: ".cache/tokenizers/qwen3", Model: "qwen3",
		Duration: 60 * time.Second, Streams: 1000, Period: 250 * time.Millisecond,
		Engines: 3, NumBlocks: 512, BlockSize: 16, MaxEntries: 1500, FeedRate: 20,
		MinShare: 0.25, HangAfter: 10 * time.Second, Settle: 30 * time.Second,
	}
}

// The soak's engines: fast, so the decisions, not the engines, set the pace.
const (
	soakMaxSeqs = 64
	soakPrefill = time.Microsecond
	soakDecode  = time.Millisecond
)

// startEmuChildren starts o.Engines vllm-emu processes and waits until
// each answers /health.
func startEmuChildren(ctx context.Context, o SoakOptions, tokDir, dir string, children *Children) ([]Replica, error) {
	ports, err := freePorts(3 * o.Engines)
	if err != nil {
		return nil, err
	}
	var out []Replica
	for i := range o.Engines {
		p := ports[3*i:]
		rep := Replica{Name: fmt.Sprintf("vllm-%d", i), Address: fmt.Sprintf("127.0.0.1:%d", p[0]),
			Events: fmt.Sprintf("tcp://127.0.0.1:%d", p[1]), Replay: fmt.Sprintf("tcp://127.0.0.1:%d", p[2])}
		args := emuArgs(o.Model, tokDir, p[0], rep, o.BlockSize, o.NumBlocks, soakMaxSeqs, soakPrefill, soakDecode)
		c, err := StartChild(rep.Name, o.EngineBin, args, []string{"PYTHONHASHSEED=0"}, filepath.Join(dir, rep.Name+".log"))
		if err != nil {
			return nil, err
		}
		children.Add(c)
		out = append(out, rep)
	}
	for _, r := range out {
		if err := waitUp(ctx, children, "http://"+r.Address+"/health", 60*time.Second); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Bounds the soak checks against.
const (
	// soakFDSlack and soakGoroutineSlack are how far above their start a
	// kvroute's descriptors and goroutines may end: connections to engines
	// and peers that come and go (scrapes, health probes, resubscriptions).
	soakFDSlack        = 8
	soakGoroutineSlack = 20
	// soakMeshPeers is the number of kvroutes in the soak's mesh.
	soakMeshPeers = 3
	// soakFrozen is the kvroute that is stopped and continued.
	soakFrozen = 2
)

// SoakCheck is one check of the soak: what, the numbers seen, and whether
// it held.
type SoakCheck struct {
	Name, Detail string
	OK           bool
}

// SoakReport is what a soak saw.
type SoakReport struct {
	Checks                  []SoakCheck
	Decisions, Errors, Hung int64
	Fed, FedErrors          int64
	DecisionsPerSecond      float64
	Hostile                 int64 // hostile connections made
}

// Failed lists the checks that failed.
func (r *SoakReport) Failed() []SoakCheck {
	var out []SoakCheck
	for _, c := range r.Checks {
		if !c.OK {
			out = append(out, c)
		}
	}
	return out
}

func (r *SoakReport) check(name string, ok bool, format string, args ...any) {
	r.Checks = append(r.Checks, SoakCheck{Name: name, OK: ok, Detail: fmt.Sprintf(format, args...)})
}

// soakNode is one kvroute of the soak.
type soakNode struct {
	name                 string
	child                *Child
	extproc, admin, mesh string
	conn                 *grpc.ClientConn
	client               extprocv3.ExternalProcessorClient
	startFDs, startGos   float64
}

// Soak runs the soak and returns its report; the error is non-nil when a
// part could not start or a check failed (the report says which).
func Soak(ctx context.Context, o SoakOptions) (rep *SoakReport, err error) {
	o.defaults()
	rep = &SoakReport{}
	begin := time.Now()
	say := func(format string, args ...any) {
		fmt.Fprintf(o.Err, "soak %5.1fs: "+format+"\n", append([]any{time.Since(begin).Seconds()}, args...)...)
	}
	dir := o.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "kvroute-soak-"); err != nil {
			return nil, err
		}
		defer func() {
			if err == nil {
				os.RemoveAll(dir)
			} else {
				say("configs and logs kept in %s", dir)
			}
		}()
	} else if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	tokDir, err := filepath.Abs(o.TokenizerDir)
	if err != nil {
		return nil, err
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	children := &Children{}
	defer children.StopAll(10 * time.Second)
	var replicas []Replica
	if o.EngineBin != "" {
		if replicas, err = startEmuChildren(ctx, o, tokDir, dir, children); err != nil {
			return nil, err
		}
	} else {
		tok, err := tokenize.Load(tokDir)
		if err != nil {
			return nil, fmt.Errorf("tokenizer (run `make testdata`): %w", err)
		}
		fleet, err := StartEmuFleet(ctx, EmuFleetOptions{Replicas: o.Engines, Model: o.Model, Tokenizer: tok,
			BlockSize: o.BlockSize, NumBlocks: o.NumBlocks, HashAlgo: blockhash.SHA256, Seed: "0", MaxNumSeqs: soakMaxSeqs,
			PrefillPerToken: soakPrefill, DecodePerToken: soakDecode, Logger: quiet})
		if err != nil {
			return nil, err
		}
		defer fleet.Close()
		replicas = fleet.Replicas
	}
	say("%d engines of %d blocks are up", o.Engines, o.NumBlocks)

	// The mesh's certificates, and a stranger's from another CA.
	ca, err := testpki.NewIn(dir, "kvroute soak mesh CA")
	if err != nil {
		return nil, err
	}
	strangerDir := filepath.Join(dir, "stranger")
	if err := os.MkdirAll(strangerDir, 0o700); err != nil {
		return nil, err
	}
	otherCA, err := testpki.NewIn(strangerDir, "stranger CA")
	if err != nil {
		return nil, err
	}
	stranger, err := otherCA.IssueFiles("kvroute-stranger")
	if err != nil {
		return nil, err
	}

	ports, err := freePorts(3 * soakMeshPeers)
	if err != nil {
		return nil, err
	}
	var meshAddrs []string
	for i := range soakMeshPeers {
		meshAddrs = append(meshAddrs, fmt.Sprintf("127.0.0.1:%d", ports[3*i+2]))
	}
	nodes := make([]*soakNode, soakMeshPeers)
	for i := range nodes {
		nd := &soakNode{name: fmt.Sprintf("kvroute-%d", i), extproc: fmt.Sprintf("127.0.0.1:%d", ports[3*i]),
			admin: fmt.Sprintf("127.0.0.1:%d", ports[3*i+1]), mesh: meshAddrs[i]}
		cert, err := ca.IssueFiles(nd.name)
		if err != nil {
			return nil, err
		}
		kc := KVRouteConfig{Model: o.Model, TokenizerDir: tokDir, BlockSize: o.BlockSize, Keys: "tokens",
			HashAlgo: "sha256", Seed: "0", ExtProc: nd.extproc, Admin: nd.admin, Replicas: replicas,
			PeersListen: nd.mesh, Peers: meshAddrs, MaxEntries: o.MaxEntries, NoLoadSignals: o.NoLoadSignals,
			PeersTLS: &PeersTLS{CertFile: cert.Cert, KeyFile: cert.Key, CAFile: ca.File}}
		cfgPath := filepath.Join(dir, nd.name+".yaml")
		if err := os.WriteFile(cfgPath, []byte(kc.YAML()), 0o600); err != nil {
			return nil, err
		}
		args := append(append([]string{}, o.KVRoute[1:]...), "serve", "--config", cfgPath)
		if nd.child, err = StartChild(nd.name, o.KVRoute[0], args, o.KVRouteEnv, filepath.Join(dir, nd.name+".log")); err != nil {
			return nil, err
		}
		children.Add(nd.child)
		nodes[i] = nd
		if i == soakFrozen {
			// A stopped kvroute cannot take SIGTERM: continue it before
			// the children are stopped (deferred earlier, so run later).
			defer func() { _ = nd.child.cmd.Process.Signal(syscall.SIGCONT) }()
		}
	}
	httpc := &http.Client{Timeout: 5 * time.Second}
	for _, nd := range nodes {
		if err := waitUp(ctx, children, "http://"+nd.admin+"/readyz", 60*time.Second); err != nil {
			return nil, err
		}
	}
	say("%d kvroutes are up (mesh on mutual TLS, index.max_entries %d)", len(nodes), o.MaxEntries)
	if err := waitMetric(ctx, httpc, nodes, "kvroute_peers", "", func(v float64) bool { return v == soakMeshPeers-1 }, 30*time.Second); err != nil {
		return nil, fmt.Errorf("mesh: %w", err)
	}

	// The driver's connections, open before the baseline so they count in
	// it and in the end alike.
	for _, nd := range nodes[:soakFrozen] {
		nd.conn, err = grpc.NewClient(nd.extproc, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, err
		}
		defer nd.conn.Close()
		nd.client = extprocv3.NewExternalProcessorClient(nd.conn)
		if err := waitConnReady(ctx, nd.conn, 10*time.Second); err != nil {
			return nil, fmt.Errorf("%s ext_proc: %w", nd.name, err)
		}
	}
	gw, err := fakeenvoy.NewGateway(nodes[0].extproc, fakeenvoy.Config{Mode: fakeenvoy.Buffered, SendProtocolConfig: true}, quiet)
	if err != nil {
		return nil, err
	}
	defer gw.Close()
	gwURL, stopGW, err := ServeLoopback(gw)
	if err != nil {
		return nil, err
	}
	defer stopGW()

	// Fill the engines until the index is at its cap, then take the
	// baseline.
	feeder := &soakFeeder{url: gwURL, model: o.Model, client: &http.Client{Timeout: o.HangAfter}}
	fillCtx, stopFill := context.WithCancel(ctx)
	fillDone := make(chan struct{})
	go func() { defer close(fillDone); feeder.run(fillCtx, 200) }()
	capLine := float64(o.MaxEntries) * 0.9 // within the 1 % batch margin and the aliases' slack
	err = waitMetric(ctx, httpc, nodes, "kvroute_index_entries", "", func(v float64) bool { return v >= capLine }, 60*time.Second)
	stopFill()
	<-fillDone
	if err != nil {
		return nil, fmt.Errorf("filling the index to its cap: %w", err)
	}
	feeder.sent.Store(0)
	feeder.failed.Store(0)
	time.Sleep(time.Second) // the fill's streams and connections close
	for _, nd := range nodes {
		m, err := scrape(ctx, httpc, nd.admin)
		if err != nil {
			return nil, err
		}
		nd.startFDs, nd.startGos = m.sum("process_open_fds", ""), m.sum("go_goroutines", "")
	}
	say("index at its cap; %d streams on %s and %s for %v, %s frozen in the middle, strangers on every mesh port",
		o.Streams, nodes[0].name, nodes[1].name, o.Duration, nodes[soakFrozen].name)

	// The load phase.
	// Cancelled, not timed out, at the end: a deadline would reach kvroute
	// in grpc-timeout and could fail the last exchanges there first.
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	endLoad := time.AfterFunc(o.Duration, stopLoad)
	defer endLoad.Stop()
	start := time.Now()
	var wg sync.WaitGroup
	var decisions, errs, hung atomic.Int64
	var firstErr atomic.Value
	prompts := newSoakPrompts()
	for i := range o.Streams {
		nd := nodes[i%soakFrozen]
		wg.Go(func() {
			rng := mrand.New(mrand.NewPCG(uint64(i), 7))
			// Spread the streams' starts over one period.
			sleepCtx(loadCtx, time.Duration(rng.Int64N(int64(o.Period))))
			for loadCtx.Err() == nil {
				switch err := soakExchange(loadCtx, nd.client, o, prompts.next(rng)); {
				case err == nil:
					decisions.Add(1)
				case loadCtx.Err() != nil:
				case errors.Is(err, errHung):
					hung.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprintf("%s at %v: %v", nd.name, time.Since(start).Round(time.Millisecond), err))
				default:
					errs.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprintf("%s at %v: %v", nd.name, time.Since(start).Round(time.Millisecond), err))
				}
			}
		})
	}
	wg.Go(func() { feeder.run(loadCtx, o.FeedRate) })
	hostile := &soakHostile{addrs: meshAddrs, stranger: stranger}
	wg.Go(func() { hostile.run(loadCtx) })
	// The index stays at its cap: sampled every second on the kvroutes
	// that are never frozen, its entries never pass the cap by more than
	// the writers' slack, and it evicts at the cap in every quarter of the
	// load. (Between evictions it may sit below the cap: a wave of routed
	// requests' speculative entries evicts block entries, then expires.)
	var capMax atomic.Int64
	var quarterEvictions [soakFrozen][4]float64
	var quarterSampled [soakFrozen][4]bool
	var lastEvictions [soakFrozen]float64 // as last sampled
	for i, nd := range nodes[:soakFrozen] {
		if m, err := scrape(loadCtx, httpc, nd.admin); err == nil {
			lastEvictions[i] = m.sum("kvroute_index_evictions_total", `cause="cap"`)
		}
	}
	wg.Go(func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		last := &lastEvictions
		for {
			select {
			case <-loadCtx.Done():
				return
			case <-t.C:
			}
			q := min(int(4*time.Since(start)/o.Duration), 3)
			for i, nd := range nodes[:soakFrozen] {
				m, err := scrape(loadCtx, httpc, nd.admin)
				if err != nil {
					continue
				}
				capMax.Store(max(capMax.Load(), int64(m.sum("kvroute_index_entries", ""))))
				ev := m.sum("kvroute_index_evictions_total", `cause="cap"`)
				quarterEvictions[i][q] += ev - last[i]
				quarterSampled[i][q] = true
				last[i] = ev
			}
		}
	})
	// Freeze one kvroute for the middle half; the other two must go on
	// booking each other's requests meanwhile.
	frozen := nodes[soakFrozen]
	var bookedWhileFrozen float64
	freezeErr := func() error {
		if !sleepCtx(loadCtx, o.Duration/4) {
			return nil
		}
		before, err := scrape(loadCtx, httpc, nodes[1].admin)
		if err != nil {
			return err
		}
		if err := frozen.child.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			return err
		}
		say("%s stopped (SIGSTOP)", frozen.name)
		sleepCtx(loadCtx, o.Duration/2)
		after, err := scrape(context.Background(), httpc, nodes[1].admin)
		if err == nil {
			bookedWhileFrozen = after.sum("kvroute_peer_messages_received_total", `kind="begin"`) -
				before.sum("kvroute_peer_messages_received_total", `kind="begin"`)
		}
		if err := frozen.child.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			return err
		}
		say("%s continued (SIGCONT)", frozen.name)
		return nil
	}()
	wg.Wait()
	elapsed := time.Since(start)
	// What the last samples missed (a scrape can take seconds on a busy
	// machine) happened in the last quarter.
	for i, nd := range nodes[:soakFrozen] {
		if m, err := scrape(ctx, httpc, nd.admin); err == nil {
			quarterEvictions[i][3] += m.sum("kvroute_index_evictions_total", `cause="cap"`) - lastEvictions[i]
			quarterSampled[i][3] = true
		}
	}
	rep.Decisions, rep.Errors, rep.Hung = decisions.Load(), errs.Load(), hung.Load()
	rep.Fed, rep.FedErrors, rep.Hostile = feeder.sent.Load(), feeder.failed.Load(), hostile.conns.Load()
	rep.DecisionsPerSecond = float64(rep.Decisions) / elapsed.Seconds()
	if freezeErr != nil {
		return rep, fmt.Errorf("freezing %s: %w", frozen.name, freezeErr)
	}
	if exit := children.FirstExit(); exit != nil {
		return rep, exit
	}

	say("load ended; checking")
	detail := ""
	if s, ok := firstErr.Load().(string); ok {
		detail = "; first: " + s
	}
	rep.check("no hangs", rep.Hung == 0, "%d exchanges over %v%s", rep.Hung, o.HangAfter, detail)
	rep.check("no errors", rep.Errors == 0 && rep.FedErrors == 0, "%d of %d decisions failed, %d of %d requests to the engines failed%s",
		rep.Errors, rep.Errors+rep.Decisions+rep.Hung, rep.FedErrors, rep.Fed, detail)
	asked := float64(o.Streams) / o.Period.Seconds()
	rep.check("decisions", rep.DecisionsPerSecond >= o.MinShare*asked, "%d in %v: %.0f/s over %d streams (asked %.0f/s; at least %.0f)",
		rep.Decisions, elapsed.Round(time.Millisecond), rep.DecisionsPerSecond, o.Streams, asked, o.MinShare*asked)
	// A quarter without a sample (scrapes can take seconds on a busy
	// machine) has its evictions counted in the next one.
	for i, nd := range nodes[:soakFrozen] {
		ok, sampled := capMax.Load() <= o.MaxEntries+o.MaxEntries/20, 0
		var qs []string
		for q, n := range quarterEvictions[i] {
			if !quarterSampled[i][q] {
				qs = append(qs, "–")
				continue
			}
			sampled++
			ok = ok && n > 0
			qs = append(qs, fmt.Sprintf("%.0f", n))
		}
		rep.check(nd.name+" index at its cap", ok && sampled >= 2,
			"block entries evicted at the cap %s in the load's quarters; at most %d entries, cap %d (+5 %%)",
			strings.Join(qs, ", "), capMax.Load(), o.MaxEntries)
	}
	rep.check("mesh while one kvroute is frozen", bookedWhileFrozen > 0,
		"%s booked %.0f of %s's requests while %s was stopped", nodes[1].name, bookedWhileFrozen, nodes[0].name, frozen.name)
	meshErr := waitMetric(ctx, httpc, nodes, "kvroute_peers", "", func(v float64) bool { return v == soakMeshPeers-1 }, 30*time.Second)
	rep.check("mesh whole again after SIGCONT", meshErr == nil, "every kvroute hears %d peers%s", soakMeshPeers-1, errSuffix(meshErr))
	var refused float64
	for i, nd := range nodes {
		m, err := scrape(ctx, httpc, nd.admin)
		if err != nil {
			return rep, err
		}
		refused += m.sum("kvroute_peer_connections_refused_total", "")
		if i == soakFrozen {
			evicted := m.sum("kvroute_index_evictions_total", `cause="cap"`)
			rep.check(nd.name+" index at its cap", evicted > 0, "%.0f block entries evicted at the cap", evicted)
		}
	}
	rep.check("strangers refused", hostile.leaked.Load() == 0 && refused > 0,
		"%d hostile connections, %.0f refused by the mesh, %d read anything", rep.Hostile, refused, hostile.leaked.Load())
	// Everything the load opened closes again.
	for _, nd := range nodes {
		var fds, gos float64
		deadline := time.Now().Add(o.Settle)
		for {
			m, err := scrape(ctx, httpc, nd.admin)
			if err != nil {
				return rep, err
			}
			fds, gos = m.sum("process_open_fds", ""), m.sum("go_goroutines", "")
			if (fds <= nd.startFDs+soakFDSlack && gos <= nd.startGos+soakGoroutineSlack) || time.Now().After(deadline) {
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
		rep.check(nd.name+" descriptors back", fds <= nd.startFDs+soakFDSlack, "%.0f open, %.0f at the start (slack %d)", fds, nd.startFDs, soakFDSlack)
		rep.check(nd.name+" goroutines back", gos <= nd.startGos+soakGoroutineSlack, "%.0f, %.0f at the start (slack %d)", gos, nd.startGos, soakGoroutineSlack)
		m, err := scrape(ctx, httpc, nd.admin)
		if err != nil {
			return rep, err
		}
		n := m.sum(panics.MetricName, "")
		rep.check(nd.name+" no panics", n == 0, "%s %.0f", panics.MetricName, n)
	}
	say("checked")
	for _, c := range rep.Checks {
		mark := "ok  "
		if !c.OK {
			mark = "FAIL"
		}
		fmt.Fprintf(o.Out, "%s %-34s %s\n", mark, c.Name, c.Detail)
	}
	if failed := rep.Failed(); len(failed) > 0 {
		for _, nd := range nodes {
			fmt.Fprintf(o.Err, "--- the end of %s's log (%s):\n%s\n", nd.name, nd.child.LogPath, nd.child.LogTail(3000))
		}
		return rep, fmt.Errorf("%d of %d checks failed", len(failed), len(rep.Checks))
	}
	return rep, nil
}

func (o *SoakOptions) defaults() {
	def := DefaultSoakOptions()
	if len(o.KVRoute) == 0 {
		o.KVRoute = def.KVRoute
	}
	fill(&o.TokenizerDir, def.TokenizerDir)
	fill(&o.Model, def.Model)
	fill(&o.Duration, def.Duration)
	fill(&o.Streams, def.Streams)
	fill(&o.Period, def.Period)
	fill(&o.Engines, def.Engines)
	fill(&o.NumBlocks, def.NumBlocks)
	fill(&o.BlockSize, def.BlockSize)
	fill(&o.MaxEntries, def.MaxEntries)
	fill(&o.FeedRate, def.FeedRate)
	fill(&o.MinShare, def.MinShare)
	fill(&o.HangAfter, def.HangAfter)
	fill(&o.Settle, def.Settle)
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Err == nil {
		o.Err = io.Discard
	}
}

func errSuffix(err error) string {
	if err == nil {
		return ""
	}
	return ": " + err.Error()
}

// sleepCtx sleeps d and reports whether ctx is still live.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// errHung marks an exchange that took longer than SoakOptions.HangAfter.
var errHung = errors.New("no answer in time")

// soakExchange runs one request's ext_proc exchange as Envoy does, holding
// the stream open until one period has passed, as the upstream answer
// does, and checks that a destination was chosen.
func soakExchange(ctx context.Context, client extprocv3.ExternalProcessorClient, o SoakOptions, prompt string) error {
	ectx, cancel := context.WithTimeout(ctx, o.HangAfter)
	defer cancel()
	body := fmt.Appendf(nil, `{"model":%q,"prompt":%q,"max_tokens":4}`, o.Model, prompt)
	until := time.Now().Add(o.Period)
	res, err := fakeenvoy.DoWhile(ectx, client, fakeenvoy.Config{Mode: fakeenvoy.Buffered, SendProtocolConfig: true, MessageTimeout: o.HangAfter},
		fakeenvoy.Request{Method: "POST", Path: "/v1/completions", Body: body, Headers: map[string]string{"content-type": "application/json"}},
		func(fakeenvoy.Result) { sleepCtx(ectx, time.Until(until)) })
	switch {
	case err != nil && ctx.Err() == nil && (ectx.Err() != nil || res.Status == http.StatusGatewayTimeout || status.Code(err) == codes.DeadlineExceeded):
		return fmt.Errorf("%w: %v", errHung, err)
	case err != nil:
		return err
	case res.Status != 0:
		return fmt.Errorf("local reply %d: %s", res.Status, res.Details)
	case res.Headers[fakeenvoy.DestinationHeader] == "":
		return errors.New("no destination chosen")
	}
	return nil
}

// soakPrompts are the decision streams' prompts: a few shared documents,
// each with a question of its own, so lookups find long cached prefixes
// (the documents the feeder has sent through) and miss on the rest.
type soakPrompts struct{ docs []string }

func newSoakPrompts() *soakPrompts {
	rng := mrand.New(mrand.NewPCG(1, 2))
	p := &soakPrompts{}
	for range 32 {
		p.docs = append(p.docs, words(rng, 120))
	}
	return p
}

func (p *soakPrompts) next(rng *mrand.Rand) string {
	return p.docs[rng.IntN(len(p.docs))] + " " + words(rng, 8)
}

// soakFeeder sends real completions with new prompts through the gateway
// in front of the first kvroute, so the engines store new blocks and their
// KV events keep every index evicting at its cap.
type soakFeeder struct {
	url, model   string
	client       *http.Client
	sent, failed atomic.Int64
}

func (f *soakFeeder) run(ctx context.Context, rate float64) {
	var wg sync.WaitGroup
	defer wg.Wait()
	rng := mrand.New(mrand.NewPCG(3, 4))
	t := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer t.Stop()
	sem := make(chan struct{}, 64)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		select {
		case sem <- struct{}{}:
		default:
			continue // the engines are behind; skip a beat
		}
		prompt := words(rng, 200)
		wg.Go(func() {
			defer func() { <-sem }()
			body := fmt.Sprintf(`{"model":%q,"prompt":%q,"max_tokens":1}`, f.model, prompt)
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.url+"/v1/completions", strings.NewReader(body))
			if err != nil {
				return
			}
			req.Header.Set("content-type", "application/json")
			resp, err := f.client.Do(req)
			if ctx.Err() != nil {
				if resp != nil {
					resp.Body.Close()
				}
				return // the run ended while the request was out
			}
			f.sent.Add(1)
			if err != nil {
				f.failed.Add(1)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				f.failed.Add(1)
			}
		})
	}
}

// soakHostile attacks every mesh port in turn: TLS without a client
// certificate, TLS with a certificate of another CA, and raw connections
// that send garbage, many at once.
type soakHostile struct {
	addrs    []string
	stranger testpki.Files
	conns    atomic.Int64
	leaked   atomic.Int64 // hostile connections that read mesh data
}

func (h *soakHostile) run(ctx context.Context) {
	cert, err := tls.LoadX509KeyPair(h.stranger.Cert, h.stranger.Key)
	if err != nil {
		h.leaked.Add(1) // cannot attack: fail the check rather than pass it
		return
	}
	noCert := &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}} // a stranger trusts any server
	otherCA := &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}, Certificates: []tls.Certificate{cert}}
	var wg sync.WaitGroup
	defer wg.Wait()
	for round := 0; ctx.Err() == nil; round++ {
		for _, addr := range h.addrs {
			wg.Go(func() { h.tlsProbe(ctx, addr, noCert) })
			wg.Go(func() { h.tlsProbe(ctx, addr, otherCA) })
			for range 4 {
				wg.Go(func() { h.garbage(ctx, addr) })
			}
		}
		sleepCtx(ctx, 200*time.Millisecond)
	}
}

// tlsProbe shakes hands as a stranger, asks for a subscription and counts
// any byte of mesh data that comes back.
func (h *soakHostile) tlsProbe(ctx context.Context, addr string, cfg *tls.Config) {
	h.conns.Add(1)
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 2 * time.Second}, Config: cfg}
	dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	c, err := d.DialContext(dctx, "tcp", addr)
	if err != nil {
		return // refused at the handshake
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	// An HTTP/2 preface and a SETTINGS frame, as a gRPC client starts.
	if _, err := c.Write(append([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), 0, 0, 0, 4, 0, 0, 0, 0, 0)); err != nil {
		return
	}
	// The server's own SETTINGS would come first on an accepted
	// connection: with TLS 1.3 the client's certificate is checked after
	// the client's handshake ends, so a refusal shows as an alert here.
	if n, _ := bufio.NewReader(c).Read(make([]byte, 1)); n > 0 {
		h.leaked.Add(1)
	}
}

// garbage connects and sends random bytes, then waits for the close.
func (h *soakHostile) garbage(ctx context.Context, addr string) {
	h.conns.Add(1)
	d := &net.Dialer{Timeout: 2 * time.Second}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	junk := make([]byte, 1+mrand.IntN(8<<10))
	_, _ = rand.Read(junk)
	_, _ = c.Write(junk)
	_, _ = io.Copy(io.Discard, c)
}

// metricsPage is one /metrics page: series line → value.
type metricsPage []struct {
	series string
	value  float64
}

// sum adds the values of every series of name whose labels contain label.
func (m metricsPage) sum(name, label string) float64 {
	var v float64
	for _, s := range m {
		n, labels, _ := strings.Cut(s.series, "{")
		if n == name && strings.Contains(labels, label) {
			v += s.value
		}
	}
	return v
}

// scrape reads a kvroute's admin /metrics (Prometheus text format).
func scrape(ctx context.Context, c *http.Client, admin string) (metricsPage, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+admin+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s/metrics: %s", admin, resp.Status)
	}
	var page metricsPage
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		page = append(page, struct {
			series string
			value  float64
		}{line[:i], v})
	}
	return page, sc.Err()
}

// waitMetric polls every node's metric (summed over series with label)
// until ok holds on all of them, or timeout passes.
func waitMetric(ctx context.Context, c *http.Client, nodes []*soakNode, name, label string, ok func(float64) bool, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var bad []string
		for _, nd := range nodes {
			m, err := scrape(ctx, c, nd.admin)
			if err != nil {
				bad = append(bad, fmt.Sprintf("%s: %v", nd.name, err))
				continue
			}
			if v := m.sum(name, label); !ok(v) {
				bad = append(bad, fmt.Sprintf("%s: %s %g", nd.name, name, v))
			}
		}
		if len(bad) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %v: %s", timeout, strings.Join(bad, ", "))
		}
		if !sleepCtx(ctx, 200*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// waitConnReady connects cc and waits until it is ready.
func waitConnReady(ctx context.Context, cc *grpc.ClientConn, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cc.Connect()
	for s := cc.GetState(); s != connectivity.Ready; s = cc.GetState() {
		if !cc.WaitForStateChange(ctx, s) {
			return fmt.Errorf("not ready after %v (%s)", timeout, s)
		}
	}
	return nil
}
