// Package routing is kvroute's routing decision: an OpenAI request's body
// becomes prompt token ids and block keys (request.go, tokens.go), the cost
// model weighs each eligible replica (cost.go), placement picks one
// (placement.go), and bookkeeping puts the routed request — or one a peer
// kvroute routed — on the index's books (bookkeeping.go). Explain and the
// tracing Recorder (explain.go) show what a decision weighed.
package routing

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvroute/kvroute/blockhash"
	"github.com/kvroute/kvroute/index"
)

// Tokenizer turns prompt text into token ids exactly as the pool's engines do.
// Encode must not keep text (or any part of it) after it returns: the router
// renders chat prompts into a buffer it reuses.
type Tokenizer interface {
	Encode(text string, addSpecialTokens bool) []int
}

// ChatRenderer renders an OpenAI chat body into the prompt text vLLM would
// tokenize (its chat template applied to the preprocessed messages).
type ChatRenderer interface {
	// AppendChat appends the prompt of body to dst and returns the
	// extended slice; the router reuses dst for later requests, so the
	// renderer must not keep it.
	AppendChat(dst, body []byte) ([]byte, error)
}

// PoolConfig describes one pool to the router.
type PoolConfig struct {
	Name string
	ID   index.PoolID
	// Models are the served model names; LoRAAdapters the adapter names a
	// request may use as its model (the name then enters every block hash).
	Models       []string
	LoRAAdapters []string
	// Tokenizer nil: the pool routes by load only.
	Tokenizer Tokenizer
	// Chat nil: chat requests route by load only.
	Chat ChatRenderer
	// Keys owns the pool's key mode (vLLM's own hashes or kvroute's token
	// keys), its block size (configured, or learned by ingest; while it is
	// unknown the pool routes by load) and its key builders. The same object
	// is handed to ingest.
	Keys      *blockhash.PoolKeys
	Endpoints []Endpoint
}

// Endpoint is one routable engine: an index replica (one DP rank) and the
// address Envoy dials.
type Endpoint struct {
	Replica index.Replica
	Name    string
	Address string
	// DPRank is set as X-data-parallel-rank (which vLLM's API server honours)
	// when the server runs more than one rank.
	DPRank int
	DPSize int
}

// RouterOptions tunes the choice; see config.Routing and cost.
type RouterOptions struct {
	// PrefillTokensPerSecond is a replica's prefill rate until one is
	// learned from its metrics.
	PrefillTokensPerSecond float64
	// ForeignRequestTokens is the uncached prompt assumed for a waiting
	// request this router did not send, until the engine's mean is learned.
	ForeignRequestTokens float64
	// KVUsageCeiling: above it a replica costs KVFullPenalty more seconds.
	KVUsageCeiling float64
	KVFullPenalty  float64
	// PlacementSlack bounds sticky placement of prompts nobody holds: a
	// fraction of the request's own prefill time.
	PlacementSlack float64
	FailOpen       bool
	// Limits bound one request's work; over them it routes by load.
	Limits Limits
	// MaxBytesInFlight bounds the bodies being tokenized and hashed at once
	// across all streams (0: unbounded); a request that does not fit routes
	// by load at once instead of waiting. Requests waiting in flow
	// control's queues hold their share of it.
	MaxBytesInFlight int64
	// Flow is flow control: requests held while their pool is saturated.
	Flow FlowOptions
}

// FlowOptions configure flow control (config.FlowControl documents each).
type FlowOptions struct {
	// Enabled: requests of a saturated pool wait in its queue (FlowQueue)
	// instead of being routed at once.
	Enabled bool
	// A pool is saturated when every eligible replica is predicted to
	// start the request more than SaturationTTFT from now, or reports more
	// than SaturationWaiting waiting requests (zero: that test is off).
	SaturationTTFT    time.Duration
	SaturationWaiting float64
	// LowPrioritySaturationTTFT replaces SaturationTTFT for a priority
	// below the pool's top one (BandSaturated); zero: it does not.
	LowPrioritySaturationTTFT time.Duration
	// ReservedReplicas is how many of a pool's eligible replicas (at most
	// all but one) a priority below the pool's top one leaves free of its
	// requests: while no more are free, it is placed, and its saturation
	// checked, only on the replicas already holding one.
	ReservedReplicas int
	// MaxQueued bounds each pool's queue (requests); its bytes are bounded
	// by MaxBytesInFlight, the budget queued bodies hold.
	MaxQueued int
	// TTL is how long a request may wait; Bands overrides it by priority.
	TTL   time.Duration
	Bands map[int]time.Duration
	// Objectives maps an objective name (the x-gateway-inference-objective
	// header) to its priority; unknown or absent names are priority 0.
	Objectives map[string]int
	// ShedStatus is the HTTP status of a shed request, with Retry-After
	// RetryAfter (rounded up to whole seconds).
	ShedStatus int
	RetryAfter time.Duration
}

