package ingest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kvroute/kvroute/index"
)

// vllmMetrics renders a /metrics page the way vLLM's prometheus_client
// exposes it (counters with _total, per-engine labels), for two DP engines.
func vllmMetrics(queries, hits float64, blockSize int, algo string) string {
	return fmt.Sprintf(`# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m-p"} 3.0
vllm:num_requests_running{engine="1",model_name="m-p"} 5.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m-p"} 1.0
vllm:num_requests_waiting{engine="1",model_name="m-p"} 0.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m-p"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="m-p"} 0.5
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="m-p"} %g
vllm:prefix_cache_queries_total{engine="1",model_name="m-p"} 0.0
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="m-p"} %g
vllm:prefix_cache_hits_total{engine="1",model_name="m-p"} 0.0
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="%d",cache_dtype="auto",enable_prefix_caching="True",engine="0",prefix_caching_hash_algo="%s"} 1.0
`, queries, hits, blockSize, algo)
}

const oldVLLMMetrics = `# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="other-name"} 2
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="other-name"} 7
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="other-name"} 0.75
`

func newScrapeManager(t *testing.T, pool testPool) (*Manager, *index.Index, *prometheus.Registry) {
	t.Helper()
	cfg := baseConfig(pool)
	cfg.Settings.ScrapeInterval = 10 * time.Millisecond
	ix := index.New(index.Options{TTL: time.Hour, MaxEntries: 1 << 20})
	reg := prometheus.NewRegistry()
	now := time.Unix(1767225600, 0)
	m, err := newManager(t, ix, cfg, Options{Registerer: reg, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	return m, ix, reg
}

func TestScraperReadsLoadPerEngineAndHitRate(t *testing.T) {
	var body atomic.Value
	body.Store(vllmMetrics(100, 50, 16, "xxhash"))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, body.Load().(string))
	}))
	defer srv.Close()
	pool := poolConfig("p", keysEngine, replicaSpec{name: "s", dp: 2, metrics: srv.URL + "/metrics"})
	m, ix, reg := newScrapeManager(t, pool)
	h := &harness{t: t, ix: ix, mgr: m, reg: reg}
	scs := m.scrapers()
	if len(scs) != 1 || len(scs[0].ranks) != 2 {
		t.Fatalf("scrapers %+v", scs)
	}
	ctx := context.Background()
	scs[0].scrape(ctx)
	for rank, want := range []index.Load{{Running: 3, Waiting: 1, KVUsage: 0.25}, {Running: 5, Waiting: 0, KVUsage: 0.5}} {
		st, _ := ix.Replica(h.rank(fmt.Sprintf("s/dp%d", rank)).r)
		if st.Load != want || st.LoadAt.IsZero() || !st.Healthy {
			t.Errorf("rank %d: %+v, want %+v", rank, st, want)
		}
	}
	// Second scrape: +100 queries, +80 hits → 0.8. Third: counters reset.
	body.Store(vllmMetrics(200, 130, 16, "xxhash"))
	scs[0].scrape(ctx)
	if s := h.status("s/dp0"); !s.HasHitRate || s.HitRate != 0.8 {
		t.Errorf("hit rate %+v, want 0.8", s)
	}
	body.Store(vllmMetrics(10, 9, 16, "xxhash"))
	scs[0].scrape(ctx)
	if s := h.status("s/dp0"); s.HitRate != 0.9 {
		t.Errorf("hit rate after counter reset %v, want 0.9", s.HitRate)
	}
	// cache_config_info: block size 16 and xxhash disagree with the config (4, sha256_cbor).
	if h.counter(metricConfigMismatch, "field", "block_size") != 3 || h.counter(metricConfigMismatch, "field", "hash_algorithm") != 3 {
		t.Errorf("config mismatches: block_size=%v hash_algorithm=%v", h.counter(metricConfigMismatch, "field", "block_size"), h.counter(metricConfigMismatch, "field", "hash_algorithm"))
	}
	if !m.Ready() {
		t.Error("not ready with fresh load data")
	}
}

// prefillPage is a vLLM /metrics page with the prefill counters the router
// learns its prefill rate from (one engine, no DP label).
func prefillPage(prompt, hits, prefillSum float64, prefillCount int) string {
	return fmt.Sprintf(`# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m-p"} 2
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{model_name="m-p"} %g
# TYPE vllm:prompt_tokens_cached_total counter
vllm:prompt_tokens_cached_total{model_name="m-p"} %g
# TYPE vllm:request_prefill_time_seconds histogram
vllm:request_prefill_time_seconds_bucket{le="1.0",model_name="m-p"} %d
vllm:request_prefill_time_seconds_bucket{le="+Inf",model_name="m-p"} %d
vllm:request_prefill_time_seconds_sum{model_name="m-p"} %g
vllm:request_prefill_time_seconds_count{model_name="m-p"} %d
`, prompt, hits, prefillCount, prefillCount, prefillSum, prefillCount)
}

