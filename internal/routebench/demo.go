package routebench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/kvroute/kvroute/internal/panics"
)

// DemoOptions configure Demo: N emulated vLLM replicas (bin/vllm-emu child
// processes), kvroute (bin/kvroute serve, a child), and one workload driven
// twice, through a round-robin gateway and through kvroute behind the fake
// Envoy. Zero values take the defaults in DefaultDemoOptions.
type DemoOptions struct {
	BinDir       string // holds vllm-emu and kvroute
	TokenizerDir string // the qwen3 tokenizer directory
	Model        string
	Replicas     int
	NumBlocks    int           // KV capacity per replica, in blocks (small, so placement matters)
	BlockSize    int           // tokens per block
	Prefill      time.Duration // emulated prefill time per uncached prompt token
	Decode       time.Duration // emulated time per decode step
	Workload     WorkloadParams
	Timeout      time.Duration // bound on the whole demo
	Out, Err     io.Writer     // the table; progress and status
	TTY          bool          // Err is a terminal: redraw the progress line
	Log          *slog.Logger  // the in-process gateway's log; nil → discarded
}

// DefaultDemoOptions: 4 replicas of 256 blocks × 16 tokens (16,384 tokens of
// KV in the fleet), 8 shared documents of about 1,000 tokens (about half the
// fleet's capacity, twice one replica's), 150 requests at 10/s, 100µs of
// prefill per uncached token. Spread evenly, every replica would need every
// document and keeps evicting them; routed by prefix, each holds two.
func DefaultDemoOptions() DemoOptions {
	return DemoOptions{
		BinDir: "bin", TokenizerDir: ".cache/tokenizers/qwen3", Model: "qwen3",
		Replicas: 4, NumBlocks: 256, BlockSize: 16,
		Prefill: 100 * time.Microsecond, Decode: 5 * time.Millisecond,
		Workload: WorkloadParams{Kind: SharedPrefix, Groups: 8, UsersPerGroup: 6, PrefixWords: 950,
			QuestionWords: 20, Rate: 10, Requests: 150, MaxTokens: 8, Seed: 1},
		Timeout: 110 * time.Second,
	}
}

