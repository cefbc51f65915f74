// Package ingest keeps the CacheIndex current from every vLLM replica: it
// subscribes to each engine's KV events over ZeroMQ (live PUB/SUB plus replay
// over DEALER/ROUTER), tracks sequence numbers per publisher, detects engine
// restarts, turns BlockStored/BlockRemoved/AllBlocksCleared into index writes
// under the pool's key mode, and polls each replica's Prometheus /metrics for
// load.
//
// Source of truth for the wire format: vllm/distributed/kv_events.py at
// upstream main 5ac26849 (docs/INGEST.md; vLLM's own payloads and frames are
// in testdata/vllm/vllm_kv_events.json).
package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvroute/kvroute/blockhash"
	"github.com/kvroute/kvroute/index"
	"github.com/kvroute/kvroute/ingest/vllmevent"
)

// Options configures a Manager. The caller (package server) resolves the
// pool → replica → DP-rank layout once and hands it here as Pools; ingest
// reads no config file and applies no defaults: every value is taken as
// given.
type Options struct {
	Settings   Settings
	Pools      []Pool
	Index      *index.Index
	Logger     *slog.Logger          // nil → slog.Default()
	Registerer prometheus.Registerer // nil → no metrics registered
	Now        func() time.Time      // nil → time.Now
}

// Settings tunes the subscribers and the scraper.
type Settings struct {
	// Bind, when set (e.g. tcp://0.0.0.0:5557), binds one SUB socket that
	// engines connect to; ranks are then told apart by topic.
	Bind string
	// QueueSize bounds each rank's decoded-batch queue (at least 1 is used).
	QueueSize int
	// ReconnectMaxBackoff caps the backoff between reconnects.
	ReconnectMaxBackoff time.Duration
	// ScrapeInterval is how often each replica's /metrics is read; 0 disables.
	ScrapeInterval time.Duration
	// ScrapeTimeout bounds one /metrics request.
	ScrapeTimeout time.Duration
	// MaxMessageBytes bounds one ZeroMQ message (and so each of its frames)
	// on every ingest socket; must be positive.
	MaxMessageBytes int64
}

// Pool is one pool as registered in the index, with its ranks in layout
// order (a replica's ranks consecutive, DP rank 0 first).
type Pool struct {
	Name         string
	ID           index.PoolID
	Models       []string // request model names: bind-mode topics may name one
	LoRAAdapters []string
	// BlockSize is the configured block size in tokens; 0 learns it from
	// the engines' events or /metrics.
	BlockSize int
	// EngineKeys: the index is keyed by vLLM's own block hashes, else by
	// kvroute's token keys.
	EngineKeys bool
	// Algorithm is the configured --prefix-caching-hash-algo name and Seed
	// the engines' PYTHONHASHSEED (nil: unknown, no self-check).
	Algorithm string
	Seed      *string
	Ranks     []Rank
}

// Rank is one routable engine: data-parallel rank DPRank of DPSize of the
// replica ReplicaName.
type Rank struct {
	Replica     index.Replica // its handle in the index
	Name        string        // its name in the index, logs and metrics
	ReplicaName string
	Address     string // ip:port of the replica's API server
	DPRank      int
	DPSize      int
	// The replica's endpoints as configured: ingest offsets Events and
	// Replay by DPRank (vLLM's convention, offsetEndpoint).
	Events, Replay, Topic, Metrics string
}

// Manager runs the subscribers and scrapers of every configured replica.
type Manager struct {
	set    Settings
	ix     *index.Index
	log    *slog.Logger
	now    func() time.Time
	m      *metrics
	pools  []*poolState
	ranks  []*rankState
	httpc  *http.Client
	tuning tuning

	// limits holds the capped sockets' limit per socket kind (zmtp.go).
	limits map[string]*frameLimit

	// bind mode: topic → ranks (by DP rank), resolved lazily and cached.
	topicMu    sync.Mutex
	topicCache map[string][]*rankState
}

// tuning holds internal timings tests shorten.
type tuning struct {
	minBackoff    time.Duration
	replayTimeout time.Duration
	keyMapCap     int
	beforeApply   func() // test hook: runs before each batch is applied (a slow index)
}