func TestScraperLearnsThePrefillRate(t *testing.T) {
	var body atomic.Value
	body.Store(prefillPage(1000, 200, 0.5, 2))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, body.Load().(string))
	}))
	defer srv.Close()
	pool := poolConfig("p", keysEngine, replicaSpec{name: "s", metrics: srv.URL + "/metrics"})
	m, ix, _ := newScrapeManager(t, pool)
	sc := m.scrapers()[0]
	sc.scrape(context.Background())
	st, _ := ix.Replica(sc.ranks[0].r)
	if st.Load.PromptTokens != 1000 || st.Load.CachedTokens != 200 || st.Load.PrefillSeconds != 0.5 || st.Load.PrefillCount != 2 || st.Load.Waiting != 2 {
		t.Fatalf("load %+v", st.Load)
	}
	// Fewer than minLearnRequests requests since: nothing learned yet.
	body.Store(prefillPage(2000, 200, 0.6, 3))
	sc.scrape(context.Background())
	if st, _ := ix.Replica(sc.ranks[0].r); st.PrefillRate != 0 {
		t.Fatalf("learned %g tokens/s from one request", st.PrefillRate)
	}
	// +9,000 prompt tokens, 1,000 cached, in 4 requests over 2 s of prefill: 4,000 tokens/s.
	body.Store(prefillPage(10000, 1200, 2.5, 6))
	sc.scrape(context.Background())
	st, _ = ix.Replica(sc.ranks[0].r)
	if st.PrefillRate != 4000 || st.MeanPromptTokens != 2000 {
		t.Fatalf("learned %g tokens/s and %g tokens per request, want 4000 and 2000", st.PrefillRate, st.MeanPromptTokens)
	}
}

func TestScraperLearnsBlockSizeFallsBackToOldNamesAndMarksUnhealthy(t *testing.T) {
	var page atomic.Value
	page.Store(oldVLLMMetrics + "# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{block_size=\"32\"} 1\n")
	var fail atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if fail.Load() {
			http.Error(w, "down", http.StatusInternalServerError)
			return
		}
		fmt.Fprint(w, page.Load().(string))
	}))
	defer srv.Close()
	pool := poolConfig("p", keysTokens, replicaSpec{name: "r0", metrics: srv.URL})
	pool.BlockSize = 0
	m, ix, _ := newScrapeManager(t, pool)
	sc := m.scrapers()[0]
	ctx := context.Background()
	sc.scrape(ctx)
	st, _ := ix.Replica(sc.ranks[0].r)
	if want := (index.Load{Running: 2, Waiting: 7, KVUsage: 0.75}); st.Load != want {
		t.Errorf("load %+v, want %+v", st.Load, want)
	}
	if bs := m.pools[0].keys.BlockSize(); bs != 32 {
		t.Errorf("learned block size %d, want 32", bs)
	}
	fail.Store(true)
	for i := range unhealthyAfter {
		sc.scrape(ctx)
		if st, _ := ix.Replica(sc.ranks[0].r); st.Healthy {
			t.Fatalf("after %d failures healthy=%v", i+1, st.Healthy)
		}
	}
	fail.Store(false)
	sc.scrape(ctx)
	if st, _ := ix.Replica(sc.ranks[0].r); !st.Healthy {
		t.Error("a good scrape did not restore health")
	}
}

func TestScrapeLoopRunsUntilCancelled(t *testing.T) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		fmt.Fprint(w, oldVLLMMetrics)
	}))
	defer srv.Close()
	m, _, _ := newScrapeManager(t, poolConfig("p", keysTokens, replicaSpec{name: "r0", metrics: srv.URL}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	waitFor(t, "three scrapes", func() bool { return n.Load() >= 3 })
	cancel()
	<-done
}

// TestScraperRejectsNonFiniteSamples: NaN, ±Inf and negative load samples
// never reach the index; the replica is marked unhealthy and the reading is
// counted as invalid. Before the check, NaN passed as a load and the router
// found no candidate cheaper than it.
func TestScraperRejectsNonFiniteSamples(t *testing.T) {
	for _, bad := range []string{"NaN", "+Inf", "-Inf", "-3"} {
		page := fmt.Sprintf("# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m-p\"} 1\n"+
			"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"m-p\"} %s\n"+
			"# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{model_name=\"m-p\"} 0.5\n", bad)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, page) }))
		m, ix, reg := newScrapeManager(t, poolConfig("p", keysTokens, replicaSpec{name: "r0", metrics: srv.URL}))
		sc := m.scrapers()[0]
		sc.scrape(t.Context())
		srv.Close()
		st, _ := ix.Replica(sc.ranks[0].r)
		if !st.LoadAt.IsZero() || st.Healthy {
			t.Errorf("%s: load %+v recorded (healthy=%v)", bad, st.Load, st.Healthy)
		}
		h := &harness{t: t, reg: reg}
		if got := h.counter(metricScrapes, "outcome", "invalid"); got != 1 {
			t.Errorf("%s: %v invalid scrapes counted, want 1", bad, got)
		}
	}
}

