package extproc

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/kvroute/kvroute/routing"
)

// Options configures the ext_proc server.
type Options struct {
	// BodyLimitBytes bounds the body kvroute accumulates in full-duplex mode
	// (413 above it); in BUFFERED mode Envoy enforces its own buffer limit.
	BodyLimitBytes int
	// DebugHeaders adds the x-kvroute-* headers to routed requests.
	DebugHeaders bool
	// ScoresHeader adds HeaderScores (every weighed endpoint's cost) to
	// routed requests; the decision then records what it weighs.
	ScoresHeader bool
	// Tracer, when set, records every decision as a span tree joined to the
	// request's traceparent (nil: tracing off, nothing recorded).
	Tracer trace.Tracer
	// BodyMode is config.Routing.BodyMode: "buffered" (or empty) or
	// "full_duplex". Envoy's protocol_config, when it sends one, overrides
	// it for that stream.
	BodyMode string
	// Flow, when set, is flow control: while it is enabled, a request whose
	// pool is saturated waits in kvroute (nil: never).
	Flow    *routing.FlowControl
	Logger  *slog.Logger
	Metrics *Metrics
}

// Server implements envoy.service.ext_proc.v3.ExternalProcessor.
type Server struct {
	extprocv3.UnimplementedExternalProcessorServer
	router Decider
	opts   Options
	log    *slog.Logger
	m      *Metrics
}

// Decider makes the routing decision for a stream and keeps its books
// (routing.Router; a fake in tests). A decision with an Endpoint is routed:
// BeginLoad follows before the answer to Envoy, BeginBlocks just after it,
// and End when the stream ends.
type Decider interface {
	// Decide picks an endpoint for a request; subset, when non-nil, holds
	// the addresses the data plane allows, and body is nil for a
	// header-only request.
	Decide(path string, body []byte, subset map[string]bool) routing.Decision
	// DecideRecorded is Decide, recording what it weighed and when each of
	// its steps ended (scores header, tracing).
	DecideRecorded(path string, body []byte, subset map[string]bool, rec *routing.Recorder) routing.Decision
	// Recovered is the decision for a request whose decision panicked.
	Recovered(subset map[string]bool, err error) routing.Decision
	BeginLoad(d *routing.Decision)
	BeginBlocks(d *routing.Decision)
	End(d *routing.Decision)
}

// NewServer returns the ext_proc service over router.
func NewServer(router Decider, opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics(nil)
	}
	return &Server{router: router, opts: opts, log: opts.Logger, m: opts.Metrics}
}

type bodyMode uint8

const (
	modeBuffered bodyMode = iota
	modeFullDuplex
)

// stream is the state of one Envoy ext_proc stream (one HTTP request).
type stream struct {
	s    *Server
	srv  extprocv3.ExternalProcessor_ProcessServer
	mode bodyMode
	// configured is the mode routing.body_mode fixes; modeSource says what
	// settled mode.
	configured bodyMode
	modeSource string
	headers    *extprocv3.HttpHeaders
	path       string
	reqID      string
	subset     map[string]bool
	// scores is HeaderScores' value for this request's decision
	// (routing.scores_header).
	scores   string
	body     []byte
	answered bool // the headers response has been sent
	closed   bool // an immediate response ended processing
	routed   bool // a routing decision was sent
	decision routing.Decision
	// flowErr is a send that failed while the request waited.
	flowErr error
}

// Process serves one HTTP request's stream. It never returns before Envoy has
// the answer it waits for; io.EOF and Canceled from Envoy end it quietly.
func (s *Server) Process(srv extprocv3.ExternalProcessor_ProcessServer) error {
	st := &stream{s: s, srv: srv}
	if s.opts.BodyMode == "full_duplex" {
		st.configured = modeFullDuplex
	}
	st.mode, st.modeSource = st.configured, ModeSourceConfigured
	s.m.streams.Inc()
	defer s.m.streams.Dec()
	defer func() {
		if st.routed {
			s.router.End(&st.decision)
		}
	}()
	ctx := srv.Context()
	for {
		req, err := srv.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled || ctx.Err() != nil {
				return nil
			}
			s.log.Warn("ext_proc stream receive failed", "request_id", st.reqID, "err", err)
			return err
		}
		done, err := st.handle(ctx, req)
		if err != nil {
			if status.Code(err) == codes.Canceled || ctx.Err() != nil {
				return nil
			}
			s.log.Warn("ext_proc stream send failed", "request_id", st.reqID, "err", err)
			return err
		}
		if done {
			// An immediate response ends processing; Envoy closes the stream.
			st.closed = true
		}
	}
}

