package ingest

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/kvroute/kvroute/blockhash"
	"github.com/kvroute/kvroute/index"
	"github.com/kvroute/kvroute/internal/loopback"
	"github.com/kvroute/kvroute/internal/panics"
	"github.com/kvroute/kvroute/internal/poll"
	"github.com/kvroute/kvroute/internal/vllmzmq"

	"github.com/kvroute/kvroute/internal/logbuf"
	"github.com/kvroute/kvroute/internal/zmtpcap"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// steps are scenario 1 of vllm_kv_events.json (sha256_cbor, PYTHONHASHSEED
// "0", int hashes, block size 4): store prompt 101..108, store decode block
// 109..112, store LoRA "sql-lora" + salt "tenant-a" 101..108, evict blocks 0
// and 1 of the prompt, reset. The zmq frames of the vectors carry the first three.
func steps(t testing.TB) [][]byte {
	v := loadEventVectors(t)
	sc := v.Scenarios[1]
	if sc.Algo != "sha256_cbor" || !sc.IntHashes || sc.BlockSize != 4 {
		t.Fatalf("unexpected scenario 1: %s int=%v bs=%d", sc.Algo, sc.IntHashes, sc.BlockSize)
	}
	var out [][]byte
	for _, st := range sc.Steps {
		out = append(out, unhex(t, st.PayloadHex))
	}
	return out
}

const (
	stepPrompt = iota
	stepDecode
	stepLoRA
	stepEvict
	stepReset
)

var (
	promptTokens = []uint32{101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 111, 112}
	loraKeys     = blockhash.RequestKeys{LoRAName: "sql-lora", CacheSalt: "tenant-a"}
)

func seed(s string) *string { return &s }

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

type replicaSpec struct {
	name, events, replay, topic, address, metrics string
	dp                                            int
}

// testPool is a pool as a test declares it; resolvePools turns it into a
// Pool (index handles, ranks, PoolKeys) the way package server does.
type testPool struct {
	Name       string
	Models     []string
	BlockSize  int
	EngineKeys bool
	Algorithm  blockhash.Algorithm
	Seed       *string
	replicas   []replicaSpec
}

// testConfig is what a test hands to start.
type testConfig struct {
	Settings Settings
	Pools    []testPool
}

// Key modes of poolConfig.
const (
	keysTokens = false
	keysEngine = true
)

func poolConfig(name string, engine bool, replicas ...replicaSpec) testPool {
	p := testPool{Name: name, Models: []string{"m-" + name}, EngineKeys: engine, BlockSize: 4,
		Algorithm: blockhash.SHA256CBOR, Seed: seed("0")}
	for i, r := range replicas {
		if r.address == "" {
			r.address = fmt.Sprintf("10.0.0.%d:8000", i+1)
		}
		r.dp = max(r.dp, 1)
		p.replicas = append(p.replicas, r)
	}
	return p
}

func baseConfig(pools ...testPool) *testConfig {
	return &testConfig{
		Settings: Settings{QueueSize: 64, ReconnectMaxBackoff: 200 * time.Millisecond,
			ScrapeTimeout: time.Second, StallTimeout: 300 * time.Millisecond, MaxMessageBytes: 32 << 20},
		Pools: pools,
	}
}

// resolvePools registers every pool and replica rank of cfg in ix (those
// not there yet) and returns the layout New takes.
func resolvePools(t testing.TB, ix *index.Index, cfg *testConfig) []Pool {
	t.Helper()
	var out []Pool
	for _, tp := range cfg.Pools {
		keys, err := blockhash.NewPoolKeys(blockhash.PoolKeysConfig{Pool: tp.Name, EngineKeys: tp.EngineKeys,
			Algorithm: tp.Algorithm, Seed: tp.Seed, BlockSize: tp.BlockSize})
		if err != nil {
			t.Fatal(err)
		}
		p := Pool{Name: tp.Name, Models: tp.Models, Keys: keys}
		pid, ok := ix.PoolByName(p.Name)
		if !ok {
			var err error
			if pid, err = ix.AddPool(p.Name); err != nil {
				t.Fatal(err)
			}
		}
		p.ID = pid
		have := map[string]index.Replica{}
		for _, st := range ix.Replicas(pid) {
			have[st.Name] = st.Replica
		}
		for _, r := range tp.replicas {
			for rank := range r.dp {
				name := r.name
				if r.dp > 1 {
					name = fmt.Sprintf("%s/dp%d", r.name, rank)
				}
				h, ok := have[name]
				if !ok {
					var err error
					if h, err = ix.AddReplica(pid, name); err != nil {
						t.Fatal(err)
					}
				}
				p.Ranks = append(p.Ranks, Rank{Replica: h, Name: name, ReplicaName: r.name, Address: r.address,
					DPRank: rank, DPSize: r.dp, Events: r.events, Replay: r.replay, Topic: r.topic, Metrics: r.metrics})
			}
		}
		out = append(out, p)
	}
	return out
}

// newManager resolves cfg in ix and creates a Manager.
func newManager(t testing.TB, ix *index.Index, cfg *testConfig, opts Options) (*Manager, error) {
	t.Helper()
	opts.Settings, opts.Pools, opts.Index = cfg.Settings, resolvePools(t, ix, cfg), ix
	if opts.Logger == nil {
		opts.Logger = quietLog
	}
	return New(opts)
}

type harness struct {
	t   testing.TB
	ix  *index.Index
	mgr *Manager
	reg *prometheus.Registry
}

// start registers the config in a fresh index as `kvroute serve` does, runs
// a Manager and stops it (waiting for every goroutine) at cleanup.
func start(t testing.TB, cfg *testConfig, tweak ...func(*Manager)) *harness {
	t.Helper()
	return startOn(t, index.New(index.Options{TTL: time.Hour, MaxEntries: 1 << 20}), cfg, tweak...)
}

// startOn is start writing to the index ix.
func startOn(t testing.TB, ix *index.Index, cfg *testConfig, tweak ...func(*Manager)) *harness {
	t.Helper()
	reg := prometheus.NewRegistry()
	mgr, err := newManager(t, ix, cfg, Options{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	mgr.tuning.minBackoff = 10 * time.Millisecond
	mgr.tuning.replayTimeout = 3 * time.Second
	for _, f := range tweak {
		f(mgr)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Run did not return after cancel")
		}
	})
	return &harness{t: t, ix: ix, mgr: mgr, reg: reg}
}

// waitFor polls cond (poll.Until).
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	poll.Until(t, what, cond)
}

func (h *harness) rank(name string) *rankState {
	for _, rs := range h.mgr.allRanks() {
		if rs.name == name {
			return rs
		}
	}
	h.t.Fatalf("no rank %s", name)
	return nil
}

func (h *harness) status(name string) rankStatus { return h.rank(name).st.get() }

func (h *harness) counter(name string, labels ...string) float64 {
	h.t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				v, _ := label(m, labels[i])
				if v != labels[i+1] {
					continue metric
				}
			}
			total += sampleValue(m)
		}
	}
	return total
}

