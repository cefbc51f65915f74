package fakeenvoy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// DestinationHeader is the header an ORIGINAL_DST cluster dials.
const DestinationHeader = "x-gateway-destination-endpoint"

// Gateway is an HTTP proxy on loopback that behaves like Envoy configured
// with envoy/envoy.yaml: it strips any client copy of the destination header
// (the header_mutation filter), runs the ext_proc exchange, and proxies to
// exactly the ip:port the processor set, as an ORIGINAL_DST cluster with
// use_http_header does (503 when the header is missing or not ip:port).
type Gateway struct {
	cfg    Config
	conn   *grpc.ClientConn
	client extprocv3.ExternalProcessorClient
	proxy  *httputil.ReverseProxy
	log    *slog.Logger

	// DebugHeaders copies the routing headers the processor set on the
	// request (x-kvroute-* and the destination) onto the answer, so a client
	// sees where its request went and why. Envoy does not do this.
	DebugHeaders bool
	// FailStatus, when not 0, answers a failed ext_proc exchange (transport
	// or protocol) and an engine that cannot be reached with this status and
	// a message naming the failing leg, instead of Envoy's 500 and 503.
	FailStatus int
}

// debugHeaderPrefix marks the processor's debug headers (extproc's
// HeaderDebug* and HeaderScores).
const debugHeaderPrefix = "x-kvroute-"

// NewGateway connects to the ext_proc server at extProcAddr (plaintext gRPC).
func NewGateway(extProcAddr string, cfg Config, log *slog.Logger) (*Gateway, error) {
	cfg.defaults()
	if log == nil {
		log = slog.Default()
	}
	conn, err := grpc.NewClient(extProcAddr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(cfg.BodyLimitBytes+1<<20), grpc.MaxCallRecvMsgSize(cfg.BodyLimitBytes+1<<20)))
	if err != nil {
		return nil, err
	}
	g := &Gateway{cfg: cfg, conn: conn, client: extprocv3.NewExternalProcessorClient(conn), log: log}
	transport := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     30 * time.Second,
	}
	g.proxy = &httputil.ReverseProxy{
		Rewrite:       func(*httputil.ProxyRequest) {}, // the handler fills the outgoing request
		Transport:     transport,
		FlushInterval: -1, // stream SSE as it comes
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if g.FailStatus != 0 {
				g.log.Warn("engine failed", "engine", r.URL.Host, "err", err)
				http.Error(w, "engine "+r.URL.Host+" failed: "+err.Error(), g.FailStatus)
				return
			}
			http.Error(w, "upstream connect error: "+err.Error(), http.StatusServiceUnavailable)
		},
	}
	return g, nil
}

// Close releases the gRPC connection.
func (g *Gateway) Close() error { return g.conn.Close() }

// ServeHTTP handles one client request.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, int64(g.cfg.BodyLimitBytes)+1))
	if err != nil {
		http.Error(w, "read body: "+err.Error(), http.StatusBadRequest)
		return
	}
	headers := map[string]string{}
	for k, vs := range r.Header {
		k = strings.ToLower(k)
		if k == DestinationHeader || k == "content-length" {
			continue // never trust a client-sent routing header
		}
		headers[k] = strings.Join(vs, ",")
	}
	if _, ok := headers["x-request-id"]; !ok {
		headers["x-request-id"] = strconv.FormatInt(time.Now().UnixNano(), 36)
	}
	// The upstream leg runs while the ext_proc stream is still open, as in
	// Envoy: the processor's in-flight count covers the whole request.
	responded := false
	res, err := DoWhile(r.Context(), g.client, g.cfg, Request{Method: r.Method, Path: r.URL.RequestURI(), Headers: headers, Body: body},
		func(res Result) {
			responded = true
			g.forward(w, r, res)
		})
	if err == nil && !responded {
		g.forward(w, r, res) // a local reply before the exchange (413 above the buffer limit)
		return
	}
	if err != nil {
		g.log.Warn("ext_proc exchange failed", "err", err, "status", res.Status)
		if responded {
			return // the stream failed as it closed; the client has its answer
		}
		if res.Status == 0 {
			res.Status = http.StatusInternalServerError
		}
		if g.FailStatus != 0 && res.Status != http.StatusGatewayTimeout {
			res.Status = g.FailStatus
		}
		http.Error(w, "ext_proc: "+err.Error(), res.Status)
	}
}

// forward answers a local reply or proxies the request to exactly the
// ip:port the processor set, as an ORIGINAL_DST cluster with use_http_header.
func (g *Gateway) forward(w http.ResponseWriter, r *http.Request, res Result) {
	if res.Status != 0 {
		w.Header().Set("content-type", "text/plain; charset=utf-8")
		for k, v := range res.LocalHeaders {
			w.Header().Set(k, v) // an immediate response's headers (Retry-After)
		}
		w.WriteHeader(res.Status)
		_, _ = io.WriteString(w, res.LocalBody)
		return
	}
	dest := res.Headers[DestinationHeader]
	ap, err := netip.ParseAddrPort(dest)
	if err != nil {
		// original_dst_host_invalid: no host, 503 "no healthy upstream".
		http.Error(w, "no healthy upstream", http.StatusServiceUnavailable)
		return
	}
	out := r.Clone(r.Context())
	out.URL = &url.URL{Scheme: "http", Host: ap.String(), Path: r.URL.Path, RawQuery: r.URL.RawQuery}
	out.Host = r.Host
	out.RequestURI = ""
	out.Header = http.Header{}
	for k, v := range res.Headers {
		if strings.HasPrefix(k, ":") {
			continue
		}
		out.Header.Set(k, v)
	}
	out.Body = io.NopCloser(bytes.NewReader(res.Body))
	out.ContentLength = int64(len(res.Body))
	if g.DebugHeaders {
		// The proxy adds the engine's headers to these.
		for k, v := range res.Headers {
			if k == DestinationHeader || strings.HasPrefix(k, debugHeaderPrefix) {
				w.Header().Set(k, v)
			}
		}
	}
	g.proxy.ServeHTTP(w, out)
}

// Serve runs the gateway's HTTP server on ln until ctx ends.
func (g *Gateway) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{Handler: g, ReadHeaderTimeout: 5 * time.Second}
	context.AfterFunc(ctx, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	})
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