var defaultTuning = tuning{minBackoff: 100 * time.Millisecond, replayTimeout: 10 * time.Second, keyMapCap: 1 << 20}

// poolState is one pool's shared ingest state.
type poolState struct {
	in        Pool
	algo      blockhash.Algorithm // zero when the name does not parse
	learnedBS atomic.Int64
	mu        sync.Mutex
	keyer     atomic.Pointer[blockhash.TokenKeyer]
	engine    atomic.Pointer[blockhash.Engine]
}

// New checks the pools against the index (every pool and rank handle must
// be registered there) and prepares the subscribers; nothing runs until Run.
// Replicas the index holds in a pool but Pools does not name are cleared.
func New(opts Options) (*Manager, error) {
	if opts.Index == nil {
		return nil, errors.New("ingest: Index is required")
	}
	if opts.Settings.MaxMessageBytes <= 0 {
		return nil, fmt.Errorf("ingest: MaxMessageBytes %d must be positive", opts.Settings.MaxMessageBytes)
	}
	m := &Manager{
		set: opts.Settings, ix: opts.Index, log: opts.Logger, now: opts.Now,
		m: newMetrics(opts.Registerer), tuning: defaultTuning,
		topicCache: map[string][]*rankState{},
	}
	if m.log == nil {
		m.log = slog.Default()
	}
	if m.now == nil {
		m.now = time.Now
	}
	m.httpc = &http.Client{Timeout: max(m.set.ScrapeTimeout, time.Millisecond)}
	m.limits = map[string]*frameLimit{}
	for _, kind := range []string{sockBind, sockEvents, sockReplay} {
		m.limits[kind] = m.frameLimit(kind)
	}
	replica := 0
	for _, p := range opts.Pools {
		if pid, ok := m.ix.PoolByName(p.Name); !ok || pid != p.ID {
			return nil, fmt.Errorf("ingest: pool %s is not registered in the index", p.Name)
		}
		ps := &poolState{in: p}
		ps.in.Ranks = nil // the ranks live in m.ranks
		if a, err := blockhash.ParseAlgorithm(p.Algorithm); err == nil {
			ps.algo = a
		}
		m.pools = append(m.pools, ps)
		registered := map[index.Replica]string{}
		for _, st := range m.ix.Replicas(p.ID) {
			registered[st.Replica] = st.Name
		}
		known := map[index.Replica]bool{}
		for i, rk := range p.Ranks {
			if name, ok := registered[rk.Replica]; !ok || name != rk.Name {
				return nil, fmt.Errorf("ingest: pool %s: replica %s is not registered in the index", p.Name, rk.Name)
			}
			known[rk.Replica] = true
			if i > 0 && (rk.DPRank == 0 || rk.ReplicaName != p.Ranks[i-1].ReplicaName) {
				replica++
			}
			rs, err := m.newRank(ps, rk, replica)
			if err != nil {
				return nil, err
			}
			m.ranks = append(m.ranks, rs)
		}
		replica++
		// Replicas the index holds but the layout no longer names are cleared.
		for r, name := range registered {
			if !known[r] {
				m.ix.Clear(r)
				m.log.Info("ingest: cleared replica no longer in the config", "pool", p.Name, "replica", name)
			}
		}
	}
	return m, nil
}

func (m *Manager) newRank(ps *poolState, rk Rank, replica int) (*rankState, error) {
	rs := &rankState{
		mgr: m, pool: ps, in: rk, replica: replica, rank: rk.DPRank, name: rk.Name, r: rk.Replica,
		queue: make(chan liveBatch, max(m.set.QueueSize, 1)),
		wake:  make(chan struct{}, 1),
		dec:   vllmevent.NewDecoder(),
	}
	rs.met = m.m.forRank(ps.in.Name, rs.name)
	rs.keys = newKeyMap(m.tuning.keyMapCap)
	var err error
	if rk.Events != "" && m.set.Bind == "" {
		if rs.events, err = offsetEndpoint(rk.Events, rk.DPRank); err != nil {
			return nil, fmt.Errorf("ingest: pool %s replica %s events: %w", ps.in.Name, rs.name, err)
		}
	}
	if rk.Replay != "" {
		if rs.replay, err = offsetEndpoint(rk.Replay, rk.DPRank); err != nil {
			return nil, fmt.Errorf("ingest: pool %s replica %s replay: %w", ps.in.Name, rs.name, err)
		}
	}
	return rs, nil
}

