// Package fakeenvoy is a lockstep stand-in for Envoy's ext_proc HTTP filter
// and an ORIGINAL_DST-style loopback gateway, for tests and the demo: no Envoy
// binary can run here. It follows Envoy's behaviour as read from
// source/extensions/filters/http/ext_proc/{ext_proc,processor_state,
// mutation_utils}.cc and the v1.40 ext_proc protos: header and body ordering per body mode,
// raw_value headers, mutation rules, the content-length check, the 413 above
// the buffer limit, ImmediateResponse without a status becoming 200, and
// streams ended by half-close (io.EOF) or reset (Canceled).
package fakeenvoy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// Mode is the filter's request_body_mode.
type Mode uint8

// The body modes the fake speaks.
const (
	Buffered Mode = iota
	FullDuplex
)

// End is how the fake closes the stream after the exchange.
type End uint8

// Stream endings Envoy produces.
const (
	EndHalfClose End = iota // CloseSend: the server sees io.EOF
	EndCancel               // reset: the server sees codes.Canceled
)

// Config mirrors the ext_proc filter settings the fake honours.
type Config struct {
	Mode Mode
	// BodyLimitBytes is the decoder buffer limit in BUFFERED mode: 413 above
	// it, the server never sees the body. 0: 8 MiB.
	BodyLimitBytes int
	// MessageTimeout is the per-message timer (BUFFERED only; Envoy answers
	// 504 when it fires). 0: 5 s.
	MessageTimeout time.Duration
	// MaxMessageTimeout is the filter's max_message_timeout: the longest
	// override_message_timeout the server may ask for (0: overrides are
	// ignored, Envoy's default).
	MaxMessageTimeout time.Duration
	// ChunkBytes splits the body into chunks in full-duplex mode. 0: 16 KiB.
	ChunkBytes int
	// SendProtocolConfig sends protocol_config on the first message (Envoy ≥ 1.40).
	SendProtocolConfig bool
	// ReceivingNamespaces are the dynamic-metadata namespaces kept.
	ReceivingNamespaces []string
	End                 End
}

// Request is one HTTP request as it reaches the filter.
type Request struct {
	Method, Path string
	// Headers are extra request headers (lower-case keys).
	Headers  map[string]string
	Body     []byte
	Trailers map[string]string
	// SubsetHint, when set, is passed as envoy.lb.subset_hint metadata.
	SubsetHint []string
}

// Result is what Envoy would do after the exchange.
type Result struct {
	// Status is a local reply's HTTP status (immediate response, 413, 500 on a
	// rejected mutation, 504 on timeout); 0 means the request continues
	// upstream with Headers and Body.
	Status    int
	LocalBody string
	Details   string
	// LocalHeaders are a local reply's headers (an immediate response's).
	LocalHeaders map[string]string
	// Headers are the request headers after mutations.
	Headers map[string]string
	// Body is the body that goes upstream.
	Body            []byte
	ClearRouteCache bool
	// Metadata is the dynamic metadata kept (receiving namespaces only).
	Metadata map[string]*structpb.Struct
	// TimeoutOverrides counts the override_message_timeout messages that
	// restarted the message timer; TimeoutOverridesIgnored those Envoy
	// ignores (its stats override_message_timeout_received and _ignored).
	TimeoutOverrides        int
	TimeoutOverridesIgnored int
}

// ErrSpurious marks a server message Envoy would reject as out of order.
var ErrSpurious = errors.New("spurious ext_proc message")

func (c *Config) defaults() {
	if c.BodyLimitBytes == 0 {
		c.BodyLimitBytes = 8 << 20
	}
	if c.MessageTimeout == 0 {
		c.MessageTimeout = 5 * time.Second
	}
	if c.ChunkBytes == 0 {
		c.ChunkBytes = 16 << 10
	}
}