// held is how many contiguous blocks from block 0 replica `name` of the pool
// holds for the key chain.
func (h *harness) held(pool, name string, keys []uint64) int {
	h.t.Helper()
	pid, _ := h.ix.PoolByName(pool)
	rs := h.rank(name)
	bk := make([]index.BlockKey, len(keys))
	for i, k := range keys {
		bk[i] = index.BlockKey(k)
	}
	for _, m := range h.ix.LookupRoute(pid, bk, nil) {
		if m.Replica == rs.r.ID {
			return m.Blocks
		}
	}
	return 0
}

// keysTokens are the keys the request path computes (keys: tokens).
func tokenKeys(t testing.TB, pool string, tokens []uint32, rk blockhash.RequestKeys) []uint64 {
	k, err := blockhash.NewTokenKeyer(pool, 4)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := blockhash.AppendKeys(k, nil, k.Root(), tokens, rk)
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// keysEngine are vLLM's event keys for the tokens (keys: engine).
func engineKeys(t testing.TB, seedStr string, tokens []uint32, rk blockhash.RequestKeys) []uint64 {
	e, err := blockhash.NewEngine(blockhash.SHA256CBOR, &seedStr, 4)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := blockhash.AppendEventKeys(e, nil, tokens, rk)
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

func newPublisher(t testing.TB, topic string, bufferSteps int) *vllmzmq.Publisher {
	t.Helper()
	p, err := vllmzmq.NewPublisher("tcp://127.0.0.1:0", "tcp://127.0.0.1:0", topic, bufferSteps)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func waitSubscribed(t testing.TB, p *vllmzmq.Publisher) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.WaitSubscribed(ctx); err != nil {
		t.Fatal(err)
	}
}

func publish(t testing.TB, p *vllmzmq.Publisher, payloads ...[]byte) {
	t.Helper()
	for _, pl := range payloads {
		if _, err := p.Publish(pl); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCleanStreamStoresTheRequestPathsKeys(t *testing.T) {
	st := steps(t)
	pub := newPublisher(t, "kv-events", 100)
	h := start(t, baseConfig(poolConfig("p", keysTokens,
		replicaSpec{name: "r0", events: pub.Endpoint(), replay: pub.ReplayEndpoint(), topic: "kv-events"})))
	waitSubscribed(t, pub)
	publish(t, pub, st[stepPrompt], st[stepDecode], st[stepLoRA])
	waitFor(t, "3 batches", func() bool { return h.status("r0").Batches == 3 })

	if got := h.held("p", "r0", tokenKeys(t, "p", promptTokens, blockhash.RequestKeys{})); got != 3 {
		t.Errorf("prompt + decode block: %d blocks held, want 3", got)
	}
	if got := h.held("p", "r0", tokenKeys(t, "p", promptTokens[:8], loraKeys)); got != 2 {
		t.Errorf("LoRA + salt prompt: %d blocks held, want 2", got)
	}
	if got := h.held("p", "r0", tokenKeys(t, "p", promptTokens[:8], blockhash.RequestKeys{CacheSalt: "other"})); got != 0 {
		t.Errorf("another tenant's salt matched %d blocks", got)
	}
	s := h.status("r0")
	if s.Gaps != 0 || s.Partial || s.Restarts != 0 || s.DecodeErrors != 0 || s.LastSeq != 2 {
		t.Errorf("status %+v", s)
	}
	if h.counter(metricSelfCheck, "verdict", "match") < 2 || h.counter(metricSchemeMismatch) != 0 {
		t.Errorf("self-check: match=%v mismatch=%v", h.counter(metricSelfCheck, "verdict", "match"), h.counter(metricSchemeMismatch))
	}
	if !h.mgr.Ready() {
		t.Error("not ready with a connected stream")
	}

	// Evict the prompt's first two blocks, then reset the cache.
	publish(t, pub, st[stepEvict])
	waitFor(t, "evict", func() bool { return h.status("r0").Batches == 4 })
	if got := h.held("p", "r0", tokenKeys(t, "p", promptTokens, blockhash.RequestKeys{})); got != 0 {
		t.Errorf("after evicting block 0: %d contiguous blocks, want 0", got)
	}
	if got := h.held("p", "r0", tokenKeys(t, "p", promptTokens[:8], loraKeys)); got != 2 {
		t.Errorf("evict touched the LoRA chain: %d", got)
	}
	publish(t, pub, st[stepReset])
	waitFor(t, "reset", func() bool { return h.status("r0").Batches == 5 })
	if st, _ := h.ix.Replica(h.rank("r0").r); st.Blocks != 0 {
		t.Errorf("AllBlocksCleared left %d blocks", st.Blocks)
	}
}

func TestEngineKeysAndSchemeMismatchMetric(t *testing.T) {
	st := steps(t)
	pub := newPublisher(t, "", 100)
	good := poolConfig("good", keysEngine, replicaSpec{name: "r0", events: pub.Endpoint()})
	bad := poolConfig("bad", keysEngine, replicaSpec{name: "r1", events: pub.Endpoint(), address: "10.0.0.9:8000"})
	bad.Seed = seed("1") // not the engine's PYTHONHASHSEED
	bad.Models = []string{"other"}
	h := start(t, baseConfig(good, bad))
	waitFor(t, "both subscribed", func() bool { return h.rank("r0").connected.Load() && h.rank("r1").connected.Load() })
	waitSubscribed(t, pub)
	time.Sleep(50 * time.Millisecond) // both subscriptions reach the PUB
	publish(t, pub, st[stepPrompt], st[stepDecode], st[stepLoRA])
	waitFor(t, "both applied", func() bool { return h.status("r0").Batches == 3 && h.status("r1").Batches == 3 })

	if got := h.held("good", "r0", engineKeys(t, "0", promptTokens, blockhash.RequestKeys{})); got != 3 {
		t.Errorf("engine keys: %d blocks held, want 3", got)
	}
	if got := h.held("good", "r0", engineKeys(t, "0", promptTokens[:8], loraKeys)); got != 2 {
		t.Errorf("engine keys with LoRA + salt: %d blocks held, want 2", got)
	}
	if m := h.counter(metricSchemeMismatch, "pool", "bad"); m < 1 {
		t.Errorf("%s{pool=bad} = %v, want ≥ 1", metricSchemeMismatch, m)
	}
	if m := h.counter(metricSchemeMismatch, "pool", "good"); m != 0 {
		t.Errorf("%s{pool=good} = %v, want 0", metricSchemeMismatch, m)
	}
}

// TestReplayedSeqJumpIsSkippedAndCounted: a replay reply holding a batch
// whose seq does not follow the previous one (the engine's buffer is
// contiguous) skips it and counts it; the batches after it in the reply,
// and the live batches that follow, are applied as usual.
func TestReplayedSeqJumpIsSkippedAndCounted(t *testing.T) {
	st := steps(t)
	empty := enc(t, []any{1.5, []any{}, 0})
	pub := newPublisher(t, "kv-events", 100)
	h := start(t, baseConfig(poolConfig("p", keysTokens,
		replicaSpec{name: "r0", events: pub.Endpoint(), replay: pub.ReplayEndpoint(), topic: "kv"})))
	waitSubscribed(t, pub)
	waitFor(t, "first-contact replay", func() bool { return h.status("r0").Replays >= 1 })
	publish(t, pub, st[stepPrompt])
	waitFor(t, "seq 0", func() bool { return h.status("r0").Batches == 1 })
	pub.Skip(st[stepDecode])        // seq 1: lost on the way
	pub.Inject(1<<30, st[stepLoRA]) // out of sequence in the replay buffer
	for range 19 {
		publish(t, pub, empty) // seqs 2..20, live
	}
	waitFor(t, "the live batches after the gap", func() bool { return h.status("r0").LastSeq == 20 })
	s := h.status("r0")
	if s.Batches != 21 {
		t.Errorf("%d batches applied, want 21 (seq 0..20)", s.Batches)
	}
	if got := h.held("p", "r0", tokenKeys(t, "p", promptTokens, blockhash.RequestKeys{})); got != 3 {
		t.Errorf("decode block from replay: %d blocks held, want 3", got)
	}
	if got := h.held("p", "r0", tokenKeys(t, "p", promptTokens[:8], loraKeys)); got != 0 {
		t.Errorf("the out-of-sequence batch's %d blocks are held", got)
	}
	if got := h.counter(metricReplayJumps); got < 1 {
		t.Errorf("%s = %v", metricReplayJumps, got)
	}
}

func TestReplayFillsSequenceGap(t *testing.T) {
	for _, legacy := range []bool{false, true} {
		t.Run(fmt.Sprintf("legacy_replay_layout=%v", legacy), func(t *testing.T) {
			st := steps(t)
			pub := newPublisher(t, "kv-events", 100)
			pub.SetLegacyReplay(legacy)
			h := start(t, baseConfig(poolConfig("p", keysTokens,
				replicaSpec{name: "r0", events: pub.Endpoint(), replay: pub.ReplayEndpoint(), topic: "kv"})))
			waitSubscribed(t, pub)
			waitFor(t, "first-contact replay", func() bool { return h.status("r0").Replays >= 1 })
			publish(t, pub, st[stepPrompt])
			pub.Skip(st[stepDecode]) // lost on the way: seq 1
			publish(t, pub, st[stepLoRA])
			// The batches land during the replay; its outcome is counted after the end marker.
			waitFor(t, "gap filled", func() bool {
				return h.status("r0").LastSeq == 2 && h.status("r0").Batches == 3 && h.counter(metricReplays, "outcome", "succeeded") >= 2
			})
			s := h.status("r0")
			if s.Gaps != 1 || s.Partial || s.ReplaysPartial != 0 {
				t.Errorf("status %+v", s)
			}
			if got := h.held("p", "r0", tokenKeys(t, "p", promptTokens, blockhash.RequestKeys{})); got != 3 {
				t.Errorf("decode block from replay: %d blocks held, want 3", got)
			}
			if h.counter(metricReplays, "outcome", "succeeded") < 2 {
				t.Errorf("replays succeeded = %v", h.counter(metricReplays, "outcome", "succeeded"))
			}
		})
	}
}

func TestReplayBufferTooShortMarksPartial(t *testing.T) {
	st := steps(t)
	pub := newPublisher(t, "", 2)
	h := start(t, baseConfig(poolConfig("p", keysTokens,
		replicaSpec{name: "r0", events: pub.Endpoint(), replay: pub.ReplayEndpoint()})))
	waitSubscribed(t, pub)
	waitFor(t, "first-contact replay", func() bool { return h.status("r0").Replays >= 1 })
	publish(t, pub, st[stepPrompt])
	waitFor(t, "seq 0", func() bool { return h.status("r0").Batches == 1 })
	pub.Skip(st[stepDecode]) // seq 1, pushed out of the 2-batch buffer by seq 3
	pub.Skip(st[stepLoRA])   // seq 2
	publish(t, pub, st[stepEvict])
	// seq 3 is applied before the gap's replay ends: wait for both (a
	// loaded machine showed LastSeq 3 with the replay still under way).
	waitFor(t, "seq 3 and the gap's replay", func() bool {
		s := h.status("r0")
		return s.LastSeq == 3 && s.ReplaysPartial >= 1
	})
	s := h.status("r0")
	if !s.Partial || s.ReplaysPartial != 1 || s.Gaps != 1 {
		t.Errorf("status %+v, want partial after one short replay", s)
	}
	if h.counter(metricReplays, "outcome", "partial") != 1 {
		t.Errorf("partial replays = %v", h.counter(metricReplays, "outcome", "partial"))
	}
	// seq 2 (the LoRA chain) came from the replay.
	if got := h.held("p", "r0", tokenKeys(t, "p", promptTokens[:8], loraKeys)); got != 2 {
		t.Errorf("LoRA chain from replay: %d blocks", got)
	}
}

func TestGapWithoutReplayIsCountedAndStreamGoesOn(t *testing.T) {
	st := steps(t)
	pub, err := vllmzmq.NewPublisher("tcp://127.0.0.1:0", "", "", 10)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })
	h := start(t, baseConfig(poolConfig("p", keysTokens, replicaSpec{name: "r0", events: pub.Endpoint()})))
	waitSubscribed(t, pub)
	publish(t, pub, st[stepPrompt])
	pub.Skip(st[stepDecode])
	publish(t, pub, st[stepLoRA])
	waitFor(t, "seq 2", func() bool { return h.status("r0").LastSeq == 2 })
	s := h.status("r0")
	if s.Gaps != 1 || !s.Partial || s.Replays != 0 || s.Batches != 2 {
		t.Errorf("status %+v", s)
	}
}

func TestRestartedPublisherClearsReplica(t *testing.T) {
	st := steps(t)
	pub := newPublisher(t, "", 100)
	ep, rep := pub.Endpoint(), pub.ReplayEndpoint()
	h := start(t, baseConfig(poolConfig("p", keysTokens, replicaSpec{name: "r0", events: ep, replay: rep})))
	waitSubscribed(t, pub)
	publish(t, pub, st[stepPrompt], st[stepDecode])
	waitFor(t, "seq 1", func() bool { return h.status("r0").LastSeq == 1 })
	if got := h.held("p", "r0", tokenKeys(t, "p", promptTokens, blockhash.RequestKeys{})); got != 3 {
		t.Fatalf("before restart: %d blocks", got)
	}

	// The engine process restarts on the same ports: seq starts at 0 again.
	pub.Close()
	waitFor(t, "disconnect seen", func() bool { return !h.rank("r0").connected.Load() })
	pub2, err := vllmzmq.NewPublisher(ep, rep, "", 100)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub2.Close() })
	waitSubscribed(t, pub2)
	publish(t, pub2, st[stepLoRA])
	waitFor(t, "restart handled", func() bool { return h.status("r0").Restarts == 1 && h.status("r0").LastSeq == 0 })
	if got := h.held("p", "r0", tokenKeys(t, "p", promptTokens, blockhash.RequestKeys{})); got != 0 {
		t.Errorf("old process's blocks survived the restart: %d", got)
	}
	if got := h.held("p", "r0", tokenKeys(t, "p", promptTokens[:8], loraKeys)); got != 2 {
		t.Errorf("new process's blocks: %d, want 2", got)
	}
	if h.counter(metricRestarts) != 1 {
		t.Errorf("restarts metric %v", h.counter(metricRestarts))
	}
}