// FlowLimits are the queue bounds of FlowOptions for one pool's FlowQueue.
func (o *RouterOptions) FlowLimits() FlowLimits {
	return FlowLimits{MaxQueued: o.Flow.MaxQueued, MaxBytes: o.MaxBytesInFlight, TTL: o.Flow.TTL, BandTTL: o.Flow.Bands}
}

// Priority is the priority of objective name ("" or unknown: 0).
func (f *FlowOptions) Priority(objective string) int {
	return f.Objectives[objective]
}

// topPriority is the highest priority of the objectives, at least 0 (the
// priority of a request without one).
func (f *FlowOptions) topPriority() int {
	top := 0
	for _, p := range f.Objectives {
		top = max(top, p)
	}
	return top
}

// Router makes the routing decision for parsed requests.
type Router struct {
	ix *index.Index
	// opts is swapped whole by SetOptions (a config reload).
	opts    atomic.Pointer[RouterOptions]
	pools   []*pool
	byModel map[string]modelRef
	matches sync.Pool
	ids     sync.Pool // *[]int: token-id buffers for appendEncoder
	texts   sync.Pool // *[]byte: rendered chat prompts
	// bytesInFlight is the body bytes of decisions in progress.
	bytesInFlight atomic.Int64
	// tieBreak picks one of n equal-cost endpoints (0 ≤ result < n):
	// math/rand/v2's shared source, or a seeded one (SeedTieBreaks).
	tieBreak func(n int) int
	// sharer, when set, hears of every request begun and ended (SetSharer).
	sharer atomic.Pointer[Sharer]
	// funnel, when set, counts where routed prompt tokens went (SetFunnel).
	funnel atomic.Pointer[Funnel]
	// flow, when set, is woken when capacity may have freed (NewFlowControl).
	flow atomic.Pointer[FlowControl]
}

type modelRef struct {
	pool *pool
	lora string
}

type pool struct {
	PoolConfig
	// eps is the pool's current endpoints (PoolConfig.Endpoints at first),
	// replaced whole by SetEndpoints; a decision reads it once.
	eps atomic.Pointer[[]Endpoint]
	// loadOnly: the pool routes by load alone (SetLoadOnly).
	loadOnly atomic.Bool
	// flowTop is the highest priority flow control has seen in the pool
	// (NoteFlowPriority), at least 0.
	flowTop atomic.Int64
	// lowBand counts, by replica, the requests of a priority below the
	// top routed there and not yet ended (FlowOptions.ReservedReplicas).
	lowBand [index.MaxReplicas]atomic.Int32
}

// endpoints is the pool's endpoint list now; never modified.
func (p *pool) endpoints() []Endpoint {
	if e := p.eps.Load(); e != nil {
		return *e
	}
	return nil
}

// NewRouter builds a router over the index's pools.
func NewRouter(ix *index.Index, pools []PoolConfig, opts RouterOptions) (*Router, error) {
	r := &Router{ix: ix, byModel: map[string]modelRef{}, tieBreak: rand.IntN}
	r.opts.Store(&opts)
	for _, pc := range pools {
		p := &pool{PoolConfig: pc}
		if pc.Keys == nil {
			return nil, fmt.Errorf("pool %s: no Keys", pc.Name)
		}
		if err := p.setEndpoints(pc.Endpoints); err != nil {
			return nil, err
		}
		p.Endpoints = nil // p.eps owns them
		for _, m := range pc.Models {
			r.byModel[m] = modelRef{pool: p}
		}
		for _, l := range pc.LoRAAdapters {
			r.byModel[l] = modelRef{pool: p, lora: l}
		}
		r.pools = append(r.pools, p)
	}
	r.matches.New = func() any { s := make([]index.Match, 0, index.MaxReplicas); return &s }
	r.ids.New = func() any { s := []int(nil); return &s }
	r.texts.New = func() any { s := []byte(nil); return &s }
	return r, nil
}

