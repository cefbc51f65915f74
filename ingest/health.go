package ingest

import (
	"sync"
	"time"
)

// A replica rank is routable while none of ingest's signals says its engine
// is gone or frozen (index.SetHealthy):
//   - its event stream (connect mode) ended and has not come back;
//   - its last /metrics scrape failed, or one has been running longer than
//     Settings.StallTimeout (a stopped process accepts the connection and
//     never answers);
//   - its last load reading was invalid (NaN, ±Inf, negative);
//   - its last /health probe failed to connect, answered 5xx, or has been
//     unanswered for Settings.StallTimeout (probe.go).
//
// A stream that ends, or (bind mode, where kvroute cannot see one engine's
// connection) unhealthyAfter failed scrapes with no live batch meanwhile,
// also drop the rank's blocks: the engine that held them is gone, and a
// restarted one starts empty.

// stallAfter is how long a probe or scrape may wait before the rank is
// unroutable until it answers: Settings.StallTimeout, or the request's own
// timeout when that is sooner or stall detection is off (0).
func (m *Manager) stallAfter() time.Duration {
	if d := m.set.StallTimeout; d > 0 {
		return min(d, m.httpc.Timeout)
	}
	return m.httpc.Timeout
}

// Reasons of kvroute_ingest_unroutable_total.
const (
	downStreamEnded  = "stream_ended"
	downScrapeFailed = "scrape_failed"
	downScrapeStall  = "scrape_stalled"
	downInvalidLoad  = "invalid_load"
	downProbeFailed  = "health_failed"
	downProbeStall   = "health_stalled"
)

// health is one rank's routability, from its signals.
type health struct {
	mu         sync.Mutex
	streamDown bool
	scrapeDown bool
	probeDown  bool
}

func (h *health) routable() bool { return !h.streamDown && !h.scrapeDown && !h.probeDown }

// setStream records the event stream's state and updates the index.
func (rs *rankState) setStream(down bool) { rs.setHealth(&rs.health.streamDown, down, downStreamEnded) }

// setProbe records the last /health probe's verdict (reason when down).
func (rs *rankState) setProbe(down bool, reason string) {
	rs.setHealth(&rs.health.probeDown, down, reason)
}

// setScrape records the last scrape's verdict (reason when down).
func (rs *rankState) setScrape(down bool, reason string) {
	rs.setHealth(&rs.health.scrapeDown, down, reason)
}

func (rs *rankState) setHealth(flag *bool, down bool, reason string) {
	h := &rs.health
	h.mu.Lock()
	defer h.mu.Unlock()
	was := h.routable()
	*flag = down
	now := h.routable()
	rs.mgr.ix.SetHealthy(rs.r, now)
	if was && !now {
		rs.met.unroutable(reason).Inc()
		rs.mgr.log.Warn("ingest: replica unroutable", "pool", rs.pool.in.Name, "replica", rs.name, "reason", reason)
	} else if !was && now {
		rs.mgr.log.Info("ingest: replica routable again", "pool", rs.pool.in.Name, "replica", rs.name)
	}
}

// engineGone asks the applier to drop the rank's blocks and sequence state
// (it owns them); queued batches of the old connection are discarded.
func (rs *rankState) engineGone() {
	rs.gone.Store(true)
	rs.poke()
}

// dropGone runs on the applier when engineGone was signalled.
func (rs *rankState) dropGone() {
	if !rs.gone.Swap(false) {
		return
	}
	for {
		select {
		case b := <-rs.queue:
			rs.queuedBytes.Add(-int64(len(b.payload)))
			continue
		default:
		}
		break
	}
	rs.mgr.log.Info("ingest: engine gone; dropping its blocks", "pool", rs.pool.in.Name, "replica", rs.name, "last_seq", rs.seq.last)
	rs.gonePrev = goneEpisode{open: true, have: rs.seq.have, last: rs.seq.last}
	rs.dropAll()
	rs.st.update(func(st *rankStatus) { st.EnginesGone++ })
}

// dropAll forgets the rank's blocks and sequence: a new episode.
func (rs *rankState) dropAll() {
	rs.seq.step(seqEvent{kind: evEngineReset})
	rs.dropBlocks()
}

// dropBlocks forgets the rank's blocks (the sequencer's state is its own).
func (rs *rankState) dropBlocks() {
	rs.clear()
	rs.st.update(func(st *rankStatus) { st.Partial = false })
	rs.drops.Add(1)
}

// goneEpisode remembers, after the engine's stream ended and its blocks
// were dropped, where the old process's sequence stood, so the first live
// batch after it tells a restart (seq at or below it) from a reconnect.
type goneEpisode struct {
	open bool
	have bool
	last uint64
}

// firstLiveAfterGone classifies the first live seq after the stream ended.
func (rs *rankState) firstLiveAfterGone(seq uint64) {
	g := &rs.gonePrev
	if !g.open {
		return
	}
	g.open = false
	if g.have && seq <= g.last {
		rs.countRestart("seq_restarted")
	}
}

// engineRestarted is signalled by the scraper when the engine's
// process_start_time_seconds changed; dropsBefore is rs.drops as of the
// scrape that last saw the old start time.
func (rs *rankState) engineRestarted(dropsBefore int64) {
	rs.restartDrops.Store(dropsBefore)
	rs.restartSeen.Store(true)
	rs.poke()
}

// onEngineRestarted runs on the applier. When the old process's stream was
// seen ending since the old start time was last read, its blocks are gone
// already and what is held now is the new process's; otherwise (a reconnect
// that raced the restart, a connection left hanging) they go now.
func (rs *rankState) onEngineRestarted() {
	if !rs.restartSeen.Swap(false) {
		return
	}
	if rs.drops.Load() == rs.restartDrops.Load() {
		if !rs.mayRestartOnStartTime() {
			return
		}
		rs.mgr.log.Info("ingest: engine restarted without its stream ending here; dropping the old process's blocks", "pool", rs.pool.in.Name, "replica", rs.name, "last_seq", rs.seq.last)
		rs.dropAll()
	}
	rs.countRestart("process_start_time")
}

// countRestart counts a restart once per episode (the drops that follow
// one engine process's end).
func (rs *rankState) countRestart(signal string) {
	ep := rs.drops.Load()
	if rs.restartCounted == ep && ep > 0 {
		return
	}
	rs.restartCounted = ep
	rs.met.restarts.Inc()
	rs.st.update(func(st *rankStatus) { st.Restarts++ })
	rs.mgr.log.Info("ingest: engine restarted", "pool", rs.pool.in.Name, "replica", rs.name, "signal", signal)
}