func TestUnknownEventTypeSkippedAndGarbageDropped(t *testing.T) {
	st := steps(t)
	pub := newPublisher(t, "", 100)
	h := start(t, baseConfig(poolConfig("p", keysTokens, replicaSpec{name: "r0", events: pub.Endpoint(), replay: pub.ReplayEndpoint()})))
	waitSubscribed(t, pub)
	unknown := enc(t, []any{1767225600.25, []any{kv{"type", "BlockPinned", "block_hashes", []any{1}}}, 0})
	publish(t, pub, unknown, []byte("\x93garbage"), st[stepPrompt])
	waitFor(t, "seq 2", func() bool { return h.status("r0").LastSeq == 2 })
	s := h.status("r0")
	if s.DecodeErrors != 1 || s.Batches != 2 || s.Gaps != 0 {
		t.Errorf("status %+v", s)
	}
	if h.counter(metricEvents, "type", evUnknown) != 1 || h.counter(metricDecodeErrors) != 1 {
		t.Errorf("unknown=%v decode_errors=%v", h.counter(metricEvents, "type", evUnknown), h.counter(metricDecodeErrors))
	}
	if got := h.held("p", "r0", tokenKeys(t, "p", promptTokens[:8], blockhash.RequestKeys{})); got != 2 {
		t.Errorf("valid batch after garbage: %d blocks", got)
	}
}

