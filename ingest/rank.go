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
	seq        sequencer
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
		acts := rs.seq.step(seqEvent{kind: evRetry})
		if acts == nil {
			retry = nil
			return
		}
		if rs.perform(ctx, acts, nil) || rs.seq.have {
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
		if len(rs.queue) == 0 && rs.dropPending.Swap(false) {
			// The dropped batch may have been the last one for a while:
			// fetch it now rather than at the next message.
			rs.perform(ctx, rs.seq.step(seqEvent{kind: evQuiet}), nil)
		}
	}
}

// onConnect runs when the reader (re)connected: replay what was published
// while we were away (all of the buffer on first contact).
func (rs *rankState) onConnect(ctx context.Context) {
	rs.perform(ctx, rs.seq.step(seqEvent{kind: evConnected}), nil)
}

// handleLive applies one live batch in sequence, replaying gaps and
// detecting restarts.
func (rs *rankState) handleLive(ctx context.Context, b liveBatch) {
	rs.firstLiveAfterGone(b.seq)
	rs.perform(ctx, rs.seq.step(seqEvent{kind: evLive, topic: b.topic, seq: b.seq}), b.payload)
}

// perform does the sequencer's actions in order and answers each request
// with the event that continues it; payload is the live batch's. It reports
// whether the last replay it ran completed (end marker received).
func (rs *rankState) perform(ctx context.Context, acts []seqAction, payload []byte) (replayOK bool) {
	var replayErr error
	for len(acts) > 0 {
		var next []seqAction
		for _, a := range acts {
			switch a.kind {
			case actApply:
				rs.applyPayload(a.seq, payload, false)
			case actReplay:
				replayErr = rs.replayFrom(ctx, a.seq)
				replayOK = replayErr == nil
				next = rs.seq.step(seqEvent{kind: evReplayEnd, ok: replayOK})
			case actReplayDone:
				rs.replayDone(a, replayErr)
			case actCheck:
				next = rs.seq.step(seqEvent{kind: evChecked, ok: rs.limits.checks.Allow()})
			case actProbe:
				top, saw, err := rs.probe(ctx, a.seq)
				next = rs.seq.step(seqEvent{kind: evProbed, ok: err == nil, top: top, saw: saw})
			case actDrop:
				rs.dropped(a)
			case actReset:
				rs.restart(a)
			case actGap:
				rs.met.gaps.Inc()
				rs.st.update(func(st *rankStatus) { st.Gaps++ })
			case actPartial:
				rs.st.update(func(st *rankStatus) { st.Partial = true })
			}
		}
		acts = next
	}
	return replayOK
}

// dropped counts and reports a live batch the sequencer did not apply.
func (rs *rankState) dropped(a seqAction) {
	switch a.why {
	case dropThrottled:
		rs.met.unverified(unverifiedThrottled).Inc()
		rs.warnSeq("ingest: dropped a live batch unchecked: replay checks over their rate", "seq", a.seq, "last_seq", a.last)
	case dropUnconfirmed:
		rs.met.unverified(unverifiedRestart).Inc()
		rs.warnSeq("ingest: dropped a live batch whose seq went backwards; the engine does not confirm a restart", "seq", a.seq, "last_seq", a.last)
	case dropNotBuffered, dropJumpTooLarge:
		// Applying it would make every later real batch look applied.
		why := "not in the engine's replay buffer"
		if a.why == dropJumpTooLarge {
			why = "larger than the plausible jump and not confirmed"
		}
		rs.met.seqJumps.Inc()
		rs.st.update(func(st *rankStatus) { st.SeqJumps++ })
		rs.warnSeq("ingest: dropped a batch with an implausible sequence jump", "seq", a.seq, "last_seq", a.last, "reason", why)
	}
}

// restart handles a publisher that started over: the sequencer forgot its
// sequence; the replica's blocks go too.
func (rs *rankState) restart(a seqAction) {
	if a.topic {
		rs.mgr.log.Warn("ingest: publisher topic changed; treating as a restart", "pool", rs.pool.in.Name, "replica", rs.name)
	}
	rs.mgr.log.Info("ingest: publisher restarted; clearing replica", "pool", rs.pool.in.Name, "replica", rs.name, "seq", a.seq, "last_seq", a.last)
	rs.dropBlocks()
	rs.countRestart("seq_backwards")
}

// clear drops everything the replica holds in the index and the key map.
func (rs *rankState) clear() {
	rs.mgr.ix.Clear(rs.r)
	rs.keys.reset()
	clear(rs.groupKinds)
}

// replayFrom fetches buffered batches from start on and applies those the
// sequencer takes, in order. A nil error means the end marker came.
func (rs *rankState) replayFrom(ctx context.Context, start uint64) error {
	rs.met.replayReq.Inc()
	return rs.mgr.fetchReplay(ctx, rs.replay, start, func(seq uint64, payload []byte) {
		for _, a := range rs.seq.step(seqEvent{kind: evReplayBatch, seq: seq}) {
			if a.kind == actApply {
				rs.applyPayload(a.seq, payload, true)
			}
		}
	})
}

// replayDone counts a replay's outcome; err is its fetch's.
func (rs *rankState) replayDone(a seqAction, err error) {
	if a.jumps > 0 {
		rs.met.replayJumps.Add(float64(a.jumps))
		rs.st.update(func(st *rankStatus) { st.SeqJumps += int64(a.jumps) })
		rs.mgr.log.Warn("ingest: skipped replayed batches whose seq does not follow the reply's previous one", "pool", rs.pool.in.Name,
			"replica", rs.name, "skipped", a.jumps, "start_seq", a.seq, "end_seq", a.end)
	}
	switch a.outcome {
	case outcomeFailed:
		rs.met.replayFailed.Inc()
		rs.mgr.log.Warn("ingest: replay failed", "pool", rs.pool.in.Name, "replica", rs.name, "start_seq", a.seq, "err", err)
		rs.st.update(func(st *rankStatus) {
			st.Replays++
			st.Partial = true
			st.setError(rs.mgr.now(), "replay: "+err.Error())
		})
	case outcomePartial:
		rs.met.replayPartial.Inc()
		rs.st.update(func(st *rankStatus) { st.Replays++; st.ReplaysPartial++; st.Partial = true })
	default:
		rs.met.replayOK.Inc()
		rs.st.update(func(st *rankStatus) { st.Replays++ })
	}
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