func (st *stream) handle(ctx context.Context, req *extprocv3.ProcessingRequest) (bool, error) {
	if st.closed {
		return true, nil
	}
	if pc := req.GetProtocolConfig(); pc != nil && st.headers == nil {
		// Envoy's own statement of the mode wins over configuration.
		st.mode, st.modeSource = modeBuffered, ModeSourceProtocolConfig
		if pc.GetRequestBodyMode() == filterv3.ProcessingMode_FULL_DUPLEX_STREAMED {
			st.mode = modeFullDuplex
		}
		if st.configured != st.mode {
			st.s.m.modeMisfits.WithLabelValues(MisfitConfigContradicted).Inc()
		}
	}
	if md := req.GetMetadataContext(); md != nil && st.subset == nil {
		st.subset = subsetHint(md)
	}
	switch v := req.Request.(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		return st.onHeaders(ctx, v.RequestHeaders)
	case *extprocv3.ProcessingRequest_RequestBody:
		return st.onBody(ctx, v.RequestBody)
	case *extprocv3.ProcessingRequest_RequestTrailers:
		return st.onTrailers(ctx)
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return false, st.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{}}})
	case *extprocv3.ProcessingRequest_ResponseBody:
		return false, st.sendResponseBody(v.ResponseBody)
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		return false, st.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{ResponseTrailers: &extprocv3.TrailersResponse{}}})
	default:
		return false, nil
	}
}

func (st *stream) onHeaders(ctx context.Context, h *extprocv3.HttpHeaders) (bool, error) {
	st.headers = h
	st.path = headerValue(h, headerPath)
	st.reqID = headerValue(h, HeaderRequestID)
	if len(st.reqID) > maxRequestIDBytes {
		// Envoy may keep a client's x-request-id: never log one at length.
		st.reqID = st.reqID[:maxRequestIDBytes] + "…"
	}
	if h.GetEndOfStream() {
		// No body will follow (e.g. GET /v1/models): route right here.
		return st.route(ctx, nil, false, true)
	}
	st.s.m.bodyModes.WithLabelValues(st.modeSource, st.mode.label()).Inc()
	if st.mode == modeFullDuplex {
		return false, nil // the headers answer waits for the whole body
	}
	st.answered = true
	return false, st.send(headersResponse(&extprocv3.CommonResponse{}))
}

func (m bodyMode) label() string {
	if m == modeFullDuplex {
		return modeLabelFullDuplex
	}
	return modeLabelBuffered
}

func (st *stream) onBody(ctx context.Context, b *extprocv3.HttpBody) (bool, error) {
	if st.routed {
		if st.mode == modeBuffered {
			// BUFFERED sends one body message: this stream is streamed and
			// the decision saw only its first chunk.
			st.s.m.modeMisfits.WithLabelValues(MisfitBodyAfterDecision).Inc()
			st.s.log.Warn("body chunk after a buffered decision: Envoy streams this request; set routing.body_mode: full_duplex or send protocol_config (Envoy ≥ 1.40)", "request_id", st.reqID)
		}
		// A body after the decision is passed through unchanged.
		return false, st.passBody(b)
	}
	if len(st.body)+len(b.GetBody()) > st.s.opts.BodyLimitBytes {
		st.s.m.decision(routing.PoolUnknown, routing.OutcomeRejected, routing.ReasonBodyTooLarge)
		return true, st.immediate(413, "request body exceeds routing.body_limit_bytes", "kvroute_body_too_large")
	}
	if st.mode == modeFullDuplex {
		st.body = append(st.body, b.GetBody()...)
		if !b.GetEndOfStream() {
			return false, nil
		}
		return st.route(ctx, st.body, true, true)
	}
	// BUFFERED: this single message is the whole body (end_of_stream is false
	// only when trailers follow).
	return st.route(ctx, b.GetBody(), false, b.GetEndOfStream())
}

func (st *stream) onTrailers(ctx context.Context) (bool, error) {
	if st.mode == modeFullDuplex && !st.routed {
		// The body ended without end_of_stream: trailers end the request.
		if done, err := st.route(ctx, st.body, true, false); done || err != nil {
			return done, err
		}
	}
	return false, st.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{RequestTrailers: &extprocv3.TrailersResponse{}}})
}