// SeedTieBreaks makes the router's choices among equal-cost endpoints a
// repeatable sequence from seed, for replays on a virtual clock
// (internal/fleetsim) in which one goroutine makes every decision: the
// seeded source is not safe for concurrent decisions. Call it before the
// first decision.
func (r *Router) SeedTieBreaks(seed uint64) {
	r.tieBreak = rand.New(rand.NewPCG(seed, 0)).IntN
}

// o is the options now.
func (r *Router) o() *RouterOptions { return r.opts.Load() }

// Options is the cost model and limits decisions use now.
func (r *Router) Options() RouterOptions { return *r.o() }

// SetOptions replaces the cost model and limits for every decision that
// starts afterwards (a config reload).
func (r *Router) SetOptions(opts RouterOptions) { r.opts.Store(&opts) }

// SetEndpoints replaces a pool's endpoints (replicas joined or left) for
// every decision that starts afterwards; decisions under way finish with the
// list they read. Addresses must be ip:port.
func (r *Router) SetEndpoints(pool string, eps []Endpoint) error {
	if p := r.poolNamed(pool); p != nil {
		err := p.setEndpoints(eps)
		if fc := r.flow.Load(); fc != nil {
			fc.wake(pool)
		}
		return err
	}
	return fmt.Errorf("router: unknown pool %s", pool)
}

// poolNamed is the pool called name, nil when there is none.
func (r *Router) poolNamed(name string) *pool {
	for _, p := range r.pools {
		if p.Name == name {
			return p
		}
	}
	return nil
}

func (p *pool) setEndpoints(eps []Endpoint) error {
	for _, e := range eps {
		if _, err := netip.ParseAddrPort(e.Address); err != nil {
			return fmt.Errorf("pool %s endpoint %s: address %q is not ip:port", p.Name, e.Name, e.Address)
		}
	}
	own := slices.Clone(eps)
	p.eps.Store(&own)
	return nil
}

// Decision is the router's answer for one request.
type Decision struct {
	Pool     string
	Endpoint *Endpoint
	// Keys are the request's block keys (for the speculative store); nil
	// when the decision was made on load alone.
	Keys []index.BlockKey
	// PromptTokens and MatchedTokens describe the prefix match (debug headers).
	PromptTokens  int
	MatchedTokens int
	// Cost is the chosen endpoint's price: estimated seconds to first
	// token plus the prefill seconds of the request's uncached tokens.
	Cost    float64
	Outcome string
	Reason  string
	// Status is the HTTP status of a rejection (Outcome rejected).
	Status int
	Err    error

	ticket        index.Ticket // the request's place in its replica's prefill queue
	lowBand       bool         // below its pool's top priority, counted in pool.lowBand while in flight
	sharedID      uint64       // the Sharer's id for it
	matchedBlocks int          // blocks of Keys the chosen replica held
	heldTokens    int          // prompt tokens the best-holding candidate held (the funnel's bound)
	// funnelRank, funnelCached and funnelGen place the request in its
	// rank's cached_tokens check window (countFunnel, endFunnel).
	funnelRank   *rankFunnel
	funnelCached int
	funnelGen    uint64
	// promise is the request's place among its replica's promises
	// (index.Promise) until End; 0 when untracked.
	promise index.PromiseTicket
}

// Rejection is what to answer for a decision without an endpoint: its HTTP
// status (500 when the decision set none in 400..599) and a message (a
// generic one when it carries no error). A decision has either an Endpoint or
// a usable Rejection, whatever path made it.
func (d *Decision) Rejection() (status int, msg string) {
	status, msg = d.Status, "kvroute could not route the request"
	if status < 400 || status > 599 {
		status = 500
	}
	if d.Err != nil {
		msg = d.Err.Error()
	}
	return status, msg
}

