package routebench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// HTTPFleet reaches a fleet of vLLM-compatible servers over HTTP only: it
// resets their prefix caches between runs and reads their /metrics. It works
// the same for child processes (the demo) and in-process engines (the
// benchmark).
type HTTPFleet struct {
	Names  []string
	Addrs  []string // ip:port per replica
	Client *http.Client
}

func (f *HTTPFleet) client() *http.Client {
	if f.Client != nil {
		return f.Client
	}
	return http.DefaultClient
}

// ResetCaches posts /reset_prefix_cache to every replica, so each run
// starts cold; vLLM publishes AllBlocksCleared, which empties kvroute's
// index for that replica. vLLM refuses the reset while a request still holds
// blocks, so a refusal is retried until timeout.
func (f *HTTPFleet) ResetCaches(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for i, a := range f.Addrs {
		for {
			err := f.resetOne(ctx, a)
			if err == nil {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s: reset_prefix_cache: %w", f.Names[i], err)
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}

func (f *HTTPFleet) resetOne(ctx context.Context, addr string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/reset_prefix_cache", nil)
	if err != nil {
		return err
	}
	resp, err := f.client().Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	// vLLM answers 200 {"success": false} while blocks are still in use
	// (vllm/entrypoints/serve/dev/cache/api_router.py); an empty body is an
	// older vLLM that answered 200 only on success.
	var r struct {
		Success *bool `json:"success"`
	}
	if len(body) > 0 && json.Unmarshal(body, &r) == nil && r.Success != nil && !*r.Success {
		return errors.New("engine refused: blocks still in use")
	}
	return nil
}

// Counters scrapes every replica's /metrics.
func (f *HTTPFleet) Counters(ctx context.Context) ([]EngineCounters, error) {
	out := make([]EngineCounters, len(f.Addrs))
	for i, a := range f.Addrs {
		c, err := ScrapeEngine(ctx, f.client(), "http://"+a+"/metrics")
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.Names[i], err)
		}
		out[i] = c
	}
	return out, nil
}

// WaitIdle waits until no replica has running or waiting requests.
func (f *HTTPFleet) WaitIdle(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		cs, err := f.Counters(ctx)
		if err == nil {
			busy := 0.0
			for _, c := range cs {
				busy += c.RunningWaiting
			}
			if busy == 0 {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("fleet not idle: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Phase runs one policy's pass over a workload: cold caches, the requests
// through the gateways, then per-replica counts and the engines' own hit
// rate from their /metrics deltas.
type Phase struct {
	Fleet    *HTTPFleet
	Driver   *Driver
	Settle   time.Duration // pause after the cache reset, for KV events to reach kvroute
	Policy   string
	Workload string
	Rate     float64
	// During, when set, runs beside the driver (churn: restart and join
	// engines); the phase waits for it. The engines' counters restart with
	// them, so the phase then counts requests per replica from Arrivals and
	// leaves the engine counters out; After is the fleet once During is done.
	// Arrivals, when set, is emptied at the start and the end of every phase.
	During   func(ctx context.Context)
	After    func() *HTTPFleet
	Arrivals *ArrivalLog
	Names    []string // every replica name, for PerReplica with During
	Setup    string   // Result.Setup

	// What the run saw, for the caller's own accounting.
	started  time.Time
	samples  []Sample
	arrivals []Arrival
}

// Run executes the phase.
func (p *Phase) Run(ctx context.Context, gatewayURLs []string, reqs []Request) (*Result, error) {
	if err := p.Fleet.WaitIdle(ctx, 30*time.Second); err != nil {
		return nil, err
	}
	if err := p.Fleet.ResetCaches(ctx, 10*time.Second); err != nil {
		return nil, err
	}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(p.Settle):
	}
	before, err := p.Fleet.Counters(ctx)
	if err != nil {
		return nil, err
	}
	if p.Arrivals != nil {
		p.Arrivals.Take()
	}
	start := time.Now()
	p.started = start
	done := make(chan struct{})
	if p.During != nil {
		go func() { defer close(done); p.During(ctx) }()
	} else {
		close(done)
	}
	samples := p.Driver.Run(ctx, gatewayURLs, reqs)
	elapsed := time.Since(start)
	<-done
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	fleet := p.Fleet
	if p.After != nil {
		fleet = p.After()
	}
	if err := fleet.WaitIdle(ctx, 30*time.Second); err != nil {
		return nil, err
	}
	r := Summarize(p.Policy, p.Workload, p.Rate, samples)
	r.Setup = p.Setup
	r.Elapsed = elapsed
	p.samples = samples
	if p.Arrivals != nil {
		p.arrivals = p.Arrivals.Take()
	}
	r.PerReplica = map[string]int{}
	if p.During != nil {
		r.ReplicaOrder = p.Names
		for _, n := range p.Names {
			r.PerReplica[n] = 0
		}
		for _, a := range p.arrivals {
			r.PerReplica[a.Replica]++
		}
		return r, nil
	}
	after, err := p.Fleet.Counters(ctx)
	if err != nil {
		return nil, err
	}
	r.ReplicaOrder = p.Fleet.Names
	for i, name := range p.Fleet.Names {
		d := after[i].Sub(before[i])
		r.PerReplica[name] = int(d.Requests)
		r.EngineQueriedTokens += int64(d.PrefixQueries)
		r.EngineHitTokens += int64(d.PrefixHits)
	}
	return r, nil
}

// FreePort returns a currently unused loopback TCP port. Another process
// may take it before it is used; callers start their children right away.
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