// FuzzScrapeParser: any /metrics body parses or fails without panicking,
// and every load it yields is finite and non-negative.
func FuzzScrapeParser(f *testing.F) {
	f.Add(vllmMetrics(10, 4, 16, "sha256"))
	f.Add(oldVLLMMetrics)
	f.Add("vllm:num_requests_running NaN\nvllm:num_requests_waiting +Inf\nvllm:kv_cache_usage_perc -1\n")
	f.Add("# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine=\"1\"} 1e308\n")
	pool := poolConfig("p", keysTokens, replicaSpec{name: "r0"})
	sc := &scraper{pool: &poolState{in: Pool{Name: pool.Name, Models: pool.Models}}}
	f.Fuzz(func(t *testing.T, body string) {
		fams, err := parseMetrics(strings.NewReader(body))
		if err != nil {
			return
		}
		for rank := range 2 {
			l, err := sc.load(fams, rank)
			if err != nil {
				continue
			}
			for _, v := range []float64{l.Running, l.Waiting, l.KVUsage} {
				if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
					t.Fatalf("load %+v passed", l)
				}
			}
		}
	})
}

// stallingMetrics serves oldVLLMMetrics; while frozen holds, a request
// waits until release is closed (then it is answered) or its client gives
// up, as a SIGSTOPped engine's /metrics does.
func stallingMetrics(frozen *atomic.Bool, release <-chan struct{}) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if frozen.Load() {
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		fmt.Fprint(w, oldVLLMMetrics)
	}))
}

// TestFrozenEngineIsUnroutableWhileItsScrapeStalls: an engine that accepts
// the /metrics connection and never answers (a SIGSTOPped process) is
// unroutable while the scrape waits, long before the scrape timeout, and
// routable again once it answers.
func TestFrozenEngineIsUnroutableWhileItsScrapeStalls(t *testing.T) {
	release := make(chan struct{})
	var frozen atomic.Bool
	srv := stallingMetrics(&frozen, release)
	defer srv.Close()
	cfg := baseConfig(poolConfig("p", keysTokens, replicaSpec{name: "r0", metrics: srv.URL}))
	cfg.Settings.ScrapeInterval = 20 * time.Millisecond
	cfg.Settings.ScrapeTimeout = time.Minute
	h := start(t, cfg)
	healthy := func() bool { st, _ := h.ix.Replica(h.rank("r0").r); return st.Healthy && !st.LoadAt.IsZero() }
	waitFor(t, "a first reading", healthy)
	frozen.Store(true)
	waitFor(t, "unroutable while the scrape stalls", func() bool { return !healthy() })
	if got := h.counter(metricUnroutable, "reason", downScrapeStall); got != 1 {
		t.Errorf("%v stalls counted, want 1", got)
	}
	frozen.Store(false)
	close(release)
	waitFor(t, "routable again", healthy)
}

// scrapers is every replica's scraper, in layout order.
func (m *Manager) scrapers() []*scraper {
	var out []*scraper
	for _, g := range m.groups {
		if sc := m.newScraper(g.ranks); sc != nil {
			out = append(out, sc)
		}
	}
	return out
}

// bigMetricsPage is a 16 MiB /metrics page (the scrape limit): vLLM's page
// followed by small series, 64 to a family, of families kvroute does not
// read.
func bigMetricsPage() string {
	var b strings.Builder
	b.WriteString(vllmMetrics(10, 4, 16, "sha256"))
	for i := 0; b.Len() < maxScrapeBytes-256; i++ {
		if i%64 == 0 {
			fmt.Fprintf(&b, "# HELP exporter_family_%d A family kvroute does not read.\n# TYPE exporter_family_%d gauge\n", i/64, i/64)
		}
		fmt.Fprintf(&b, "exporter_family_%d{shard=\"%d\"} %d\n", i/64, i, i)
	}
	return b.String()
}

