package ingest

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/kvroute/kvroute/index"
	"github.com/kvroute/kvroute/ingest/vllmevent"
)

// rankState is one replica rank: one publisher's stream. Its socket reader
// (or the bind-mode reader) only enqueues; its applier goroutine owns the
// sequence state, the decoder and the key map, and does every index write.
type rankState struct {
	mgr     *Manager
	pool    *poolState
	in      Rank
	replica int // identifies the rank's replica among all ranks
	rank    int
	name    string
	r       index.Replica
	events  string // connect mode: this rank's PUB endpoint
	replay  string // this rank's ROUTER endpoint, "" without replay
	met     *rankMetrics

	queue          chan liveBatch
	wake           chan struct{}
	resync         atomic.Bool // a new connection: replay what was missed
	dropPending    atomic.Bool // the reader dropped a batch on a full queue
	connected      atomic.Bool
	queuedBytes    atomic.Int64 // payload bytes in queue
	gone           atomic.Bool  // the engine is gone: the applier drops the rank's blocks
	lastLiveAt     atomic.Int64 // unix nanos of the last live batch read
	health         health
	restartSeen    atomic.Bool  // the scraper saw a new process_start_time_seconds
	restartDrops   atomic.Int64 // drops as of the old start time's last reading
	drops          atomic.Int64 // times the applier dropped all of the rank's blocks
	orphans        orphans      // keys the index evicted, for the applier
	aliases        atomic.Int64 // the key map's entries as last synced
	gonePrev       goneEpisode  // applier-owned
	restartCounted int64        // applier-owned: the drops episode a restart was counted for

	// Applier-owned.
	dec        *vllmevent.Decoder
	batch      vllmevent.EventBatch
	seq        seqState
	keys       *keyMap
	keysBuf    []index.BlockKey
	groupKinds map[int]bool // group_idx → applied (prefix-keeping kind)
	checks     int
	limits     bindLimits
	eventBS    int // the block_size of the last BlockStored event (status copy)

	st statusBox
}

// liveBatch is one message as read from the socket.
type liveBatch struct {
	topic   string
	seq     uint64
	payload []byte
}

// enqueue hands a live message to the applier without ever blocking: a full
// queue (ingest.queue_size batches, or maxQueuedBytes of payload) drops it,
// counts it, and leaves the gap for replay to fill.
func (rs *rankState) enqueue(b liveBatch) {
	rs.lastLiveAt.Store(time.Now().UnixNano())
	n := int64(len(b.payload))
	if rs.queuedBytes.Add(n) > rs.mgr.maxQueuedBytes() {
		rs.queuedBytes.Add(-n)
		rs.met.drops.Inc()
		rs.st.update(func(s *rankStatus) { s.QueueDrops++ })
		rs.dropPending.Store(true)
		return
	}
	select {
	case rs.queue <- b:
	default:
		rs.queuedBytes.Add(-n)
		rs.met.drops.Inc()
		rs.st.update(func(s *rankStatus) { s.QueueDrops++ })
		rs.dropPending.Store(true)
	}
}

func (rs *rankState) poke() {
	select {
	case rs.wake <- struct{}{}:
	default:
	}
}

// applyLoop is the rank's applier.
func (rs *rankState) applyLoop(ctx context.Context) {
	// Bind mode has no connect signal: an engine that published before
	// kvroute started, and is idle now, is only known through its replay.
	// Until a replay succeeds or the engine's first batch arrives, retry it
	// with the reconnect backoff.
	var retry <-chan time.Time
	backoff := rs.mgr.tuning.minBackoff
	initial := func() {
		if rs.seq.have || rs.replay == "" || rs.events != "" {
			retry = nil
			return
		}
		if rs.onConnect(ctx) || rs.seq.have {
			retry = nil
			return
		}
		retry = time.After(backoff)
		backoff = min(2*backoff, max(rs.mgr.set.ReconnectMaxBackoff, rs.mgr.tuning.minBackoff))
	}
	if rs.mgr.set.Bind != "" && !rs.seq.have {
		initial()
	}
	for {
		select {
		case <-ctx.Done():
			return
		case b := <-rs.queue:
			rs.queuedBytes.Add(-int64(len(b.payload)))
			if rs.gone.Load() {
				rs.dropGone() // b belonged to the connection that ended
				continue
			}
			if rs.resync.Swap(false) {
				rs.onConnect(ctx)
			}
			rs.handleLive(ctx, b)
			retry = nil
		case <-rs.wake:
			rs.dropGone()
			rs.onEngineRestarted()
			rs.dropOrphans()
			if rs.resync.Swap(false) {
				rs.onConnect(ctx)
			}
		case <-retry:
			initial()
		}
		if len(rs.queue) == 0 && rs.dropPending.Swap(false) && rs.seq.have && rs.replay != "" {
			// The dropped batch may have been the last one for a while:
			// fetch it now rather than at the next message.
			rs.replayFrom(ctx, rs.seq.last+1, 0)
		}
	}
}

