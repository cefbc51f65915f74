package extproc

import (
	"sync/atomic"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
)

// These benchmarks take apart where kvroute's time goes at one ext_proc
// stream (docs/PERFORMANCE.md): they diagnose, they hold no target.

// spinProcessor is nopProcessor that spends work of a fixed duration on
// each body before answering: the cost of server work of known size.
type spinProcessor struct {
	nopProcessor
	work time.Duration
}

var spinSink int

func (p spinProcessor) Process(srv extprocv3.ExternalProcessor_ProcessServer) error {
	return p.nopProcessor.serve(srv, func() {
		for t0 := time.Now(); time.Since(t0) < p.work; {
			for i := range 64 {
				spinSink += i
			}
		}
	})
}

// BenchmarkGRPCOneStreamServerWork runs one stream of the 2k-chat exchanges
// of GRPCDecisions_2kChat against the nop server, against the nop server
// spinning 60 µs on each body, and against kvroute, whose decision time
// inside the server (kvroute_route_decision_duration_seconds) it reports as
// decide-µs (mean). Each server decides bodies never seen before.
func BenchmarkGRPCOneStreamServerWork(b *testing.B) {
	w := newChatWorkload(b, 2000)
	var seq atomic.Int64
	serve := func(p extprocv3.ExternalProcessorServer) extprocv3.ExternalProcessorClient {
		g := grpc.NewServer(grpc.MaxRecvMsgSize(16 << 20))
		extprocv3.RegisterExternalProcessorServer(g, p)
		return benchServe(b, g)
	}
	m := NewMetrics(nil)
	g, _ := NewGRPCServer(NewServer(w.router, Options{BodyLimitBytes: 8 << 20, Metrics: m}), nil)
	for _, s := range []struct {
		name   string
		client extprocv3.ExternalProcessorClient
	}{
		{"nop", serve(nopProcessor{})},
		{"nop+spin60µs", serve(spinProcessor{work: 60 * time.Microsecond})},
		{"kvroute", benchServe(b, g)},
	} {
		b.Run("server="+s.name, func(b *testing.B) {
			var before, after dto.Metric
			_ = m.decisionSeconds.Write(&before)
			runDecisions(b, s.client, w, &seq, 1)
			_ = m.decisionSeconds.Write(&after)
			if n := after.Histogram.GetSampleCount() - before.Histogram.GetSampleCount(); n > 0 {
				b.ReportMetric((after.Histogram.GetSampleSum()-before.Histogram.GetSampleSum())/float64(n)*1e6, "decide-µs")
			}
		})
	}
}
