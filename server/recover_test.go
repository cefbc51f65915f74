package server

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvroute/kvroute/internal/panics"
)

func recoveringServer() (*Server, *prometheus.Registry) {
	reg := prometheus.NewRegistry()
	return &Server{log: slog.New(slog.NewTextHandler(io.Discard, nil)), reg: reg, panics: panics.NewCounter(reg)}, reg
}

// TestAdminHandlerPanicIs500AndCounted: a panicking admin handler answers
// 500 over a real connection and is counted; net/http alone would drop the
// connection without a word or a metric.
func TestAdminHandlerPanicIs500AndCounted(t *testing.T) {
	s, reg := recoveringServer()
	srv := httptest.NewServer(s.recoverHTTP(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("handler bug") })))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/debug/replicas")
	if err != nil {
		t.Fatalf("connection dropped: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 500 {
		t.Fatalf("status %d, want 500", resp.StatusCode)
	}
	if n, err := testutil.GatherAndCount(reg, panics.MetricName); err != nil || n != 1 {
		t.Fatalf("%s series: %d (%v)", panics.MetricName, n, err)
	}
}

// TestSupervisedLoopRestartsAfterPanic: a long-lived loop that panics is
// counted and run again; one that returns ends.
func TestSupervisedLoopRestartsAfterPanic(t *testing.T) {
	s, reg := recoveringServer()
	runs := 0
	s.supervise(context.Background(), panicIndex, func() {
		if runs++; runs == 1 {
			panic("sweeper bug")
		}
	})
	if runs != 2 {
		t.Fatalf("loop ran %d times, want 2 (once more after the panic)", runs)
	}
	if n, err := testutil.GatherAndCount(reg, panics.MetricName); err != nil || n != 1 {
		t.Fatalf("%s series: %d (%v)", panics.MetricName, n, err)
	}
}
