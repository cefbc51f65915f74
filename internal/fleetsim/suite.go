package fleetsim

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// The routing suite: every recorded trace and every generated family, at
// several gateway counts (with and without kvroute's peer mesh), seeds and
// loads, each cell a full simulation of every suite policy plus the pooled
// bound, judged against the goals kvroute must meet in every cell.

// SuitePolicies are the policies every suite cell compares: the two
// baselines users start from, the anchors' policies, and kvroute.
var SuitePolicies = []string{PolicyRoundRobin, PolicyApproxPrefix, PolicyLLMDSticky, PolicyDynamoKV, PolicyKVRoute}

// SuiteWorkload is one row of the suite: a trace window or a family.
type SuiteWorkload struct {
	Name     string
	Describe string
	Trace    bool // a recorded trace (its 1-gateway cells have a pooled-bound goal)
	// MaxModelLen overrides the fleet's context length (0: the fleet's).
	MaxModelLen int
	records     func(seed uint64) ([]Record, error)
}

// SuiteOptions describe a suite run.
type SuiteOptions struct {
	Fleet     Options
	Workloads []SuiteWorkload
	Gateways  []int     // gateway counts of the grid
	Mesh      bool      // also run kvroute with the peer mesh at every count above 1
	Seeds     []uint64  // each seed: its own trace window, family draw and tie-breaks
	Loads     []float64 // arrival-rate multipliers
	Policies  []string
	// Curve is the gateway counts of the gateway curve (nil: none), run on
	// workload CurveWorkload at seed CurveSeed (0: the first) and the first
	// load.
	Curve         []int
	CurveWorkload string
	CurveSeed     uint64
	Jobs          int // cells run in parallel
	Progress      io.Writer
}

// TraceWorkloads reads every *.jsonl trace in dir and returns one workload
// each. A trace of at most whole requests is replayed whole, each seed
// spreading its arrivals over a second after their recorded time
// (SpreadArrivals); a longer one is cut to a window of window requests
// whose start the seed chooses (TraceWindow).
func TraceWorkloads(dir string, whole, window int) ([]SuiteWorkload, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil {
		return nil, err
	}
	slices.Sort(paths)
	var out []SuiteWorkload
	for _, p := range paths {
		recs, err := ReadTrace(p)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Base(p), err)
		}
		name := strings.TrimSuffix(strings.TrimSuffix(filepath.Base(p), ".jsonl"), "_trace")
		w := SuiteWorkload{Name: name, Trace: true}
		if len(recs) <= whole || window <= 0 || len(recs) <= window {
			w.Describe = fmt.Sprintf("recorded trace %s, all %d requests; each seed spreads arrivals over 1 s after their recorded time", filepath.Base(p), len(recs))
			w.records = func(seed uint64) ([]Record, error) { return SpreadArrivals(recs, time.Second, seed), nil }
		} else {
			w.Describe = fmt.Sprintf("recorded trace %s: a window of %d of its %d requests (seed 1: the first, 2: the middle, 3: the last)", filepath.Base(p), window, len(recs))
			w.records = func(seed uint64) ([]Record, error) { return TraceWindow(recs, window, seed), nil }
		}
		out = append(out, w)
	}
	return out, nil
}

// TraceWindow is the window of n records seed chooses: seeds 1, 2, 3 (and
// so on, cyclically) start at the beginning, the middle and the end of the
// trace. Arrival times are rebased to the window's first.
func TraceWindow(recs []Record, n int, seed uint64) []Record {
	n = min(n, len(recs))
	start := int((seed+2)%3) * (len(recs) - n) / 2
	out := slices.Clone(recs[start : start+n])
	t0 := out[0].Timestamp
	for i := range out {
		out[i].Timestamp -= t0
	}
	return out
}

// FamilyWorkloads are the generated families as suite workloads.
func FamilyWorkloads(fs []Family) []SuiteWorkload {
	var out []SuiteWorkload
	for _, f := range fs {
		w := SuiteWorkload{Name: f.Name, Describe: f.Describe(), records: f.Generate}
		if f.Name == FamilyAgentic {
			w.MaxModelLen = (f.MaxBlocks + 1) * TraceBlockTokens
		}
		out = append(out, w)
	}
	return out
}

