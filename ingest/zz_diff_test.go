package ingest

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// answers is a shared stream of scripted engine answers.
type answers struct {
	r *rand.Rand
}

func (a *answers) reply(start uint64) scriptReply {
	var seqs []uint64
	from := start
	switch a.r.IntN(6) {
	case 0: // buffer lost start
		from = start + uint64(a.r.IntN(3))
	case 1:
		if start > 0 {
			from = start - 1
		}
	}
	n := a.r.IntN(6)
	for i := 0; i < n; i++ {
		seqs = append(seqs, from+uint64(i))
	}
	if a.r.IntN(8) == 0 && len(seqs) > 0 {
		seqs = slices.Insert(seqs, a.r.IntN(len(seqs)), 900+uint64(a.r.IntN(3)))
	}
	if a.r.IntN(10) == 0 {
		seqs = append([]uint64{start + maxSeqJump + 5}, seqs...)
	}
	return scriptReply{seqs: seqs, ok: a.r.IntN(5) != 0}
}
func (a *answers) check() bool { return a.r.IntN(3) != 0 }
func (a *answers) probe(seq uint64) scriptProbe {
	return scriptProbe{top: seq + uint64(a.r.IntN(12)), saw: a.r.IntN(4) != 0, ok: a.r.IntN(5) != 0}
}

// oldRank is main's handleLive, confirmRestart, mayCheck, restart,
// replayFrom, onConnect, the quiet replay and initial(), with the I/O
// scripted and traced.
type oldRank struct {
	seq              seqState
	bound, canReplay bool
	ans              *answers
	trace            []string
}

func (o *oldRank) t(f string, a ...any) { o.trace = append(o.trace, fmt.Sprintf(f, a...)) }

func (o *oldRank) replayFrom(start, upTo uint64) (bool, uint64) {
	if upTo > 0 {
		o.t("replay from %d upto %d", start, upTo)
	} else {
		o.t("replay from %d", start)
	}
	rep := o.ans.reply(start)
	run := o.seq.beginReplay(start)
	for _, s := range rep.seqs {
		if run.next(s) {
			o.t("apply %d replayed", s)
			o.seq.apply(s)
		}
	}
	run.done(upTo)
	outcome := outcomeComplete
	if !rep.ok {
		outcome = outcomeFailed
	} else if run.partial {
		outcome = outcomePartial
	}
	o.trace = append(o.trace, traceAction(seqAction{kind: actReplayDone, seq: start, end: run.end, jumps: run.jumps, outcome: outcome}))
	return rep.ok, run.end
}

func (o *oldRank) onConnect() bool {
	o.seq.haveLive = false
	if !o.canReplay {
		return false
	}
	o.seq.initialDone = true
	ok, _ := o.replayFrom(o.seq.resumeFrom(), 0)
	return ok
}

func (o *oldRank) mayCheck(seq uint64) bool {
	if !o.bound || !o.canReplay {
		return true
	}
	o.t("check")
	if o.ans.check() {
		return true
	}
	o.seq.haveLive = false
	o.t("drop %d throttled", seq)
	return false
}

func (o *oldRank) confirmRestart(seq uint64) bool {
	if !o.bound {
		return true
	}
	s := &o.seq
	confirmed := false
	switch {
	case !o.canReplay:
		confirmed = s.backContinued(seq)
	case o.mayCheck(seq):
		o.t("probe %d", seq)
		p := o.ans.probe(seq)
		confirmed = p.ok && p.saw && p.top < s.seen()
	default:
		return false
	}
	if confirmed {
		return true
	}
	s.haveLive = false
	o.t("drop %d unconfirmed", seq)
	return false
}

func (o *oldRank) restart(seq uint64, topic bool) {
	if topic {
		o.t("reset %d last %d topic", seq, o.seq.last)
	} else {
		o.t("reset %d last %d", seq, o.seq.last)
	}
	o.seq = seqState{topic: o.seq.topic, haveTopic: o.seq.haveTopic}
	o.seq.initialDone = true
	if o.canReplay && seq > 0 {
		o.replayFrom(0, seq)
	}
}

func (o *oldRank) implausible(seq uint64, why string) {
	o.seq.haveLive = false
	o.t("drop %d %s", seq, why)
}

