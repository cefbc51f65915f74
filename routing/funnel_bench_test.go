package routing

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvroute/kvroute/internal/routetest"
)

// BenchmarkDecide_Chat2kFunnel is BenchmarkDecide_Chat2k with the
// prompt-token funnel counting, as the server runs it (parity on): run both
// in one command to compare on the same machine state.
func BenchmarkDecide_Chat2kFunnel(b *testing.B) {
	w := newChatWorkload(b, 2000)
	w.router.SetFunnel(NewFunnel(prometheus.NewRegistry(), []string{"qwen"}))
	var lat, cpu []time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		body := w.Body(i)
		b.StartTimer()
		c0 := routetest.ProcessCPU()
		d, took := w.decide(body)
		lat = append(lat, took)
		cpu = append(cpu, routetest.ProcessCPU()-c0)
		if d.Endpoint == nil {
			b.Fatalf("decision %+v", d)
		}
	}
	b.StopTimer()
	reportLatency(b, lat, cpu)
}