// Do runs one request's ext_proc exchange over a new stream of client. A
// non-nil error is a protocol violation a real Envoy would turn into a 500 or
// 504 (Result.Status says which) or a transport failure.
func Do(ctx context.Context, client extprocv3.ExternalProcessorClient, cfg Config, req Request) (Result, error) {
	return DoWhile(ctx, client, cfg, req, nil)
}

// DoWhile is Do with the rest of the HTTP request in the middle: Envoy keeps
// the ext_proc stream open until the HTTP stream is destroyed, i.e. after
// the upstream response (Envoy source/extensions/filters/http/ext_proc; ext_proc.cc closes the stream in
// onDestroy), so a processor that counts requests in flight by open streams
// sees each request for as long as it lasts. upstream, when not nil, runs
// after a completed exchange (also one ending in a local reply) and before
// the stream ends.
func DoWhile(ctx context.Context, client extprocv3.ExternalProcessorClient, cfg Config, req Request, upstream func(Result)) (Result, error) {
	cfg.defaults()
	res := Result{Headers: map[string]string{}, Metadata: map[string]*structpb.Struct{}}
	res.Headers[":method"] = req.Method
	res.Headers[":path"] = req.Path
	res.Headers[":scheme"] = "http"
	res.Headers[":authority"] = "gateway.local"
	for k, v := range req.Headers {
		res.Headers[strings.ToLower(k)] = v
	}
	if len(req.Body) > 0 {
		res.Headers["content-length"] = strconv.Itoa(len(req.Body))
	}
	if cfg.Mode == Buffered && len(req.Body) > cfg.BodyLimitBytes {
		// Envoy's buffer filter answers itself; ext_proc never sees the body.
		res.Status, res.Details = 413, "request_payload_too_large"
		return res, nil
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := client.Process(sctx)
	if err != nil {
		return res, err
	}
	ex := &exchange{cfg: cfg, stream: stream, res: &res, req: req}
	err = ex.run()
	if err == nil || errors.Is(err, errLocalReply) {
		if upstream != nil {
			upstream(res)
		}
		err = ex.finish(cancel)
	}
	return res, err
}

// errLocalReply ends the exchange early after an immediate response.
var errLocalReply = errors.New("local reply")

type exchange struct {
	cfg    Config
	stream extprocv3.ExternalProcessor_ProcessClient
	res    *Result
	req    Request
	first  bool
}

func (ex *exchange) run() error {
	hasBody := len(ex.req.Body) > 0
	if err := ex.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
		Headers: headerMap(ex.res.Headers), EndOfStream: !hasBody && ex.req.Trailers == nil,
	}}}); err != nil {
		return err
	}
	if ex.cfg.Mode == FullDuplex {
		return ex.fullDuplex(hasBody)
	}
	if err := ex.expect("request_headers"); err != nil || !hasBody {
		return err
	}
	if err := ex.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{
		Body: ex.req.Body, EndOfStream: ex.req.Trailers == nil,
	}}}); err != nil {
		return err
	}
	ex.res.Body = ex.req.Body
	if err := ex.expect("request_body"); err != nil {
		return err
	}
	if ex.req.Trailers != nil {
		if err := ex.send(trailersMessage(ex.req.Trailers)); err != nil {
			return err
		}
		return ex.expect("request_trailers")
	}
	return nil
}

