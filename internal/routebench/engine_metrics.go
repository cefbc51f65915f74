package routebench

import (
	"context"
	"fmt"
	"io"
	"net/http"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// EngineCounters are the cumulative counters the harness reads from a vLLM
// (or emulated) engine's /metrics, summed over label sets.
type EngineCounters struct {
	Requests       float64 // vllm:request_success_total
	PromptTokens   float64 // vllm:prompt_tokens_total
	CachedTokens   float64 // vllm:prompt_tokens_cached_total
	PrefixQueries  float64 // vllm:prefix_cache_queries_total
	PrefixHits     float64 // vllm:prefix_cache_hits_total
	RunningWaiting float64 // vllm:num_requests_running + vllm:num_requests_waiting (gauges)
}

// Sub returns c - o for the counters (the gauge is c's).
func (c EngineCounters) Sub(o EngineCounters) EngineCounters {
	return EngineCounters{
		Requests: c.Requests - o.Requests, PromptTokens: c.PromptTokens - o.PromptTokens,
		CachedTokens: c.CachedTokens - o.CachedTokens, PrefixQueries: c.PrefixQueries - o.PrefixQueries,
		PrefixHits: c.PrefixHits - o.PrefixHits, RunningWaiting: c.RunningWaiting,
	}
}

// ScrapeEngine reads an engine's Prometheus text /metrics at url.
func ScrapeEngine(ctx context.Context, client *http.Client, url string) (EngineCounters, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return EngineCounters{}, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return EngineCounters{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return EngineCounters{}, fmt.Errorf("GET %s: status %d", url, resp.StatusCode)
	}
	return parseEngineMetrics(resp.Body)
}

func parseEngineMetrics(r io.Reader) (EngineCounters, error) {
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return EngineCounters{}, fmt.Errorf("parse engine metrics: %w", err)
	}
	sum := func(name string) float64 {
		f, ok := fams[name]
		if !ok {
			return 0
		}
		var s float64
		for _, m := range f.Metric {
			s += value(m)
		}
		return s
	}
	return EngineCounters{
		Requests:       sum("vllm:request_success_total"),
		PromptTokens:   sum("vllm:prompt_tokens_total"),
		CachedTokens:   sum("vllm:prompt_tokens_cached_total"),
		PrefixQueries:  sum("vllm:prefix_cache_queries_total"),
		PrefixHits:     sum("vllm:prefix_cache_hits_total"),
		RunningWaiting: sum("vllm:num_requests_running") + sum("vllm:num_requests_waiting"),
	}, nil
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	}
	return 0
}
