package extproc

import (
	"context"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/kvroute/kvroute/routing"
)

// Span names.
const (
	SpanDecision = "kvroute.decision"
	spanPrefix   = "kvroute."
)

// Span attributes: counts, the pool and replica names (the operator's) and
// the decision's outcome and reason (bounded sets) — never the prompt, the
// token ids, or any string the client chose (model, LoRA name, cache_salt).
const (
	AttrPool          = "kvroute.pool"
	AttrOutcome       = "kvroute.outcome"
	AttrReason        = "kvroute.reason"
	AttrReplica       = "kvroute.replica"
	AttrPromptTokens  = "kvroute.prompt_tokens"
	AttrPromptBlocks  = "kvroute.prompt_blocks"
	AttrMatchedTokens = "kvroute.matched_tokens"
	AttrBodyBytes     = "kvroute.body_bytes"
	AttrStatus        = "kvroute.reject_status"
)

// headerCarrier reads the W3C trace context from the request headers Envoy
// sent (read only: kvroute does not forward it; Envoy does).
type headerCarrier struct{ h *extprocv3.HttpHeaders }

func (c headerCarrier) Get(key string) string { return headerValue(c.h, key) }
func (c headerCarrier) Set(string, string)    {}
func (c headerCarrier) Keys() []string {
	var ks []string
	for _, hv := range c.h.GetHeaders().GetHeaders() {
		ks = append(ks, hv.GetKey())
	}
	return ks
}

var traceContext = propagation.TraceContext{}

// traceDecision records the decision rec timed as a span tree under the
// request's incoming trace context (a new trace when it has none).
func (st *stream) traceDecision(rec *routing.Recorder, d *routing.Decision, bodyBytes int) {
	end := time.Now()
	ctx := traceContext.Extract(context.Background(), headerCarrier{st.headers})
	attrs := []attribute.KeyValue{
		attribute.String(AttrPool, d.Pool), attribute.String(AttrOutcome, d.Outcome), attribute.String(AttrReason, d.Reason),
		attribute.Int(AttrPromptTokens, d.PromptTokens), attribute.Int(AttrPromptBlocks, len(d.Keys)),
		attribute.Int(AttrMatchedTokens, d.MatchedTokens), attribute.Int(AttrBodyBytes, bodyBytes),
	}
	if d.Endpoint != nil {
		attrs = append(attrs, attribute.String(AttrReplica, d.Endpoint.Name))
	}
	ctx, span := st.s.opts.Tracer.Start(ctx, SpanDecision, trace.WithTimestamp(rec.Start()),
		trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
	if d.Endpoint == nil {
		status, _ := d.Rejection()
		span.SetAttributes(attribute.Int(AttrStatus, status))
		span.SetStatus(codes.Error, d.Reason) // a reason code, never the error text
	}
	rec.Steps(end, func(step string, from, to time.Time) {
		_, s := st.s.opts.Tracer.Start(ctx, spanPrefix+step, trace.WithTimestamp(from))
		s.End(trace.WithTimestamp(to))
	})
	span.End(trace.WithTimestamp(end))
}
