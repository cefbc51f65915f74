package ingest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kvroute/kvroute/index"
)

// unhealthyAfter consecutive failed scrapes, with no live batch meanwhile,
// mean a bind-mode engine is gone (health.go); one failure already makes the
// replica unroutable.
const unhealthyAfter = 3

// maxScrapeBytes bounds one /metrics body.
const maxScrapeBytes = 16 << 20

// scraper polls one vLLM server's /metrics; with data parallelism the
// server reports each rank's engine under the label engine="<rank>".
type scraper struct {
	m     *Manager
	pool  *poolState
	name  string       // the replica's name
	url   string       // its /metrics URL
	ranks []*rankState // by DP rank
	fails int
	prevQ map[int][2]float64 // rank → last (queries, hits)
	warn  map[string]string  // mismatch field → value already warned about
	// invalid: rank → its last reading was rejected (logged once per episode).
	invalid  map[int]bool
	interval time.Duration
	// startTime is the engine's last process_start_time_seconds (0: unknown).
	startTime float64
	dropsAt   map[int]int64 // rank → its drops count when startTime was read
}

// newScraper is the scraper of one replica's ranks (nil when its metrics URL
// is not known).
func (m *Manager) newScraper(ranks []*rankState) *scraper {
	if len(ranks) == 0 || ranks[0].in.Metrics == "" {
		return nil
	}
	rs := ranks[0]
	return &scraper{m: m, pool: rs.pool, name: rs.in.ReplicaName, url: rs.in.Metrics, ranks: ranks,
		prevQ: map[int][2]float64{}, warn: map[string]string{}, invalid: map[int]bool{}, dropsAt: map[int]int64{}}
}

