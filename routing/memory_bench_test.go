package routing

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvroute/kvroute/internal/routetest"
)

// heapPeak samples the live heap while it runs and reports the largest
// HeapAlloc seen above the heap it started from (after a GC).
type heapPeak struct {
	base, peak atomic.Uint64
	stop       chan struct{}
	done       sync.WaitGroup
}

func startHeapPeak() *heapPeak {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	h := &heapPeak{stop: make(chan struct{})}
	h.base.Store(ms.HeapAlloc)
	h.peak.Store(ms.HeapAlloc)
	h.done.Go(func() {
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-h.stop:
				return
			case <-t.C:
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				if ms.HeapAlloc > h.peak.Load() {
					h.peak.Store(ms.HeapAlloc)
				}
			}
		}
	})
	return h
}

// end stops sampling and returns the peak above the base, in MB.
func (h *heapPeak) end() float64 {
	close(h.stop)
	h.done.Wait()
	return float64(h.peak.Load()-h.base.Load()) / 1e6
}

// memoryRouter is a one-pool router over the real Qwen3 tokenizer and chat
// template with the given limits (zero: unbounded).
func memoryRouter(b *testing.B, lim Limits, inFlight int64) *Router {
	opts := benchRouterOptions
	opts.Limits, opts.MaxBytesInFlight = lim, inFlight
	router, _, _ := qwenRouter(b, 4, opts)
	return router
}

// benchDecideMemory decides concurrent requests of promptBytes of prose
// each and reports the peak live heap above the idle heap (peak-heap-MB)
// and that peak per body byte (heap-per-body-byte), with and without the
// default limits (config's routing.max_prompt_bytes etc.).
func benchDecideMemory(b *testing.B, concurrent, promptBytes int) {
	bodies := make([][]byte, concurrent)
	for i := range bodies {
		text := routetest.Prose(uint64(10+i), promptBytes/5)[:promptBytes] // ASCII prose: any cut is valid
		bodies[i] = fmt.Appendf(nil, `{"model":"qwen3","prompt":%q}`, text)
	}
	for _, c := range []struct {
		name     string
		lim      Limits
		inFlight int64
	}{
		{"limits=default", Limits{MaxPromptBytes: 1 << 20, MaxPromptTokens: 256 << 10, MaxMessages: 4096}, 8 << 20},
		{"limits=none", Limits{}, 0},
	} {
		b.Run(c.name, func(b *testing.B) {
			router := memoryRouter(b, c.lim, c.inFlight)
			var peak float64
			reasons := make([]string, len(bodies))
			for b.Loop() {
				h := startHeapPeak()
				var wg sync.WaitGroup
				for i, body := range bodies {
					wg.Go(func() {
						d := router.Decide("/v1/completions", body, nil)
						if d.Endpoint == nil {
							b.Errorf("no endpoint: %+v", d)
						}
						reasons[i] = d.Reason
					})
				}
				wg.Wait()
				peak = max(peak, h.end())
			}
			b.ReportMetric(peak, "peak-heap-MB")
			b.ReportMetric(peak*1e6/float64(concurrent*len(bodies[0])), "heap-per-body-byte")
			b.Logf("%d × %d-byte bodies: reasons %v, peak live heap %.1f MB", concurrent, len(bodies[0]), reasons, peak)
		})
	}
}

// BenchmarkDecideMemory_8MBPrompt: one 8 MB completion prompt.
func BenchmarkDecideMemory_8MBPrompt(b *testing.B) { benchDecideMemory(b, 1, 8<<20) }

// BenchmarkDecideMemory_16x8MBPrompts: 16 concurrent 8 MB prompts.
func BenchmarkDecideMemory_16x8MBPrompts(b *testing.B) { benchDecideMemory(b, 16, 8<<20) }

// BenchmarkDecideMemory_1MBPrompt: one prompt just under the default
// max_prompt_bytes (1 MiB as sent, JSON escapes included), the most one
// request may tokenize.
func BenchmarkDecideMemory_1MBPrompt(b *testing.B) { benchDecideMemory(b, 1, 1_000_000) }

// BenchmarkDecideMemory_16x1MBPrompts: 16 concurrent prompts under the
// per-request limit; the in-flight budget (8 MiB) lets about half decide
// and routes the rest by load.
func BenchmarkDecideMemory_16x1MBPrompts(b *testing.B) { benchDecideMemory(b, 16, 1_000_000) }
