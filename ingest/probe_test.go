package ingest

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// A frozen engine (SIGSTOP: the connection is accepted, nothing answers)
// whose /metrics was read a moment ago must stop being routable long before
// the next scrape: the /health probe sees it. A dead engine core (vLLM's
// /health answers 5xx) likewise; both come back when /health answers.
func TestHealthProbeMakesFrozenOrDeadEngineUnroutable(t *testing.T) {
	var mode atomic.Int32 // 0 healthy, 1 frozen, 2 dead engine core
	release := make(chan struct{})
	defer close(release)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			switch mode.Load() {
			case 1:
				select {
				case <-release:
				case <-r.Context().Done():
				}
				return
			case 2:
				w.WriteHeader(http.StatusInternalServerError)
				return
			}
			return
		}
		fmt.Fprint(w, oldVLLMMetrics)
	}))
	defer srv.Close()
	cfg := baseConfig(poolConfig("p", keysTokens, replicaSpec{name: "r0", metrics: srv.URL + "/metrics"}))
	cfg.Settings.ScrapeInterval = time.Hour // only the first scrape runs
	cfg.Settings.HealthInterval = 20 * time.Millisecond
	h := start(t, cfg)
	healthy := func() bool { st, _ := h.ix.Replica(h.rank("r0").r); return st.Healthy }
	waitFor(t, "a reading", func() bool { st, _ := h.ix.Replica(h.rank("r0").r); return !st.LoadAt.IsZero() && st.Healthy })

	for _, c := range []struct {
		mode   int32
		reason string
	}{{1, downProbeStall}, {2, downProbeFailed}} {
		before := h.counter(metricProbesFailed, "reason", c.reason)
		mode.Store(c.mode)
		waitFor(t, "unroutable ("+c.reason+")", func() bool { return !healthy() })
		if got := h.counter(metricProbesFailed, "reason", c.reason); got <= before {
			t.Errorf("%s probes counted %v, want > %v", c.reason, got, before)
		}
		mode.Store(0)
		waitFor(t, "routable again after "+c.reason, healthy)
	}
}
