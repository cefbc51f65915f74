package vllmemu

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvroute/kvroute/blockhash"
	"github.com/kvroute/kvroute/chattemplate"
	"github.com/kvroute/kvroute/internal/vllmzmq"
	"github.com/kvroute/kvroute/tokenize"
)

// Options configures one emulated engine (one DP rank). Zero values take the
// documented defaults.
type Options struct {
	// Model is the served model name (/v1/models, the model_name label).
	Model string
	// ModelAliases are further names requests may use for Model, as vLLM's
	// --served-model-name with several names; responses name Model.
	ModelAliases []string
	// LoRAAdapters are served LoRA adapter names; a request naming one runs
	// with that adapter (lora_name in the hashes and events, lora_id = its
	// position + 1, as vLLM numbers --lora-modules).
	LoRAAdapters []string
	// Tokenizer encodes prompts; required.
	Tokenizer *tokenize.Tokenizer
	// Chat renders chat requests; nil: /v1/chat/completions answers 400.
	Chat *chattemplate.ChatTemplates
	// BlockSize is tokens per KV block, default 16.
	BlockSize int
	// NumBlocks is the GPU KV capacity in blocks (--num-gpu-blocks-override),
	// block 0 being vLLM's null block; default 2048.
	NumBlocks int
	// HashAlgo is --prefix-caching-hash-algo, default sha256 (vLLM's).
	HashAlgo blockhash.Algorithm
	// Seed is PYTHONHASHSEED; nil draws a random root per engine, like vLLM.
	Seed *string
	// BytesBlockHashes publishes full digests instead of 64-bit values
	// (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0).
	BytesBlockHashes bool
	// EvictWithoutEvents drops cached blocks to reuse them without
	// publishing BlockRemoved: an engine whose index a router cannot keep
	// (a disagreement on purpose; vLLM always publishes them).
	EvictWithoutEvents bool
	// MaxNumSeqs bounds the running sequences, default 8.
	MaxNumSeqs int
	// MaxNumBatchedTokens is the per-step token budget (chunked prefill),
	// default 2048.
	MaxNumBatchedTokens int
	// MaxModelLen bounds prompt + output tokens; default 32768, capped at
	// the KV capacity.
	MaxModelLen int
	// PrefillPerToken is the step time per uncached prompt token
	// scheduled, default 50µs.
	PrefillPerToken time.Duration
	// DecodePerToken is the time of a step in which sequences decode (one
	// token each, batched), default 5ms.
	DecodePerToken time.Duration
	// StepOverhead is added to every scheduler step, default 0.
	StepOverhead time.Duration
	// EventsEndpoint is the ZMQ PUB endpoint the engine binds, e.g.
	// "tcp://127.0.0.1:5557" (port 0 picks one, "*" binds every interface);
	// "" publishes no events. Unlike vLLM, which connects when the endpoint
	// names a host, the emulator always binds.
	EventsEndpoint string
	// ReplayEndpoint is the ZMQ ROUTER endpoint for replay; "" = none.
	ReplayEndpoint string
	// Topic is the topic frame, "" by default as in vLLM.
	Topic string
	// ReplayBuffer is the number of batches kept for replay, default 10000.
	ReplayBuffer int
	// LegacyLayout encodes events as positional arrays (vLLM ≤ 0.23) and
	// answers replay without the topic frame (vLLM ≤ 0.25).
	LegacyLayout bool
	// DataParallelRank goes into every batch and the engine label.
	DataParallelRank int
	// Now is the clock for event timestamps and TTFT; nil → time.Now.
	Now func() time.Time
	// Logger; nil → slog.Default().
	Logger *slog.Logger
}

// Stats is a snapshot of an engine's counters and state.
type Stats struct {
	Requests           int64 // requests admitted to the engine
	Finished           int64
	PromptTokens       int64 // prompt tokens of admitted requests
	CachedPromptTokens int64 // prefix-cache hit tokens
	GeneratedTokens    int64
	Preemptions        int64
	Running            int
	Waiting            int
	KVUsage            float64 // 0..1 as vllm:kv_cache_usage_perc
	CachedBlocks       int     // blocks holding a hash
	Steps              int64
	EventBatches       int64 // batches handed to the publisher
	EventDrops         int64 // batches dropped because the publish queue was full
	// PrefillSeconds and PrefillCount are vllm:request_prefill_time_seconds'
	// sum and count.
	PrefillSeconds float64
	PrefillCount   int64
	// PrefilledPromptTokens and PrefilledCachedTokens are
	// vllm:prompt_tokens_total and vllm:prompt_tokens_cached_total: the
	// prompts (and their cache hits) of requests past their first token.
	PrefilledPromptTokens int64
	PrefilledCachedTokens int64
}

// ErrReset is returned by ResetPrefixCache while blocks are in use.
var ErrReset = errors.New("failed to reset prefix cache: some blocks are not freed yet")