// Decide picks an endpoint for a request. subset, when non-nil, restricts the
// candidates to those addresses (the data plane's subset hint). body may be
// nil for a header-only request. It is Prepare then DecidePrepared.
func (r *Router) Decide(path string, body []byte, subset map[string]bool) Decision {
	pr := r.prepare(path, body, subset, nil)
	return r.DecidePrepared(&pr, nil)
}

// DecideRecorded is Decide, recording what it weighs and when each step
// ended into rec (NewRecorder).
func (r *Router) DecideRecorded(path string, body []byte, subset map[string]bool, rec *Recorder) Decision {
	pr := r.prepare(path, body, subset, rec)
	return r.DecidePrepared(&pr, rec)
}

// Recovered is the decision for a request whose decision panicked (a bug,
// err the recovered value): like any internal error it routes by load when
// fail-open is on (within the only pool: the request's is not known) and
// rejects with 500 otherwise.
func (r *Router) Recovered(subset map[string]bool, err error) Decision {
	return r.failOpen(nil, subset, ReasonInternalError, 500, err, nil)
}

// Prepared is a request parsed, tokenized and hashed into block keys but not
// yet decided: everything the decision needs that does not depend on the
// index. Flow control holds it while the request waits and decides it when
// capacity frees (DecidePrepared), with the index as it is then. It holds
// its body's share of the in-flight decision budget
// (RouterOptions.MaxBytesInFlight) until it is decided or discarded.
type Prepared struct {
	pool   *pool // nil: not known (bad JSON, an unknown model)
	lora   string
	subset map[string]bool
	keys   []index.BlockKey
	// promptTokens and blockSize are the prompt's length and the key size.
	promptTokens int
	blockSize    int
	// keyed: it got as far as its token ids (the pool's parity check
	// applies, as it did before keys).
	keyed bool
	// how decides it: by keys, by load for reason, or failOpen.
	how    prepHow
	reason string
	status int
	err    error
	// held is the body bytes of the decision budget it holds.
	held int
	// priority is its flow control priority when banded (SetPriority):
	// below the pool's top priority it leaves the reserved replicas to
	// higher ones (Flow.ReservedReplicas).
	priority int
	banded   bool
	r        *Router
}

// SetPriority makes the request's decision one of flow control at
// priority: below the pool's top priority it is not placed on the
// replicas reserved for higher ones (FlowOptions.ReservedReplicas).
func (pr *Prepared) SetPriority(priority int) { pr.priority, pr.banded = priority, true }

type prepHow uint8

const (
	prepKeys prepHow = iota // prefix and load, with keys
	prepLoad                // by load for reason (err its cause)
	prepFail                // failOpen(reason, status, err)
)

// Pool is the name of the request's pool (PoolUnknown when it has none: it
// will be rejected or routed by load within the only pool).
func (p *Prepared) Pool() string { return poolName(p.pool) }

// PromptTokens is the prompt's length in tokens (0 when it was not
// tokenized): the request's cost in fair sharing.
func (p *Prepared) PromptTokens() int { return p.promptTokens }

// Bytes is the body bytes it holds of the in-flight decision budget.
func (p *Prepared) Bytes() int { return p.held }

// Reason is why it will be routed by load or rejected; "" when it will be
// decided on its block keys.
func (p *Prepared) Reason() string {
	if p.how == prepKeys {
		return ""
	}
	return p.reason
}

// Discard releases a request that will not be decided (shed, or its client
// went away). Discarding a decided request does nothing.
func (p *Prepared) Discard() {
	if p.held > 0 && p.r != nil {
		p.r.release(p.held)
	}
	p.held = 0
}

// Prepare parses, tokenizes and hashes a request for DecidePrepared (see
// Decide for the arguments). The Prepared must be decided or discarded.
func (r *Router) Prepare(path string, body []byte, subset map[string]bool) Prepared {
	return r.prepare(path, body, subset, nil)
}

// PrepareRecorded is Prepare, recording when each step ended into rec.
func (r *Router) PrepareRecorded(path string, body []byte, subset map[string]bool, rec *Recorder) Prepared {
	return r.prepare(path, body, subset, rec)
}

