package extproc

import (
	"context"
	"crypto/tls"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
)

// grpcMessageMargin is added to the body limit for the rest of a
// ProcessingRequest (headers, metadata) when sizing MaxRecvMsgSize.
const grpcMessageMargin = 1 << 20

// NewGRPCServer returns a gRPC server carrying the ext_proc service and
// grpc.health.v1 with the names Envoy and GIE probe. tlsConf nil: plaintext.
// The health server starts NOT_SERVING for readiness; see WatchReadiness.
func NewGRPCServer(s *Server, tlsConf *tls.Config) (*grpc.Server, *health.Server) {
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(s.opts.BodyLimitBytes + grpcMessageMargin),
		grpc.MaxSendMsgSize(s.opts.BodyLimitBytes + grpcMessageMargin),
		// Envoy opens one stream per request on a few long-lived connections.
		grpc.MaxConcurrentStreams(1 << 16),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
	}
	if tlsConf != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tlsConf)))
	}
	g := grpc.NewServer(opts...)
	extprocv3.RegisterExternalProcessorServer(g, s)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(g, hs)
	hs.SetServingStatus(HealthLiveness, healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus(HealthReadiness, healthpb.HealthCheckResponse_NOT_SERVING)
	hs.SetServingStatus(HealthServiceExtProc, healthpb.HealthCheckResponse_NOT_SERVING)
	return g, hs
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
