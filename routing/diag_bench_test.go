package routing

import (
	"fmt"
	"testing"
	"time"
)

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
				body := w.Body(start + i%max(first, 1))
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
				body := w.Body(start + i)
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
//
// streamWorkers is the gRPC stream workers of extproc's server
// (extproc.streamWorkers), which this package cannot import.
func BenchmarkDecide_Chat2kRoundRobinStacks(b *testing.B) {
	const streamWorkers = 128
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
				j.body = w.AppendBody(j.body[:0], start+i)
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
