package extproc

import (
	"context"
	"errors"
	"math"
	"strconv"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/kvroute/kvroute/routing"
)

// Flow control's request headers, as the Gateway API Inference Extension's
// endpoint picker reads them (llm-d's EPP HTTP headers reference):
// the InferenceObjective a request belongs to (its spec.priority is the
// request's priority; kvroute maps names to priorities from
// routing.flow_control.objectives) and the fairness key requests share
// capacity by ("default-flow" when absent).
const (
	HeaderObjective  = "x-gateway-inference-objective"
	HeaderFairnessID = "x-gateway-inference-fairness-id"
	// DefaultFlow is the fairness key of a request without one.
	DefaultFlow = "default-flow"
	// maxFairnessIDBytes bounds the fairness key kept per waiting flow (a
	// longer one is cut: flows sharing its first bytes share capacity).
	maxFairnessIDBytes = 128
	// FlowTimeoutMargin is added to a queued request's remaining TTL in the
	// override_message_timeout kvroute asks Envoy for: the time to decide
	// and answer once released or shed. Envoy's max_message_timeout must be
	// at least the largest TTL plus this margin, or Envoy ignores the
	// override and fails the request at message_timeout.
	FlowTimeoutMargin = time.Second
)

// decideFlow decides under flow control: the request may wait for capacity.
// In BUFFERED mode, as it starts to wait, Envoy is asked (once) for its
// remaining TTL plus FlowTimeoutMargin more time for this message;
// FULL_DUPLEX_STREAMED runs no message timer.
func (st *stream) decideFlow(ctx context.Context, fc *routing.FlowControl, body []byte, fullDuplex bool) (out routing.FlowOutcome) {
	defer st.s.m.panics.Recover(panicDecide, st.s.log, func(err error) {
		out = routing.FlowOutcome{Decision: st.s.router.Recovered(st.subset, err)}
	})
	priority := fc.Priority(headerValue(st.headers, HeaderObjective))
	flow := headerValue(st.headers, HeaderFairnessID)
	if flow == "" {
		flow = DefaultFlow
	}
	if len(flow) > maxFairnessIDBytes {
		flow = flow[:maxFairnessIDBytes]
	}
	queued := func(maxWait time.Duration) {
		if fullDuplex || maxWait <= 0 {
			return
		}
		st.flowErr = st.send(&extprocv3.ProcessingResponse{OverrideMessageTimeout: durationpb.New(maxWait + FlowTimeoutMargin)})
	}
	rec := st.recorder()
	out = fc.Decide(ctx, st.path, body, st.subset, priority, flow, rec, queued)
	if rec != nil && out.Shed == "" {
		st.report(rec, &out.Decision, len(body))
	}
	return out
}

// shed answers a request flow control would not route: the configured
// status with Retry-After, details naming the reason.
func (st *stream) shed(fc *routing.FlowControl, out routing.FlowOutcome) error {
	o := fc.Options()
	st.s.m.decision(out.Pool, routing.OutcomeRejected, "flow_"+out.Shed)
	// Debug: under overload every request may be shed; the metric counts them.
	st.s.log.Debug("request shed", "request_id", st.reqID, "pool", out.Pool, "reason", out.Shed, "waited", out.Waited)
	retry := int64(math.Ceil(o.RetryAfter.Seconds()))
	status := o.ShedStatus
	if status < 400 || status > 599 {
		status = 429
	}
	err := st.immediate(status, "kvroute: the pool is saturated ("+out.Shed+"); retry later", "kvroute_flow_"+out.Shed,
		setHeader("retry-after", strconv.FormatInt(max(retry, 0), 10)))
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