// Engine is one emulated vLLM engine core plus its OpenAI server.
type Engine struct {
	opts    Options
	log     *slog.Logger
	hasher  *blockhash.Engine
	filler  []fillerToken
	reg     *prometheus.Registry
	met     *metrics
	loraIDs map[string]int64

	mu      sync.Mutex
	pool    *blockPool
	waiting []*request
	running []*request
	stats   Stats

	wake    chan struct{}
	pubq    chan []byte
	pub     *vllmzmq.Publisher
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	started bool
	closed  bool
}

type fillerToken struct {
	id   int
	text string
}

// New validates opts and builds an engine; Start runs it.
func New(opts Options) (*Engine, error) {
	if opts.Tokenizer == nil {
		return nil, errors.New("vllmemu: Options.Tokenizer is required")
	}
	return build(opts)
}

// build is New without the tokenizer requirement (a Virtual engine
// takes token ids and generates token 0).
func build(opts Options) (*Engine, error) {
	if opts.Model == "" {
		return nil, errors.New("vllmemu: Options.Model is required")
	}
	opts = opts.withDefaults()
	switch {
	case opts.BlockSize < 1, opts.NumBlocks < 2, opts.MaxNumSeqs < 1, opts.MaxNumBatchedTokens < 1,
		opts.PrefillPerToken < 0, opts.DecodePerToken < 0, opts.StepOverhead < 0, opts.MaxModelLen < 0,
		opts.ReplayBuffer < 0, opts.DataParallelRank < 0:
		return nil, fmt.Errorf("vllmemu: invalid options (block size %d, blocks %d, max seqs %d, budget %d, max model len %d)",
			opts.BlockSize, opts.NumBlocks, opts.MaxNumSeqs, opts.MaxNumBatchedTokens, opts.MaxModelLen)
	}
	capacity := (opts.NumBlocks - 1) * opts.BlockSize
	if opts.MaxModelLen == 0 {
		opts.MaxModelLen = min(defaultMaxModelLen, capacity)
	}
	if opts.MaxModelLen > capacity {
		return nil, fmt.Errorf("vllmemu: max model len %d does not fit %d KV blocks of %d tokens", opts.MaxModelLen, opts.NumBlocks-1, opts.BlockSize)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	seed := opts.Seed
	if seed == nil {
		// vLLM draws NONE_HASH from os.urandom without PYTHONHASHSEED; a random
		// seed string gives an equally unpredictable root.
		var b [16]byte
		_, _ = rand.Read(b[:])
		s := hex.EncodeToString(b[:])
		seed = &s
	}
	hasher, err := blockhash.NewEngine(opts.HashAlgo, seed, opts.BlockSize)
	if err != nil {
		return nil, fmt.Errorf("vllmemu: %w", err)
	}
	e := &Engine{
		opts: opts, log: log, hasher: hasher,
		pool:    newBlockPool(opts.NumBlocks, opts.BlockSize, !opts.BytesBlockHashes),
		wake:    make(chan struct{}, 1),
		reg:     prometheus.NewRegistry(),
		loraIDs: map[string]int64{},
	}
	for i, name := range opts.LoRAAdapters {
		e.loraIDs[name] = int64(i + 1)
	}
	e.pool.silentEvict = opts.EvictWithoutEvents
	e.filler = makeFiller(opts.Tokenizer)
	e.met = newMetrics(e.reg, e)
	return e, nil
}

// withDefaults fills o's zero values with the documented defaults (those
// that do not depend on other fields).
func (o Options) withDefaults() Options {
	if o.BlockSize == 0 {
		o.BlockSize = defaultBlockSize
	}
	if o.NumBlocks == 0 {
		o.NumBlocks = defaultNumBlocks
	}
	if o.HashAlgo == 0 {
		o.HashAlgo = blockhash.SHA256
	}
	if o.MaxNumSeqs == 0 {
		o.MaxNumSeqs = defaultMaxNumSeqs
	}
	if o.MaxNumBatchedTokens == 0 {
		o.MaxNumBatchedTokens = defaultMaxNumBatchedTokens
	}
	if o.PrefillPerToken == 0 {
		o.PrefillPerToken = defaultPrefillPerToken
	}
	if o.DecodePerToken == 0 {
		o.DecodePerToken = defaultDecodePerToken
	}
	if o.ReplayBuffer == 0 {
		o.ReplayBuffer = defaultReplayBuffer
	}
	return o
}

// fillerWords are the generated text: the emulator computes no logits.
var fillerWords = []string{" The", " quick", " brown", " fox", " jumps", " over", " the", " lazy", " dog", "."}

func makeFiller(t *tokenize.Tokenizer) []fillerToken {
	var out []fillerToken
	if t == nil {
		return []fillerToken{{0, " "}}
	}
	for _, w := range fillerWords {
		for i, id := range t.Encode(w, false) {
			text := ""
			if i == 0 {
				text = w
			}
			out = append(out, fillerToken{id, text})
		}
	}
	if len(out) == 0 {
		out = []fillerToken{{0, " "}}
	}
	return out
}

// Start binds the ZMQ sockets (when configured) and starts the scheduler;
// it returns once the sockets listen. Close stops everything.
func (e *Engine) Start(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.started || e.closed {
		return errors.New("vllmemu: engine already started or closed")
	}
	if e.opts.EventsEndpoint != "" {
		replay := e.opts.ReplayEndpoint
		if replay != "" {
			replay = listenEndpoint(replay)
		}
		pub, err := vllmzmq.NewPublisher(listenEndpoint(e.opts.EventsEndpoint), replay, e.opts.Topic, e.opts.ReplayBuffer)
		if err != nil {
			return fmt.Errorf("vllmemu rank %d: %w", e.opts.DataParallelRank, err)
		}
		pub.SetLegacyReplay(e.opts.LegacyLayout)
		e.pub = pub
		e.pubq = make(chan []byte, eventQueueSize)
	}
	ctx, cancel := context.WithCancel(ctx)
	e.cancel = cancel
	e.started = true
	if e.pub != nil {
		e.wg.Add(1)
		go e.publishLoop(ctx)
	}
	e.wg.Add(1)
	go e.schedulerLoop(ctx)
	e.log.Debug("vllm-emu: engine started", "model", e.opts.Model, "rank", e.opts.DataParallelRank,
		"block_size", e.opts.BlockSize, "num_gpu_blocks", e.opts.NumBlocks, "hash_algo", e.opts.HashAlgo.String(),
		"events", e.EventsEndpoint(), "replay", e.ReplayEndpoint())
	return nil
}

// EventsEndpoint is the bound PUB endpoint ("" without events).
func (e *Engine) EventsEndpoint() string {
	if e.pub == nil {
		return ""
	}
	return e.pub.Endpoint()
}

// ReplayEndpoint is the bound ROUTER endpoint ("" without replay).
func (e *Engine) ReplayEndpoint() string {
	if e.pub == nil {
		return ""
	}
	return e.pub.ReplayEndpoint()
}

// WaitEventSubscriber waits until a subscriber is connected to the PUB
// socket: ZeroMQ drops what is published before that.
func (e *Engine) WaitEventSubscriber(ctx context.Context) error {
	if e.pub == nil {
		return errors.New("vllmemu: no events endpoint")
	}
	return e.pub.WaitSubscribed(ctx)
}

// Close stops the scheduler, fails the requests in flight and closes the
// sockets.
func (e *Engine) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	cancel := e.cancel
	e.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	e.wg.Wait()
	e.mu.Lock()
	for _, r := range append(e.running, e.waiting...) {
		r.out <- output{done: true, err: errEngineClosed}
	}
	e.running, e.waiting = nil, nil
	e.mu.Unlock()
	if e.pub != nil {
		return e.pub.Close()
	}
	return nil
}

