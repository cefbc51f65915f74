package index

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric names, the index's part of kvroute's wire contract.
const (
	metricEntries   = "kvroute_index_entries"
	metricAliases   = "kvroute_index_aliases"
	metricStores    = "kvroute_index_block_stores_total"
	metricRemoves   = "kvroute_index_block_removes_total"
	metricClears    = "kvroute_index_clears_total"
	metricEvictions = "kvroute_index_evictions_total"
	metricLookups   = "kvroute_index_lookups_total"
	metricLookupDur = "kvroute_index_lookup_duration_seconds"
)

type metrics struct {
	stores, removes, clears *prometheus.CounterVec
	evictions               *prometheus.CounterVec
	lookups                 *prometheus.CounterVec
	lookupDur               prometheus.Histogram
}

type poolMetrics struct {
	stores, removes, clears prometheus.Counter
	evictedTTL, evictedCap  prometheus.Counter
	lookupsHit, lookupsMiss prometheus.Counter
	lookupDur               prometheus.Histogram
}

func newMetrics(ix *Index, reg prometheus.Registerer) *metrics {
	m := &metrics{
		stores: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricStores, Help: "Block keys stored (Store calls × keys), by pool.",
		}, []string{"pool"}),
		removes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricRemoves, Help: "Block keys removed, by pool.",
		}, []string{"pool"}),
		clears: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricClears, Help: "Replicas cleared (restart, AllBlocksCleared, removal), by pool.",
		}, []string{"pool"}),
		evictions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricEvictions, Help: "Block entries evicted, by pool and cause (ttl, cap).",
		}, []string{"pool", "cause"}),
		lookups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricLookups, Help: "LookupRoute calls, by pool and outcome (hit: some replica holds block 0; miss).",
		}, []string{"pool", "outcome"}),
		lookupDur: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    metricLookupDur,
			Help:    "LookupRoute latency.",
			Buckets: prometheus.ExponentialBuckets(250e-9, 2, 16),
		}),
	}
	if reg != nil {
		entries := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: metricEntries, Help: "Entries counted toward index.max_entries across all pools: block entries (each lists its replicas), speculative entries and tokens-mode engine hash aliases.",
		}, func() float64 { return float64(ix.entries.Load()) })
		aliases := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: metricAliases, Help: "Of " + metricEntries + ", the engine hash → block key aliases ingest keeps in keys: tokens mode.",
		}, func() float64 { return float64(ix.aliases.Load()) })
		reg.MustRegister(m.stores, m.removes, m.clears, m.evictions, m.lookups, m.lookupDur, entries, aliases)
	}
	return m
}

func (m *metrics) forPool(name string) *poolMetrics {
	return &poolMetrics{
		stores:      m.stores.WithLabelValues(name),
		removes:     m.removes.WithLabelValues(name),
		clears:      m.clears.WithLabelValues(name),
		evictedTTL:  m.evictions.WithLabelValues(name, "ttl"),
		evictedCap:  m.evictions.WithLabelValues(name, "cap"),
		lookupsHit:  m.lookups.WithLabelValues(name, "hit"),
		lookupsMiss: m.lookups.WithLabelValues(name, "miss"),
		lookupDur:   m.lookupDur,
	}
}

func (pm *poolMetrics) observeLookup(hit bool, d time.Duration) {
	if hit {
		pm.lookupsHit.Inc()
	} else {
		pm.lookupsMiss.Inc()
	}
	pm.lookupDur.Observe(d.Seconds())
}
