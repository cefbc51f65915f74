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
	"github.com/kvroute/kvroute/config"
	"github.com/kvroute/kvroute/index"
	"github.com/kvroute/kvroute/ingest/vllmevent"
)

// Options configures a Manager.
type Options struct {
	Config     *config.Config
	Index      *index.Index
	Logger     *slog.Logger          // nil → slog.Default()
	Registerer prometheus.Registerer // nil → no metrics registered
	Now        func() time.Time      // nil → time.Now
}

// Manager runs the subscribers and scrapers of every configured replica.
type Manager struct {
	cfg    *config.Config
	ix     *index.Index
	log    *slog.Logger
	now    func() time.Time
	m      *metrics
	pools  []*poolState
	ranks  []*rankState
	httpc  *http.Client
	tuning tuning

	// maxMessageBytes caps every ZeroMQ message and frame (zmtp.go);
	// limits holds the capped sockets' limit per socket kind.
	maxMessageBytes int64
	limits          map[string]*frameLimit

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
	cfg       *config.Pool
	id        index.PoolID
	algo      blockhash.Algorithm // zero when the name does not parse
	learnedBS atomic.Int64
	mu        sync.Mutex
	keyer     atomic.Pointer[blockhash.TokenKeyer]
	engine    atomic.Pointer[blockhash.Engine]
}

// New checks the config against the index (every pool and replica rank must
// be registered) and prepares the subscribers; nothing runs until Run.
func New(opts Options) (*Manager, error) {
	if opts.Config == nil || opts.Index == nil {
		return nil, errors.New("ingest: Config and Index are required")
	}
	m := &Manager{
		cfg: opts.Config, ix: opts.Index, log: opts.Logger, now: opts.Now,
		m: newMetrics(opts.Registerer), tuning: defaultTuning,
		topicCache: map[string][]*rankState{},
	}
	if m.log == nil {
		m.log = slog.Default()
	}
	if m.now == nil {
		m.now = time.Now
	}
	m.httpc = &http.Client{Timeout: max(m.cfg.Ingest.ScrapeTimeout.Std(), time.Millisecond)}
	m.maxMessageBytes = int64(m.cfg.Ingest.MaxMessageBytes)
	if m.maxMessageBytes <= 0 {
		m.maxMessageBytes = config.DefaultMaxMessageBytes
	}
	m.limits = map[string]*frameLimit{}
	for _, kind := range []string{sockBind, sockEvents, sockReplay} {
		m.limits[kind] = m.frameLimit(kind)
	}
	for i := range m.cfg.Pools {
		pc := &m.cfg.Pools[i]
		pid, ok := m.ix.PoolByName(pc.Name)
		if !ok {
			return nil, fmt.Errorf("ingest: pool %s is not registered in the index", pc.Name)
		}
		ps := &poolState{cfg: pc, id: pid}
		if a, err := blockhash.ParseAlgorithm(pc.Hash.Algorithm); err == nil {
			ps.algo = a
		}
		m.pools = append(m.pools, ps)
		byName := map[string]index.Replica{}
		for _, st := range m.ix.Replicas(pid) {
			byName[st.Name] = st.Replica
		}
		known := map[string]bool{}
		for j := range pc.Replicas {
			rc := &pc.Replicas[j]
			for rank := 0; rank < max(rc.DataParallelSize, 1); rank++ {
				name := rc.RankName(rank)
				r, ok := byName[name]
				if !ok {
					return nil, fmt.Errorf("ingest: pool %s: replica %s is not registered in the index", pc.Name, name)
				}
				known[name] = true
				rs, err := m.newRank(ps, rc, rank, r)
				if err != nil {
					return nil, err
				}
				m.ranks = append(m.ranks, rs)
			}
		}
		// Replicas the index holds but the config no longer names are cleared.
		for name, r := range byName {
			if !known[name] {
				m.ix.Clear(r)
				m.log.Info("ingest: cleared replica no longer in the config", "pool", pc.Name, "replica", name)
			}
		}
	}
	return m, nil
}

func (m *Manager) newRank(ps *poolState, rc *config.Replica, rank int, r index.Replica) (*rankState, error) {
	rs := &rankState{
		mgr: m, pool: ps, cfg: rc, rank: rank, name: rc.RankName(rank), r: r,
		queue: make(chan liveBatch, max(m.cfg.Ingest.QueueSize, 1)),
		wake:  make(chan struct{}, 1),
		dec:   vllmevent.NewDecoder(),
	}
	rs.met = m.m.forRank(ps.cfg.Name, rs.name)
	rs.keys = newKeyMap(min(m.tuning.keyMapCap, int(m.ix.MaxEntries())), m.ix.AccountAliases)
	var err error
	if rc.Events != "" && m.cfg.Ingest.Bind == "" {
		if rs.events, err = offsetEndpoint(rc.Events, rank); err != nil {
			return nil, fmt.Errorf("ingest: pool %s replica %s events: %w", ps.cfg.Name, rs.name, err)
		}
	}
	if rc.Replay != "" {
		if rs.replay, err = offsetEndpoint(rc.Replay, rank); err != nil {
			return nil, fmt.Errorf("ingest: pool %s replica %s replay: %w", ps.cfg.Name, rs.name, err)
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
	if m.cfg.Ingest.Bind != "" {
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
	if iv := m.cfg.Ingest.ScrapeInterval.Std(); iv > 0 {
		for _, sc := range m.scrapers() {
			wg.Go(func() { m.supervise(ctx, compScraper, func() { sc.loop(ctx, iv) }) })
		}
	}
	if iv := m.cfg.Ingest.HealthInterval.Std(); iv > 0 {
		for _, pr := range m.probers() {
			wg.Go(func() { m.supervise(ctx, compProber, func() { pr.loop(ctx, iv) }) })
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
		if ps.cfg.Name == pool {
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
	return m.now().Sub(st.LoadAt) <= max(3*m.cfg.Ingest.ScrapeInterval.Std(), 5*time.Second)
}

func (ps *poolState) blockSize() int {
	if ps.cfg.BlockSize > 0 {
		return ps.cfg.BlockSize
	}
	return int(ps.learnedBS.Load())
}

// learnBlockSize records the engines' block size when the config leaves it
// to them; the first value wins.
func (ps *poolState) learnBlockSize(bs int) bool {
	if ps.cfg.BlockSize > 0 || bs <= 0 {
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
	k, err := blockhash.NewTokenKeyer(ps.cfg.Name, bs)
	if err != nil {
		return nil
	}
	ps.keyer.Store(k)
	return k
}

// hashEngine returns the pool's vLLM hasher for the self-check, nil when no
// seed is configured (vLLM's root hash is then random per process).
func (ps *poolState) hashEngine(bs int) *blockhash.Engine {
	if ps.cfg.Hash.Seed == nil || ps.algo == 0 {
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
	e, err := blockhash.NewEngine(ps.algo, ps.cfg.Hash.Seed, bs)
	if err != nil {
		return nil
	}
	ps.engine.Store(e)
	return e
}