var errEngineClosed = errors.New("engine is shutting down")

// Stats returns a snapshot of the counters and the scheduler state.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.stats
	s.Running, s.Waiting = len(e.running), len(e.waiting)
	s.KVUsage = e.pool.usage()
	s.CachedBlocks = 0
	for _, bs := range e.pool.cached {
		s.CachedBlocks += len(bs)
	}
	return s
}

// CachedPrefixBlocks is an oracle: the number of leading full blocks of this
// prompt that admission would hit in the prefix cache now. As in vLLM the
// last prompt token is never a hit, so it is at most (len(tokenIDs)-1)/BlockSize.
func (e *Engine) CachedPrefixBlocks(tokenIDs []int, loraName, cacheSalt string) int {
	r := &request{tokens: tokenIDs, lora: loraName, salt: cacheSalt}
	if len(tokenIDs) == 0 || r.hashNewBlocks(e.hasher) != nil {
		return 0
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.pool.longestHit(r.digests, (len(tokenIDs)-1)/e.opts.BlockSize))
}

// ResetPrefixCache drops every cached block and publishes AllBlocksCleared.
// Like vLLM it fails (ErrReset) while any request holds blocks, unless
// resetRunning is set: then the running requests are preempted first (back
// to the waiting queue, recomputed later), as Scheduler.reset_prefix_cache
// does with reset_running_requests (vllm/v1/core/sched/scheduler.py,
// upstream main 5ac26849).
func (e *Engine) ResetPrefixCache(resetRunning bool) error {
	e.mu.Lock()
	if resetRunning {
		for len(e.running) > 0 {
			e.preempt(e.running[len(e.running)-1])
		}
	}
	ok := e.pool.reset()
	if ok {
		// vLLM queues AllBlocksCleared for the next step's batch; an idle
		// engine would hold it back, so the emulator publishes it at once.
		e.publishLocked(e.pool.takeEvents())
	}
	e.updateGauges()
	e.mu.Unlock()
	if !ok {
		return ErrReset
	}
	e.log.Info("vllm-emu: prefix cache reset", "rank", e.opts.DataParallelRank)
	return nil
}

// Options returns the options with defaults filled in.
func (e *Engine) Options() Options { return e.opts }

// CachedBlockHashes is an oracle for tests and benchmarks: the 64-bit event
// hashes of every block now in the prefix cache, ascending, one entry per
// cached block (two blocks with the same hash give two entries).
func (e *Engine) CachedBlockHashes() []uint64 {
	e.mu.Lock()
	var out []uint64
	for _, bs := range e.pool.cached {
		for _, b := range bs {
			out = append(out, b.digest.EventValue())
		}
	}
	e.mu.Unlock()
	slices.Sort(out)
	return out
}
