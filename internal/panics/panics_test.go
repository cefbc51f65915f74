package panics

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

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

// TestSuperviseRestartsAndLogsNoPanicValue: a supervised loop that panics is
// counted, logged with the panic's type only (a panic value may quote client
// data) and run again; one that returns ends.
func TestSuperviseRestartsAndLogsNoPanicValue(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := NewCounter(reg)
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	runs := 0
	began := time.Now()
	c.Supervise(context.Background(), "test_loop", log, func() {
		if runs++; runs <= 2 {
			panic(fmt.Errorf("prompt %q", "SECRET-PROMPT-TEXT"))
		}
	})
	if runs != 3 {
		t.Fatalf("loop ran %d times, want 3", runs)
	}
	if took := time.Since(began); took < 2*RestartPause {
		t.Fatalf("two restarts took %s, want at least %s", took, 2*RestartPause)
	}
	if got := testutil.ToFloat64(c.vec.WithLabelValues("test_loop")); got != 2 {
		t.Fatalf("counted %g panics, want 2", got)
	}
	if strings.Contains(logs.String(), "SECRET") || !strings.Contains(logs.String(), "panic_type=") {
		t.Fatalf("log:\n%s", logs.String())
	}
}

func TestSuperviseStopsWithItsContext(t *testing.T) {
	c := NewCounter(nil)
	ctx, cancel := context.WithCancel(context.Background())
	runs := 0
	c.Supervise(ctx, "test_loop", nil, func() {
		runs++
		cancel()
		panic("bug")
	})
	if runs != 1 {
		t.Fatalf("loop ran %d times after its context ended, want 1", runs)
	}
}