// fullDuplex sends everything without waiting, then reads the headers
// response, the streamed body and (with trailers) the trailers response.
func (ex *exchange) fullDuplex(hasBody bool) error {
	// Full duplex streams without buffering: the body limit is the server's.
	body := ex.req.Body
	for len(body) > 0 {
		n := min(len(body), ex.cfg.ChunkBytes)
		if err := ex.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{
			Body: body[:n], EndOfStream: n == len(body) && ex.req.Trailers == nil,
		}}}); err != nil {
			return err
		}
		body = body[n:]
	}
	if ex.req.Trailers != nil {
		if err := ex.send(trailersMessage(ex.req.Trailers)); err != nil {
			return err
		}
	}
	if err := ex.expect("request_headers"); err != nil || !hasBody {
		return err
	}
	ex.res.Body = nil
	for {
		resp, err := ex.recv()
		if err != nil {
			return err
		}
		if ir := resp.GetImmediateResponse(); ir != nil {
			return ex.immediate(ir)
		}
		br := resp.GetRequestBody()
		if br == nil {
			return ex.spurious("a request_body response", resp)
		}
		sr := br.GetResponse().GetBodyMutation().GetStreamedResponse()
		if sr == nil {
			return ex.spurious("streamed_response body mutation (FULL_DUPLEX_STREAMED requires it)", resp)
		}
		ex.res.Body = append(ex.res.Body, sr.GetBody()...)
		if sr.GetEndOfStream() || (ex.req.Trailers != nil && len(ex.res.Body) >= len(ex.req.Body)) {
			break
		}
	}
	if ex.req.Trailers != nil {
		return ex.expect("request_trailers")
	}
	return nil
}

func trailersMessage(t map[string]string) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestTrailers{RequestTrailers: &extprocv3.HttpTrailers{Trailers: headerMap(t)}}}
}

func (ex *exchange) send(m *extprocv3.ProcessingRequest) error {
	if !ex.first {
		ex.first = true
		if ex.cfg.SendProtocolConfig {
			mode := filterv3.ProcessingMode_BUFFERED
			if ex.cfg.Mode == FullDuplex {
				mode = filterv3.ProcessingMode_FULL_DUPLEX_STREAMED
			}
			m.ProtocolConfig = &extprocv3.ProtocolConfiguration{RequestBodyMode: mode, ResponseBodyMode: filterv3.ProcessingMode_NONE}
		}
		if ex.req.SubsetHint != nil {
			vals := make([]any, len(ex.req.SubsetHint))
			for i, s := range ex.req.SubsetHint {
				vals[i] = s
			}
			hint, err := structpb.NewStruct(map[string]any{"x-gateway-destination-endpoint-subset": vals})
			if err != nil {
				return err
			}
			m.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"envoy.lb.subset_hint": hint}}
		}
	}
	return ex.stream.Send(m)
}

type recvd struct {
	resp *extprocv3.ProcessingResponse
	err  error
}

// recv waits for the next server message that answers something; in
// BUFFERED mode the message timer runs (504 when it fires, as Envoy's
// onMessageTimeout).
//
// A message carrying override_message_timeout is only that, whatever else
// it holds (ext_proc.cc onReceiveMessage checks it first and returns), and
// Envoy's onNewTimeout and ProcessorState::restartMessageTimer decide its
// fate: a duration that does not convert to milliseconds, or is below 1 ms,
// or above max_message_timeout (so every one when max_message_timeout is 0)
// is ignored; otherwise the running timer restarts with the new duration,
// counted from now, once per message awaiting its answer (a second one is
// ignored until the answer comes: new_timeout_received_ is cleared in
// onFinishProcessorCall). With no timer running (FULL_DUPLEX_STREAMED)
// restartMessageTimer finds none enabled and the override is ignored.
func (ex *exchange) recv() (*extprocv3.ProcessingResponse, error) {
	ch := make(chan recvd, 1)
	next := func() {
		go func() {
			resp, err := ex.stream.Recv()
			ch <- recvd{resp, err}
		}()
	}
	var timeout <-chan time.Time
	if ex.cfg.Mode != FullDuplex {
		t := time.NewTimer(ex.cfg.MessageTimeout)
		timeout = t.C
		defer func() { t.Stop() }()
		restart := func(d time.Duration) {
			t.Stop()
			t = time.NewTimer(d)
			timeout = t.C
		}
		overridden := false
		next()
		for {
			select {
			case r := <-ch:
				if r.err == nil && r.resp.GetOverrideMessageTimeout() != nil {
					d, ok := overrideMillis(r.resp.GetOverrideMessageTimeout().AsDuration(), r.resp.GetOverrideMessageTimeout().IsValid(), ex.cfg.MaxMessageTimeout)
					if !ok || overridden {
						ex.res.TimeoutOverridesIgnored++
					} else {
						overridden = true
						ex.res.TimeoutOverrides++
						restart(d)
					}
					next()
					continue
				}
				return r.resp, ex.streamErr(r.err)
			case <-timeout:
				ex.res.Status, ex.res.Details = 504, "ext_proc_error_per-message_timeout_exceeded"
				return nil, fmt.Errorf("message timeout %s: the server did not answer", ex.cfg.MessageTimeout)
			}
		}
	}
	for {
		resp, err := ex.stream.Recv()
		if err == nil && resp.GetOverrideMessageTimeout() != nil {
			ex.res.TimeoutOverridesIgnored++ // no message timer in this mode
			continue
		}
		return resp, ex.streamErr(err)
	}
}