// onConnect runs when the reader (re)connected: replay what was published
// while we were away (all of the buffer on first contact).
//
// It reports whether the replay completed.
func (rs *rankState) onConnect(ctx context.Context) bool {
	rs.seq.haveLive = false
	if rs.replay == "" {
		return false
	}
	rs.seq.initialDone = true
	ok, _ := rs.replayFrom(ctx, rs.seq.resumeFrom(), 0)
	return ok
}

// handleLive applies one live batch in sequence, replaying gaps and
// detecting restarts.
func (rs *rankState) handleLive(ctx context.Context, b liveBatch) {
	rs.firstLiveAfterGone(b.seq)
	s := &rs.seq
	if s.haveTopic && b.topic != s.topic && !rs.bound() {
		rs.mgr.log.Warn("ingest: publisher topic changed; treating as a restart", "pool", rs.pool.in.Name, "replica", rs.name)
		rs.restart(ctx, b.seq)
	}
	s.topic, s.haveTopic = b.topic, true
	if !s.have && !s.initialDone && rs.replay != "" {
		// First contact (bind mode has no connect signal): fetch the buffer.
		s.initialDone = true
		rs.replayFrom(ctx, 0, 0)
	}
	switch s.order(b.seq) {
	case liveReplayed:
		s.seenLive(b.seq)
		return // already applied by a replay
	case liveBehind:
		if !rs.confirmRestart(ctx, b.seq) {
			return
		}
		rs.restart(ctx, b.seq)
	default:
		s.haveBack = false
	}
	if s.applied(b.seq) {
		s.seenLive(b.seq)
		return // the restart's replay covered it
	}
	if !s.have && b.seq > 0 && rs.replay != "" {
		// Nothing applied yet (the first replay failed or raced the
		// engine's first batches): what came before b.seq is a gap too.
		if !rs.mayCheck(b.seq) {
			return
		}
		rs.replayFrom(ctx, 0, b.seq)
		if s.applied(b.seq) {
			s.seenLive(b.seq)
			return
		}
	}
	if s.gapBefore(b.seq) {
		rs.met.gaps.Inc()
		rs.st.update(func(st *rankStatus) { st.Gaps++ })
		verified := false
		if rs.replay != "" {
			if !rs.mayCheck(b.seq) {
				return
			}
			ok, end := rs.replayFrom(ctx, s.last+1, b.seq)
			if s.applied(b.seq) {
				s.seenLive(b.seq)
				return
			}
			// The engine buffers a batch before a replay can be served, so a
			// live seq its replay does not reach was never published by it.
			if ok && end < b.seq {
				rs.implausibleJump(b.seq, "not in the engine's replay buffer")
				return
			}
			verified = ok
		}
		// Nothing to check it against: believe a huge jump only when the
		// next batch continues it.
		if !verified && !s.takeUnverifiedJump(b.seq) {
			rs.implausibleJump(b.seq, "larger than the plausible jump and not confirmed")
			return
		}
		if s.gapBefore(b.seq) {
			rs.st.update(func(st *rankStatus) { st.Partial = true })
		}
	}
	s.haveJump = false
	s.seenLive(b.seq)
	rs.applyPayload(b.seq, b.payload, false)
}

// implausibleJump drops a live batch whose seq jumps ahead of anything the
// engine can have published: applying it would make every later real batch
// look already applied. The sequence state stays where it was.
func (rs *rankState) implausibleJump(seq uint64, why string) {
	rs.met.seqJumps.Inc()
	rs.st.update(func(st *rankStatus) { st.SeqJumps++ })
	rs.seq.haveLive = false
	rs.warnSeq("ingest: dropped a batch with an implausible sequence jump", "seq", seq, "last_seq", rs.seq.last, "reason", why)
}