// route decides and answers: in BUFFERED mode (and for header-only requests)
// with a single mutation response; in full-duplex mode with the deferred
// headers response followed by the body streamed back.
func (st *stream) route(ctx context.Context, body []byte, fullDuplex, bodyEOS bool) (bool, error) {
	start := time.Now()
	var d routing.Decision
	begun := false
	if fc := st.s.opts.Flow; fc != nil && body != nil && fc.Enabled() {
		out := st.decideFlow(ctx, fc, body, fullDuplex)
		if st.flowErr != nil {
			if out.Begun {
				st.s.router.End(&out.Decision)
			}
			return false, st.flowErr
		}
		if out.Shed == routing.FlowCancelled {
			return true, context.Cause(ctx) // nobody to answer
		}
		if out.Shed != "" {
			return true, st.shed(fc, out)
		}
		d, begun = out.Decision, out.Begun
		st.s.m.decisionSeconds.Observe((time.Since(start) - out.Waited).Seconds())
	} else {
		d = st.decide(body)
		st.s.m.decisionSeconds.Observe(time.Since(start).Seconds())
	}
	st.s.m.decision(d.Pool, d.Outcome, d.Reason)
	if d.Endpoint == nil {
		code, msg := d.Rejection()
		st.s.log.Info("request rejected", "request_id", st.reqID, "pool", d.Pool, "reason", d.Reason, "status", code, "err", d.Err)
		return true, st.immediate(code, msg, "kvroute_"+d.Reason)
	}
	if d.Err != nil {
		st.s.log.Info("routing failed open", "request_id", st.reqID, "pool", d.Pool, "reason", d.Reason, "err", d.Err)
	}
	st.decision, st.routed = d, true
	if !begun {
		st.s.router.BeginLoad(&st.decision)
	}
	if st.s.log.Enabled(context.Background(), slog.LevelDebug) {
		// Checked first: the arguments alone cost eight allocations.
		st.s.log.Debug("routed", "request_id", st.reqID, "pool", d.Pool, "replica", d.Endpoint.Name,
			"outcome", d.Outcome, "reason", d.Reason, "prompt_tokens", d.PromptTokens, "matched_tokens", d.MatchedTokens)
	}

	common := &extprocv3.CommonResponse{HeaderMutation: st.mutation(&d), ClearRouteCache: true}
	meta := destinationMetadata(d.Endpoint.Address)
	headersEOS := st.headers.GetEndOfStream()
	if !fullDuplex {
		var resp *extprocv3.ProcessingResponse
		if body == nil && headersEOS || !st.answered {
			st.answered = true
			resp = headersResponse(common)
		} else {
			resp = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{Response: common}}}
		}
		resp.DynamicMetadata = meta
		return false, st.sendDecision(resp)
	}
	resp := headersResponse(common)
	resp.DynamicMetadata = meta
	st.answered = true
	if err := st.sendDecision(resp); err != nil {
		return false, err
	}
	return false, st.streamBody(body, bodyEOS)
}

// sendDecision sends the response carrying the routing decision, then
// records the decision's blocks on its replica (Decider.BeginBlocks): with
// the answer already on its way, that work no longer delays the request.
func (st *stream) sendDecision(resp *extprocv3.ProcessingResponse) error {
	if err := st.send(resp); err != nil {
		return err
	}
	st.s.router.BeginBlocks(&st.decision)
	return nil
}

// decide runs the router's decision; a panic in it (a bug) is counted and
// the request fails open like any internal error.
func (st *stream) decide(body []byte) (d routing.Decision) {
	defer st.s.m.panics.Recover(panicDecide, st.s.log, func(err error) {
		d = st.s.router.Recovered(st.subset, err)
	})
	rec := st.recorder()
	if rec == nil {
		return st.s.router.Decide(st.path, body, st.subset)
	}
	d = st.s.router.DecideRecorded(st.path, body, st.subset, rec)
	st.report(rec, &d, len(body))
	return d
}

// recorder is a Recorder for what this server reports of a decision (the
// scores header, tracing); nil when it reports neither.
func (st *stream) recorder() *routing.Recorder {
	scores, tracing := st.s.opts.ScoresHeader, st.s.opts.Tracer != nil
	if !scores && !tracing {
		return nil
	}
	return routing.NewRecorder(scores, tracing)
}

// report keeps what rec recorded of decision d: the scores header's value
// and the decision's span.
func (st *stream) report(rec *routing.Recorder, d *routing.Decision, bodyLen int) {
	if st.s.opts.ScoresHeader {
		st.scores = rec.Scores()
	}
	if st.s.opts.Tracer != nil {
		st.traceDecision(rec, d, bodyLen)
	}
}

// streamBody sends body back to Envoy in ≤ 62,000-byte streamed_response
// chunks; Envoy forwards upstream only what it receives here.
func (st *stream) streamBody(body []byte, eos bool) error {
	for first := true; first || len(body) > 0; first = false {
		n := min(len(body), streamedChunkBytes)
		chunk := body[:n]
		body = body[n:]
		last := len(body) == 0
		if err := st.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{
			Response: &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_StreamedResponse{
				StreamedResponse: &extprocv3.StreamedBodyResponse{Body: chunk, EndOfStream: last && eos},
			}}},
		}}}); err != nil {
			return err
		}
	}
	return nil
}