func TestDataParallelRankOneListensOnPortPlusOne(t *testing.T) {
	st := steps(t)
	// Rank r's engine publishes events on base+r and replays on base+2+r.
	var pubs []*vllmzmq.Publisher
	ev, err := loopback.BindConsecutive(4, func(base int) error {
		pubs = nil
		for rank := range 2 {
			p, err := vllmzmq.NewPublisher(fmt.Sprintf("tcp://127.0.0.1:%d", base+rank), fmt.Sprintf("tcp://127.0.0.1:%d", base+2+rank), "", 100)
			if err != nil {
				for _, p := range pubs {
					p.Close()
				}
				return err
			}
			pubs = append(pubs, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pubs {
		t.Cleanup(func() { p.Close() })
	}
	rp := ev + 2
	h := start(t, baseConfig(poolConfig("p", keysTokens, replicaSpec{name: "dp", dp: 2,
		events: fmt.Sprintf("tcp://127.0.0.1:%d", ev), replay: fmt.Sprintf("tcp://127.0.0.1:%d", rp)})))
	if got := h.rank("dp/dp1").events; got != fmt.Sprintf("tcp://127.0.0.1:%d", ev+1) {
		t.Fatalf("rank 1 events endpoint %s", got)
	}
	for _, p := range pubs {
		waitSubscribed(t, p)
	}
	publish(t, pubs[1], st[stepPrompt])
	publish(t, pubs[0], st[stepLoRA])
	waitFor(t, "both ranks", func() bool { return h.status("dp/dp1").Batches == 1 && h.status("dp/dp0").Batches == 1 })
	keys := tokenKeys(t, "p", promptTokens[:8], blockhash.RequestKeys{})
	if h.held("p", "dp/dp1", keys) != 2 || h.held("p", "dp/dp0", keys) != 0 {
		t.Errorf("prompt blocks: dp1=%d dp0=%d, want 2 and 0", h.held("p", "dp/dp1", keys), h.held("p", "dp/dp0", keys))
	}
	if h.held("p", "dp/dp0", tokenKeys(t, "p", promptTokens[:8], loraKeys)) != 2 {
		t.Error("rank 0 lost its own blocks")
	}
}

func TestSlowIndexFillsBoundedQueueAndReplayRecovers(t *testing.T) {
	st := steps(t)
	pub := newPublisher(t, "", 100)
	cfg := baseConfig(poolConfig("p", keysTokens, replicaSpec{name: "r0", events: pub.Endpoint(), replay: pub.ReplayEndpoint()}))
	cfg.Settings.QueueSize = 2
	gate := make(chan struct{})
	var blocked sync.Once
	slow := func() {
		blocked.Do(func() { <-gate })
	}
	h := start(t, cfg, func(m *Manager) { m.tuning.beforeApply = slow })
	waitSubscribed(t, pub)
	t.Cleanup(func() {
		select {
		case <-gate:
		default:
			close(gate)
		}
	})
	// The first batch blocks the applier (a slow index write); the next
	// ones fill the queue of 2 and then overflow it.
	publish(t, pub, st[stepPrompt], st[stepDecode], st[stepLoRA], st[stepDecode], st[stepLoRA], st[stepDecode])
	waitFor(t, "queue drops", func() bool { return h.status("r0").QueueDrops >= 1 })
	close(gate)
	// A replay applies its batches before it counts itself: wait for both
	// (a fresh-clone CI run saw LastSeq 5 with Replays still 0).
	waitFor(t, "all 6 applied and the replay counted", func() bool {
		s := h.status("r0")
		return s.LastSeq == 5 && s.Replays >= 1
	})
	// The dropped batches come back through a replay: the gap replay, or
	// the first-connect replay when the drops happened before it ran.
	s := h.status("r0")
	if s.Partial || s.Replays < 1 {
		t.Errorf("status %+v: want the drops recovered by replay", s)
	}
	if h.counter(metricQueueDrops) < 1 {
		t.Error("queue drops not counted")
	}
	if got := h.held("p", "r0", tokenKeys(t, "p", promptTokens, blockhash.RequestKeys{})); got != 3 {
		t.Errorf("%d blocks after recovery, want 3", got)
	}
}

func TestBindModeTellsEnginesApartByTopic(t *testing.T) {
	st := steps(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	bind := "tcp://" + l.Addr().String()
	l.Close()
	cfg := baseConfig(poolConfig("p", keysTokens,
		replicaSpec{name: "a", topic: "engine-a"},
		replicaSpec{name: "b", topic: "unused", address: "10.1.2.3:8000"}))
	cfg.Settings.Bind = bind
	h := start(t, cfg)
	dial := func(topic string) *vllmzmq.Publisher {
		var p *vllmzmq.Publisher
		waitFor(t, "dial "+topic, func() bool {
			p, err = vllmzmq.DialPublisher(bind, "", topic, 10)
			return err == nil
		})
		t.Cleanup(func() { p.Close() })
		waitSubscribed(t, p)
		return p
	}
	pa, pb, px := dial("engine-a"), dial("kv@10.1.2.3:8000@m-p"), dial("kv@10.9.9.9:8000@m-p")
	publish(t, pa, st[stepPrompt])
	publish(t, pb, st[stepLoRA])
	publish(t, px, st[stepPrompt])
	waitFor(t, "both engines", func() bool { return h.status("a").Batches == 1 && h.status("b").Batches == 1 })
	waitFor(t, "unknown topic counted", func() bool { return h.counter(metricUnknownTopic) == 1 })
	if h.held("p", "a", tokenKeys(t, "p", promptTokens[:8], blockhash.RequestKeys{})) != 2 ||
		h.held("p", "b", tokenKeys(t, "p", promptTokens[:8], loraKeys)) != 2 ||
		h.held("p", "b", tokenKeys(t, "p", promptTokens[:8], blockhash.RequestKeys{})) != 0 {
		t.Error("blocks landed on the wrong replica")
	}
}

// TestPublisherReplayMatchesVLLMFrames checks the test publisher against the
// frames captured from vLLM's ZmqEventPublisher, so the socket tests above
// exercise vLLM's real wire behaviour.
func TestPublisherReplayMatchesVLLMFrames(t *testing.T) {
	v := loadEventVectors(t)
	pub := newPublisher(t, v.ZMQ.Topic, 100)
	for _, f := range v.ZMQ.Live {
		pub.Skip(unhex(t, f[2]))
	}
	ask := func(start []byte) [][]string {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		d := zmq4.NewDealer(ctx)
		defer d.Close()
		if err := d.Dial(pub.ReplayEndpoint()); err != nil {
			t.Fatal(err)
		}
		if err := d.Send(zmq4.NewMsgFrom([]byte{}, start)); err != nil {
			t.Fatal(err)
		}
		var got [][]string
		for {
			msg, err := d.Recv()
			if err != nil {
				t.Fatal(err)
			}
			var fr []string
			for _, f := range msg.Frames {
				fr = append(fr, hex.EncodeToString(f))
			}
			got = append(got, fr)
			if strings.Contains(strings.Join(fr, ","), "ffffffffffffffff") {
				return got
			}
		}
	}
	req := v.ZMQ.ReplayRequest
	if got, want := ask(unhex(t, req[1])), v.ZMQ.ReplayResponse; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("replay from 1:\n got %v\nwant %v", got, want)
	}
	if got, want := ask(unhex(t, "0000000000000063")), v.ZMQ.Replay99; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("replay from 99:\n got %v\nwant %v", got, want)
	}
}

func TestDebugHandlerAndReplicaRemovedFromConfig(t *testing.T) {
	st := steps(t)
	pub := newPublisher(t, "", 100)
	cfg := baseConfig(poolConfig("p", keysEngine, replicaSpec{name: "r0", events: pub.Endpoint(), replay: pub.ReplayEndpoint()}))
	// An index that still holds a replica the config no longer names.
	ix := index.New(index.Options{TTL: time.Hour, MaxEntries: 1 << 20})
	pid, _ := ix.AddPool("p")
	r0, _ := ix.AddReplica(pid, "r0")
	gone, _ := ix.AddReplica(pid, "gone")
	ix.Store(gone, []index.BlockKey{1, 2, 3}, index.TierGPU)
	mgr, err := newManager(t, ix, cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := ix.Replica(gone); s.Blocks != 0 {
		t.Errorf("replica removed from config still holds %d blocks", s.Blocks)
	}
	if mgr.Ready() {
		t.Error("ready before any stream or load")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { mgr.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	waitSubscribed(t, pub)
	publish(t, pub, st[stepPrompt])
	waitFor(t, "applied", func() bool { s, _ := ix.Replica(r0); return s.Blocks == 2 })

	srv := httptest.NewServer(mgr.DebugHandler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/debug/replicas")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Replicas []ReplicaStatus `json:"replicas"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	if len(body.Replicas) != 1 {
		t.Fatalf("replicas %+v", body.Replicas)
	}
	r := body.Replicas[0]
	if r.Replica != "r0" || !r.Connected || r.LastSeq == nil || *r.LastSeq != 0 || r.BlocksHeld != 2 || r.PoolBlockSize != 4 {
		t.Errorf("debug view %+v", r)
	}
	if !mgr.Ready() {
		t.Error("not ready with a live stream")
	}
}

func TestNewRejectsUnregisteredReplicasAndIPCWithRanks(t *testing.T) {
	cfg := baseConfig(poolConfig("p", keysTokens, replicaSpec{name: "r0", events: "tcp://127.0.0.1:1"}))
	pools := resolvePools(t, index.New(index.Options{TTL: time.Hour, MaxEntries: 1 << 20}), cfg)
	if _, err := New(Options{Settings: cfg.Settings, Pools: pools, Index: index.New(index.Options{TTL: time.Hour, MaxEntries: 1 << 20})}); err == nil {
		t.Error("pool missing from the index accepted")
	}
	// The layout's own index, but inputs ingest must not guess at.
	ix := index.New(index.Options{TTL: time.Hour, MaxEntries: 1 << 20})
	pools = resolvePools(t, ix, cfg)
	noKeys := slices.Clone(pools)
	noKeys[0].Keys = nil
	if _, err := New(Options{Settings: cfg.Settings, Pools: noKeys, Index: ix}); err == nil {
		t.Error("pool without Keys accepted")
	}
	unbounded := cfg.Settings
	unbounded.MaxMessageBytes = 0
	if _, err := New(Options{Settings: unbounded, Pools: pools, Index: ix}); err == nil {
		t.Error("MaxMessageBytes 0 accepted (ingest applies no defaults)")
	}
	if _, err := New(Options{Settings: cfg.Settings, Pools: pools, Index: ix, Logger: quietLog}); err != nil {
		t.Errorf("the layout itself: %v", err)
	}
	if _, err := offsetEndpoint("ipc:///tmp/kv", 1); err == nil {
		t.Error("ipc endpoint with DP rank 1 accepted")
	}
	if got, _ := offsetEndpoint("inproc://cache", 3); got != "inproc://cache_dp3" {
		t.Errorf("inproc offset %s", got)
	}
}

func TestTopicConvention(t *testing.T) {
	cases := []struct {
		topic, replicaAddr string
		want               bool
	}{
		{"kv@10.0.0.1:8000@llama", "10.0.0.1:8000", true},
		{"kv@10.0.0.1:8000@llama", "10.0.0.1:8001", false},
		{"kv@10.0.0.1@llama", "10.0.0.1:8000", true},
		{"kv@[fd00::1]:8000@m", "[fd00::1]:8000", true},
		{"kv@fd00::1@m", "[fd00::1]:8000", true},
		{"events", "10.0.0.1:8000", false},
	}
	for _, c := range cases {
		addr, _, ok := topicAddress(c.topic)
		if got := ok && addressMatches(c.replicaAddr, addr); got != c.want {
			t.Errorf("%s vs %s: %v, want %v", c.topic, c.replicaAddr, got, c.want)
		}
	}
}

// TestParentHashZeroIsARootBlock: llm-d-inference-sim publishes BlockStored
// in the positional layout with parent_block_hash 0 for a run from block 0
// (its KV-event sender marshals llm-d-kv-cache's BlockStored, whose parent is
// EmptyBlockHash = 0). Those runs must be indexed as roots, not dropped as
// parent_unknown.
func TestParentHashZeroIsARootBlock(t *testing.T) {
	pub := newPublisher(t, "", 10)
	h := start(t, baseConfig(poolConfig("p", keysTokens, replicaSpec{name: "sim", events: pub.Endpoint()})))
	waitSubscribed(t, pub)
	tokens := []any{}
	for _, tok := range promptTokens[:8] {
		tokens = append(tokens, tok)
	}
	// [tag, block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium, lora_name, extra_keys]
	simStored := []any{"BlockStored", []any{uint64(0xa1), uint64(0xa2)}, uint64(0), tokens, 4, nil, "GPU", nil, nil}
	publish(t, pub, enc(t, []any{1767225600.25, []any{simStored}, 0}))
	waitFor(t, "the batch", func() bool { return h.status("sim").Batches == 1 })
	if got := h.held("p", "sim", tokenKeys(t, "p", promptTokens[:8], blockhash.RequestKeys{})); got != 2 {
		t.Errorf("%d blocks held, want 2 (parent 0 is no parent)", got)
	}
	if n := h.status("sim").ParentUnknown; n != 0 {
		t.Errorf("%d runs counted parent_unknown", n)
	}
}

// bindModeEngineAndForger starts ingest bound (bind mode) for one engine
// "a" publishing under topic "engine-a", with a replay endpoint when
// withReplay, dials that engine in, and dials a stranger's publisher that
// can send frames under any topic.
func bindModeEngineAndForger(t *testing.T, withReplay bool) (*harness, *vllmzmq.Publisher, zmq4.Socket) {
	t.Helper()
	bind, replay := freeEndpoint(t), ""
	if withReplay {
		replay = freeEndpoint(t)
	}
	cfg := baseConfig(poolConfig("p", keysTokens, replicaSpec{name: "a", topic: "engine-a", replay: replay}))
	cfg.Settings.Bind = bind
	h := start(t, cfg)
	var engine *vllmzmq.Publisher
	waitFor(t, "the engine dials", func() bool {
		var err error
		engine, err = vllmzmq.DialPublisher(bind, replay, "engine-a", 100)
		return err == nil
	})
	t.Cleanup(func() { engine.Close() })
	waitSubscribed(t, engine)
	forger := zmq4.NewPub(t.Context(), zmtpcap.Quiet)
	t.Cleanup(func() { forger.Close() })
	if err := forger.Dial(bind); err != nil {
		t.Fatal(err)
	}
	return h, engine, forger
}

// forgeJump has forger send the engine's topic with seq 2^40 (the LoRA
// batch) until ingest drops it as a jump, then has the engine publish its
// next batch (the decode step) and checks that batch is applied and the
// forged one's blocks are not held.
func forgeJump(t *testing.T, h *harness, engine *vllmzmq.Publisher, forger zmq4.Socket, st [][]byte) {
	t.Helper()
	waitFor(t, "the forged batch dropped", func() bool {
		_ = forger.Send(zmq4.NewMsgFrom([]byte("engine-a"), binary.BigEndian.AppendUint64(nil, 1<<40), st[stepLoRA]))
		return h.counter(metricSeqJumps) >= 1
	})
	publish(t, engine, st[stepDecode])
	waitFor(t, "the engine's next batch", func() bool {
		return h.held("p", "a", tokenKeys(t, "p", promptTokens, blockhash.RequestKeys{})) == 3
	})
	if got := h.held("p", "a", tokenKeys(t, "p", promptTokens[:8], loraKeys)); got != 0 {
		t.Errorf("the forged batch's %d blocks are held", got)
	}
}

// TestForgedSequenceJumpIsDroppedAndCounted: a peer that reaches the bound
// socket and sends the engine's topic with seq 2^40 is not applied (the
// engine's replay buffer does not have it) and does not make the engine's
// next real batch look already applied.
func TestForgedSequenceJumpIsDroppedAndCounted(t *testing.T) {
	st := steps(t)
	h, engine, forger := bindModeEngineAndForger(t, true)
	publish(t, engine, st[stepPrompt])
	waitFor(t, "the first batch", func() bool { return h.status("a").Batches == 1 })

	forgeJump(t, h, engine, forger, st)
	if s := h.status("a"); s.LastSeq != 1 || s.Restarts != 0 {
		t.Errorf("status %+v", s)
	}
}

// TestForgedBackwardsSeqInBindModeIsNoRestart: in bind mode a stranger's
// frame under an engine's topic with a seq at or below what the engine sent
// is not a restart unless the engine's replay confirms one; a flood of
// forged frames triggers replays at the per-rank rate only, and the
// engine's next batch is applied as usual.
func TestForgedBackwardsSeqInBindModeIsNoRestart(t *testing.T) {
	st := steps(t)
	h, engine, forger := bindModeEngineAndForger(t, true)
	publish(t, engine, st[stepPrompt], st[stepDecode])
	keys := tokenKeys(t, "p", promptTokens, blockhash.RequestKeys{})
	waitFor(t, "the engine's batches", func() bool { return h.held("p", "a", keys) == 3 })

	waitFor(t, "a forged backwards seq handled", func() bool {
		_ = forger.Send(zmq4.NewMsgFrom([]byte("engine-a"), binary.BigEndian.AppendUint64(nil, 0), st[stepLoRA]))
		return h.counter(metricUnverified, "reason", unverifiedRestart) >= 1 || h.counter(metricRestarts) >= 1
	})
	if n := h.counter(metricRestarts); n != 0 {
		t.Fatalf("a forged backwards seq restarted the replica (%v restarts)", n)
	}
	replaysBefore := h.counter(metricReplays, "outcome", "requested")
	began := time.Now()
	for i := range 200 {
		seq := []uint64{0, 1, 5, 1 << 40}[i%4]
		_ = forger.Send(zmq4.NewMsgFrom([]byte("engine-a"), binary.BigEndian.AppendUint64(nil, seq), st[stepLoRA]))
	}
	// Of the 200, the 50 with seq 1 are duplicates of what a replay
	// delivered (dropped silently); the rest are counted, or dropped on a
	// full queue.
	waitFor(t, "the flood handled", func() bool {
		return h.counter(metricUnverified)+h.counter(metricSeqJumps)+h.counter(metricQueueDrops) >= 140
	})
	replays := h.counter(metricReplays, "outcome", "requested") - replaysBefore
	if allowed := bindCheckBurst + bindChecksPerSecond*time.Since(began).Seconds() + 1; replays > allowed {
		t.Errorf("200 forged frames forced %v replays in %s; the rate allows %.0f", replays, time.Since(began), allowed)
	}
	publish(t, engine, st[stepLoRA])
	waitFor(t, "the engine's next batch", func() bool {
		return h.held("p", "a", tokenKeys(t, "p", promptTokens[:8], loraKeys)) == 2
	})
	if s := h.status("a"); s.Restarts != 0 || h.counter(metricRestarts) != 0 {
		t.Errorf("forged frames caused %d restarts (status %+v)", s.Restarts, s)
	}
}

// TestApplierPanicIsRecoveredAndCounted: a panic while applying a batch
// (here injected before the first apply) is recovered, counted in
// kvroute_panics_total, the applier restarts, and replay fills the batch it
// lost.
func TestApplierPanicIsRecoveredAndCounted(t *testing.T) {
	st := steps(t)
	pub := newPublisher(t, "", 10)
	var once sync.Once
	logs := &logbuf.Buffer{}
	h := start(t, baseConfig(poolConfig("p", keysTokens, replicaSpec{name: "r0", events: pub.Endpoint(), replay: pub.ReplayEndpoint()})),
		func(m *Manager) {
			m.log = slog.New(slog.NewTextHandler(logs, nil))
			m.tuning.beforeApply = func() { once.Do(func() { panic("injected SECRET-PROMPT") }) }
		})
	before := h.counter(panics.MetricName, "component", compApplier)
	waitSubscribed(t, pub)
	publish(t, pub, st[stepPrompt], st[stepDecode])
	waitFor(t, "the applier recovers", func() bool { return h.counter(panics.MetricName, "component", compApplier) == before+1 })
	if l := logs.String(); strings.Contains(l, "SECRET") || !strings.Contains(l, "panic_type=string") {
		t.Errorf("the panic's log line must name its type, never its value:\n%s", l)
	}
	publish(t, pub, st[stepLoRA])
	waitFor(t, "all blocks", func() bool {
		return h.held("p", "r0", tokenKeys(t, "p", promptTokens, blockhash.RequestKeys{})) == 3
	})
}

// TestLargeBatchDoesNotPinDecodeBuffers: after a batch of 65,536 blocks the
// applier's decode and key buffers are dropped at the next batch instead of
// staying at their largest for the life of the process.
func TestLargeBatchDoesNotPinDecodeBuffers(t *testing.T) {
	st := steps(t)
	pub := newPublisher(t, "", 10)
	h := start(t, baseConfig(poolConfig("p", keysEngine, replicaSpec{name: "r0", events: pub.Endpoint()})))
	waitSubscribed(t, pub)
	const blocks = 1 << 16
	hashes, tokens := make([]any, blocks), make([]any, 4*blocks)
	for i := range hashes {
		hashes[i] = uint64(i + 1)
	}
	for i := range tokens {
		tokens[i] = uint32(i % 50000)
	}
	big := enc(t, []any{1.5, []any{kv{"type", "BlockStored", "block_hashes", hashes, "parent_block_hash", nil,
		"token_ids", tokens, "block_size", 4}}, 0})
	publish(t, pub, big)
	waitFor(t, "the big batch", func() bool { return h.status("r0").Batches == 1 })
	if st, _ := h.ix.Replica(h.rank("r0").r); st.Blocks != blocks {
		t.Fatalf("%d blocks held, want %d", st.Blocks, blocks)
	}
	publish(t, pub, st[stepPrompt])
	waitFor(t, "the small batch", func() bool { return h.status("r0").Batches == 2 })
	rs := h.rank("r0")
	if n := retainedBytes(&rs.batch); n > maxRetainedDecodeBytes {
		t.Errorf("decode buffers keep %d bytes after a small batch", n)
	}
	if n := cap(rs.keysBuf) * 8; n > maxRetainedDecodeBytes {
		t.Errorf("key buffer keeps %d bytes", n)
	}
}

// TestBindModeReplaysIdleEnginesAtStart: in bind mode an engine that holds
// blocks but publishes nothing is asked for its replay buffer when kvroute
// starts, and the request is retried until the engine answers.
func TestBindModeReplaysIdleEnginesAtStart(t *testing.T) {
	st := steps(t)
	idle := newPublisher(t, "engine-a", 10) // its live PUB is never connected: an idle engine
	idle.Skip(st[stepPrompt])
	late := freeEndpoint(t) // an engine whose replay socket comes up after kvroute
	cfg := baseConfig(poolConfig("p", keysTokens,
		replicaSpec{name: "a", topic: "engine-a", replay: idle.ReplayEndpoint()},
		replicaSpec{name: "b", topic: "engine-b", replay: late}))
	cfg.Settings.Bind = freeEndpoint(t)
	h := start(t, cfg)
	waitFor(t, "the idle engine's blocks", func() bool {
		return h.held("p", "a", tokenKeys(t, "p", promptTokens[:8], blockhash.RequestKeys{})) == 2
	})
	lateEngine, err := vllmzmq.NewPublisher(freeEndpoint(t), late, "engine-b", 10)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lateEngine.Close() })
	lateEngine.Skip(st[stepLoRA])
	waitFor(t, "the late engine's blocks", func() bool {
		return h.held("p", "b", tokenKeys(t, "p", promptTokens[:8], loraKeys)) == 2
	})
}

// TestDeadEngineIsUnroutableAndItsBlocksDropped: when an engine's event
// stream ends (the process exited) the replica stops being routable at once
// and the blocks the dead process held are dropped; a new engine on the same
// endpoint is routable again and re-indexed.
func TestDeadEngineIsUnroutableAndItsBlocksDropped(t *testing.T) {
	st := steps(t)
	pub := newPublisher(t, "", 10)
	h := start(t, baseConfig(poolConfig("p", keysTokens, replicaSpec{name: "r0", events: pub.Endpoint(), replay: pub.ReplayEndpoint()})))
	waitSubscribed(t, pub)
	publish(t, pub, st[stepPrompt])
	prompt := tokenKeys(t, "p", promptTokens[:8], blockhash.RequestKeys{})
	waitFor(t, "the blocks", func() bool { return h.held("p", "r0", prompt) == 2 })
	pub.Close()
	waitFor(t, "unroutable", func() bool { s, _ := h.ix.Replica(h.rank("r0").r); return !s.Healthy })
	waitFor(t, "blocks dropped", func() bool { s, _ := h.ix.Replica(h.rank("r0").r); return s.Blocks == 0 })
	if got := h.counter(metricUnroutable, "reason", downStreamEnded); got != 1 {
		t.Errorf("%v stream ends counted, want 1", got)
	}
	again, err := vllmzmq.NewPublisher(pub.Endpoint(), pub.ReplayEndpoint(), "", 10)
	if err != nil {
		t.Skipf("SKIP: the old ports were taken meanwhile: %v", err)
	}
	t.Cleanup(func() { again.Close() })
	waitSubscribed(t, again)
	publish(t, again, st[stepPrompt])
	waitFor(t, "routable and re-indexed", func() bool {
		s, _ := h.ix.Replica(h.rank("r0").r)
		return s.Healthy && h.held("p", "r0", prompt) == 2
	})
}

// startTimeMetrics serves a /metrics page with the given
// process_start_time_seconds (as prometheus_client's process collector);
// 0 means the engine is down (503), as between a process's death and its
// successor's start.
func startTimeMetrics(t testing.TB, start *atomic.Int64) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if start.Load() == 0 {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(w, "# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds %d.25\n%s", start.Load(), "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m-p\"} 0\n")
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// boundConfig is one replica "a" (topic engine-a) whose batches come
// through the bind-mode socket at a free endpoint, bind.
func boundConfig(t *testing.T) (cfg *testConfig, bind string) {
	bind = freeEndpoint(t)
	cfg = baseConfig(poolConfig("p", keysTokens, replicaSpec{name: "a", topic: "engine-a"}))
	cfg.Settings.Bind = bind
	return cfg, bind
}

// startTimeRank starts ingest for one replica without replay whose
// /metrics reports a process start time the test moves, scraped every
// 20 ms, and waits for its subscription.
func startTimeRank(t *testing.T) (*harness, *vllmzmq.Publisher, *atomic.Int64) {
	startTime := new(atomic.Int64)
	startTime.Store(1767225600)
	pub := newPublisher(t, "", 100)
	cfg := baseConfig(poolConfig("p", keysTokens, replicaSpec{name: "r0", events: pub.Endpoint(), metrics: startTimeMetrics(t, startTime)}))
	cfg.Settings.ScrapeInterval = 20 * time.Millisecond
	h := start(t, cfg)
	waitSubscribed(t, pub)
	return h, pub, startTime
}

// TestRestartPastTheOldSeqIsDetected: the engine restarts and publishes
// past the old process's last seq before kvroute reconnects. The replay from
// last+1 used to pass for a continuation: the old blocks stayed held, the new
// process's first batch was never applied and restarts stayed 0.
func TestRestartPastTheOldSeqIsDetected(t *testing.T) {
	st := steps(t)
	empty := enc(t, []any{1.5, []any{}, 0})
	var startTime atomic.Int64
	startTime.Store(1767225600)
	pub := newPublisher(t, "", 100)
	ep, rep := pub.Endpoint(), pub.ReplayEndpoint()
	cfg := baseConfig(poolConfig("p", keysTokens, replicaSpec{name: "r0", events: ep, replay: rep, metrics: startTimeMetrics(t, &startTime)}))
	cfg.Settings.ScrapeInterval = 20 * time.Millisecond
	h := start(t, cfg)
	waitSubscribed(t, pub)
	publish(t, pub, st[stepPrompt], st[stepDecode])
	prompt := tokenKeys(t, "p", promptTokens, blockhash.RequestKeys{})
	waitFor(t, "the old process's blocks", func() bool { return h.held("p", "r0", prompt) == 3 })

	old := startTime.Swap(0)
	pub.Close()
	pub2, err := vllmzmq.NewPublisher(ep, rep, "", 100)
	if err != nil {
		t.Skipf("SKIP: the old ports were taken meanwhile: %v", err)
	}
	t.Cleanup(func() { pub2.Close() })
	startTime.Store(old + 60)
	pub2.Skip(st[stepLoRA]) // seq 0, published before kvroute reconnected
	for range 3 {
		pub2.Skip(empty) // seqs 1..3: past the old process's last seq (1)
	}
	waitSubscribed(t, pub2)
	publish(t, pub2, empty)
	waitFor(t, "the new process's blocks", func() bool { return h.held("p", "r0", tokenKeys(t, "p", promptTokens[:8], loraKeys)) == 2 })
	waitFor(t, "the restart counted", func() bool { return h.mgr.Status()[0].Restarts >= 1 })
	if got := h.held("p", "r0", prompt); got != 0 {
		t.Errorf("the old process's %d blocks are still held", got)
	}
}

// TestStartTimeChangeDropsBlocksWhenTheStreamNeverEnded: a new
// process_start_time_seconds with no stream end seen (a connection left
// hanging) drops the old process's blocks and counts a restart.
func TestStartTimeChangeDropsBlocksWhenTheStreamNeverEnded(t *testing.T) {
	st := steps(t)
	h, pub, startTime := startTimeRank(t)
	publish(t, pub, st[stepPrompt])
	prompt := tokenKeys(t, "p", promptTokens[:8], blockhash.RequestKeys{})
	waitFor(t, "the blocks", func() bool { return h.held("p", "r0", prompt) == 2 })
	waitFor(t, "a first start time", func() bool { return h.counter(metricScrapes, "outcome", "ok") >= 2 })
	startTime.Add(60)
	waitFor(t, "the restart", func() bool { return h.mgr.Status()[0].Restarts == 1 })
	if got := h.held("p", "r0", prompt); got != 0 {
		t.Errorf("%d old blocks held", got)
	}
}

// TestStartTimeFlippingIsRateLimited: whoever answers a replica's /metrics
// can change process_start_time_seconds at every scrape. The first change
// with no stream end seen drops the rank's blocks (a restart); further
// changes within startTimeRestartEvery keep them and are counted instead
// of clearing the replica at every scrape.
func TestStartTimeFlippingIsRateLimited(t *testing.T) {
	st := steps(t)
	h, pub, startTime := startTimeRank(t)
	waitFor(t, "a first start time", func() bool { return h.counter(metricScrapes, "outcome", "ok") >= 2 })
	startTime.Add(60)
	waitFor(t, "the first restart", func() bool { return h.mgr.Status()[0].Restarts == 1 })
	// A scrape after the drop, so the next change is the new process's.
	scrapes := h.counter(metricScrapes, "outcome", "ok")
	waitFor(t, "a scrape after the restart", func() bool { return h.counter(metricScrapes, "outcome", "ok") >= scrapes+2 })
	publish(t, pub, st[stepPrompt])
	prompt := tokenKeys(t, "p", promptTokens[:8], blockhash.RequestKeys{})
	waitFor(t, "the blocks", func() bool { return h.held("p", "r0", prompt) == 2 })
	for range 5 {
		startTime.Add(60)
		scrapes := h.counter(metricScrapes, "outcome", "ok")
		waitFor(t, "a scrape after the change", func() bool { return h.counter(metricScrapes, "outcome", "ok") >= scrapes+2 })
	}
	if got := h.counter(metricRestartsKept); got != 5 {
		t.Errorf("%s %g, want 5", metricRestartsKept, got)
	}
	if got := h.held("p", "r0", prompt); got != 2 {
		t.Errorf("%d of 2 blocks held after start-time flips within %v", got, startTimeRestartEvery)
	}
	if got := h.mgr.Status()[0].Restarts; got != 1 {
		t.Errorf("%d restarts counted, want 1", got)
	}
}

// TestUnconfirmedHugeJumpWithoutReplayIsDropped: with no replay to check
// against, a jump of more than maxSeqJump is taken only when the next batch
// continues it; a lone forged seq 2^40 is dropped and counted.
func TestUnconfirmedHugeJumpWithoutReplayIsDropped(t *testing.T) {
	st := steps(t)
	h, engine, forger := bindModeEngineAndForger(t, false)
	publish(t, engine, st[stepPrompt])
	waitFor(t, "the first batch", func() bool { return h.status("a").Batches == 1 })
	forgeJump(t, h, engine, forger, st)
}