// A 16 MiB page of small series costs the scraper a few MiB of allocation,
// not hundreds: only the families kvroute reads are parsed, and the load is
// read as from the bare page.
func TestScrapeOfA16MiBPageAllocatesLittle(t *testing.T) {
	page := bigMetricsPage()
	pool := poolConfig("p", keysTokens, replicaSpec{name: "r0"})
	sc := &scraper{pool: &poolState{in: Pool{Name: pool.Name, Models: pool.Models}}}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fams, err := parseMetrics(strings.NewReader(page))
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("parsing a %d-byte page allocated %d bytes", len(page), alloc)
	if alloc > 8<<20 {
		t.Errorf("parsing a 16 MiB page allocated %d MiB", alloc>>20)
	}
	l, err := sc.load(fams, 1)
	if err != nil || l.Running != 5 || l.KVUsage != 0.5 {
		t.Errorf("load %+v, %v", l, err)
	}
}

// Too many series of a family kvroute reads fail the scrape (counted as an
// error) instead of being held.
func TestScrapeRefusesTooManySeriesOfAReadFamily(t *testing.T) {
	var b strings.Builder
	b.WriteString("# TYPE vllm:num_requests_running gauge\n")
	for i := range maxScrapeKeptSeries + 1 {
		fmt.Fprintf(&b, "vllm:num_requests_running{engine=\"0\",model_name=\"m%d\"} 1\n", i)
	}
	if _, err := parseMetrics(strings.NewReader(b.String())); !errors.Is(err, errScrapeSeries) {
		t.Fatalf("err %v", err)
	}
	long := "vllm:num_requests_running{model_name=\"" + strings.Repeat("m", maxScrapeLineBytes) + "\"} 1\n"
	if _, err := parseMetrics(strings.NewReader(long)); !errors.Is(err, errScrapeLine) {
		t.Fatalf("long line: err %v", err)
	}
	// A long line of another family is skipped.
	fams, err := parseMetrics(strings.NewReader("other{a=\"" + strings.Repeat("x", 1<<20) + "\"} 1\n" + oldVLLMMetrics))
	if err != nil || fams[vllmWaiting] == nil || fams["other"] != nil {
		t.Fatalf("fams %v, err %v", len(fams), err)
	}
}

// BenchmarkParseMetrics_16MiBPage parses bigMetricsPage as the scraper
// does (filtered) and, as the baseline, with expfmt over the whole page.
func BenchmarkParseMetrics_16MiBPage(b *testing.B) {
	page := bigMetricsPage()
	for _, bc := range []struct {
		name  string
		parse func(io.Reader) (map[string]*dto.MetricFamily, error)
	}{
		{"filtered", parseMetrics},
		{"expfmt_whole_page", func(r io.Reader) (map[string]*dto.MetricFamily, error) {
			p := expfmt.NewTextParser(model.UTF8Validation)
			return p.TextToMetricFamilies(r)
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(page)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bc.parse(strings.NewReader(page)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// FuzzScrapeFilterKeepsWhatIsRead: for any page the full parser accepts,
// the filtered page parses too and yields the same load for every rank.
func FuzzScrapeFilterKeepsWhatIsRead(f *testing.F) {
	f.Add(vllmMetrics(10, 4, 16, "sha256"))
	f.Add(oldVLLMMetrics)
	f.Add(prefillPage(100, 40, 1.5, 3))
	f.Add("# HELP other x\n# TYPE other counter\nother_total 1\n" + oldVLLMMetrics)
	pool := poolConfig("p", keysTokens, replicaSpec{name: "r0"})
	sc := &scraper{pool: &poolState{in: Pool{Name: pool.Name, Models: pool.Models}}}
	f.Fuzz(func(t *testing.T, body string) {
		p := expfmt.NewTextParser(model.UTF8Validation)
		full, err := p.TextToMetricFamilies(strings.NewReader(body))
		if err != nil {
			return
		}
		kept, err := parseMetrics(strings.NewReader(body))
		if err != nil {
			if errors.Is(err, errScrapeSeries) || errors.Is(err, errScrapeLine) {
				return
			}
			t.Fatalf("the full page parses, the filtered one does not: %v", err)
		}
		for rank := range 2 {
			a, errA := sc.load(full, rank)
			b, errB := sc.load(kept, rank)
			if (errA == nil) != (errB == nil) || fmt.Sprint(a) != fmt.Sprint(b) {
				t.Fatalf("rank %d: full %+v (%v), filtered %+v (%v)", rank, a, errA, b, errB)
			}
		}
	})
}