// PolicyStats is one policy's figures in one cell.
type PolicyStats struct {
	Name      string  `json:"name"`
	HitRate   float64 `json:"token_hit_rate"`
	P50       float64 `json:"ttft_p50_ms"`
	P90       float64 `json:"ttft_p90_ms"`
	P99       float64 `json:"ttft_p99_ms"`
	Requests  int     `json:"requests"`
	Errors    int     `json:"errors"`
	Imbalance float64 `json:"imbalance"`
	// Parity is what kvroute's cached_tokens check found (kvroute only).
	Parity *ParityResult `json:"parity_cached_tokens,omitempty"`
}

func statsOf(r *Result) PolicyStats {
	return PolicyStats{Name: r.Name, HitRate: r.HitRate(), P50: msOf(r.Percentile(0.5)), P90: msOf(r.Percentile(0.9)),
		P99: msOf(r.Percentile(0.99)), Requests: r.Requests, Errors: r.Errors, Imbalance: r.Imbalance(), Parity: r.Parity}
}

// Cell is one simulated cell's outcome.
type Cell struct {
	Workload string        `json:"workload"`
	Gateways int           `json:"gateways"`
	Mesh     bool          `json:"mesh"`
	Seed     uint64        `json:"seed"`
	Load     float64       `json:"load"`
	Policies []PolicyStats `json:"policies"`
	Pooled   float64       `json:"pooled_hit_rate"`
	Ideal    float64       `json:"ideal_hit_rate"`
	Dir      string        `json:"dir"`
}

// Policy returns the named policy's stats.
func (c *Cell) Policy(name string) (PolicyStats, bool) {
	for _, p := range c.Policies {
		if p.Name == name {
			return p, true
		}
	}
	return PolicyStats{}, false
}

// Setup names the cell's gateway mode ("3 gateways + mesh").
func (c *Cell) Setup() string { return setupName(c.Gateways, c.Mesh) }

func setupName(g int, mesh bool) string {
	s := fmt.Sprintf("%d gw", g)
	if mesh {
		s += " + mesh"
	}
	return s
}

// CurvePoint is one point of the gateway curve.
type CurvePoint struct {
	Gateways int     `json:"gateways"`
	Policy   string  `json:"policy"` // approx-prefix, kvroute, kvroute + mesh
	HitRate  float64 `json:"token_hit_rate"`
	P90      float64 `json:"ttft_p90_ms"`
}

// SuiteResult is a suite run's outcome.
type SuiteResult struct {
	Cells     []*Cell
	Curve     []CurvePoint
	Workloads []SuiteWorkload
	Wall      time.Duration
	Options   SuiteOptions
}

type suiteJob struct {
	w    SuiteWorkload
	seed uint64
	load float64
}

// RunSuite runs every cell, writing each cell's results.json and
// results.md under out as it finishes.
func RunSuite(so SuiteOptions, out string) (*SuiteResult, error) {
	start := time.Now()
	var jobs []suiteJob
	for _, w := range so.Workloads {
		for _, s := range so.Seeds {
			for _, l := range so.Loads {
				jobs = append(jobs, suiteJob{w, s, l})
			}
		}
	}
	res := &SuiteResult{Workloads: so.Workloads, Options: so}
	var mu sync.Mutex
	var firstErr error
	next := 0
	var wg sync.WaitGroup
	for range max(so.Jobs, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				if next >= len(jobs) || firstErr != nil {
					mu.Unlock()
					return
				}
				j := jobs[next]
				next++
				mu.Unlock()
				cells, err := runSuiteJob(so, j, out)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = fmt.Errorf("%s seed %d load %g×: %w", j.w.Name, j.seed, j.load, err)
				}
				res.Cells = append(res.Cells, cells...)
				done := next
				mu.Unlock()
				if so.Progress != nil && err == nil {
					fmt.Fprintf(so.Progress, "suite: %s seed %d load %g× done (%d/%d started), %s\n", j.w.Name, j.seed, j.load, done, len(jobs), time.Since(start).Round(time.Second))
				}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	slices.SortFunc(res.Cells, func(a, b *Cell) int {
		return strings.Compare(cellKey(a), cellKey(b))
	})
	if len(so.Curve) > 0 {
		curve, err := runCurve(so)
		if err != nil {
			return nil, fmt.Errorf("gateway curve: %w", err)
		}
		res.Curve = curve
	}
	res.Wall = time.Since(start)
	return res, nil
}

