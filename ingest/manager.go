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

	"github.com/kvroute/kvroute/internal/zmtpcap"
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
	// HealthInterval is how often each replica's /health is probed; 0
	// disables (probe.go).
	HealthInterval time.Duration
	// StallTimeout is how long a probe or scrape may go unanswered before
	// the rank is unroutable until one answers (health.go); 0 leaves only
	// ScrapeTimeout.
	StallTimeout time.Duration
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
	// Keys owns the pool's key mode, hash algorithm and seed (nil: no
	// self-check), block size and key builders. The router holds the same
	// object: when no block size is configured, ingest learns it (Learn)
	// from the engines' events or /metrics and the router keys at it.
	Keys  *blockhash.PoolKeys
	Ranks []Rank
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
	httpc  *http.Client
	tuning tuning

	// ranks is every rank, in layout order, replaced whole (copy-on-write)
	// when replicas join or leave; readers load it (allRanks).
	ranks atomic.Pointer[[]*rankState]
	// aliasShare is each rank's share of the index's alias budget
	// (keyMap.limit): the budget divided by the ranks followed now.
	aliasShare atomic.Int64
	// mu serialises replica changes and guards groups, nextReplica and run.
	mu          sync.Mutex
	groups      []*group
	nextReplica int
	// run is Run's context and wait group once Run started (nil before):
	// a replica added then starts at once.
	run   context.Context
	runWG *sync.WaitGroup

	// limits holds the capped sockets' limit per socket kind (zmtp.go).
	limits map[string]*zmtpcap.Limit

	// bind mode: topic → ranks (by DP rank), resolved lazily and cached.
	topicMu    sync.Mutex
	topicCache map[string][]*rankState
}

// tuning holds internal timings tests shorten.
type tuning struct {
	minBackoff    time.Duration
	replayTimeout time.Duration
	keyMapCap     int
	orphanSweep   time.Duration // longest an evicted block's alias waits (orphans.go)
	beforeApply   func()        // test hook: runs before each batch is applied (a slow index)
	noSelfCheck   bool          // benchmarks: random engine hashes would all mismatch
}

var defaultTuning = tuning{minBackoff: 100 * time.Millisecond, replayTimeout: 10 * time.Second, keyMapCap: 1 << 20,
	orphanSweep: time.Second}

// poolState is one pool's shared ingest state.
type poolState struct {
	in   Pool
	keys *blockhash.PoolKeys // in.Keys
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
	m.limits = map[string]*zmtpcap.Limit{}
	for _, kind := range []string{sockBind, sockEvents, sockReplay} {
		m.limits[kind] = m.frameLimit(kind)
	}
	var all []*rankState
	for _, p := range opts.Pools {
		if pid, ok := m.ix.PoolByName(p.Name); !ok || pid != p.ID {
			return nil, fmt.Errorf("ingest: pool %s is not registered in the index", p.Name)
		}
		if p.Keys == nil || p.Keys.Pool() != p.Name {
			return nil, fmt.Errorf("ingest: pool %s: Keys missing or for another pool", p.Name)
		}
		ps := &poolState{in: p, keys: p.Keys}
		ps.in.Ranks = nil // the ranks live in m.ranks
		m.pools = append(m.pools, ps)
		registered := map[index.Replica]string{}
		for _, st := range m.ix.Replicas(p.ID) {
			registered[st.Replica] = st.Name
		}
		known := map[index.Replica]bool{}
		for i := 0; i < len(p.Ranks); {
			j := i + 1
			for j < len(p.Ranks) && p.Ranks[j].DPRank != 0 && p.Ranks[j].ReplicaName == p.Ranks[i].ReplicaName {
				j++
			}
			for _, rk := range p.Ranks[i:j] {
				if name, ok := registered[rk.Replica]; !ok || name != rk.Name {
					return nil, fmt.Errorf("ingest: pool %s: replica %s is not registered in the index", p.Name, rk.Name)
				}
				known[rk.Replica] = true
			}
			g, err := m.newGroup(ps, p.Ranks[i:j])
			if err != nil {
				return nil, err
			}
			m.groups = append(m.groups, g)
			all = append(all, g.ranks...)
			i = j
		}
		// Replicas the index holds but the layout no longer names are cleared.
		for r, name := range registered {
			if !known[r] {
				m.ix.Clear(r)
				m.log.Info("ingest: cleared replica no longer in the config", "pool", p.Name, "replica", name)
			}
		}
	}
	m.storeRanks(all)
	m.ix.OnEvict(m.blocksEvicted)
	return m, nil
}

func (m *Manager) newRank(ps *poolState, rk Rank, replica int) (*rankState, error) {
	rs := &rankState{
		mgr: m, pool: ps, in: rk, replica: replica, rank: rk.DPRank, name: rk.Name, r: rk.Replica,
		queue:  make(chan liveBatch, max(m.set.QueueSize, 1)),
		wake:   make(chan struct{}, 1),
		dec:    vllmevent.NewDecoder(),
		limits: newBindLimits(),
	}
	rs.met = m.m.forRank(ps.in.Name, rs.name)
	rs.keys = newKeyMap(m.tuning.keyMapCap, func(delta int64) {
		rs.aliases.Add(delta)
		m.ix.AccountAliases(delta)
	})
	rs.keys.share = &m.aliasShare
	rs.keys.evicted = func(n int) { rs.met.aliasesEvicted.Add(float64(n)) }
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
	rs.seq = newSequencer(rs.bound(), rs.replay != "")
	return rs, nil
}

// Run starts every subscriber, applier and scraper and returns once ctx is
// done and all of them have exited. A bind-mode socket that cannot bind is
// an error returned at once. Replicas added while it runs start at once;
// Run is called once.
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
	m.mu.Lock()
	m.run, m.runWG = ctx, &wg
	for _, g := range m.groups {
		m.startGroup(g)
	}
	m.mu.Unlock()
	<-ctx.Done()
	return nil
}

// allRanks is every rank now, in layout order; the slice is never modified.
func (m *Manager) allRanks() []*rankState {
	if p := m.ranks.Load(); p != nil {
		return *p
	}
	return nil
}

// Ready reports whether every pool has at least one replica rank with a live
// event stream or fresh load data.
func (m *Manager) Ready() bool {
	ranks := m.allRanks()
	for _, ps := range m.pools {
		ok := false
		for _, rs := range ranks {
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
