package ingest

import (
	"context"
)

// Components of kvroute_panics_total that ingest reports.
const (
	compApplier    = "ingest_applier"
	compSubscriber = "ingest_subscriber"
	compBound      = "ingest_bind_reader"
	compScraper    = "ingest_scraper"
	compProber     = "ingest_health_prober"
)

// supervise runs fn under panics.Counter.Supervise.
func (m *Manager) supervise(ctx context.Context, component string, fn func()) {
	m.m.panics.Supervise(ctx, component, m.log, fn)
}
