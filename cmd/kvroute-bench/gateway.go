package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/kvroute/kvroute/internal/fakeenvoy"
)

// runGateway is `kvroute-bench gateway`: HTTP in, kvroute's ext_proc decision
// as Envoy (envoy/envoy.yaml) asks for it, the request proxied to the engine
// kvroute picked. A development and test tool, not a production proxy.
func runGateway(ctx context.Context, args []string, io stdio) error {
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	fs.SetOutput(io.err)
	listen := fs.String("listen", "127.0.0.1:8080", "HTTP `address` clients send OpenAI requests to")
	extproc := fs.String("extproc", "127.0.0.1:9002", "kvroute's ext_proc `address` (listen.extproc; plaintext gRPC)")
	debug := fs.Bool("debug-headers", false, "copy kvroute's routing headers (x-gateway-destination-endpoint, x-kvroute-* when routing.debug_headers is on) onto each answer")
	maxBody := fs.Int("max-body-bytes", 8<<20, "largest request body accepted (413 above it), as Envoy's buffer limit")
	msgTimeout := fs.Duration("message-timeout", 5*time.Second, "the ext_proc filter's message_timeout, as in envoy/envoy.yaml")
	maxMsgTimeout := fs.Duration("max-message-timeout", 30*time.Second, "the ext_proc filter's max_message_timeout, as in envoy/envoy.yaml: the longest override_message_timeout honoured (a request flow control holds asks for its TTL + 1 s; 0 ignores every override)")
	fs.Usage = func() {
		fmt.Fprintln(io.err, "usage: kvroute-bench gateway [--listen ADDR] [--extproc ADDR] [--debug-headers]")
		fmt.Fprintln(io.err, "A loopback stand-in for Envoy in front of kvroute, for development and tests, not production:")
		fmt.Fprintln(io.err, "each request's headers and body go to kvroute over ext_proc (BUFFERED), then to the engine")
		fmt.Fprintln(io.err, "kvroute chose; streamed (SSE) answers pass through as they come. 502 when kvroute or the")
		fmt.Fprintln(io.err, "engine fails, 503 when kvroute names no engine.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	if fs.NArg() > 0 || *maxBody <= 0 || *msgTimeout <= 0 || *maxMsgTimeout < 0 {
		fs.Usage()
		return errUsage
	}
	log := slog.New(slog.NewTextHandler(io.err, nil))
	gw, err := fakeenvoy.NewGateway(*extproc, fakeenvoy.Config{Mode: fakeenvoy.Buffered, SendProtocolConfig: true, BodyLimitBytes: *maxBody,
		MessageTimeout: *msgTimeout, MaxMessageTimeout: *maxMsgTimeout}, log)
	if err != nil {
		return fmt.Errorf("ext_proc %s: %w", *extproc, err)
	}
	defer gw.Close()
	gw.DebugHeaders, gw.FailStatus = *debug, http.StatusBadGateway
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	fmt.Fprintf(io.out, "gateway: listening on http://%s, routing with kvroute at %s (development and tests only; Ctrl-C stops)\n", ln.Addr(), *extproc)
	return gw.Serve(ctx, ln)
}