func (so SuiteOptions) curveSeed() uint64 {
	if so.CurveSeed > 0 {
		return so.CurveSeed
	}
	return so.Seeds[0]
}

func (so SuiteOptions) workloadIndex(name string) int {
	return slices.IndexFunc(so.Workloads, func(w SuiteWorkload) bool { return w.Name == name })
}

func cellKey(c *Cell) string {
	return fmt.Sprintf("%s|%02d|%v|%05.2f|%03d", c.Workload, c.Gateways, c.Mesh, c.Load, c.Seed)
}

// cellOptions is the fleet of one cell.
func (so SuiteOptions) cellOptions(w SuiteWorkload, seed uint64, gateways int, mesh bool) Options {
	o := so.Fleet
	o.Seed, o.Gateways, o.Peers, o.Progress = seed, gateways, mesh, nil
	if w.MaxModelLen > 0 {
		o.MaxModelLen = w.MaxModelLen
	}
	return o
}

func runSuiteJob(so SuiteOptions, j suiteJob, out string) ([]*Cell, error) {
	recs, err := j.w.records(j.seed)
	if err != nil {
		return nil, err
	}
	src := &TraceSource{Records: recs, Speedup: j.load}
	o1 := so.cellOptions(j.w, j.seed, 1, false)
	pooled, err := Run(src, policyPooled, o1)
	if err != nil {
		return nil, err
	}
	ideal := idealRate(src, o1.BlockSize)
	var cells []*Cell
	for _, g := range so.Gateways {
		rep := &Report{Pooled: pooled, Ideal: ideal}
		for _, p := range so.Policies {
			r, err := Run(src, p, so.cellOptions(j.w, j.seed, g, false))
			if err != nil {
				return nil, err
			}
			rep.Results = append(rep.Results, r)
		}
		c, err := writeCell(out, j, g, false, rep, len(recs), so.cellOptions(j.w, j.seed, g, false))
		if err != nil {
			return nil, err
		}
		cells = append(cells, c)
		if !so.Mesh || g == 1 || !slices.Contains(so.Policies, PolicyKVRoute) {
			continue
		}
		// The mesh changes only kvroute: the other policies' runs are the
		// same as without it.
		mo := so.cellOptions(j.w, j.seed, g, true)
		kv, err := Run(src, PolicyKVRoute, mo)
		if err != nil {
			return nil, err
		}
		mrep := &Report{Pooled: pooled, Ideal: ideal}
		for _, r := range rep.Results {
			if r.Name == PolicyKVRoute {
				r = kv
			}
			mrep.Results = append(mrep.Results, r)
		}
		c, err = writeCell(out, j, g, true, mrep, len(recs), mo)
		if err != nil {
			return nil, err
		}
		cells = append(cells, c)
	}
	return cells, nil
}

// idealRate is the infinite-cache hit rate of src.
func idealRate(src Source, blockSize int) float64 {
	var hit, total int64
	for i := range src.Len() {
		tokens, _ := src.Prompt(i)
		total += int64(len(tokens))
		hit += int64(src.IdealHit(i, blockSize))
	}
	if total == 0 {
		return 0
	}
	return float64(hit) / float64(total)
}

func writeCell(out string, j suiteJob, g int, mesh bool, rep *Report, n int, o Options) (*Cell, error) {
	c := &Cell{Workload: j.w.Name, Gateways: g, Mesh: mesh, Seed: j.seed, Load: j.load, Pooled: rep.pooledRate(), Ideal: rep.Ideal}
	for _, r := range rep.Results {
		c.Policies = append(c.Policies, statsOf(r))
	}
	mode := fmt.Sprintf("g%d", g)
	if mesh {
		mode += "-mesh"
	}
	c.Dir = filepath.Join("cells", j.w.Name, mode, fmt.Sprintf("seed%d-load%gx", j.seed, j.load))
	dir := filepath.Join(out, c.Dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var js strings.Builder
	if err := rep.WriteJSON(&js); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), []byte(js.String()), 0o644); err != nil {
		return nil, err
	}
	var md strings.Builder
	fmt.Fprintf(&md, "Routing suite cell: %s, %s, seed %d, load %g× — %d requests, %d engines × %d blocks × %d tokens\n\n",
		j.w.Name, setupName(g, mesh), j.seed, j.load, n, o.Engines, o.KVBlocks, o.BlockSize)
	rep.WriteMarkdown(&md)
	if err := os.WriteFile(filepath.Join(dir, "results.md"), []byte(md.String()), 0o644); err != nil {
		return nil, err
	}
	return c, nil
}

