package extproc

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
)

// These benchmarks take apart where kvroute's time goes at one ext_proc
// stream (docs/PERFORMANCE.md, issue 18): they diagnose, they hold no target.

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

// BenchmarkDecide_Chat2kSecondPass is Decide_Chat2k's decision on bodies
// seen once before (pass=second replays pass=first's bodies in order), as
// GRPCDecisions_2kChat decided at 8 and 32 streams before its bodies were
// numbered through the run: the user turn then hits the segment cache and
// its blocks are already speculative.
func BenchmarkDecide_Chat2kSecondPass(b *testing.B) {
	w := newChatWorkload(b, 2000)
	start := 1 << 30 // numbers no other benchmark of the process sends
	var first int
	for _, pass := range []string{"first", "second"} {
		b.Run("pass="+pass, func(b *testing.B) {
			var lat []time.Duration
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				if pass == "first" {
					first = i + 1
				}
				body := w.body(start + i%max(first, 1))
				b.StartTimer()
				_, took := w.decide(body)
				lat = append(lat, took)
			}
			reportP50(b, lat)
		})
	}
}

// thrashBytes is more than the CPU caches of the machines this runs on.
const thrashBytes = 64 << 20

// BenchmarkDecide_Chat2kColdCPUCache is Decide_Chat2k with the CPU caches
// emptied before each decision (thrash=true: 64 MiB written, outside the
// timed decision) against warm ones: how much a decision depends on
// finding its tables in cache, as it may not at one stream.
func BenchmarkDecide_Chat2kColdCPUCache(b *testing.B) {
	w := newChatWorkload(b, 2000)
	buf := make([]byte, thrashBytes)
	start := 1 << 29
	for _, thrash := range []bool{false, true} {
		b.Run(fmt.Sprint("thrash=", thrash), func(b *testing.B) {
			var lat []time.Duration
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				body := w.body(start + i)
				if thrash {
					for j := 0; j < len(buf); j += 64 {
						buf[j]++
					}
				}
				b.StartTimer()
				_, took := w.decide(body)
				lat = append(lat, took)
			}
			start += 1 << 20
			reportP50(b, lat)
		})
	}
}

// BenchmarkDecide_Chat2kRoundRobinStacks hands Decide_Chat2k's decisions to
// goroutines=N goroutines in turn, as gRPC's stream workers (woken first in,
// first out) take successive streams: with many, each decision runs on a
// stack last used N decisions ago. The first sub-benchmark warms the caches.
func BenchmarkDecide_Chat2kRoundRobinStacks(b *testing.B) {
	w := newChatWorkload(b, 2000)
	type job struct {
		body []byte
		took time.Duration
		done chan struct{}
	}
	start := 1 << 28
	for _, n := range []int{1, 1, streamWorkers, 1, streamWorkers} {
		b.Run(fmt.Sprint("goroutines=", n), func(b *testing.B) {
			queues := make([]chan *job, n)
			for i := range queues {
				queues[i] = make(chan *job)
				go func(q chan *job) {
					for j := range q {
						_, j.took = w.decide(j.body)
						j.done <- struct{}{}
					}
				}(queues[i])
			}
			defer func() {
				for _, q := range queues {
					close(q)
				}
			}()
			j := &job{done: make(chan struct{})}
			var lat []time.Duration
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				j.body = w.appendBody(j.body[:0], start+i)
				b.StartTimer()
				queues[i%n] <- j
				<-j.done
				lat = append(lat, j.took)
			}
			start += 1 << 20
			reportP50(b, lat)
		})
	}
}
