// Package panics counts and logs panics recovered in kvroute's long-lived
// goroutines and gRPC handlers, under one metric every component shares:
// kvroute_panics_total{component}. It imports nothing of kvroute, so extproc,
// ingest and server may all use it without bending DESIGN's import rules.
package panics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// MetricName is the one counter of recovered panics, labelled by component
// (a fixed name per goroutine kind, never request data).
const MetricName = "kvroute_panics_total"

// Counter counts recovered panics by component.
type Counter struct {
	vec *prometheus.CounterVec
}

// NewCounter returns the registry's panic counter, registering it on first
// use: every component that recovers calls NewCounter(reg) and shares the
// same series. reg nil: an unregistered counter.
func NewCounter(reg prometheus.Registerer) *Counter {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricName,
		Help: "Panics recovered in kvroute's goroutines and gRPC handlers, by component; each ended one stream, request or goroutine iteration instead of the process.",
	}, []string{"component"})
	if reg != nil {
		if err := reg.Register(vec); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				panic(err)
			}
			vec = are.ExistingCollector.(*prometheus.CounterVec)
		}
	}
	return &Counter{vec: vec}
}

// Count records one recovered panic of component.
func (c *Counter) Count(component string) { c.vec.WithLabelValues(component).Inc() }

// Recover, deferred directly (defer c.Recover(...)), stops a panic of the
// calling goroutine, counts it, logs it with its stack (the stack names code,
// not request data) and calls then, when not nil, with an error describing
// it. It re-panics nothing: the goroutine's caller decides what comes next.
func (c *Counter) Recover(component string, log *slog.Logger, then func(error)) {
	v := recover()
	if v == nil {
		return
	}
	c.Count(component)
	err := fmt.Errorf("%s: recovered panic", component)
	if log != nil {
		log.Error("panic recovered", "component", component, "panic_type", fmt.Sprintf("%T", v), "stack", string(debug.Stack()))
	}
	if then != nil {
		then(err)
	}
}

// RestartPause paces a supervised goroutine that keeps panicking: each
// restart logs a stack, so a loop that panics at once is held to ten a
// second.
const RestartPause = 100 * time.Millisecond

// Supervise runs fn until it returns normally or ctx ends: a panic in it is
// recovered, counted and logged as Recover does (its type and stack, never
// its value, which may hold client data), and fn runs again after
// RestartPause. Every long-lived goroutine that should outlive a bug in one
// iteration runs under it.
func (c *Counter) Supervise(ctx context.Context, component string, log *slog.Logger, fn func()) {
	for ctx.Err() == nil {
		panicked := true
		func() {
			defer c.Recover(component, log, nil)
			fn()
			panicked = false
		}()
		if !panicked {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(RestartPause):
		}
	}
}