func (r *Router) prepare(path string, body []byte, subset map[string]bool, rec *Recorder) Prepared {
	pr := Prepared{subset: subset, r: r}
	if body == nil {
		if len(r.pools) == 1 {
			pr.pool = r.pools[0]
		}
		return pr.byLoad(ReasonNoBody, nil)
	}
	req, err := ParseRequest(path, body, r.o().Limits)
	rec.mark(stepParse)
	if req == nil {
		// Not a JSON object: no model, so no pool.
		return pr.fail(ReasonBadJSON, 400, err)
	}
	ref, ok := r.byModel[req.Model]
	if !ok {
		if req.Model == "" && len(r.pools) == 1 {
			ref = modelRef{pool: r.pools[0]}
		} else {
			// The name is the client's: its length only, never its bytes.
			return pr.fail(ReasonUnknownModel, 404, fmt.Errorf("model name of %d bytes is not served by any pool", len(req.Model)))
		}
	}
	pr.pool, pr.lora = ref.pool, ref.lora
	switch {
	case errors.Is(err, errPromptTooLarge):
		return pr.byLoad(ReasonPromptTooLarge, nil)
	case errors.Is(err, errTooManyMessages):
		return pr.byLoad(ReasonTooManyMessages, nil)
	case errors.Is(err, errBadJSON):
		return pr.fail(ReasonBadJSON, 400, err)
	case err != nil:
		return pr.fail(ReasonUnsupported, 400, err)
	}
	if !r.acquire(len(body)) {
		return pr.byLoad(ReasonDecideBudget, nil)
	}
	pr.held = len(body)
	idBuf := r.ids.Get().(*[]int)
	ids, reason, err := r.tokens(pr.pool, req, (*idBuf)[:0], rec)
	rec.mark(stepTokenize)
	defer func() {
		// ids are dead once the keys are computed (the caches copy them).
		if cap(ids) <= maxPooledIDs {
			*idBuf = ids[:0]
			r.ids.Put(idBuf)
		}
	}()
	if err != nil || reason != "" {
		if err != nil {
			return pr.fail(reason, 400, err)
		}
		return pr.byLoad(reason, nil)
	}
	r.prepareIDs(&pr, req.CacheSalt, ids, rec)
	return pr
}

func (pr Prepared) byLoad(reason string, err error) Prepared {
	pr.how, pr.reason, pr.err = prepLoad, reason, err
	return pr
}

func (pr Prepared) fail(reason string, status int, err error) Prepared {
	pr.how, pr.reason, pr.status, pr.err = prepFail, reason, status, err
	return pr
}

// DecideIDs routes a completion whose prompt token ids are already known,
// for model (a served model or LoRA adapter name): the path Decide takes
// after parsing and tokenizing a body. The fleet simulator calls it to skip
// JSON; its decisions are Decide's. It is PrepareIDs then DecidePrepared.
func (r *Router) DecideIDs(model string, ids []int) Decision {
	pr := r.PrepareIDs(model, ids)
	return r.DecidePrepared(&pr, nil)
}

// PrepareIDs is Prepare for a completion whose prompt token ids are known
// (see DecideIDs). It holds none of the decision budget; ids are not kept.
func (r *Router) PrepareIDs(model string, ids []int) Prepared {
	pr := Prepared{r: r}
	ref, ok := r.byModel[model]
	if !ok {
		return pr.fail(ReasonUnknownModel, 404, fmt.Errorf("model name of %d bytes is not served by any pool", len(model)))
	}
	pr.pool, pr.lora = ref.pool, ref.lora
	if len(ids) == 0 {
		return pr.byLoad(ReasonEmptyPrompt, nil)
	}
	r.prepareIDs(&pr, "", ids, nil)
	return pr
}

