package ingest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// group is one replica (a vLLM server) and everything ingest runs for it:
// its DP ranks' subscribers and appliers, its scraper and health prober.
// Groups come and go as the fleet changes (AddReplica, RemoveReplica).
type group struct {
	pool  *poolState
	name  string // the replica's name (Rank.ReplicaName)
	ranks []*rankState
	// cancel stops the group's goroutines; done waits for them (startGroup).
	cancel context.CancelFunc
	done   sync.WaitGroup
}

// newGroup prepares a replica's ranks (consecutive, DP rank 0 first).
func (m *Manager) newGroup(ps *poolState, ranks []Rank) (*group, error) {
	g := &group{pool: ps, name: ranks[0].ReplicaName}
	replica := m.nextReplica
	m.nextReplica++
	for _, rk := range ranks {
		rs, err := m.newRank(ps, rk, replica)
		if err != nil {
			return nil, err
		}
		g.ranks = append(g.ranks, rs)
	}
	return g, nil
}

// startGroup starts g's goroutines under Run's context. m.mu is held and
// Run has started.
func (m *Manager) startGroup(g *group) {
	ctx, cancel := context.WithCancel(m.run)
	g.cancel = cancel
	goIn := func(fn func()) {
		g.done.Add(1)
		m.runWG.Go(func() { defer g.done.Done(); fn() })
	}
	for _, rs := range g.ranks {
		goIn(func() { m.supervise(ctx, compApplier, func() { rs.applyLoop(ctx) }) })
		if rs.events != "" {
			goIn(func() { m.supervise(ctx, compSubscriber, func() { rs.subscribeLoop(ctx) }) })
		}
	}
	sc := m.newScraper(g.ranks)
	if iv := m.set.ScrapeInterval; iv > 0 && sc != nil {
		goIn(func() { m.supervise(ctx, compScraper, func() { sc.loop(ctx, iv) }) })
	}
	if iv := m.set.HealthInterval; iv > 0 && sc != nil {
		if pr := m.newProber(sc); pr != nil {
			goIn(func() { m.supervise(ctx, compProber, func() { pr.loop(ctx, iv) }) })
		}
	}
}

// AddReplica starts following a replica that joined pool: ranks are its DP
// ranks (DP rank 0 first), each already registered in the index. Before Run
// it is prepared and started with the others; while Run runs it starts at
// once (subscription, first-contact replay, scraping, health probes).
func (m *Manager) AddReplica(pool string, ranks []Rank) error {
	if len(ranks) == 0 {
		return fmt.Errorf("ingest: pool %s: a replica needs at least one rank", pool)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	ps := m.pool(pool)
	if ps == nil {
		return fmt.Errorf("ingest: unknown pool %s", pool)
	}
	name := ranks[0].ReplicaName
	for i, rk := range ranks {
		if rk.ReplicaName != name || rk.DPRank != i {
			return fmt.Errorf("ingest: pool %s replica %s: ranks out of order", pool, name)
		}
		if st, ok := m.ix.Replica(rk.Replica); !ok || st.Name != rk.Name {
			return fmt.Errorf("ingest: pool %s: replica %s is not registered in the index", pool, rk.Name)
		}
	}
	if m.findGroup(ps, name) >= 0 {
		return fmt.Errorf("ingest: pool %s: replica %s is already followed", pool, name)
	}
	g, err := m.newGroup(ps, ranks)
	if err != nil {
		return err
	}
	m.groups = append(m.groups, g)
	m.publishRanks()
	if m.run != nil && m.run.Err() == nil {
		m.startGroup(g)
	}
	return nil
}

// slowRemoval is how long a removed replica's goroutines may take to stop
// before RemoveReplica says so: every wait they do watches their context.
const slowRemoval = time.Second

// RemoveReplica stops following a replica that left pool: its goroutines are
// stopped and waited for, so nothing of it writes to the index afterwards,
// and its metric series are deleted (pods come and go with new names; their
// series must not accumulate). Dropping its blocks is the index's
// RemoveReplica, which the caller does next. An unknown name is a no-op.
func (m *Manager) RemoveReplica(pool, name string) {
	m.mu.Lock()
	ps := m.pool(pool)
	i := -1
	if ps != nil {
		i = m.findGroup(ps, name)
	}
	if i < 0 {
		m.mu.Unlock()
		return
	}
	g := m.groups[i]
	m.groups = slices.Delete(m.groups, i, i+1)
	m.publishRanks()
	m.mu.Unlock()
	if g.cancel != nil {
		began := time.Now()
		g.cancel()
		g.done.Wait()
		if took := time.Since(began); took > slowRemoval {
			m.log.Warn("ingest: a removed replica's goroutines were slow to stop", "pool", pool, "replica", name, "took", took)
		}
	}
	for _, rs := range g.ranks {
		rs.keys.reset()
		rs.keys.sync() // releases its aliases from index.max_entries
		m.m.dropSeries(pool, rs.name)
	}
}

func (m *Manager) pool(name string) *poolState {
	for _, ps := range m.pools {
		if ps.in.Name == name {
			return ps
		}
	}
	return nil
}

// findGroup is the index of pool's replica name in m.groups, or -1 (m.mu).
func (m *Manager) findGroup(ps *poolState, name string) int {
	return slices.IndexFunc(m.groups, func(g *group) bool { return g.pool == ps && g.name == name })
}

// publishRanks replaces the rank list readers see and forgets the bind-mode
// topic cache, which points at ranks (m.mu).
func (m *Manager) publishRanks() {
	var all []*rankState
	for _, g := range m.groups {
		all = append(all, g.ranks...)
	}
	m.storeRanks(all)
	m.topicMu.Lock()
	clear(m.topicCache)
	m.topicMu.Unlock()
}

// storeRanks publishes the rank list and divides the index's alias budget
// among the ranks (a rank holding more than its new share sheds its older
// key-map generation at its next BlockStored).
func (m *Manager) storeRanks(all []*rankState) {
	m.aliasShare.Store(m.ix.AliasBudget() / int64(max(len(all), 1)))
	m.ranks.Store(&all)
}

// dropSeries deletes every series of one replica rank.
func (m *metrics) dropSeries(pool, replica string) {
	l := prometheus.Labels{"pool": pool, "replica": replica}
	for _, v := range []*prometheus.CounterVec{m.batches, m.events, m.blocks, m.decodeErrors, m.gaps, m.replays,
		m.restarts, m.restartsKept, m.queueDrops, m.parentUnknown, m.aliasesEvicted, m.aliasesOrphan, m.replayJumps, m.unverified, m.unroutable, m.seqJumps, m.scrapes, m.probesFailed, m.configMismatch} {
		v.DeletePartialMatch(l)
	}
	for _, v := range []*prometheus.GaugeVec{m.connected, m.lastSeq, m.lag, m.hitRate} {
		v.DeletePartialMatch(l)
	}
}