func (sc *scraper) loop(ctx context.Context, interval time.Duration) {
	sc.interval = interval
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		sc.scrape(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// scrape reads /metrics once and records each rank's load.
func (sc *scraper) scrape(ctx context.Context) {
	// A stopped engine accepts the connection and never answers: stop
	// routing to it while the scrape waits.
	stalled := make(chan struct{})
	stall := time.AfterFunc(sc.m.stallAfter(), func() {
		defer close(stalled)
		for _, rs := range sc.ranks {
			rs.met.scrapeStalled.Inc()
			rs.setScrape(true, downScrapeStall)
		}
	})
	began := sc.m.now()
	fams, err := sc.fetch(ctx)
	if !stall.Stop() {
		<-stalled
	}
	now := sc.m.now()
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		sc.fails++
		for _, rs := range sc.ranks {
			rs.met.scrapeErr.Inc()
			rs.st.update(func(st *rankStatus) { st.ScrapeFailures++; st.setError(now, "scrape: "+err.Error()) })
			rs.setScrape(true, downScrapeFailed)
			if sc.fails == unhealthyAfter && rs.events == "" && time.Since(time.Unix(0, rs.lastLiveAt.Load())) > unhealthyAfter*sc.interval {
				// Bind mode cannot see the engine's connection end: a
				// replica unreachable for this long, with no events
				// meanwhile, is gone.
				rs.engineGone()
			}
		}
		if sc.fails == unhealthyAfter {
			sc.m.log.Warn("ingest: /metrics unreachable", "pool", sc.pool.in.Name, "replica", sc.name, "url", sc.url, "err", err)
		}
		sc.m.log.Debug("ingest: /metrics scrape failed", "pool", sc.pool.in.Name, "replica", sc.name, "err", err)
		return
	}
	sc.fails = 0
	sc.checkCacheConfig(fams)
	sc.checkStartTime(fams)
	for _, rs := range sc.ranks {
		l, err := sc.load(fams, rs.rank)
		if err != nil {
			// A reading kvroute cannot trust (NaN, ±Inf, negative) is not a
			// load: keep the last good one, count it, and let the failure
			// count toward unhealthy like an unreachable /metrics.
			rs.met.scrapeInvalid.Inc()
			rs.st.update(func(st *rankStatus) { st.ScrapeFailures++; st.setError(now, "scrape: "+err.Error()) })
			rs.setScrape(true, downInvalidLoad)
			if !sc.invalid[rs.rank] {
				sc.invalid[rs.rank] = true
				sc.m.log.Warn("ingest: /metrics load sample rejected; replica unhealthy until a valid reading", "pool", sc.pool.in.Name, "replica", rs.name, "err", err)
			}
			continue
		}
		sc.invalid[rs.rank] = false
		sc.m.ix.SetLoad(rs.r, l, now)
		rs.setScrape(false, "")
		rs.met.scrapeOK.Inc()
		q, okQ := sc.finite(fams, rs.rank, vllmQueries+"_total", vllmQueries, vllmQueriesOld+"_total", vllmQueriesOld)
		h, okH := sc.finite(fams, rs.rank, vllmHits+"_total", vllmHits, vllmHitsOld+"_total", vllmHitsOld)
		if c, metric, ok := sc.engineCached(fams, rs.rank, h, okH); ok {
			rs.st.update(func(st *rankStatus) { st.EngineCached, st.EngineCachedMetric, st.EngineCachedAt = c, metric, began })
		}
		if !okQ || !okH {
			continue
		}
		prev, seen := sc.prevQ[rs.rank]
		sc.prevQ[rs.rank] = [2]float64{q, h}
		if !seen {
			rs.st.update(func(st *rankStatus) { st.LastScrapeAt = now })
			continue
		}
		dq, dh := q-prev[0], h-prev[1]
		if dq < 0 || dh < 0 { // counters reset: the engine restarted
			dq, dh = q, h
		}
		rs.st.update(func(st *rankStatus) {
			st.LastScrapeAt = now
			if dq > 0 {
				st.HitRate, st.HasHitRate = dh/dq, true
			}
		})
		if dq > 0 {
			rs.met.hitRate.Set(dh / dq)
		}
	}
}

// engineCached is the rank's cached prompt tokens counter: vLLM's
// vllm:prompt_tokens_cached_total (local and external hits, counted at a
// request's first token) when the engine exports it, else its prefix-cache
// hits (hits, okHits).
func (sc *scraper) engineCached(fams map[string]*dto.MetricFamily, rank int, hits float64, okHits bool) (float64, string, bool) {
	for _, name := range []string{vllmPromptCached + "_total", vllmPromptCached} {
		if m := sc.sample(fams[name], rank); m != nil {
			v := sampleValue(m)
			return v, vllmPromptCached + "_total", !math.IsNaN(v) && !math.IsInf(v, 0) && v >= 0
		}
	}
	if okHits && (sc.sample(fams[vllmHits+"_total"], rank) != nil || sc.sample(fams[vllmHits], rank) != nil) {
		return hits, vllmHits + "_total", true
	}
	return 0, "", false
}

// errBadSample: a load sample that is not a finite, non-negative number.
var errBadSample = errors.New("not a finite non-negative number")

// load reads one rank's load; every value is finite and non-negative or the
// reading is refused (naming the metric, never its labels).
func (sc *scraper) load(fams map[string]*dto.MetricFamily, rank int) (index.Load, error) {
	var l index.Load
	for _, f := range []struct {
		dst   *float64
		names []string
	}{
		{&l.Running, []string{vllmRunning}},
		{&l.Waiting, []string{vllmWaiting}},
		{&l.KVUsage, []string{vllmKVUsage, vllmKVUsageOld}},
	} {
		v, ok := sc.finite(fams, rank, f.names...)
		if !ok {
			return index.Load{}, fmt.Errorf("%s: %w", f.names[0], errBadSample)
		}
		*f.dst = v
	}
	// Counters the router learns each engine's prefill rate from: optional
	// (older vLLM lacks some); a NaN, reset or absurd delta teaches the
	// router nothing (index.Load), so they do not make the reading invalid.
	l.PromptTokens = sc.value(fams, rank, vllmPromptTokens+"_total", vllmPromptTokens)
	l.CachedTokens = sc.value(fams, rank, vllmPromptCached+"_total", vllmPromptCached)
	l.PrefillSeconds = sc.histSum(fams, rank, vllmPrefillTime)
	l.PrefillCount = sc.histCount(fams, rank, vllmPrefillTime)
	return l, nil
}

// finite is value, with ok false when the sample is NaN, ±Inf or negative.
func (sc *scraper) finite(fams map[string]*dto.MetricFamily, rank int, names ...string) (float64, bool) {
	v := sc.value(fams, rank, names...)
	return v, !math.IsNaN(v) && !math.IsInf(v, 0) && v >= 0
}

func (sc *scraper) fetch(ctx context.Context) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, sc.url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := sc.m.httpc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return nil, fmt.Errorf("GET %s: %s", sc.url, resp.Status)
	}
	fams, err := parseMetrics(io.LimitReader(resp.Body, maxScrapeBytes))
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", sc.url, err)
	}
	return fams, nil
}

