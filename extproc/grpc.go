package extproc

import (
	"context"
	"crypto/tls"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
)

// grpcMessageMargin is added to the body limit for the rest of a
// ProcessingRequest (headers, metadata) when sizing MaxRecvMsgSize.
const grpcMessageMargin = 1 << 20

// streamWorkers is the number of long-lived goroutines that run ext_proc
// streams (grpc.NumStreamWorkers). Without them gRPC starts a goroutine per
// stream, that is per HTTP request, whose stack grows by copying while it
// unmarshals, decides and marshals; a worker keeps its grown stack. Streams
// beyond this many at once still get a goroutine each, as without workers.
// Idle workers cost their stacks (tens of kB each).
const streamWorkers = 128

// NewGRPCServer returns a gRPC server carrying the ext_proc service and
// grpc.health.v1 with the names Envoy and GIE probe. tlsConf nil: plaintext.
// The health server starts NOT_SERVING for readiness; see WatchReadiness.
func NewGRPCServer(s *Server, tlsConf *tls.Config) (*grpc.Server, *health.Server) {
	g := grpc.NewServer(serverOptions(s, tlsConf)...)
	extprocv3.RegisterExternalProcessorServer(g, s)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(g, hs)
	hs.SetServingStatus(HealthLiveness, healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus(HealthReadiness, healthpb.HealthCheckResponse_NOT_SERVING)
	hs.SetServingStatus(HealthServiceExtProc, healthpb.HealthCheckResponse_NOT_SERVING)
	return g, hs
}

// serverOptions are NewGRPCServer's options: message sizes, stream limits,
// keepalive policy, the panic-recovery interceptors and TLS.
func serverOptions(s *Server, tlsConf *tls.Config) []grpc.ServerOption {
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(s.opts.BodyLimitBytes + grpcMessageMargin),
		grpc.MaxSendMsgSize(s.opts.BodyLimitBytes + grpcMessageMargin),
		// Envoy opens one stream per request on a few long-lived connections.
		grpc.MaxConcurrentStreams(1 << 16),
		grpc.NumStreamWorkers(streamWorkers),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		grpc.ChainUnaryInterceptor(s.recoverUnary),
		grpc.ChainStreamInterceptor(s.recoverStream),
	}
	if tlsConf != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tlsConf)))
	}
	return opts
}

// recoverUnary turns a panic in a unary handler into an Internal error for
// that call, counted in kvroute_panics_total{component="extproc_grpc"}.
func (s *Server) recoverUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	defer s.m.panics.Recover(panicGRPC, s.log, func(e error) { resp, err = nil, status.Error(codes.Internal, e.Error()) })
	return handler(ctx, req)
}

// recoverStream does the same for a streaming handler: the one ext_proc
// stream fails (Envoy applies its failure_mode_allow), the process lives.
func (s *Server) recoverStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
	defer s.m.panics.Recover(panicGRPC, s.log, func(e error) { err = status.Error(codes.Internal, e.Error()) })
	return handler(srv, ss)
}

// WatchReadiness sets the readiness and ext_proc health names from ready()
// every interval until ctx ends, then marks everything NOT_SERVING (so
// Envoy's health check drains traffic during shutdown).
func WatchReadiness(ctx context.Context, hs *health.Server, ready func() bool, interval time.Duration) {
	set := func(ok bool) {
		st := healthpb.HealthCheckResponse_NOT_SERVING
		if ok {
			st = healthpb.HealthCheckResponse_SERVING
		}
		hs.SetServingStatus(HealthReadiness, st)
		hs.SetServingStatus(HealthServiceExtProc, st)
		hs.SetServingStatus("", st)
	}
	set(ready())
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			hs.Shutdown()
			return
		case <-t.C:
			set(ready())
		}
	}
}
