package ingest

// sequencer decides, for one publisher's stream, what happens to each live
// batch: apply it, replay what it skipped, confirm or refuse a restart, or
// drop it with a reason. It does no I/O and reads no clock: the rank's
// applier feeds it events (a live batch, the batches and end of a replay
// reply, the answer to a rate check or a restart probe, a new connection,
// an engine restart) and performs the actions it returns, in order
// (sequencer_test.go tables them). A returned list ends with at most one
// request (actReplay, actCheck, actProbe); its answer is the next event.
type sequencer struct {
	seqState
	bound     bool // live batches come through the shared bind-mode socket
	canReplay bool // the rank has a replay endpoint

	// The live batch in progress and where its handling waits.
	stage   seqStage
	cur     uint64 // its seq
	run     *replayRun
	runUpTo uint64 // the run's expectUpTo
}

// seqStage is what an answer continues.
type seqStage uint8

const (
	stageNone           seqStage = iota
	stageTopicRestarted          // the restart replay after a topic change
	stageFirstContact            // the first-contact replay
	stageConfirmCheck            // may a replay check a backwards seq?
	stageConfirmProbe            // the probe that checks a backwards seq
	stageRestarted               // the restart replay after a confirmed backwards seq
	stageNothingCheck            // may a replay fetch what precedes the first batch?
	stageNothingReplay           // the replay of what precedes the first batch
	stageGapCheck                // may a replay fill the gap?
	stageGapReplay               // the replay that fills the gap
)

// seqEventKind is what happened.
type seqEventKind uint8

const (
	evLive        seqEventKind = iota // a live batch: topic, seq
	evConnected                       // the reader (re)connected
	evQuiet                           // the queue emptied after a batch was dropped on a full queue
	evRetry                           // bind mode: the first-contact retry is due
	evReplayBatch                     // one batch of a replay reply: seq
	evReplayEnd                       // the replay reply ended: ok when its end marker came
	evChecked                         // the answer to actCheck: ok when the rate allows a check
	evProbed                          // the answer to actProbe: ok when it completed; top, saw: the highest seq it saw, if any
	evEngineReset                     // the replica's blocks were dropped for the engine's end or restart
)

// seqEvent is one input to the sequencer.
type seqEvent struct {
	kind  seqEventKind
	topic string
	seq   uint64
	ok    bool
	top   uint64 // evProbed: the highest seq the probe saw
	saw   bool   // evProbed: it saw one
}

// seqActKind is what the applier is to do.
type seqActKind uint8

const (
	actApply      seqActKind = iota // apply batch seq (the live one, or with replayed the reply's)
	actReplay                       // request: fetch a replay from seq; upTo > seq means [seq, upTo) is known to exist
	actReplayDone                   // a replay ended: count its outcome
	actCheck                        // request: consult the rank's check rate
	actProbe                        // request: fetch a replay from seq only to see its seqs, applying nothing
	actDrop                         // drop the live batch for reason
	actReset                        // the publisher restarted: drop the replica's blocks, count the restart
	actGap                          // count a gap before the live batch
	actPartial                      // the replica's index is partial
)

// dropReason says why a live batch was not applied.
type dropReason uint8

const (
	dropReplayed     dropReason = iota // a replay applied it already
	dropApplied                        // a replay this batch triggered applied it
	dropThrottled                      // it needed a replay check over the check rate
	dropUnconfirmed                    // its seq went backwards and the engine does not confirm a restart
	dropNotBuffered                    // it jumps past the engine's replay buffer
	dropJumpTooLarge                   // it jumps past maxSeqJump with nothing to confirm it
)

// replayOutcome is how a replay ended.
type replayOutcome uint8

const (
	outcomeComplete replayOutcome = iota
	outcomePartial
	outcomeFailed
)

// seqAction is one output of the sequencer.
type seqAction struct {
	kind     seqActKind
	seq      uint64 // the batch; a replay's or probe's start
	upTo     uint64 // actReplay: expectUpTo
	last     uint64 // actDrop, actReset: the last applied seq then
	replayed bool   // actApply: a replay reply's batch
	why      dropReason
	topic    bool // actReset: the topic changed
	// actReplayDone:
	end     uint64
	jumps   int
	outcome replayOutcome
}

func newSequencer(bound, canReplay bool) sequencer {
	return sequencer{bound: bound, canReplay: canReplay}
}

