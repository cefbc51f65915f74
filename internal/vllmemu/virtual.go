package vllmemu

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// Virtual is an engine for discrete-event simulation: the same block pool,
// scheduler and latency model as Engine, but no goroutines, sockets or wall
// clock. The caller owns time: Start plans a step at a virtual instant and
// says when it ends; Finish applies it at that instant and returns the
// step's KV events (vLLM's msgpack batch) and the requests that produced
// their first token or finished. Not safe for concurrent use.
type Virtual struct {
	e       *Engine
	now     time.Time
	plan    []scheduled
	ends    time.Time
	outputs []int // outputs of plan's requests before the step
	buf     []byte
}

// VirtualRequest is one request submitted to a Virtual engine.
type VirtualRequest struct {
	r *request
	// ID is the caller's, for its bookkeeping.
	ID int
}

// Arrival, FirstToken (zero until then), PromptTokens and HitTokens (the
// prefix-cache hit at first admission) describe the request.
func (q *VirtualRequest) Arrival() time.Time    { return q.r.arrival }
func (q *VirtualRequest) FirstToken() time.Time { return q.r.firstToken }
func (q *VirtualRequest) PromptTokens() int     { return q.r.promptLen }
func (q *VirtualRequest) HitTokens() int        { return q.r.hitTokens }

// ErrTooLong is Submit's answer to a prompt + max_tokens over the model length.
var ErrTooLong = errors.New("vllmemu: prompt and max_tokens exceed the model length")

// NewVirtual builds a virtual engine; opts.Tokenizer, the ZMQ endpoints and
// opts.Now are ignored (start is the virtual clock's origin).
func NewVirtual(opts Options, start time.Time) (*Virtual, error) {
	opts.Tokenizer, opts.Chat, opts.EventsEndpoint, opts.ReplayEndpoint = nil, nil, "", ""
	if opts.Model == "" {
		opts.Model = "sim"
	}
	v := &Virtual{now: start}
	opts.Now = func() time.Time { return v.now }
	e, err := build(opts)
	if err != nil {
		return nil, err
	}
	v.e = e
	return v, nil
}

// Stats returns the engine's counters and state.
func (v *Virtual) Stats() Stats {
	s := v.e.stats
	s.Running, s.Waiting = len(v.e.running), len(v.e.waiting)
	s.KVUsage = v.e.pool.usage()
	return s
}

// Submit queues a request arriving now with the given prompt (the slice is
// kept; the engine appends generated tokens to its own copy).
func (v *Virtual) Submit(now time.Time, id int, tokens []int, maxTokens int) (*VirtualRequest, error) {
	v.advance(now)
	if len(tokens) == 0 || maxTokens < 1 {
		return nil, fmt.Errorf("vllmemu: empty prompt or max_tokens %d", maxTokens)
	}
	if len(tokens)+maxTokens > v.e.opts.MaxModelLen {
		return nil, ErrTooLong
	}
	r := &request{tokens: slices.Clip(tokens), promptLen: len(tokens), maxTokens: maxTokens, arrival: now}
	if err := r.hashNewBlocks(v.e.hasher); err != nil {
		return nil, err
	}
	q := &VirtualRequest{r: r, ID: id}
	r.virt = q
	v.e.waiting = append(v.e.waiting, r)
	return q, nil
}

// Busy reports whether a step is in progress, and when it ends.
func (v *Virtual) Busy() (bool, time.Time) { return v.plan != nil, v.ends }

// Start plans the next step at now when none is in progress and there is
// work; it reports whether a step started.
func (v *Virtual) Start(now time.Time) bool {
	if v.plan != nil {
		return false
	}
	v.advance(now)
	plan := v.e.schedule()
	if len(plan) == 0 {
		return false
	}
	v.plan, v.ends = plan, now.Add(v.e.stepDuration(plan))
	v.outputs = v.outputs[:0]
	for _, s := range plan {
		v.outputs = append(v.outputs, s.r.outputs)
	}
	return true
}

// Finish applies the step in progress at its end time. first receives the
// requests whose first token the step produced, done those it finished;
// events is the step's KV-event batch (nil when there were none), valid
// until the next Finish.
func (v *Virtual) Finish(first, done func(*VirtualRequest)) (events []byte) {
	if v.plan == nil {
		return nil
	}
	v.advance(v.ends)
	v.e.finishStep(v.plan)
	for i, s := range v.plan {
		q := s.r.virt
		if q == nil {
			continue
		}
		if v.outputs[i] == 0 && s.r.outputs > 0 && first != nil {
			first(q)
		}
		if s.r.outputs >= s.r.maxTokens && v.outputs[i] < s.r.maxTokens && done != nil {
			done(q)
		}
	}
	v.plan = nil
	evs := v.e.pool.takeEvents()
	if len(evs) == 0 {
		return nil
	}
	rank := v.e.opts.DataParallelRank
	v.buf = encodeBatch(v.buf[:0], &eventBatch{ts: unixSeconds(v.now), events: evs, dpRank: &rank}, false)
	return v.buf
}

func (v *Virtual) advance(now time.Time) {
	if now.After(v.now) {
		v.now = now
	}
}

// CachedPrefixBlocks is an oracle: the leading full blocks of tokens that
// admission would hit in this engine's prefix cache now (Engine's).
func (v *Virtual) CachedPrefixBlocks(tokens []int) int { return v.e.CachedPrefixBlocks(tokens, "", "") }