func (o *oldRank) handleLive(topic string, seq uint64) {
	s := &o.seq
	if s.haveTopic && topic != s.topic && !o.bound {
		o.restart(seq, true)
	}
	s.topic, s.haveTopic = topic, true
	if !s.have && !s.initialDone && o.canReplay {
		s.initialDone = true
		o.replayFrom(0, 0)
	}
	switch s.order(seq) {
	case liveReplayed:
		s.seenLive(seq)
		o.t("drop %d replayed", seq)
		return
	case liveBehind:
		if !o.confirmRestart(seq) {
			return
		}
		o.restart(seq, false)
	default:
		s.haveBack = false
	}
	if s.applied(seq) {
		s.seenLive(seq)
		o.t("drop %d applied", seq)
		return
	}
	if !s.have && seq > 0 && o.canReplay {
		if !o.mayCheck(seq) {
			return
		}
		o.replayFrom(0, seq)
		if s.applied(seq) {
			s.seenLive(seq)
			o.t("drop %d applied", seq)
			return
		}
	}
	if s.gapBefore(seq) {
		o.t("gap")
		verified := false
		if o.canReplay {
			if !o.mayCheck(seq) {
				return
			}
			ok, end := o.replayFrom(s.last+1, seq)
			if s.applied(seq) {
				s.seenLive(seq)
				o.t("drop %d applied", seq)
				return
			}
			if ok && end < seq {
				o.implausible(seq, "not-buffered")
				return
			}
			verified = ok
		}
		if !verified && !s.takeUnverifiedJump(seq) {
			o.implausible(seq, "jump-too-large")
			return
		}
		if s.gapBefore(seq) {
			o.t("partial")
		}
	}
	s.haveJump = false
	s.seenLive(seq)
	o.t("apply %d", seq)
	s.apply(seq)
}

// TestSequencerMatchesTheOldApplier drives main's logic and the sequencer
// through the same random events and answers and compares the traces.
func TestSequencerMatchesTheOldApplier(t *testing.T) {
	for c := range 200000 {
		seed := uint64(c)
		bound, canReplay := c%4 >= 2, c%2 == 1
		old := &oldRank{seq: seqState{}, bound: bound, canReplay: canReplay, ans: &answers{rand.New(rand.NewPCG(seed, 1))}}
		q := newSequencer(bound, canReplay)
		ansNew := &answers{rand.New(rand.NewPCG(seed, 1))}
		ev := rand.New(rand.NewPCG(seed, 2))
		var newTrace []string
		var steps []string
		for range 12 {
			var e seqEvent
			base := max(old.seq.last, old.seq.live)
			switch k := ev.IntN(20); {
			case k < 12:
				var s uint64
				switch ev.IntN(8) {
				case 0:
					s = uint64(ev.IntN(3))
				case 1:
					s = base + maxSeqJump + uint64(ev.IntN(3))
				case 2:
					if base > 2 {
						s = base - uint64(ev.IntN(3))
					}
				default:
					s = base + uint64(ev.IntN(4))
				}
				topic := "kv"
				if ev.IntN(15) == 0 {
					topic = "other"
				}
				e = seqEvent{kind: evLive, topic: topic, seq: s}
			case k < 14:
				e = seqEvent{kind: evConnected}
			case k < 16:
				e = seqEvent{kind: evQuiet}
			case k < 18:
				e = seqEvent{kind: evRetry}
			default:
				e = seqEvent{kind: evEngineReset}
			}
			steps = append(steps, fmt.Sprintf("%+v", e))
			// old
			switch e.kind {
			case evLive:
				old.handleLive(e.topic, e.seq)
			case evConnected:
				old.onConnect()
			case evQuiet:
				if old.seq.have && old.canReplay {
					old.replayFrom(old.seq.last+1, 0)
				}
			case evRetry:
				if !(old.seq.have || !old.canReplay || !old.bound) {
					old.onConnect()
				}
			case evEngineReset:
				old.seq = seqState{topic: old.seq.topic, haveTopic: old.seq.haveTopic}
			}
			// new
			newTrace = append(newTrace, driveAns(t, &q, ansNew, e)...)
			if !slices.Equal(old.trace, newTrace) || old.seq != q.seqState {
				t.Fatalf("case %d (bound %v replay %v) after %v:\nold %q\nnew %q\nold state %+v\nnew state %+v", c, bound, canReplay, steps, old.trace, newTrace, old.seq, q.seqState)
			}
		}
	}
}

func driveAns(t *testing.T, q *sequencer, ans *answers, ev seqEvent) []string {
	var trace []string
	acts := q.step(ev)
	for len(acts) > 0 {
		var next []seqAction
		for _, a := range acts {
			trace = append(trace, traceAction(a))
			switch a.kind {
			case actApply:
				q.apply(a.seq)
			case actReplay:
				r := ans.reply(a.seq)
				for _, seq := range r.seqs {
					for _, b := range q.step(seqEvent{kind: evReplayBatch, seq: seq}) {
						trace = append(trace, traceAction(b))
						q.apply(b.seq)
					}
				}
				next = q.step(seqEvent{kind: evReplayEnd, ok: r.ok})
			case actCheck:
				next = q.step(seqEvent{kind: evChecked, ok: ans.check()})
			case actProbe:
				p := ans.probe(a.seq)
				next = q.step(seqEvent{kind: evProbed, ok: p.ok, top: p.top, saw: p.saw})
			}
		}
		acts = next
	}
	return trace
}