// reset forgets the sequence (a new episode of the engine); the topic stays.
func (q *sequencer) reset() {
	q.seqState = seqState{topic: q.topic, haveTopic: q.haveTopic}
}

// step takes one event and returns what to do.
func (q *sequencer) step(ev seqEvent) []seqAction {
	switch ev.kind {
	case evLive:
		return q.live(ev.topic, ev.seq)
	case evConnected:
		q.stage = stageNone
		q.haveLive = false
		if !q.canReplay {
			return nil
		}
		q.initialDone = true
		return q.replay(q.resumeFrom(), 0, stageNone)
	case evQuiet:
		q.stage = stageNone
		if !q.have || !q.canReplay {
			return nil
		}
		return q.replay(q.last+1, 0, stageNone)
	case evRetry:
		if q.have || !q.canReplay || !q.bound {
			return nil
		}
		return q.step(seqEvent{kind: evConnected})
	case evReplayBatch:
		if q.run != nil && q.run.next(ev.seq) {
			return []seqAction{{kind: actApply, seq: ev.seq, replayed: true}}
		}
		return nil
	case evReplayEnd:
		return q.replayEnded(ev.ok)
	case evChecked:
		return q.checked(ev.ok)
	case evProbed:
		return q.probed(ev)
	case evEngineReset:
		q.stage = stageNone
		q.reset()
	}
	return nil
}

// live starts handling a live batch.
func (q *sequencer) live(topic string, seq uint64) []seqAction {
	q.stage, q.cur = stageNone, seq
	changed := q.haveTopic && topic != q.topic && !q.bound
	q.topic, q.haveTopic = topic, true
	if changed {
		return q.restart(true, stageTopicRestarted)
	}
	return q.firstContact()
}

// firstContact: bind mode has no connect signal, so the first batch fetches
// the buffer.
func (q *sequencer) firstContact() []seqAction {
	if !q.have && !q.initialDone && q.canReplay {
		q.initialDone = true
		return q.replay(0, 0, stageFirstContact)
	}
	return q.ordered()
}

// ordered places the batch against what was seen and applied.
func (q *sequencer) ordered() []seqAction {
	switch q.order(q.cur) {
	case liveReplayed:
		q.seenLive(q.cur)
		return q.drop(dropReplayed)
	case liveBehind:
		return q.confirmRestart()
	default:
		q.haveBack = false
	}
	return q.afterOrder()
}

// confirmRestart: a live seq at or below what was seen is the engine's
// restart in connect mode. In bind mode the engine's replay must show its
// sequence is below what kvroute saw (a restarted engine counts again from
// 0); without a replay endpoint, the next batch must continue the lower seq.
func (q *sequencer) confirmRestart() []seqAction {
	switch {
	case !q.bound:
		return q.restart(false, stageRestarted)
	case !q.canReplay:
		if q.backContinued(q.cur) {
			return q.restart(false, stageRestarted)
		}
		return q.unconfirmed()
	}
	q.stage = stageConfirmCheck
	return []seqAction{{kind: actCheck}}
}

func (q *sequencer) unconfirmed() []seqAction {
	q.haveLive = false
	return q.drop(dropUnconfirmed)
}

// restart starts the sequence over from the live batch: the replica's blocks
// go, and the new stream is fetched from its beginning; then continues.
func (q *sequencer) restart(topic bool, then seqStage) []seqAction {
	acts := []seqAction{{kind: actReset, seq: q.cur, last: q.last, topic: topic}}
	q.reset()
	q.initialDone = true
	if q.canReplay && q.cur > 0 {
		return append(acts, q.replay(0, q.cur, then)...)
	}
	return append(acts, q.resume(then, false, 0)...)
}

// afterOrder: the batch is not behind, or a restart was taken.
func (q *sequencer) afterOrder() []seqAction {
	if q.applied(q.cur) {
		q.seenLive(q.cur)
		return q.drop(dropApplied) // the restart's replay covered it
	}
	if !q.have && q.cur > 0 && q.canReplay {
		// Nothing applied yet (the first replay failed or raced the
		// engine's first batches): what came before the batch is a gap too.
		return q.check(stageNothingCheck)
	}
	return q.gap()
}

// gap replays what the batch skipped, or judges the jump without a replay.
func (q *sequencer) gap() []seqAction {
	if !q.gapBefore(q.cur) {
		return q.take()
	}
	acts := []seqAction{{kind: actGap}}
	if q.canReplay {
		return append(acts, q.check(stageGapCheck)...)
	}
	return append(acts, q.judgeJump(false)...)
}

