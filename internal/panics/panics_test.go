package panics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestComponentsShareOneCounter: every component's NewCounter on one
// registry feeds the same kvroute_panics_total series.
func TestComponentsShareOneCounter(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, b := NewCounter(reg), NewCounter(reg)
	func() {
		defer a.Recover("extproc_grpc", nil, nil)
		panic("bug")
	}()
	var got error
	func() {
		defer b.Recover("ingest_subscriber", nil, func(err error) { got = err })
		panic("bug")
	}()
	if got == nil {
		t.Fatal("then was not called with an error")
	}
	if testutil.ToFloat64(a.vec.WithLabelValues("ingest_subscriber")) != 1 || testutil.ToFloat64(b.vec.WithLabelValues("extproc_grpc")) != 1 {
		t.Fatal("the two counters do not share series")
	}
	if n, err := testutil.GatherAndCount(reg, MetricName); err != nil || n != 2 {
		t.Fatalf("%d series (%v), want 2", n, err)
	}
}