// prepareIDs computes the block keys of ids into pr (or the reason to route
// by load or fail open).
func (r *Router) prepareIDs(pr *Prepared, salt string, ids []int, rec *Recorder) {
	pr.promptTokens, pr.keyed = len(ids), true
	if pr.pool.loadOnly.Load() {
		*pr = pr.byLoad(ReasonParityMismatch, nil)
		return
	}
	k, err := pr.pool.Keys.KeySet()
	if err != nil {
		*pr = pr.fail(ReasonHashError, 500, err)
		return
	}
	if k == nil {
		*pr = pr.byLoad(ReasonBlockSizeUnknown, nil)
		return
	}
	pr.blockSize = k.BlockSize
	keys, err := blockKeys(k, pr.pool.Keys.EngineKeys(), make([]index.BlockKey, 0, len(ids)/k.BlockSize), ids, blockhash.RequestKeys{LoRAName: pr.lora, CacheSalt: salt})
	rec.mark(stepKeys)
	if err != nil {
		*pr = pr.fail(ReasonHashError, 500, err)
		return
	}
	pr.how, pr.keys = prepKeys, keys
}

// DecidePrepared decides a prepared request with the index as it is now,
// recording into rec when it is non-nil, and releases its share of the
// decision budget. A Prepared is decided once.
func (r *Router) DecidePrepared(pr *Prepared, rec *Recorder) Decision {
	defer pr.Discard()
	p := pr.pool
	if rec != nil {
		rec.promptTokens, rec.blockSize = pr.promptTokens, pr.blockSize
	}
	subset, low := pr.subset, false
	if pr.banded && p != nil {
		if k := r.reserveFor(p, pr.priority); k > 0 {
			subset, low = r.unreservedSubset(p, subset, k), true
		}
	}
	d := r.decidePrepared(pr, p, subset, rec)
	d.lowBand = low
	return d
}

func (r *Router) decidePrepared(pr *Prepared, p *pool, subset map[string]bool, rec *Recorder) Decision {
	if pr.how != prepFail && pr.keyed && p.loadOnly.Load() {
		return r.byLoad(p, subset, ReasonParityMismatch, nil, rec)
	}
	switch pr.how {
	case prepFail:
		return r.failOpen(p, subset, pr.reason, pr.status, pr.err, rec)
	case prepLoad:
		return r.byLoad(p, subset, pr.reason, pr.err, rec)
	}
	d := r.choose(p, subset, pr.keys, pr.promptTokens, pr.blockSize, rec)
	if d.Endpoint == nil && d.Outcome != OutcomeRejected {
		// Whatever the cost function, an eligible fleet gets an endpoint
		// (a NaN cost compares with nothing).
		rec.reset()
		d = r.byLoad(p, subset, ReasonNoHit, nil, rec)
	}
	return d
}

// acquire reserves n body bytes of the in-flight decision budget, without
// waiting; release returns them.
func (r *Router) acquire(n int) bool {
	if r.o().MaxBytesInFlight <= 0 {
		return true
	}
	if r.bytesInFlight.Add(int64(n)) > r.o().MaxBytesInFlight {
		r.bytesInFlight.Add(-int64(n))
		return false
	}
	return true
}

func (r *Router) release(n int) {
	if r.o().MaxBytesInFlight > 0 {
		r.bytesInFlight.Add(-int64(n))
	}
}

// failOpen routes by load within p after an internal error when fail-open is
// on, and rejects with status otherwise. With no pool (p nil: bad JSON, an
// unknown model) it routes only when there is a single pool: any other
// replica may serve another model.
func (r *Router) failOpen(p *pool, subset map[string]bool, reason string, status int, err error, rec *Recorder) Decision {
	if p == nil && len(r.pools) == 1 {
		p = r.pools[0]
	}
	if r.o().FailOpen && p != nil {
		return r.byLoad(p, subset, reason, err, rec)
	}
	return Decision{Pool: poolName(p), Outcome: OutcomeRejected, Reason: reason, Status: status, Err: err}
}

func poolName(p *pool) string {
	if p == nil {
		return PoolUnknown
	}
	return p.Name
}

func (r *Router) noEligible(d Decision) Decision {
	d.Outcome, d.Status = OutcomeRejected, 503
	if d.Reason == "" || d.Reason == ReasonHit || d.Reason == ReasonNoHit {
		d.Reason = ReasonNoEligible
	}
	d.Err = errors.New("no eligible replica (all unhealthy or outside the subset hint)")
	return d
}
