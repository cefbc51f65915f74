package ingest

import (
	"context"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// PanicsTotal counts panics recovered in kvroute's long-lived goroutines,
// by component (fixed names). It is declared once, here, for every package
// that recovers: register it with Registerer (ingest does, in New).
var PanicsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: metricPanics,
	Help: "Panics recovered in long-lived goroutines, by component; the goroutine was restarted.",
}, []string{"component"})

// Components of kvroute_panics_total that ingest reports.
const (
	compApplier    = "ingest_applier"
	compSubscriber = "ingest_subscriber"
	compBound      = "ingest_bind_reader"
	compScraper    = "ingest_scraper"
)

// panicRestartDelay paces a goroutine that keeps panicking.
const panicRestartDelay = 100 * time.Millisecond

// supervise runs fn until it returns normally or ctx ends; a panic is
// recovered, counted, logged with its stack, and fn runs again.
func (m *Manager) supervise(ctx context.Context, component string, fn func()) {
	for ctx.Err() == nil {
		if !m.runRecovered(component, fn) {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(panicRestartDelay):
		}
	}
}

// runRecovered reports whether fn panicked.
func (m *Manager) runRecovered(component string, fn func()) (panicked bool) {
	defer func() {
		if r := recover(); r != nil {
			panicked = true
			PanicsTotal.WithLabelValues(component).Inc()
			m.log.LogAttrs(context.Background(), slog.LevelError, "recovered a panic; restarting the goroutine",
				slog.String("component", component), slog.Any("panic", r), slog.String("stack", string(debug.Stack())))
		}
	}()
	fn()
	return false
}