// Demo runs the demo and prints the final table to o.Out. It fails when a
// part does not come up in time, when requests fail, or when kvroute's
// prefix-cache hit rate is not above round-robin's. Every child is stopped
// before it returns, on success, error and cancellation alike.
func Demo(ctx context.Context, o DemoOptions) (err error) {
	def := DefaultDemoOptions()
	fill(&o.BinDir, def.BinDir)
	fill(&o.TokenizerDir, def.TokenizerDir)
	fill(&o.Model, def.Model)
	fill(&o.Replicas, def.Replicas)
	fill(&o.NumBlocks, def.NumBlocks)
	fill(&o.BlockSize, def.BlockSize)
	fill(&o.Prefill, def.Prefill)
	fill(&o.Decode, def.Decode)
	fill(&o.Timeout, def.Timeout)
	if o.Workload.Kind == "" {
		o.Workload = def.Workload
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Err == nil {
		o.Err = io.Discard
	}
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	emu, err := filepath.Abs(filepath.Join(o.BinDir, "vllm-emu"))
	if err != nil {
		return err
	}
	kvrouteBin, _ := filepath.Abs(filepath.Join(o.BinDir, "kvroute"))
	for _, p := range []string{emu, kvrouteBin} {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("%s missing (run `make build`): %w", p, err)
		}
	}
	tokDir, _ := filepath.Abs(o.TokenizerDir)
	if _, err := os.Stat(filepath.Join(tokDir, "tokenizer.json")); err != nil {
		return fmt.Errorf("tokenizer %s missing (run `make testdata`): %w", tokDir, err)
	}
	reqs, err := Generate(o.Workload)
	if err != nil {
		return err
	}

	interrupted := ctx.Done()
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	dir, err := os.MkdirTemp("", "kvroute-demo-")
	if err != nil {
		return err
	}
	children := &Children{}
	defer func() {
		children.StopAll(5 * time.Second)
		keep := err != nil
		select {
		case <-interrupted: // Ctrl-C: nothing to debug
			keep = false
		default:
		}
		if !keep {
			os.RemoveAll(dir)
		} else {
			fmt.Fprintf(o.Err, "demo: logs kept in %s\n", dir)
		}
	}()

	fmt.Fprintf(o.Err, "demo: starting %d emulated vLLM replicas (%d blocks × %d tokens each), kvroute and the gateway on 127.0.0.1\n",
		o.Replicas, o.NumBlocks, o.BlockSize)
	fleet := &HTTPFleet{Client: &http.Client{Timeout: 30 * time.Second}}
	kcfg := KVRouteConfig{Model: o.Model, TokenizerDir: tokDir, BlockSize: o.BlockSize, Keys: "tokens",
		HashAlgo: "sha256", Seed: "0"}
	// Every port at once, so no two parts are handed the same one.
	ports, err := freePorts(3*o.Replicas + 2)
	if err != nil {
		return err
	}
	for i := range o.Replicas {
		ports := ports[3*i:]
		name := fmt.Sprintf("vllm-%d", i)
		rep := Replica{Name: name, Address: fmt.Sprintf("127.0.0.1:%d", ports[0]),
			Events: fmt.Sprintf("tcp://127.0.0.1:%d", ports[1]), Replay: fmt.Sprintf("tcp://127.0.0.1:%d", ports[2])}
		args := emuArgs(o.Model, tokDir, ports[0], rep, o.BlockSize, o.NumBlocks, 8, o.Prefill, o.Decode)
		c, err := StartChild(name, emu, args, []string{"PYTHONHASHSEED=0"}, filepath.Join(dir, name+".log"))
		if err != nil {
			return err
		}
		children.Add(c)
		fleet.Names = append(fleet.Names, name)
		fleet.Addrs = append(fleet.Addrs, rep.Address)
		kcfg.Replicas = append(kcfg.Replicas, rep)
	}
	for _, a := range fleet.Addrs {
		if err := waitUp(ctx, children, "http://"+a+"/health", 30*time.Second); err != nil {
			return err
		}
	}

	kcfg.ExtProc = fmt.Sprintf("127.0.0.1:%d", ports[3*o.Replicas])
	kcfg.Admin = fmt.Sprintf("127.0.0.1:%d", ports[3*o.Replicas+1])
	cfgPath := filepath.Join(dir, "kvroute.yaml")
	if err := os.WriteFile(cfgPath, []byte(kcfg.YAML()), 0o600); err != nil {
		return err
	}
	kv, err := StartChild("kvroute", kvrouteBin, []string{"serve", "--config", cfgPath}, nil, filepath.Join(dir, "kvroute.log"))
	if err != nil {
		return err
	}
	children.Add(kv)
	if err := waitUp(ctx, children, "http://"+kcfg.Admin+"/readyz", 30*time.Second); err != nil {
		return err
	}
	kvURL, stopKV, err := StartGateway(kcfg.ExtProc, o.Log)
	if err != nil {
		return err
	}
	defer stopKV()
	rr := NewPolicyGateway(&RoundRobin{}, fleet.Addrs)
	rrURL, stopRR, err := ServeLoopback(rr)
	if err != nil {
		return err
	}
	defer stopRR()

	prog := &Progress{W: o.Err, TTY: o.TTY}
	driver := &Driver{Client: &http.Client{Timeout: 60 * time.Second}, Model: o.Model, Progress: prog.Observe}
	fmt.Fprintf(o.Err, "demo: %d requests, %s workload: %d shared documents of %d words, %d users each, %.0f req/s (Poisson)\n",
		len(reqs), o.Workload.Kind, o.Workload.Groups, o.Workload.PrefixWords, o.Workload.UsersPerGroup, o.Workload.Rate)
	var results []*Result
	for _, ph := range []struct{ policy, url string }{{"round-robin", rrURL}, {"kvroute", kvURL}} {
		phase := &Phase{Fleet: fleet, Driver: driver, Settle: 500 * time.Millisecond,
			Policy: ph.policy, Workload: o.Workload.Kind, Rate: o.Workload.Rate}
		prog.Begin(ph.policy, len(reqs))
		r, err := phase.Run(ctx, []string{ph.url}, reqs)
		prog.End()
		if err != nil {
			if exit := children.FirstExit(); exit != nil {
				return exit
			}
			return fmt.Errorf("%s phase: %w", ph.policy, err)
		}
		results = append(results, r)
	}
	WriteDemoTable(o.Out, results)
	for _, r := range results {
		if r.Errors > 0 {
			return fmt.Errorf("%s: %d of %d requests failed", r.Policy, r.Errors, r.Requests)
		}
		if err := r.CrossCheck(); err != nil {
			return fmt.Errorf("%s: hit-rate cross-check: %w", r.Policy, err)
		}
	}
	if err := demoExplain(ctx, o.Out, kvrouteBin, kcfg.Admin, dir, o.Model, reqs[len(reqs)-1]); err != nil {
		return err
	}
	if m, err := scrape(ctx, &http.Client{Timeout: 5 * time.Second}, kcfg.Admin); err != nil {
		return err
	} else if n := m.sum(panics.MetricName, ""); n > 0 {
		return fmt.Errorf("kvroute recovered %g panics (%s; log %s)", n, panics.MetricName, kv.LogPath)
	}
	base, kvr := results[0], results[1]
	if kvr.EngineHitRate() <= base.EngineHitRate() {
		return fmt.Errorf("kvroute's prefix-cache hit rate %.1f %% does not beat round-robin's %.1f %%", 100*kvr.EngineHitRate(), 100*base.EngineHitRate())
	}
	fmt.Fprintf(o.Out, "\nkvroute beats round-robin: prefix-cache hit rate %.1f %% vs %.1f %%, TTFT p90 %s vs %s\n",
		100*kvr.EngineHitRate(), 100*base.EngineHitRate(), ms(kvr.Percentile(0.9)), ms(base.Percentile(0.9)))
	return nil
}