// curvePolicies are the gateway curve's lines.
const curveMesh = PolicyKVRoute + " + mesh"

func runCurve(so SuiteOptions) ([]CurvePoint, error) {
	i := so.workloadIndex(so.CurveWorkload)
	if i < 0 {
		return nil, fmt.Errorf("no workload %q", so.CurveWorkload)
	}
	w := so.Workloads[i]
	seed, load := so.curveSeed(), so.Loads[0]
	recs, err := w.records(seed)
	if err != nil {
		return nil, err
	}
	src := &TraceSource{Records: recs, Speedup: load}
	var pts []CurvePoint
	for _, g := range so.Curve {
		for _, line := range []string{PolicyApproxPrefix, PolicyKVRoute, curveMesh} {
			o := so.cellOptions(w, seed, g, line == curveMesh)
			pol := line
			if line == curveMesh {
				pol = PolicyKVRoute
			}
			r, err := Run(src, pol, o)
			if err != nil {
				return nil, err
			}
			pts = append(pts, CurvePoint{Gateways: g, Policy: line, HitRate: r.HitRate(), P90: msOf(r.Percentile(0.9))})
		}
		if so.Progress != nil {
			fmt.Fprintf(so.Progress, "suite: gateway curve %d gateways done\n", g)
		}
	}
	return pts, nil
}

// suiteJSON is summary.json.
type suiteJSON struct {
	Cells []*Cell      `json:"cells"`
	Curve []CurvePoint `json:"gateway_curve"`
	Goals []SuiteGoal  `json:"goals"`
	Wall  float64      `json:"wall_seconds"`
}

// WriteJSON writes summary.json.
func (s *SuiteResult) WriteJSON(w io.Writer, goals []SuiteGoal) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(suiteJSON{Cells: s.Cells, Curve: s.Curve, Goals: goals, Wall: s.Wall.Seconds()})
}

// LoadCells reads the cells a suite run wrote under out
// (cells/WORKLOAD/gN[-mesh]/seedS-loadLx/results.json), so a summary can
// be written again, or from an interrupted run's finished cells.
func LoadCells(out string) ([]*Cell, error) {
	paths, err := filepath.Glob(filepath.Join(out, "cells", "*", "*", "*", "results.json"))
	if err != nil {
		return nil, err
	}
	var cells []*Cell
	for _, p := range paths {
		rel, _ := filepath.Rel(out, filepath.Dir(p))
		parts := strings.Split(filepath.ToSlash(rel), "/")
		c := &Cell{Workload: parts[1], Dir: rel}
		mode := parts[2]
		c.Mesh = strings.HasSuffix(mode, "-mesh")
		if _, err := fmt.Sscanf(strings.TrimSuffix(mode, "-mesh"), "g%d", &c.Gateways); err != nil {
			return nil, fmt.Errorf("%s: gateway mode %q", rel, mode)
		}
		if _, err := fmt.Sscanf(strings.TrimSuffix(parts[3], "x"), "seed%d-load%g", &c.Seed, &c.Load); err != nil {
			return nil, fmt.Errorf("%s: seed and load %q", rel, parts[3])
		}
		raw, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		var rep jsonReport
		if err := json.Unmarshal(raw, &rep); err != nil {
			return nil, fmt.Errorf("%s: %w", rel, err)
		}
		c.Pooled, c.Ideal = rep.PooledHitRate, rep.IdealHitRate
		for _, jp := range rep.Policies {
			c.Policies = append(c.Policies, PolicyStats{Name: jp.Name, HitRate: jp.TokenHitRate, P50: jp.TTFTP50,
				P90: jp.TTFTP90, P99: jp.TTFTP99, Requests: jp.Requests, Errors: jp.Errors})
		}
		cells = append(cells, c)
	}
	slices.SortFunc(cells, func(a, b *Cell) int { return strings.Compare(cellKey(a), cellKey(b)) })
	return cells, nil
}
