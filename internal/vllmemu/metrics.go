package vllmemu

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are vLLM's per-engine Prometheus metrics, labelled model_name and
// engine as vLLM's PrometheusStatLogger does (vllm/v1/metrics/loggers.py,
// upstream main 5ac26849).
type metrics struct {
	running, waiting, kvUsage prometheus.Gauge
	queries, hits, cached     prometheus.Counter
	promptTokens, genTokens   prometheus.Counter
	preemptions, success      prometheus.Counter
	ttft, e2e                 prometheus.Observer
	prefill, queue            prometheus.Observer
	e                         *Engine
}

func newMetrics(reg prometheus.Registerer, e *Engine) *metrics {
	labels := prometheus.Labels{labelModelName: e.opts.Model, labelEngine: strconv.Itoa(e.opts.DataParallelRank)}
	f := func(name, help string) prometheus.Opts {
		return prometheus.Opts{Name: name, Help: help, ConstLabels: labels}
	}
	gauge := func(name, help string) prometheus.Gauge {
		g := prometheus.NewGauge(prometheus.GaugeOpts(f(name, help)))
		reg.MustRegister(g)
		return g
	}
	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts(f(name, help)))
		reg.MustRegister(c)
		return c
	}
	hist := func(name, help string, buckets []float64) prometheus.Observer {
		h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, ConstLabels: labels, Buckets: buckets})
		reg.MustRegister(h)
		return h
	}
	m := &metrics{e: e,
		running:      gauge(metricRunning, "Number of requests in model execution batches."),
		waiting:      gauge(metricWaiting, "Number of requests waiting to be processed."),
		kvUsage:      gauge(metricKVUsage, "KV-cache usage. 1 means 100 percent usage."),
		queries:      counter(metricQueries, "Prefix cache queries, in terms of number of queried tokens."),
		hits:         counter(metricHits, "Prefix cache hits, in terms of number of cached tokens."),
		cached:       counter(metricPromptCached, "Number of cached prompt tokens (local and external)."),
		promptTokens: counter(metricPromptTokens, "Number of prefill tokens processed."),
		genTokens:    counter(metricGenTokens, "Number of generation tokens processed."),
		preemptions:  counter(metricPreemptions, "Cumulative number of preemption from the engine."),
		ttft:         hist(metricTTFT, "Histogram of time to first token in seconds.", ttftBuckets),
		e2e:          hist(metricE2E, "Histogram of e2e request latency in seconds.", e2eBuckets),
		// Prefill: first scheduled to first token, the latency model's
		// prefill steps (with any decode sharing them); routers learn the
		// prefill rate from it and vllm:prompt_tokens_total.
		prefill: hist(metricPrefillTime, "Histogram of time spent in PREFILL phase for request.", requestTimeBuckets),
		queue:   hist(metricQueueTime, "Histogram of time spent in WAITING phase for request.", requestTimeBuckets),
	}
	success := prometheus.NewCounter(prometheus.CounterOpts{Name: metricSuccess, Help: "Count of successfully processed requests.",
		ConstLabels: prometheus.Labels{labelModelName: e.opts.Model, labelEngine: labels[labelEngine], labelFinishedReason: finishedReasonLength}})
	reg.MustRegister(success)
	m.success = success
	info := prometheus.NewGauge(prometheus.GaugeOpts{Name: metricCacheConfig, Help: "Information of the LLMEngine CacheConfig",
		ConstLabels: prometheus.Labels{
			labelEngine:                labels[labelEngine],
			"block_size":               strconv.Itoa(e.opts.BlockSize),
			"cache_dtype":              "auto",
			"enable_prefix_caching":    "True",
			"prefix_caching_hash_algo": e.opts.HashAlgo.String(),
			"num_gpu_blocks":           strconv.Itoa(e.opts.NumBlocks),
			"num_gpu_blocks_override":  strconv.Itoa(e.opts.NumBlocks),
		}})
	info.Set(1)
	reg.MustRegister(info)
	return m
}

// admitted records a first admission's prefix-cache lookup (in tokens).
func (m *metrics) admitted(promptTokens, hitTokens int) {
	m.queries.Add(float64(promptTokens))
	m.hits.Add(float64(hitTokens))
}

// prefilled records a request's prompt when its first token is out, as
// vLLM's IterationStats counts prompt tokens (and their cached part) with
// the prefill that produced them — the same instant its prefill time is
// observed, which is what lets a router divide one by the other.
func (m *metrics) prefilled(promptTokens, hitTokens int, seconds float64) {
	m.promptTokens.Add(float64(promptTokens))
	m.cached.Add(float64(hitTokens))
	m.prefill.Observe(seconds)
}

func (m *metrics) finished(e2eSeconds float64) {
	m.success.Inc()
	m.e2e.Observe(e2eSeconds)
}

// updateGauges refreshes the scheduler gauges; the caller holds e.mu.
func (e *Engine) updateGauges() {
	e.met.running.Set(float64(len(e.running)))
	e.met.waiting.Set(float64(len(e.waiting)))
	e.met.kvUsage.Set(e.pool.usage())
}