// overrideMillis is onNewTimeout's check of an override: whole milliseconds
// (DurationUtil::durationToMillisecondsNoThrow truncates; a negative or
// invalid duration fails), at least 1 ms and at most max_message_timeout.
func overrideMillis(d time.Duration, valid bool, maxTimeout time.Duration) (time.Duration, bool) {
	if !valid || d < 0 {
		return 0, false
	}
	ms := d.Milliseconds()
	if ms < 1 || ms > maxTimeout.Milliseconds() {
		return 0, false
	}
	return time.Duration(ms) * time.Millisecond, true
}

// streamErr maps a stream end while Envoy waits: OK (io.EOF) means the server
// ended processing, and Envoy continues the request unmodified.
func (ex *exchange) streamErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, io.EOF):
		return fmt.Errorf("server closed the stream (OK) before answering: Envoy continues without routing")
	default:
		ex.res.Status, ex.res.Details = 500, "ext_proc_error_gRPC_error"
		return err
	}
}

// expect reads the response to a phase and applies it.
func (ex *exchange) expect(phase string) error {
	resp, err := ex.recv()
	if err != nil {
		return err
	}
	if ir := resp.GetImmediateResponse(); ir != nil {
		return ex.immediate(ir)
	}
	var common *extprocv3.CommonResponse
	switch phase {
	case "request_headers":
		hr := resp.GetRequestHeaders()
		if hr == nil {
			return ex.spurious("a request_headers response", resp)
		}
		common = hr.GetResponse()
	case "request_body":
		br := resp.GetRequestBody()
		if br == nil {
			return ex.spurious("a request_body response", resp)
		}
		common = br.GetResponse()
	case "request_trailers":
		if resp.GetRequestTrailers() == nil {
			return ex.spurious("a request_trailers response", resp)
		}
		if hm := resp.GetRequestTrailers().GetHeaderMutation(); hm != nil && len(hm.GetSetHeaders()) > 0 {
			return nil // trailer mutations do not touch request headers
		}
		return nil
	}
	if err := ex.apply(common, phase); err != nil {
		return err
	}
	ex.keepMetadata(resp.GetDynamicMetadata())
	return nil
}

// apply applies a CommonResponse as processor_state.cc does.
func (ex *exchange) apply(c *extprocv3.CommonResponse, phase string) error {
	if c == nil {
		return nil
	}
	if c.GetStatus() == extprocv3.CommonResponse_CONTINUE_AND_REPLACE {
		return ex.localReply(500, "CONTINUE_AND_REPLACE is not expected from a router")
	}
	if hm := c.GetHeaderMutation(); hm != nil {
		if err := ex.mutateHeaders(hm); err != nil {
			return err
		}
		if c.GetClearRouteCache() {
			ex.res.ClearRouteCache = true
		}
	}
	if bm := c.GetBodyMutation(); bm != nil {
		if phase != "request_body" {
			return ex.localReply(500, "body mutation in a headers response")
		}
		switch m := bm.GetMutation().(type) {
		case *extprocv3.BodyMutation_Body:
			ex.res.Body = m.Body
		case *extprocv3.BodyMutation_ClearBody:
			ex.res.Body = nil
		case *extprocv3.BodyMutation_StreamedResponse:
			return ex.localReply(500, "streamed_response outside FULL_DUPLEX_STREAMED")
		}
		if cl, ok := ex.res.Headers["content-length"]; ok && cl != strconv.Itoa(len(ex.res.Body)) {
			return ex.localReply(500, "mismatch between content length and the length of the mutated body")
		}
	}
	return nil
}