// passBody answers a body message that needs no decision.
func (st *stream) passBody(b *extprocv3.HttpBody) error {
	if st.mode == modeFullDuplex {
		return st.streamBody(b.GetBody(), b.GetEndOfStream())
	}
	return st.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{}}})
}

func (st *stream) sendResponseBody(b *extprocv3.HttpBody) error {
	if st.mode == modeFullDuplex {
		return st.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{
			Response: &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_StreamedResponse{
				StreamedResponse: &extprocv3.StreamedBodyResponse{Body: b.GetBody(), EndOfStream: b.GetEndOfStream()},
			}}},
		}}})
	}
	return st.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{}}})
}

func (st *stream) mutation(d *routing.Decision) *extprocv3.HeaderMutation {
	set := []*corev3.HeaderValueOption{setHeader(HeaderDestination, d.Endpoint.Address)}
	if d.Endpoint.DPSize > 1 {
		set = append(set, setHeader(dpRankHeader, strconv.Itoa(d.Endpoint.DPRank)))
	}
	if st.scores != "" {
		set = append(set, setHeader(HeaderScores, st.scores))
	}
	if st.s.opts.DebugHeaders {
		set = append(set,
			setHeader(HeaderDebugReplica, d.Endpoint.Name),
			setHeader(HeaderDebugMatchedTokens, strconv.Itoa(d.MatchedTokens)),
			setHeader(HeaderDebugPromptTokens, strconv.Itoa(d.PromptTokens)),
			setHeader(HeaderDebugReason, d.Reason),
		)
	}
	return &extprocv3.HeaderMutation{SetHeaders: set}
}

// immediate ends the request with a local reply; the status is always set
// (Envoy turns a missing one into 200). extra are more reply headers.
func (st *stream) immediate(code int, msg, details string, extra ...*corev3.HeaderValueOption) error {
	return st.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{ImmediateResponse: &extprocv3.ImmediateResponse{
		Status:  &typev3.HttpStatus{Code: typev3.StatusCode(code)},
		Body:    []byte(msg + "\n"),
		Details: details,
		Headers: &extprocv3.HeaderMutation{SetHeaders: append([]*corev3.HeaderValueOption{setHeader("content-type", "text/plain; charset=utf-8")}, extra...)},
	}}})
}

func (st *stream) send(resp *extprocv3.ProcessingResponse) error { return st.srv.Send(resp) }

func headersResponse(c *extprocv3.CommonResponse) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{Response: c}}}
}

// setHeader overwrites a header using raw_value only: Envoy reads raw_value
// and rejects a mutation that sets both.
func setHeader(key, value string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{
		Header:       &corev3.HeaderValue{Key: key, RawValue: []byte(value)},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
	}
}

func destinationMetadata(addr string) *structpb.Struct {
	return &structpb.Struct{Fields: map[string]*structpb.Value{
		MetadataNamespaceLB: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
			HeaderDestination: structpb.NewStringValue(addr),
		}}),
	}}
}

// headerValue reads a header from raw_value, falling back to value.
func headerValue(h *extprocv3.HttpHeaders, key string) string {
	for _, hv := range h.GetHeaders().GetHeaders() {
		if hv.GetKey() == key {
			if len(hv.GetRawValue()) > 0 {
				return string(hv.GetRawValue())
			}
			return hv.GetValue()
		}
	}
	return ""
}

// subsetHint reads envoy.lb.subset_hint / x-gateway-destination-endpoint-subset:
// a list of "ip:port" (or one comma-separated string). nil: no hint.
func subsetHint(md *corev3.Metadata) map[string]bool {
	ns := md.GetFilterMetadata()[MetadataNamespaceSubsetHint]
	if ns == nil {
		return nil
	}
	v, ok := ns.GetFields()[MetadataKeySubset]
	if !ok {
		return nil
	}
	set := map[string]bool{}
	add := func(s string) {
		for _, part := range splitComma(s) {
			set[part] = true
		}
	}
	switch x := v.GetKind().(type) {
	case *structpb.Value_ListValue:
		for _, item := range x.ListValue.GetValues() {
			add(item.GetStringValue())
		}
	case *structpb.Value_StringValue:
		add(x.StringValue)
	}
	return set
}

func splitComma(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			part := s[start:i]
			for len(part) > 0 && part[0] == ' ' {
				part = part[1:]
			}
			for len(part) > 0 && part[len(part)-1] == ' ' {
				part = part[:len(part)-1]
			}
			if part != "" {
				out = append(out, part)
			}
			start = i + 1
		}
	}
	return out
}