// judgeJump: with nothing verified, believe a huge jump only when the next
// batch continues it.
func (q *sequencer) judgeJump(verified bool) []seqAction {
	if !verified && !q.takeUnverifiedJump(q.cur) {
		return q.implausible(dropJumpTooLarge)
	}
	if q.gapBefore(q.cur) {
		return append([]seqAction{{kind: actPartial}}, q.take()...)
	}
	return q.take()
}

// take applies the live batch.
func (q *sequencer) take() []seqAction {
	q.haveJump = false
	q.seenLive(q.cur)
	return []seqAction{{kind: actApply, seq: q.cur}}
}

// implausible drops a batch whose seq jumps ahead of anything the engine can
// have published: applying it would make every later real batch look
// applied. The sequence stays where it was.
func (q *sequencer) implausible(why dropReason) []seqAction {
	q.haveLive = false
	return q.drop(why)
}

func (q *sequencer) drop(why dropReason) []seqAction {
	q.stage = stageNone
	return []seqAction{{kind: actDrop, seq: q.cur, last: q.last, why: why}}
}

// check asks whether a replay may check the batch (bind mode rates them);
// connect mode goes on at once.
func (q *sequencer) check(then seqStage) []seqAction {
	if q.bound {
		q.stage = then
		return []seqAction{{kind: actCheck}}
	}
	return q.checkedAt(then)
}

func (q *sequencer) checked(ok bool) []seqAction {
	at := q.stage
	q.stage = stageNone
	if !ok {
		switch at {
		case stageConfirmCheck, stageNothingCheck, stageGapCheck:
			q.haveLive = false
			return q.drop(dropThrottled)
		}
		return nil
	}
	return q.checkedAt(at)
}

// checkedAt goes on once a check was allowed.
func (q *sequencer) checkedAt(at seqStage) []seqAction {
	switch at {
	case stageConfirmCheck:
		q.stage = stageConfirmProbe
		return []seqAction{{kind: actProbe, seq: q.cur}}
	case stageNothingCheck:
		return q.replay(0, q.cur, stageNothingReplay)
	case stageGapCheck:
		return q.replay(q.last+1, q.cur, stageGapReplay)
	}
	return nil
}

func (q *sequencer) probed(ev seqEvent) []seqAction {
	if q.stage != stageConfirmProbe {
		return nil
	}
	q.stage = stageNone
	if ev.ok && ev.saw && ev.top < q.seen() {
		return q.restart(false, stageRestarted)
	}
	return q.unconfirmed()
}

// replay requests a replay from start and says which stage its end
// continues.
func (q *sequencer) replay(start, upTo uint64, then seqStage) []seqAction {
	q.run, q.runUpTo, q.stage = q.beginReplay(start), upTo, then
	return []seqAction{{kind: actReplay, seq: start, upTo: upTo}}
}

func (q *sequencer) replayEnded(ok bool) []seqAction {
	run := q.run
	if run == nil {
		return nil
	}
	q.run = nil
	run.done(q.runUpTo)
	done := seqAction{kind: actReplayDone, seq: run.start, end: run.end, jumps: run.jumps}
	switch {
	case !ok:
		done.outcome = outcomeFailed
	case run.partial:
		done.outcome = outcomePartial
	}
	at := q.stage
	q.stage = stageNone
	return append([]seqAction{done}, q.resume(at, ok, run.end)...)
}

// resume goes on after a replay (ok, end) that stage at waited for.
func (q *sequencer) resume(at seqStage, ok bool, end uint64) []seqAction {
	switch at {
	case stageTopicRestarted:
		return q.firstContact()
	case stageFirstContact:
		return q.ordered()
	case stageRestarted:
		return q.afterOrder()
	case stageNothingReplay:
		if q.applied(q.cur) {
			q.seenLive(q.cur)
			return q.drop(dropApplied)
		}
		return q.gap()
	case stageGapReplay:
		if q.applied(q.cur) {
			q.seenLive(q.cur)
			return q.drop(dropApplied)
		}
		// The engine buffers a batch before a replay can be served, so a
		// live seq its replay does not reach was never published by it.
		if ok && end < q.cur {
			return q.implausible(dropNotBuffered)
		}
		return q.judgeJump(ok)
	}
	return nil
}
