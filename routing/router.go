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
	// ForeignRunningShare is the share of the mean uncached prompt charged
	// for each running request this router did not send (still prefilling,
	// as far as the last scrape can tell).
	ForeignRunningShare float64
	// DecodeInterference is the seconds one decoding sequence adds to a
	// prefill on the same replica.
	DecodeInterference float64
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
	// by load at once instead of waiting.
	MaxBytesInFlight int64
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
		return p.setEndpoints(eps)
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
	sharedID      uint64       // the Sharer's id for it
	matchedBlocks int          // blocks of Keys the chosen replica held
	heldTokens    int          // prompt tokens the best-holding candidate held (the funnel's bound)
	// funnelRank, funnelCached and funnelGen place the request in its
	// rank's cached_tokens check window (countFunnel, endFunnel).
	funnelRank   *rankFunnel
	funnelCached int
	funnelGen    uint64
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
// nil for a header-only request.
func (r *Router) Decide(path string, body []byte, subset map[string]bool) Decision {
	return r.decide(path, body, subset, nil)
}

// DecideRecorded is Decide, recording what it weighs and when each step
// ended into rec (NewRecorder).
func (r *Router) DecideRecorded(path string, body []byte, subset map[string]bool, rec *Recorder) Decision {
	return r.decide(path, body, subset, rec)
}

// Recovered is the decision for a request whose decision panicked (a bug,
// err the recovered value): like any internal error it routes by load when
// fail-open is on (within the only pool: the request's is not known) and
// rejects with 500 otherwise.
func (r *Router) Recovered(subset map[string]bool, err error) Decision {
	return r.failOpen(nil, subset, ReasonInternalError, 500, err, nil)
}

// decide is Decide, recording every endpoint it weighs into rec when rec is
// non-nil (Explain).
func (r *Router) decide(path string, body []byte, subset map[string]bool, rec *Recorder) Decision {
	if body == nil {
		var p *pool
		if len(r.pools) == 1 {
			p = r.pools[0]
		}
		return r.byLoad(p, subset, ReasonNoBody, nil, rec)
	}
	req, err := ParseRequest(path, body, r.o().Limits)
	rec.mark(stepParse)
	if req == nil {
		// Not a JSON object: no model, so no pool.
		return r.failOpen(nil, subset, ReasonBadJSON, 400, err, rec)
	}
	ref, ok := r.byModel[req.Model]
	if !ok {
		if req.Model == "" && len(r.pools) == 1 {
			ref = modelRef{pool: r.pools[0]}
		} else {
			// The name is the client's: its length only, never its bytes.
			return r.failOpen(nil, subset, ReasonUnknownModel, 404, fmt.Errorf("model name of %d bytes is not served by any pool", len(req.Model)), rec)
		}
	}
	p := ref.pool
	switch {
	case errors.Is(err, errPromptTooLarge):
		return r.byLoad(p, subset, ReasonPromptTooLarge, nil, rec)
	case errors.Is(err, errTooManyMessages):
		return r.byLoad(p, subset, ReasonTooManyMessages, nil, rec)
	case errors.Is(err, errBadJSON):
		return r.failOpen(p, subset, ReasonBadJSON, 400, err, rec)
	case err != nil:
		return r.failOpen(p, subset, ReasonUnsupported, 400, err, rec)
	}
	if !r.acquire(len(body)) {
		return r.byLoad(p, subset, ReasonDecideBudget, nil, rec)
	}
	defer r.release(len(body))
	idBuf := r.ids.Get().(*[]int)
	ids, reason, err := r.tokens(p, req, (*idBuf)[:0], rec)
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
			return r.failOpen(p, subset, reason, 400, err, rec)
		}
		return r.byLoad(p, subset, reason, nil, rec)
	}
	return r.decideIDs(p, ref.lora, req.CacheSalt, ids, subset, rec)
}

// DecideIDs routes a completion whose prompt token ids are already known,
// for model (a served model or LoRA adapter name): the path Decide takes
// after parsing and tokenizing a body. The fleet simulator calls it to skip
// JSON; its decisions are Decide's.
func (r *Router) DecideIDs(model string, ids []int) Decision {
	ref, ok := r.byModel[model]
	if !ok {
		return r.failOpen(nil, nil, ReasonUnknownModel, 404, fmt.Errorf("model name of %d bytes is not served by any pool", len(model)), nil)
	}
	if len(ids) == 0 {
		return r.byLoad(ref.pool, nil, ReasonEmptyPrompt, nil, nil)
	}
	return r.decideIDs(ref.pool, ref.lora, "", ids, nil, nil)
}

func (r *Router) decideIDs(p *pool, lora, salt string, ids []int, subset map[string]bool, rec *Recorder) Decision {
	if rec != nil {
		rec.promptTokens = len(ids)
	}
	if p.loadOnly.Load() {
		return r.byLoad(p, subset, ReasonParityMismatch, nil, rec)
	}
	k, err := p.Keys.KeySet()
	if err != nil {
		return r.failOpen(p, subset, ReasonHashError, 500, err, rec)
	}
	if k == nil {
		return r.byLoad(p, subset, ReasonBlockSizeUnknown, nil, rec)
	}
	if rec != nil {
		rec.blockSize = k.BlockSize
	}
	keys, err := blockKeys(k, p.Keys.EngineKeys(), make([]index.BlockKey, 0, len(ids)/k.BlockSize), ids, blockhash.RequestKeys{LoRAName: lora, CacheSalt: salt})
	rec.mark(stepKeys)
	if err != nil {
		return r.failOpen(p, subset, ReasonHashError, 500, err, rec)
	}
	d := r.choose(p, subset, keys, len(ids), k.BlockSize, rec)
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