// emuArgs are the vllm-emu arguments of replica rep on port, publishing
// KV events (with a replay endpoint) as vLLM's --kv-events-config says, its
// block hashes sha256 (run it with PYTHONHASHSEED=0).
func emuArgs(model, tokDir string, port int, rep Replica, blockSize, numBlocks, maxSeqs int, prefill, decode time.Duration) []string {
	events := fmt.Sprintf(`{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":%q,"replay_endpoint":%q,"topic":"kv","buffer_steps":10000}`,
		rep.Events, rep.Replay)
	return []string{"--model", model, "--tokenizer", tokDir, "--host", "127.0.0.1", "--port", strconv.Itoa(port),
		"--block-size", strconv.Itoa(blockSize), "--num-gpu-blocks-override", strconv.Itoa(numBlocks),
		"--prefix-caching-hash-algo", "sha256", "--max-num-seqs", strconv.Itoa(maxSeqs), "--max-num-batched-tokens", "2048",
		"--kv-events-config", events,
		"--emu-prefill-per-token", prefill.String(), "--emu-decode-per-token", decode.String()}
}

// demoExplain runs `kvroute explain` on one of the demo's requests against
// the running kvroute and prints what it answers: the decision kvroute would
// make for that request now, per candidate, without routing it.
func demoExplain(ctx context.Context, out io.Writer, kvrouteBin, admin, dir, model string, r Request) error {
	path, body := RequestBody(model, r)
	bodyFile := filepath.Join(dir, "explain-request.json")
	if err := os.WriteFile(bodyFile, body, 0o600); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	args := []string{"explain", "--admin", admin, "--path", path, "--body", bodyFile}
	cmd := exec.CommandContext(ctx, kvrouteBin, args...)
	answer, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("kvroute explain: %w: %s", err, answer)
	}
	// The explanation itself: the admin address and the body file are gone
	// when the demo ends, so no command to rerun is shown.
	fmt.Fprintf(out, "\nWhy kvroute routes the demo's last request where it does (kvroute explain, asked of the running kvroute; nothing is routed):\n%s", answer)
	fmt.Fprintf(out, "(on your own kvroute: kvroute explain --admin ADMIN_ADDR --path %s --body REQUEST.json; docs/OPERATIONS.md)\n", path)
	return nil
}

// waitUp polls url until it answers 200, a child exits, or timeout passes.
func waitUp(ctx context.Context, children *Children, url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	client := &http.Client{Timeout: time.Second}
	var last error
	for {
		if err := children.FirstExit(); err != nil {
			return err
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
		last = err
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("%s not ready after %v: %v", url, timeout, last)
			}
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// freePorts returns n distinct free loopback ports.
func freePorts(n int) ([]int, error) {
	seen := map[int]bool{}
	var out []int
	for len(out) < n {
		p, err := FreePort()
		if err != nil {
			return nil, err
		}
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out, nil
}

func fill[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}