// mutateHeaders follows mutation_utils.cc: raw_value is read, setting both
// value and raw_value is an error, protected headers are ignored.
func (ex *exchange) mutateHeaders(hm *extprocv3.HeaderMutation) error {
	for _, o := range hm.GetSetHeaders() {
		h := o.GetHeader()
		key := strings.ToLower(h.GetKey())
		if h.GetValue() != "" && len(h.GetRawValue()) > 0 {
			return ex.localReply(500, "only one of value or raw_value may be set")
		}
		if key == ":authority" || key == ":method" || key == ":scheme" || key == "host" || strings.HasPrefix(key, "x-envoy-") {
			continue
		}
		// Envoy reads raw_value: a mutation carrying only value sets an empty header.
		val := string(h.GetRawValue())
		//lint:ignore SA1019 Envoy still applies the deprecated append field, so the fake does too
		if o.GetAppend().GetValue() {
			if old, ok := ex.res.Headers[key]; ok {
				val = old + "," + val
			}
		}
		ex.res.Headers[key] = val
	}
	for _, k := range hm.GetRemoveHeaders() {
		k = strings.ToLower(k)
		if strings.HasPrefix(k, ":") || k == "host" {
			continue
		}
		delete(ex.res.Headers, k)
	}
	return nil
}

func (ex *exchange) keepMetadata(md *structpb.Struct) {
	for ns, v := range md.GetFields() {
		for _, allowed := range ex.cfg.ReceivingNamespaces {
			if ns == allowed && v.GetStructValue() != nil {
				ex.res.Metadata[ns] = v.GetStructValue()
			}
		}
	}
}

// immediate applies an ImmediateResponse: a local reply, 200 when the status
// is missing or below 200 (sendImmediateResponse's default).
func (ex *exchange) immediate(ir *extprocv3.ImmediateResponse) error {
	code := int(ir.GetStatus().GetCode())
	if code < 200 {
		code = 200
	}
	ex.res.Status, ex.res.LocalBody, ex.res.Details = code, string(ir.GetBody()), ir.GetDetails()
	ex.res.LocalHeaders = map[string]string{}
	for _, o := range ir.GetHeaders().GetSetHeaders() {
		ex.res.LocalHeaders[strings.ToLower(o.GetHeader().GetKey())] = string(o.GetHeader().GetRawValue())
	}
	return errLocalReply
}

func (ex *exchange) localReply(code int, details string) error {
	ex.res.Status, ex.res.Details = code, details
	return errLocalReply
}

func (ex *exchange) spurious(want string, got *extprocv3.ProcessingResponse) error {
	ex.res.Status, ex.res.Details = 500, "spurious_message"
	return fmt.Errorf("%w: want %s, got %T", ErrSpurious, want, got.GetResponse())
}

// finish ends the stream like Envoy destroying the HTTP stream, and reports
// a server that ended with an error status.
func (ex *exchange) finish(cancel context.CancelFunc) error {
	if ex.cfg.End == EndCancel {
		cancel()
		return nil
	}
	if err := ex.stream.CloseSend(); err != nil {
		return err
	}
	_, err := ex.stream.Recv()
	if errors.Is(err, io.EOF) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("server ended the stream with %w", err)
	}
	// A message after the exchange is spurious.
	return fmt.Errorf("%w: a message after the exchange ended", ErrSpurious)
}

func headerMap(h map[string]string) *corev3.HeaderMap {
	hm := &corev3.HeaderMap{}
	for k, v := range h {
		hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: strings.ToLower(k), RawValue: []byte(v)})
	}
	return hm
}
