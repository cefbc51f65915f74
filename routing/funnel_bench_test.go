package routing

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// BenchmarkDecide_Chat2kFunnel is BenchmarkDecide_Chat2k with the
// prompt-token funnel counting, as the server runs it (parity on): run both
// in one command to compare on the same machine state.
func BenchmarkDecide_Chat2kFunnel(b *testing.B) {
	benchDecide(b, 2000, func(w *chatWorkload) {
		w.router.SetFunnel(NewFunnel(prometheus.NewRegistry(), []string{"qwen"}))
	})
}