// Run starts every subscriber, applier and scraper and returns once ctx is
// done and all of them have exited. A bind-mode socket that cannot bind is
// an error returned at once.
func (m *Manager) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	if m.set.Bind != "" {
		socks, err := m.bindSockets(ctx)
		if err != nil {
			return err
		}
		for rank, s := range socks {
			wg.Go(func() {
				defer s.Close()
				m.supervise(ctx, compBound, func() { m.readBound(ctx, s, rank) })
			})
		}
	}
	for _, rs := range m.ranks {
		wg.Go(func() { m.supervise(ctx, compApplier, func() { rs.applyLoop(ctx) }) })
		if rs.events != "" {
			wg.Go(func() { m.supervise(ctx, compSubscriber, func() { rs.subscribeLoop(ctx) }) })
		}
	}
	if iv := m.set.ScrapeInterval; iv > 0 {
		for _, sc := range m.scrapers() {
			wg.Go(func() { m.supervise(ctx, compScraper, func() { sc.loop(ctx, iv) }) })
		}
	}
	<-ctx.Done()
	return nil
}

// BlockSize returns the function that reports the pool's block size in
// tokens — configured, else learned from events or /metrics, else 0 — with
// the pool resolved once: the router calls it on every request.
func (m *Manager) BlockSize(pool string) func() int {
	for _, ps := range m.pools {
		if ps.in.Name == pool {
			return ps.blockSize
		}
	}
	return func() int { return 0 }
}

// Ready reports whether every pool has at least one replica rank with a live
// event stream or fresh load data.
func (m *Manager) Ready() bool {
	for _, ps := range m.pools {
		ok := false
		for _, rs := range m.ranks {
			if rs.pool == ps && (rs.connected.Load() || m.loadFresh(rs)) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// loadFresh: the replica's last load reading is younger than three scrape
// intervals (at least 5s).
func (m *Manager) loadFresh(rs *rankState) bool {
	st, ok := m.ix.Replica(rs.r)
	if !ok || st.LoadAt.IsZero() {
		return false
	}
	return m.now().Sub(st.LoadAt) <= max(3*m.set.ScrapeInterval, 5*time.Second)
}

func (ps *poolState) blockSize() int {
	if ps.in.BlockSize > 0 {
		return ps.in.BlockSize
	}
	return int(ps.learnedBS.Load())
}

// learnBlockSize records the engines' block size when the config leaves it
// to them; the first value wins.
func (ps *poolState) learnBlockSize(bs int) bool {
	if ps.in.BlockSize > 0 || bs <= 0 {
		return false
	}
	return ps.learnedBS.CompareAndSwap(0, int64(bs))
}

// tokenKeyer returns the pool's keyer for its block size, built once.
func (ps *poolState) tokenKeyer(bs int) *blockhash.TokenKeyer {
	if k := ps.keyer.Load(); k != nil && k.BlockSize() == bs {
		return k
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if k := ps.keyer.Load(); k != nil && k.BlockSize() == bs {
		return k
	}
	k, err := blockhash.NewTokenKeyer(ps.in.Name, bs)
	if err != nil {
		return nil
	}
	ps.keyer.Store(k)
	return k
}

// hashEngine returns the pool's vLLM hasher for the self-check, nil when no
// seed is configured (vLLM's root hash is then random per process).
func (ps *poolState) hashEngine(bs int) *blockhash.Engine {
	if ps.in.Seed == nil || ps.algo == 0 {
		return nil
	}
	if e := ps.engine.Load(); e != nil && e.BlockSize() == bs {
		return e
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if e := ps.engine.Load(); e != nil && e.BlockSize() == bs {
		return e
	}
	e, err := blockhash.NewEngine(ps.algo, ps.in.Seed, bs)
	if err != nil {
		return nil
	}
	ps.engine.Store(e)
	return e
}
