package ingest

import (
	"context"
	"log/slog"
	"runtime/debug"
	"time"
)

// Components of kvroute_panics_total that ingest reports.
const (
	compApplier    = "ingest_applier"
	compSubscriber = "ingest_subscriber"
	compBound      = "ingest_bind_reader"
	compScraper    = "ingest_scraper"
	compProber     = "ingest_health_prober"
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
			m.m.panics.Count(component)
			m.log.LogAttrs(context.Background(), slog.LevelError, "recovered a panic; restarting the goroutine",
				slog.String("component", component), slog.Any("panic", r), slog.String("stack", string(debug.Stack())))
		}
	}()
	fn()
	return false
}
