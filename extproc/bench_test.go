package extproc

import (
	"context"
	"net"
	"slices"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kvroute/kvroute/internal/fakeenvoy"
)

// nopProcessor answers the same messages as kvroute with a fixed destination
// and no work: the protocol's own ceiling on this machine.
type nopProcessor struct {
	extprocv3.UnimplementedExternalProcessorServer
}

func (nopProcessor) Process(srv extprocv3.ExternalProcessor_ProcessServer) error {
	for {
		req, err := srv.Recv()
		if err != nil {
			return nil
		}
		var resp *extprocv3.ProcessingResponse
		switch req.Request.(type) {
		case *extprocv3.ProcessingRequest_RequestHeaders:
			resp = headersResponse(&extprocv3.CommonResponse{})
		case *extprocv3.ProcessingRequest_RequestBody:
			resp = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{
				Response: &extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: nil}, ClearRouteCache: true}}}}
			resp.GetRequestBody().Response.HeaderMutation.SetHeaders = append(resp.GetRequestBody().Response.HeaderMutation.SetHeaders, setHeader(HeaderDestination, "127.0.0.1:8001"))
			resp.DynamicMetadata = destinationMetadata("127.0.0.1:8001")
		default:
			continue
		}
		if err := srv.Send(resp); err != nil {
			return nil
		}
	}
}

func benchServe(b *testing.B, register func(*grpc.Server)) extprocv3.ExternalProcessorClient {
	g := grpc.NewServer(grpc.MaxRecvMsgSize(16 << 20))
	register(g)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = g.Serve(ln) }()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(16<<20)))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close(); g.Stop() })
	return extprocv3.NewExternalProcessorClient(conn)
}

// benchDecisions runs BUFFERED exchanges of 2k-token chat requests (each
// with a user turn never seen before) on 32 concurrent streams
// (GOMAXPROCS × 16) and reports decisions/s.
func benchDecisions(b *testing.B, client extprocv3.ExternalProcessorClient) {
	w := newChatWorkload(b, 2000)
	bodies := make([][]byte, 4096)
	for i := range bodies {
		bodies[i] = w.body(i)
	}
	cfg := fakeenvoy.Config{Mode: fakeenvoy.Buffered, SendProtocolConfig: true}
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			res, err := fakeenvoy.Do(context.Background(), client, cfg, fakeenvoy.Request{Method: "POST", Path: "/v1/chat/completions", Body: bodies[i%len(bodies)]})
			if err != nil || res.Headers[HeaderDestination] == "" {
				b.Errorf("exchange: %v", err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
}

// BenchmarkGRPCDecisions_2kChat_32Streams_Nop is the ceiling: a processor
// that does no work but answers the same messages.
func BenchmarkGRPCDecisions_2kChat_32Streams_Nop(b *testing.B) {
	client := benchServe(b, func(g *grpc.Server) { extprocv3.RegisterExternalProcessorServer(g, nopProcessor{}) })
	benchDecisions(b, client)
}

// BenchmarkGRPCDecisions_2kChat_32Streams_Kvroute is kvroute's full decision
// (parse, render Qwen3's chat template, tokenize with Qwen3's tokenizer,
// hash, lookup, choose) over the same streams.
func BenchmarkGRPCDecisions_2kChat_32Streams_Kvroute(b *testing.B) {
	w := newChatWorkload(b, 2000)
	srv := NewServer(w.router, Options{BodyLimitBytes: 8 << 20, Metrics: NewMetrics(nil)})
	client := benchServe(b, func(g *grpc.Server) { extprocv3.RegisterExternalProcessorServer(g, srv) })
	benchDecisions(b, client)
}

// BenchmarkGRPCBufferedWithoutProtocolConfig is one stream of BUFFERED
// exchanges (2k-token chat) from an Envoy that sends no protocol_config
// (< 1.40), with routing.body_mode at its default (buffered) and at auto,
// which waits up to ModeInferenceWindow for a body chunk that never comes
// before it answers the headers. Reports the exchange's p50.
func BenchmarkGRPCBufferedWithoutProtocolConfig(b *testing.B) {
	w := newChatWorkload(b, 2000)
	for _, mode := range []string{"default", "auto"} {
		b.Run("body_mode="+mode, func(b *testing.B) {
			opts := Options{BodyLimitBytes: 8 << 20, Metrics: NewMetrics(nil)}
			if mode == "auto" {
				opts.BodyMode = mode
			}
			srv := NewServer(w.router, opts)
			client := benchServe(b, func(g *grpc.Server) { extprocv3.RegisterExternalProcessorServer(g, srv) })
			var lat []time.Duration
			for i := 0; b.Loop(); i++ {
				t0 := time.Now()
				res, err := fakeenvoy.Do(context.Background(), client, fakeenvoy.Config{Mode: fakeenvoy.Buffered}, fakeenvoy.Request{Method: "POST", Path: "/v1/chat/completions", Body: w.body(i)})
				if err != nil || res.Headers[HeaderDestination] == "" {
					b.Fatalf("exchange: %v", err)
				}
				lat = append(lat, time.Since(t0))
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
		})
	}
}
