package extproc

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/kvroute/kvroute/blockhash"
	"github.com/kvroute/kvroute/index"
	"github.com/kvroute/kvroute/internal/mix"
)

// Tokenizer turns prompt text into token ids exactly as the pool's engines do.
// Encode must not keep text (or any part of it) after it returns: the router
// renders chat prompts into a buffer it reuses.
type Tokenizer interface {
	Encode(text string, addSpecialTokens bool) []int
}

// appendEncoder is a Tokenizer that can append to a reused buffer
// (tokenize.Tokenizer.AppendEncode); the router pools its id buffers then.
type appendEncoder interface {
	AppendEncode(dst []int, text string, addSpecialTokens bool) []int
}

// maxPooledIDs bounds the id buffers the router keeps for reuse (8 MiB).
const maxPooledIDs = 1 << 20

// maxPooledText bounds the prompt-text buffers the router keeps for reuse.
const maxPooledText = 8 << 20

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
	r.matches.New = func() any { s := make([]index.Match, 0, 64); return &s }
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

// blockKeys appends the request's block keys under the pool's key mode.
func blockKeys(ks *blockhash.KeySet, engine bool, dst []index.BlockKey, ids []int, rk blockhash.RequestKeys) ([]index.BlockKey, error) {
	var raw [512]uint64
	buf := raw[:0]
	if n := len(ids) / ks.BlockSize; n > len(raw) {
		buf = make([]uint64, 0, n)
	}
	var err error
	if engine {
		buf, err = blockhash.AppendEventKeys(ks.Engine, buf, ids, rk)
	} else {
		buf, err = blockhash.AppendKeys(ks.Tokens, buf, ks.Tokens.Root(), ids, rk)
	}
	for _, v := range buf {
		dst = append(dst, index.BlockKey(v))
	}
	return dst, err
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
	// Cost is the chosen endpoint's estimated seconds to first token.
	Cost    float64
	Outcome string
	Reason  string
	// Status is the HTTP status of a rejection (Outcome rejected).
	Status int
	Err    error

	ticket        index.Ticket // the request's place in its replica's prefill queue
	sharedID      uint64       // the Sharer's id for it
	matchedBlocks int          // blocks of Keys the chosen replica held
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

// decide is Decide, recording every endpoint it weighs into rec when rec is
// non-nil (Explain).
func (r *Router) decide(path string, body []byte, subset map[string]bool, rec *recorder) Decision {
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

func (r *Router) decideIDs(p *pool, lora, salt string, ids []int, subset map[string]bool, rec *recorder) Decision {
	if rec != nil {
		rec.promptTokens = len(ids)
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

// tokens returns the request's prompt token ids, or a reason to route by load.
// buf is an empty buffer the ids may be appended to.
func (r *Router) tokens(p *pool, req *Request, buf []int, rec *recorder) ([]int, string, error) {
	var ids []int
	switch req.Kind {
	case KindCompletion:
		if req.PromptIDs != nil {
			return req.PromptIDs, "", nil
		}
		if p.Tokenizer == nil {
			return nil, ReasonNoTokenizer, nil
		}
		if req.Prompt == "" {
			return nil, ReasonEmptyPrompt, nil
		}
		ids = r.encode(p, buf, req.Prompt, req.AddSpecialTokens)
	case KindChat:
		if p.Tokenizer == nil || p.Chat == nil {
			return nil, ReasonNoTokenizer, nil
		}
		textBuf := r.texts.Get().(*[]byte)
		prompt, err := p.Chat.AppendChat((*textBuf)[:0], req.Body)
		defer func() {
			// The text is dead once tokenized: the tokenizer keeps no part of it.
			if cap(prompt) <= maxPooledText {
				*textBuf = prompt[:0]
				r.texts.Put(textBuf)
			}
		}()
		text := unsafe.String(unsafe.SliceData(prompt), len(prompt))
		rec.mark(stepTemplate)
		if err != nil {
			// Template errors can quote the messages (raise_exception, an
			// unknown content type): keep their length only.
			return nil, ReasonChatTemplate, fmt.Errorf("chat template could not render the request (%d-byte error withheld: it may quote the request)", len(err.Error()))
		}
		if r.o().Limits.promptTooLarge(len(text)) {
			return nil, ReasonPromptTooLarge, nil
		}
		ids = r.encode(p, buf, text, req.AddSpecialTokens)
	default:
		return nil, ReasonNoBody, nil
	}
	if r.o().Limits.MaxPromptTokens > 0 && len(ids) > r.o().Limits.MaxPromptTokens {
		return nil, ReasonPromptTooLarge, nil
	}
	return ids, "", nil
}

// encode tokenizes text, into buf when the tokenizer can append.
func (r *Router) encode(p *pool, buf []int, text string, addSpecialTokens bool) []int {
	if a, ok := p.Tokenizer.(appendEncoder); ok {
		return a.AppendEncode(buf, text, addSpecialTokens)
	}
	return p.Tokenizer.Encode(text, addSpecialTokens)
}

// failOpen routes by load within p after an internal error when fail-open is
// on, and rejects with status otherwise. With no pool (p nil: bad JSON, an
// unknown model) it routes only when there is a single pool: any other
// replica may serve another model.
func (r *Router) failOpen(p *pool, subset map[string]bool, reason string, status int, err error, rec *recorder) Decision {
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
		return poolUnknown
	}
	return p.Name
}

// candidate is an eligible endpoint with its live state.
type candidate struct {
	ep    *Endpoint
	state index.ReplicaState
	rate  float64 // prefill tokens/s: learned, else the configured default
	slot  int     // its entry in the recorder (Explain), when recording
}

// eligible lists p's endpoints (all pools' when p is nil) that are healthy
// and inside the subset hint. A full KV cache does not make a replica
// ineligible (it only costs more, see cost): a busy engine's cache is always
// full, and refusing traffic while engines serve is worse than queueing.
//
// With rec non-nil it records every endpoint it looks at, eligible or not
// and why.
func (r *Router) eligible(p *pool, subset map[string]bool, dst []candidate, rec *recorder) []candidate {
	pools := r.pools
	if p != nil {
		pools = []*pool{p}
	}
	now := r.ix.Now()
	for _, pp := range pools {
		eps := pp.endpoints()
		for i := range eps {
			ep := &eps[i]
			slot := rec.add(ep)
			if subset != nil && !subset[ep.Address] {
				rec.ineligible(slot, IneligibleSubset)
				continue
			}
			st, ok := r.ix.ReplicaAt(ep.Replica, r.o().PrefillTokensPerSecond, now)
			if !ok {
				rec.ineligible(slot, IneligibleUnknown)
				continue
			}
			if !st.Healthy {
				rec.ineligible(slot, IneligibleUnhealthy)
				continue
			}
			rate := st.PrefillRate
			if !(rate > 0) {
				rate = r.o().PrefillTokensPerSecond
			}
			dst = append(dst, candidate{ep: ep, state: st, rate: rate, slot: slot})
		}
	}
	return dst
}

// cost is the estimated seconds to this request's first token on c:
//
//	(queued prefill tokens + the request's uncached tokens) / prefill rate
//	+ decode_interference × decoding sequences
//	+ kv_full_penalty when KV usage is above kv_usage_ceiling
//
// Queued prefill is this router's own outstanding uncached tokens on c plus,
// for the requests the engine reports that this router did not send, the
// waiting ones × the engine's learned mean uncached prompt (prefill rate
// default while nothing is learned), and the running ones × foreign_running_share
// of it (queued). Decoding sequences are this router's in
// flight there plus the engine's foreign running ones.
func (r *Router) cost(c *candidate, uncached float64) float64 {
	st := &c.state
	_, fr := st.Foreign()
	cost := (r.queued(st, c.rate)+max(uncached, 0))/c.rate + r.o().DecodeInterference*(float64(st.InFlight)+fr)
	if r.o().KVUsageCeiling > 0 && st.Load.KVUsage > r.o().KVUsageCeiling {
		cost += r.o().KVFullPenalty
	}
	if math.IsNaN(cost) {
		return math.Inf(1)
	}
	return cost
}

// queued is the prefill tokens ahead of a new request on a replica at
// prefill rate rate (see cost): this router's outstanding uncached tokens
// plus the engine's foreign requests × its learned mean uncached prompt —
// each waiting one whole, each running one foreign_running_share of it,
// drained at rate since the scrape that saw it.
func (r *Router) queued(st *index.ReplicaState, rate float64) float64 {
	return st.PendingTokens + r.foreignQueued(st, rate)
}

// foreignQueued is the part of queued that other routers and clients sent.
// The running part is what the scrape suggests is still being prefilled:
// it drains like this router's own queue, so a stale scrape (1 s old) no
// longer marks a replica busy whose foreign prefills ended long ago.
func (r *Router) foreignQueued(st *index.ReplicaState, rate float64) float64 {
	fw, fr := st.Foreign()
	mean := st.MeanPromptTokens
	if !(mean > 0) {
		mean = r.o().ForeignRequestTokens
	}
	running := fr * mean * r.o().ForeignRunningShare
	if running > 0 && rate > 0 && st.At.After(st.LoadAt) {
		running = max(0, running-rate*st.At.Sub(st.LoadAt).Seconds())
	}
	return fw*mean + running
}

// byLoad places a request no replica holds a prefix of by the same cost, all
// its tokens uncached. With block keys (a prompt of at least one block) it
// is sticky: among the replicas whose cost is within placement_slack × the
// request's own prefill time of the cheapest, it takes the one ranking
// highest for the first block key by rendezvous hashing, so a document
// evicted everywhere comes back where it was rather than wherever is
// emptiest, unless that replica is busier than the bound. Without keys it
// takes the cheapest, ties at random. It rejects with 503 only when no
// replica is healthy (or inside the subset hint).
func (r *Router) byLoad(p *pool, subset map[string]bool, reason string, cause error, rec *recorder) Decision {
	return r.place(p, subset, reason, cause, nil, 0, rec)
}

func (r *Router) place(p *pool, subset map[string]bool, reason string, cause error, keys []index.BlockKey, promptTokens int, rec *recorder) Decision {
	var buf [64]candidate
	cands := r.eligible(p, subset, buf[:0], rec)
	d := Decision{Pool: poolName(p), Outcome: OutcomeLoad, Reason: reason, Err: cause, Keys: keys, PromptTokens: promptTokens}
	if len(cands) == 0 {
		return r.noEligible(d)
	}
	var costs [64]float64
	cs := costs[:0]
	best, ties := 0, 0
	for i := range cands {
		c := r.cost(&cands[i], float64(promptTokens))
		cs = append(cs, c)
		rec.weigh(r, &cands[i], index.Match{}, float64(promptTokens), c)
		switch {
		case i == 0 || c < cs[best]:
			best, ties = i, 1
		case c == cs[best]:
			// Reservoir sampling keeps each tied endpoint with equal chance.
			ties++
			if r.tieBreak(ties) == 0 {
				best = i
			}
		}
	}
	if len(keys) > 0 {
		bound := cs[best] + r.o().PlacementSlack*float64(promptTokens)/cands[best].rate
		// A replica with no prefill queued is as good as the cheapest when
		// its cost is within placementIdleTolerance: the learned prefill
		// rates of identical engines differ by a few percent, and the
		// fastest-looking one must not take every document of an idle fleet.
		idleBound := cs[best] * (1 + placementIdleTolerance)
		// Bounded by cache occupancy too: a replica holding more than half
		// this prompt's blocks beyond the least occupied candidate would
		// evict to take it while another has room. Full caches (steady
		// eviction) are all within the bound: placement stays sticky.
		least := cands[0].state.Blocks
		for i := range cands {
			least = min(least, cands[i].state.Blocks)
		}
		roomBound := float64(least) + placementOccupancySlack*float64(len(keys))
		top := uint64(0)
		for i := range cands {
			if (cs[i] > bound && !(r.idle(&cands[i]) && cs[i] <= idleBound)) || float64(cands[i].state.Blocks) > roomBound {
				continue
			}
			if s := rendezvous(keys[0], cands[i].ep); s >= top {
				top, best = s, i
			}
		}
	}
	d.Endpoint, d.Cost = cands[best].ep, cs[best]
	return d
}

// placementOccupancySlack bounds sticky placement by cache occupancy: a
// replica holding more than this fraction of the prompt's blocks beyond the
// least occupied candidate is not a placement target.
const placementOccupancySlack = 0.5

// placementIdleTolerance: an idle replica (no prefill queued) within this
// fraction of the cheapest placement cost counts as tied with it.
const placementIdleTolerance = 0.2

// rendezvous is endpoint e's highest-random-weight score for key k.
func rendezvous(k index.BlockKey, e *Endpoint) uint64 {
	return mix.Mix64(uint64(k) ^ e.nameHash())
}

// nameHash is FNV-1a of the endpoint's name (stable across restarts and
// routers, so every kvroute replica places a document alike).
func (e *Endpoint) nameHash() uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(e.Name); i++ {
		h ^= uint64(e.Name[i])
		h *= 1099511628211
	}
	return h
}

func (r *Router) noEligible(d Decision) Decision {
	d.Outcome, d.Status = OutcomeRejected, 503
	if d.Reason == "" || d.Reason == ReasonHit || d.Reason == ReasonNoHit {
		d.Reason = ReasonNoEligible
	}
	d.Err = errors.New("no eligible replica (all unhealthy or outside the subset hint)")
	return d
}

// choose minimises cost (estimated seconds to first token, see cost) over
// the eligible endpoints, each with its own cached prefix, ties broken at
// random; with no cached prefix anywhere it places the request by load,
// sticky to the first block (place).
func (r *Router) choose(p *pool, subset map[string]bool, keys []index.BlockKey, promptTokens, blockSize int, rec *recorder) Decision {
	mp := r.matches.Get().(*[]index.Match)
	defer r.matches.Put(mp)
	matches := r.ix.LookupRoute(p.ID, keys, (*mp)[:0])
	rec.mark(stepLookup)
	*mp = matches[:0]
	if len(matches) == 0 {
		return r.place(p, subset, ReasonNoHit, nil, keys, promptTokens, rec)
	}
	var buf [64]candidate
	cands := r.eligible(p, subset, buf[:0], rec)
	d := Decision{Pool: p.Name, Keys: keys, PromptTokens: promptTokens, Outcome: OutcomePrefix, Reason: ReasonHit}
	if len(cands) == 0 {
		return r.noEligible(d)
	}
	var costBuf [64]float64
	var matchBuf [64]int
	costs, matched := costBuf[:0], matchBuf[:0]
	best, ties := 0, 0
	for i := range cands {
		c := &cands[i]
		var held index.Match
		for _, m := range matches {
			if m.Replica == c.ep.Replica.ID {
				held = m
				break
			}
		}
		uncached := float64(promptTokens) - held.Weighted*float64(blockSize)
		costs = append(costs, r.cost(c, uncached))
		matched = append(matched, held.Blocks)
		rec.weigh(r, c, held, uncached, costs[i])
		switch {
		case i == 0 || costs[i] < costs[best]:
			best, ties = i, 1
		case costs[i] == costs[best]:
			// Reservoir sampling keeps each tied endpoint with equal chance.
			ties++
			if r.tieBreak(ties) == 0 {
				best = i
			}
		}
	}
	best = r.spreadIdle(cands, costs, matched, keys, best)
	bestMatched := matched[best]
	d.Endpoint, d.Cost, d.MatchedTokens = cands[best].ep, costs[best], min(bestMatched*blockSize, promptTokens)
	d.matchedBlocks = min(bestMatched, len(keys))
	if bestMatched == 0 {
		d.Outcome, d.Reason = OutcomeLoad, ReasonNoHit
	}
	return d
}

// spreadIdle picks among the idle replicas whose cost is within
// placementIdleTolerance of the cheapest one (best): when the cheapest is
// idle, the part of the prompt it lacks is new to all of them, and their
// costs differ only by the noise in their learned prefill rates or by a
// short shared prefix (a fleet's system prompt) one of them lacks, so the
// cheapest-looking one would take every such request — every new
// conversation. The pick is the one given the fewest requests lately
// (ReplicaState.RecentRequests: the conversations it serves, whose context
// its cache must keep), then the rendezvous winner for the first block
// beyond the cheapest one's prefix, as place does for prompts nobody holds:
// new conversations spread evenly over the whole fleet, and one that lost
// its blocks comes back where it was. A replica that lacks the shared prefix
// competes too: were it excluded it would never get a request, so never
// the prefix (in the simulator, 7 of 16 engines got no request on one seed).
func (r *Router) spreadIdle(cands []candidate, costs []float64, matched []int, keys []index.BlockKey, best int) int {
	m := matched[best]
	if m >= len(keys) || !r.idle(&cands[best]) {
		return best
	}
	anchor, bound := keys[m], costs[best]*(1+placementIdleTolerance)
	pick, top, load := best, rendezvous(anchor, cands[best].ep), cands[best].state.RecentRequests()
	for i := range cands {
		if i == best || costs[i] > bound || !r.idle(&cands[i]) {
			continue
		}
		l := cands[i].state.RecentRequests()
		if s := rendezvous(anchor, cands[i].ep); l < load || (l == load && s > top) {
			pick, top, load = i, s, l
		}
	}
	return pick
}

// idle reports whether c has no prefill queued, its own or foreign.
func (r *Router) idle(c *candidate) bool {
	return c.state.PendingTokens < 1 && c.state.Load.Waiting == 0 && r.foreignQueued(&c.state, c.rate) < 1
}

// Begin records the routed request on its endpoint: in flight, its uncached
// prompt tokens in the replica's prefill queue, and speculative ownership of
// its blocks. End must follow when the stream ends.
func (r *Router) Begin(d *Decision) {
	r.beginLoad(d)
	r.beginBlocks(d)
}

// beginLoad is the first half of Begin: the request in flight and its
// uncached tokens queued on its replica (and told to the peers). It is
// cheap and comes before the answer to Envoy, so the request counts as load
// before it can reach its replica.
func (r *Router) beginLoad(d *Decision) {
	if d.Endpoint == nil {
		return
	}
	uncached := max(d.PromptTokens-d.MatchedTokens, 0)
	d.ticket = r.beginWork(d.Endpoint.Replica, uncached, nil, 0)
	if s := r.share(); s != nil {
		d.sharedID = s.Began(SharedWork{Pool: d.Pool, Endpoint: d.Endpoint.Name, Uncached: uncached, Matched: d.matchedBlocks, Keys: d.Keys})
	}
}

// beginBlocks is the second half of Begin: the request's matched blocks
// refreshed and the rest stored as speculative on its replica (holdBlocks:
// a lock and a table probe per block). The server runs it just after
// answering Envoy, off the request's path: a decision made in those
// microseconds misses the entries, as one made while this decision ran
// does anyway.
func (r *Router) beginBlocks(d *Decision) {
	if d.Endpoint == nil {
		return
	}
	r.holdBlocks(d.Endpoint.Replica, d.Keys, d.matchedBlocks)
}

// End releases what Begin recorded.
func (r *Router) End(d *Decision) {
	if d.Endpoint != nil {
		r.ix.EndWork(d.Endpoint.Replica, d.ticket)
		if s := r.share(); s != nil {
			s.Ended(d.sharedID)
		}
	}
}

// dpRankHeader is vLLM's per-request DP-rank pin.
const dpRankHeader = "x-data-parallel-rank"

func (e *Endpoint) rankValue() string { return strconv.Itoa(e.DPRank) }