// parseMetrics parses the families kvroute reads from a Prometheus text
// exposition (filterMetrics).
func parseMetrics(r io.Reader) (map[string]*dto.MetricFamily, error) {
	kept, err := filterMetrics(r)
	if err != nil {
		return nil, err
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(bytes.NewReader(kept))
}

// value is the first of names present for the rank's engine and the pool's
// model; 0 when none is.
func (sc *scraper) value(fams map[string]*dto.MetricFamily, rank int, names ...string) float64 {
	for _, name := range names {
		if m := sc.sample(fams[name], rank); m != nil {
			return sampleValue(m)
		}
	}
	return 0
}

// sample picks the rank's sample: label engine="<rank>" (no label: rank 0),
// preferring model_name among the pool's models; a sample naming another
// model is used only when none names one of them (a served-model-name the
// config does not list).
func (sc *scraper) sample(f *dto.MetricFamily, rank int) *dto.Metric {
	if f == nil {
		return nil
	}
	engine := strconv.Itoa(rank)
	var fallback *dto.Metric
	for _, m := range f.GetMetric() {
		if eng, ok := label(m, labelEngine); (ok && eng != engine) || (!ok && rank != 0) {
			continue
		}
		model, ok := label(m, labelModelName)
		if !ok || slices.Contains(sc.pool.in.Models, model) || slices.Contains(sc.pool.in.LoRAAdapters, model) {
			return m
		}
		if fallback == nil {
			fallback = m
		}
	}
	return fallback
}

// histSum and histCount read a histogram's _sum and _count for the rank; 0
// when absent.
func (sc *scraper) histSum(fams map[string]*dto.MetricFamily, rank int, name string) float64 {
	if m := sc.sample(fams[name], rank); m != nil && m.Histogram != nil {
		return m.GetHistogram().GetSampleSum()
	}
	return 0
}

func (sc *scraper) histCount(fams map[string]*dto.MetricFamily, rank int, name string) float64 {
	if m := sc.sample(fams[name], rank); m != nil && m.Histogram != nil {
		return float64(m.GetHistogram().GetSampleCount())
	}
	return 0
}

func label(m *dto.Metric, name string) (string, bool) {
	for _, lp := range m.GetLabel() {
		if lp.GetName() == name {
			return lp.GetValue(), true
		}
	}
	return "", false
}

func sampleValue(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Untyped != nil:
		return m.GetUntyped().GetValue()
	}
	return 0
}

// checkCacheConfig compares vllm:cache_config_info with the pool config:
// learns the block size when the config leaves it to the engines, and warns
// (once per value) when block size or hash algorithm disagree.
func (sc *scraper) checkCacheConfig(fams map[string]*dto.MetricFamily) {
	m := sc.sample(fams[vllmCacheConfig], 0)
	if m == nil {
		return
	}
	ps := sc.pool
	bsLabel, _ := label(m, labelBlockSize)
	algoLabel, _ := label(m, labelHashAlgorithm)
	announced, _ := strconv.Atoi(bsLabel)
	for _, rs := range sc.ranks {
		rs.st.update(func(st *rankStatus) { st.EngineBlockSize, st.EngineHashAlgo = max(announced, 0), boundLabel(algoLabel) })
	}
	if v, ok := label(m, labelBlockSize); ok {
		if bs, err := strconv.Atoi(v); err == nil && bs > 0 {
			if ps.keys.Learn(bs) {
				sc.m.log.Info("ingest: learned block size from /metrics", "pool", ps.in.Name, "block_size", bs)
			}
			if c := ps.keys.ConfiguredBlockSize(); c > 0 && bs != c {
				sc.mismatch("block_size", v, func() { sc.ranks[0].met.mismatchBS.Inc() }, "configured", c)
			}
		}
	}
	if v, ok := label(m, labelHashAlgorithm); ok && v != "" && (ps.keys.EngineKeys() || ps.keys.Seed() != nil) {
		if a := ps.keys.Algorithm(); a != 0 && v != a.String() {
			sc.mismatch("hash_algorithm", v, func() { sc.ranks[0].met.mismatchAlgo.Inc() }, "configured", a.String())
		}
	}
}

// boundLabel keeps an engine-announced label value short enough to show.
func boundLabel(v string) string {
	const maxLabel = 64
	if len(v) > maxLabel {
		return v[:maxLabel]
	}
	return v
}

func (sc *scraper) mismatch(field, engineValue string, count func(), args ...any) {
	count()
	if sc.warn[field] == engineValue {
		return
	}
	sc.warn[field] = engineValue
	sc.m.log.Warn("ingest: engine cache config disagrees with the pool config",
		append([]any{"pool", sc.pool.in.Name, "replica", sc.name, "field", field, "engine", engineValue}, args...)...)
}

// checkStartTime watches the engine's process_start_time_seconds: a new
// value is a new process, whose cache starts empty, whatever the event
// stream showed (the new process may have published past the old one's last
// seq before kvroute reconnected).
func (sc *scraper) checkStartTime(fams map[string]*dto.MetricFamily) {
	f := fams[processStartTime]
	if f == nil || len(f.GetMetric()) == 0 {
		return
	}
	v := sampleValue(f.GetMetric()[0])
	if math.IsNaN(v) || math.IsInf(v, 0) || v <= 0 {
		return
	}
	prev := sc.startTime
	sc.startTime = v
	if prev != 0 && v != prev {
		sc.m.log.Info("ingest: engine process start time changed", "pool", sc.pool.in.Name, "replica", sc.name)
		for _, rs := range sc.ranks {
			rs.engineRestarted(sc.dropsAt[rs.rank])
		}
	}
	for _, rs := range sc.ranks {
		sc.dropsAt[rs.rank] = rs.drops.Load()
	}
}
