package ingest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kvroute/kvroute/config"
	"github.com/kvroute/kvroute/index"
)

// unhealthyAfter consecutive failed scrapes mark a replica unhealthy.
const unhealthyAfter = 3

// maxScrapeBytes bounds one /metrics body.
const maxScrapeBytes = 16 << 20

// scraper polls one vLLM server's /metrics; with data parallelism the
// server reports each rank's engine under the label engine="<rank>".
type scraper struct {
	m     *Manager
	pool  *poolState
	cfg   *config.Replica
	ranks []*rankState // by DP rank
	fails int
	prevQ map[int][2]float64 // rank → last (queries, hits)
	warn  map[string]string  // mismatch field → value already warned about
}

func (m *Manager) scrapers() []*scraper {
	var out []*scraper
	byCfg := map[*config.Replica]*scraper{}
	for _, rs := range m.ranks {
		if rs.cfg.Metrics == "" {
			continue
		}
		sc := byCfg[rs.cfg]
		if sc == nil {
			sc = &scraper{m: m, pool: rs.pool, cfg: rs.cfg, prevQ: map[int][2]float64{}, warn: map[string]string{}}
			byCfg[rs.cfg] = sc
			out = append(out, sc)
		}
		sc.ranks = append(sc.ranks, rs)
	}
	return out
}

func (sc *scraper) loop(ctx context.Context, interval time.Duration) {
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
	fams, err := sc.fetch(ctx)
	now := sc.m.now()
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		sc.fails++
		for _, rs := range sc.ranks {
			rs.met.scrapeErr.Inc()
			rs.st.update(func(st *rankStatus) { st.ScrapeFailures++; st.setError(now, "scrape: "+err.Error()) })
			if sc.fails >= unhealthyAfter {
				sc.m.ix.SetHealthy(rs.r, false)
			}
		}
		if sc.fails == unhealthyAfter {
			sc.m.log.Warn("ingest: /metrics unreachable; replica marked unhealthy", "pool", sc.pool.cfg.Name, "replica", sc.cfg.Name, "url", sc.cfg.Metrics, "err", err)
		}
		sc.m.log.Debug("ingest: /metrics scrape failed", "pool", sc.pool.cfg.Name, "replica", sc.cfg.Name, "err", err)
		return
	}
	if sc.fails >= unhealthyAfter {
		sc.m.log.Info("ingest: /metrics reachable again; replica healthy", "pool", sc.pool.cfg.Name, "replica", sc.cfg.Name)
	}
	sc.fails = 0
	sc.checkCacheConfig(fams)
	for _, rs := range sc.ranks {
		l := index.Load{
			Running: sc.value(fams, rs.rank, vllmRunning),
			Waiting: sc.value(fams, rs.rank, vllmWaiting),
			KVUsage: sc.value(fams, rs.rank, vllmKVUsage, vllmKVUsageOld),
			// Counters the router learns each engine's prefill rate from.
			PromptTokens:   sc.value(fams, rs.rank, vllmPromptTokens+"_total", vllmPromptTokens),
			CachedTokens:   sc.value(fams, rs.rank, vllmPromptCached+"_total", vllmPromptCached),
			PrefillSeconds: sc.histSum(fams, rs.rank, vllmPrefillTime),
			PrefillCount:   sc.histCount(fams, rs.rank, vllmPrefillTime),
		}
		sc.m.ix.SetLoad(rs.r, l, now)
		sc.m.ix.SetHealthy(rs.r, true)
		rs.met.scrapeOK.Inc()
		q := sc.value(fams, rs.rank, vllmQueries+"_total", vllmQueries, vllmQueriesOld+"_total", vllmQueriesOld)
		h := sc.value(fams, rs.rank, vllmHits+"_total", vllmHits, vllmHitsOld+"_total", vllmHitsOld)
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

func (sc *scraper) fetch(ctx context.Context) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, sc.cfg.Metrics, nil)
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
		return nil, fmt.Errorf("GET %s: %s", sc.cfg.Metrics, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(io.LimitReader(resp.Body, maxScrapeBytes))
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", sc.cfg.Metrics, err)
	}
	return fams, nil
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
		if !ok || slices.Contains(sc.pool.cfg.Models, model) || slices.Contains(sc.pool.cfg.LoRAAdapters, model) {
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
	if v, ok := label(m, labelBlockSize); ok {
		if bs, err := strconv.Atoi(v); err == nil && bs > 0 {
			if ps.learnBlockSize(bs) {
				sc.m.log.Info("ingest: learned block size from /metrics", "pool", ps.cfg.Name, "block_size", bs)
			}
			if ps.cfg.BlockSize > 0 && bs != ps.cfg.BlockSize {
				sc.mismatch("block_size", v, func() { sc.ranks[0].met.mismatchBS.Inc() }, "configured", ps.cfg.BlockSize)
			}
		}
	}
	if v, ok := label(m, labelHashAlgorithm); ok && v != "" && (ps.cfg.IsEngineKeys() || ps.cfg.Hash.Seed != nil) && v != ps.cfg.Hash.Algorithm {
		sc.mismatch("hash_algorithm", v, func() { sc.ranks[0].met.mismatchAlgo.Inc() }, "configured", ps.cfg.Hash.Algorithm)
	}
}

func (sc *scraper) mismatch(field, engineValue string, count func(), args ...any) {
	count()
	if sc.warn[field] == engineValue {
		return
	}
	sc.warn[field] = engineValue
	sc.m.log.Warn("ingest: engine cache config disagrees with the pool config",
		append([]any{"pool", sc.pool.cfg.Name, "replica", sc.cfg.Name, "field", field, "engine", engineValue}, args...)...)
}