// restart handles a publisher that started over: forget the replica's
// blocks and sequence, then resync from the new stream's beginning.
func (rs *rankState) restart(ctx context.Context, seq uint64) {
	rs.mgr.log.Info("ingest: publisher restarted; clearing replica", "pool", rs.pool.in.Name, "replica", rs.name, "seq", seq, "last_seq", rs.seq.last)
	rs.dropAll()
	rs.countRestart("seq_backwards")
	rs.seq.initialDone = true
	if rs.replay != "" && seq > 0 {
		rs.replayFrom(ctx, 0, seq)
	}
}

// clear drops everything the replica holds in the index and the key map.
func (rs *rankState) clear() {
	rs.mgr.ix.Clear(rs.r)
	rs.keys.reset()
	clear(rs.groupKinds)
}

// replayFrom fetches buffered batches from start on and applies the new ones
// in order. expectUpTo > start means seqs [start, expectUpTo) are known to
// exist (a gap before live seq expectUpTo). When the first batch replayed is
// not start, the buffer no longer had it: the replica's index is partial.
//
// ok reports a complete replay (end marker received); end is the highest
// seq it delivered (start-1 when none).
func (rs *rankState) replayFrom(ctx context.Context, start, expectUpTo uint64) (ok bool, end uint64) {
	rs.met.replayReq.Inc()
	run := rs.seq.beginReplay(start)
	err := rs.mgr.fetchReplay(ctx, rs.replay, start, func(seq uint64, payload []byte) {
		if run.next(seq) {
			rs.applyPayload(seq, payload, true)
		}
	})
	run.done(expectUpTo)
	end, partial, jumps := run.end, run.partial, run.jumps
	if jumps > 0 {
		rs.met.replayJumps.Add(float64(jumps))
		rs.st.update(func(st *rankStatus) { st.SeqJumps += int64(jumps) })
		rs.mgr.log.Warn("ingest: skipped replayed batches whose seq does not follow the reply's previous one", "pool", rs.pool.in.Name,
			"replica", rs.name, "skipped", jumps, "start_seq", start, "end_seq", end)
	}
	switch {
	case err != nil:
		rs.met.replayFailed.Inc()
		rs.mgr.log.Warn("ingest: replay failed", "pool", rs.pool.in.Name, "replica", rs.name, "start_seq", start, "err", err)
		rs.st.update(func(st *rankStatus) {
			st.Replays++
			st.Partial = true
			st.setError(rs.mgr.now(), "replay: "+err.Error())
		})
	case partial:
		rs.met.replayPartial.Inc()
		rs.st.update(func(st *rankStatus) { st.Replays++; st.ReplaysPartial++; st.Partial = true })
	default:
		rs.met.replayOK.Inc()
		rs.st.update(func(st *rankStatus) { st.Replays++ })
	}
	return err == nil, end
}

// applyPayload decodes one batch and applies it; the seq counts as consumed
// even when the payload is malformed (it is dropped and counted, never
// partly written).
func (rs *rankState) applyPayload(seq uint64, payload []byte, replayed bool) {
	if h := rs.mgr.tuning.beforeApply; h != nil {
		h()
	}
	rs.seq.apply(seq)
	rs.met.lastSeq.Set(float64(seq))
	now := rs.mgr.now()
	defer rs.trimBuffers()
	if err := rs.dec.Decode(payload, &rs.batch); err != nil {
		rs.met.decodeErrors.Inc()
		rs.st.update(func(st *rankStatus) {
			st.DecodeErrors++
			st.LastSeq, st.HasSeq = seq, true
			st.setError(now, err.Error())
		})
		return
	}
	for i := range rs.batch.Events {
		rs.applyEvent(&rs.batch.Events[i])
	}
	if replayed {
		rs.met.replayed.Inc()
	} else {
		rs.met.live.Inc()
	}
	lag := now.Sub(time.Unix(0, int64(rs.batch.TS*1e9))).Seconds()
	rs.met.lag.Set(lag)
	rs.st.update(func(st *rankStatus) {
		st.Batches++
		st.LastSeq, st.HasSeq = seq, true
		st.LastBatchAt = now
		st.LagSeconds = lag
	})
}
