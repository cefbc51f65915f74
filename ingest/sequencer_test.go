package ingest

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
)

// engineScript answers the sequencer's requests in a table row, in order:
// each actReplay takes the next reply, each actCheck the next rate answer,
// each actProbe the next probe answer.
type engineScript struct {
	replies []scriptReply
	checks  []bool
	probes  []scriptProbe
}

type scriptReply struct {
	seqs []uint64
	ok   bool // the end marker came
}

type scriptProbe struct {
	top uint64
	saw bool
	ok  bool
}

// traceAction names an action for a table row.
func traceAction(a seqAction) string {
	switch a.kind {
	case actApply:
		if a.replayed {
			return fmt.Sprintf("apply %d replayed", a.seq)
		}
		return fmt.Sprintf("apply %d", a.seq)
	case actReplay:
		if a.upTo > 0 {
			return fmt.Sprintf("replay from %d upto %d", a.seq, a.upTo)
		}
		return fmt.Sprintf("replay from %d", a.seq)
	case actReplayDone:
		outcome := [...]string{"complete", "partial", "failed"}[a.outcome]
		s := fmt.Sprintf("replayed %d-%d %s", a.seq, a.end, outcome)
		if a.end+1 == a.seq {
			s = fmt.Sprintf("replayed %d none %s", a.seq, outcome)
		}
		if a.jumps > 0 {
			s += fmt.Sprintf(" jumps %d", a.jumps)
		}
		return s
	case actCheck:
		return "check"
	case actProbe:
		return fmt.Sprintf("probe %d", a.seq)
	case actDrop:
		return fmt.Sprintf("drop %d %s", a.seq,
			[...]string{"replayed", "applied", "throttled", "unconfirmed", "not-buffered", "jump-too-large"}[a.why])
	case actReset:
		if a.topic {
			return fmt.Sprintf("reset %d last %d topic", a.seq, a.last)
		}
		return fmt.Sprintf("reset %d last %d", a.seq, a.last)
	case actGap:
		return "gap"
	case actPartial:
		return "partial"
	}
	return fmt.Sprintf("unknown action %d", a.kind)
}

// drive feeds ev to q and performs what it returns as the applier does,
// answering requests from sc; it returns the trace.
func drive(t *testing.T, q *sequencer, sc *engineScript, ev seqEvent) []string {
	t.Helper()
	var trace []string
	acts := q.step(ev)
	for len(acts) > 0 {
		var next []seqAction
		for i, a := range acts {
			trace = append(trace, traceAction(a))
			isRequest := a.kind == actReplay || a.kind == actCheck || a.kind == actProbe
			if isRequest && i != len(acts)-1 {
				t.Fatalf("request %q is not the last action of %v", traceAction(a), acts)
			}
			switch a.kind {
			case actApply:
				q.apply(a.seq)
			case actReplay:
				if len(sc.replies) == 0 {
					t.Fatalf("unscripted %q; trace %q", traceAction(a), trace)
				}
				r := sc.replies[0]
				sc.replies = sc.replies[1:]
				for _, seq := range r.seqs {
					for _, b := range q.step(seqEvent{kind: evReplayBatch, seq: seq}) {
						trace = append(trace, traceAction(b))
						if b.kind == actApply {
							q.apply(b.seq)
						}
					}
				}
				next = q.step(seqEvent{kind: evReplayEnd, ok: r.ok})
			case actCheck:
				if len(sc.checks) == 0 {
					t.Fatalf("unscripted check; trace %q", trace)
				}
				next = q.step(seqEvent{kind: evChecked, ok: sc.checks[0]})
				sc.checks = sc.checks[1:]
			case actProbe:
				if len(sc.probes) == 0 {
					t.Fatalf("unscripted %q; trace %q", traceAction(a), trace)
				}
				p := sc.probes[0]
				sc.probes = sc.probes[1:]
				next = q.step(seqEvent{kind: evProbed, ok: p.ok, top: p.top, saw: p.saw})
			}
		}
		acts = next
	}
	return trace
}

func live(seq uint64) seqEvent { return seqEvent{kind: evLive, topic: "kv", seq: seq} }

// inOrder is a stream that applied and saw seq live on this connection.
func inOrder(seq uint64) seqState {
	return seqState{have: true, last: seq, haveLive: true, live: seq, haveTopic: true, topic: "kv", initialDone: true}
}

// TestSequencer tables the sequencer's answers: each row starts from a
// state, feeds events (the engine's replies scripted) and expects the
// actions, one line each, in order.
func TestSequencer(t *testing.T) {
	const (
		connect = false
		bind    = true
	)
	bigJump := uint64(4 + maxSeqJump + 10)
	for _, c := range []struct {
		name      string
		bound     bool
		canReplay bool
		s         seqState
		events    []seqEvent
		script    engineScript
		want      []string
		last      uint64 // the last applied seq afterwards
	}{
		{name: "live order", canReplay: true, s: inOrder(4), events: []seqEvent{live(5), live(6)},
			want: []string{"apply 5", "apply 6"}, last: 6},
		{name: "first contact on connect fetches the buffer; its last live batch is a duplicate", canReplay: true,
			events: []seqEvent{{kind: evConnected}, live(2), live(3)},
			script: engineScript{replies: []scriptReply{{seqs: []uint64{0, 1, 2}, ok: true}}},
			want: []string{"replay from 0", "apply 0 replayed", "apply 1 replayed", "apply 2 replayed", "replayed 0-2 complete",
				"drop 2 replayed", "apply 3"}, last: 3},
		{name: "first batch in bind mode fetches the buffer", bound: bind, canReplay: true, events: []seqEvent{live(0)},
			script: engineScript{replies: []scriptReply{{ok: true}}},
			want:   []string{"replay from 0", "replayed 0 none complete", "apply 0"}, last: 0},
		{name: "gap filled by replay", canReplay: true, s: inOrder(4), events: []seqEvent{live(8)},
			script: engineScript{replies: []scriptReply{{seqs: []uint64{5, 6, 7, 8}, ok: true}}},
			want: []string{"gap", "replay from 5 upto 8", "apply 5 replayed", "apply 6 replayed", "apply 7 replayed", "apply 8 replayed",
				"replayed 5-8 complete", "drop 8 applied"}, last: 8},
		{name: "gap, the buffer lost its start", canReplay: true, s: inOrder(4), events: []seqEvent{live(8)},
			script: engineScript{replies: []scriptReply{{seqs: []uint64{7, 8}, ok: true}}},
			want:   []string{"gap", "replay from 5 upto 8", "apply 7 replayed", "apply 8 replayed", "replayed 5-8 partial", "drop 8 applied"}, last: 8},
		{name: "gap, a replayed seq that does not follow is skipped", canReplay: true, s: inOrder(4), events: []seqEvent{live(7)},
			script: engineScript{replies: []scriptReply{{seqs: []uint64{5, 900, 6, 7}, ok: true}}},
			want: []string{"gap", "replay from 5 upto 7", "apply 5 replayed", "apply 6 replayed", "apply 7 replayed",
				"replayed 5-7 partial jumps 1", "drop 7 applied"}, last: 7},
		{name: "gap past the engine's buffer is a jump", canReplay: true, s: inOrder(4), events: []seqEvent{live(9), live(5)},
			script: engineScript{replies: []scriptReply{{seqs: []uint64{5, 6}, ok: true}}},
			want: []string{"gap", "replay from 5 upto 9", "apply 5 replayed", "apply 6 replayed", "replayed 5-6 complete", "drop 9 not-buffered",
				"drop 5 replayed"}, last: 6},
		{name: "gap, the replay fails: a plausible jump is taken, partial", canReplay: true, s: inOrder(4), events: []seqEvent{live(8)},
			script: engineScript{replies: []scriptReply{{ok: false}}},
			want:   []string{"gap", "replay from 5 upto 8", "replayed 5 none failed", "partial", "apply 8"}, last: 8},
		{name: "gap, the replay fails: a huge jump waits for the next batch", canReplay: true, s: inOrder(4),
			events: []seqEvent{live(bigJump), live(bigJump + 1)},
			script: engineScript{replies: []scriptReply{{ok: false}, {ok: false}}},
			want: []string{"gap", fmt.Sprintf("replay from 5 upto %d", bigJump), "replayed 5 none failed", fmt.Sprintf("drop %d jump-too-large", bigJump),
				"gap", fmt.Sprintf("replay from 5 upto %d", bigJump+1), "replayed 5 none failed", "partial", fmt.Sprintf("apply %d", bigJump+1)},
			last: bigJump + 1},
		{name: "gap without a replay endpoint", s: inOrder(4), events: []seqEvent{live(7)},
			want: []string{"gap", "partial", "apply 7"}, last: 7},
		{name: "huge jump without a replay endpoint, not continued", s: inOrder(4), events: []seqEvent{live(bigJump), live(bigJump + 2)},
			want: []string{"gap", fmt.Sprintf("drop %d jump-too-large", bigJump), "gap", fmt.Sprintf("drop %d jump-too-large", bigJump+2)},
			last: 4},
		{name: "nothing applied yet: what precedes the batch is fetched", canReplay: true,
			s: seqState{initialDone: true}, events: []seqEvent{live(3)},
			script: engineScript{replies: []scriptReply{{seqs: []uint64{0, 1, 2, 3}, ok: true}}},
			want: []string{"replay from 0 upto 3", "apply 0 replayed", "apply 1 replayed", "apply 2 replayed", "apply 3 replayed",
				"replayed 0-3 complete", "drop 3 applied"}, last: 3},
		{name: "duplicate live batch on one connection is a restart (connect mode)", canReplay: true, s: inOrder(5), events: []seqEvent{live(5)},
			script: engineScript{replies: []scriptReply{{seqs: []uint64{0, 1, 2, 3, 4, 5}, ok: true}}},
			want: []string{"reset 5 last 5", "replay from 0 upto 5", "apply 0 replayed", "apply 1 replayed", "apply 2 replayed",
				"apply 3 replayed", "apply 4 replayed", "apply 5 replayed", "replayed 0-5 complete", "drop 5 applied"}, last: 5},
		{name: "seq back to 0 is a restart (connect mode)", canReplay: true, s: inOrder(9), events: []seqEvent{live(0), live(1)},
			want: []string{"reset 0 last 9", "apply 0", "apply 1"}, last: 1},
		{name: "wrap: the highest seq, then 0", s: inOrder(math.MaxUint64 - 1), events: []seqEvent{live(math.MaxUint64), live(0)},
			want: []string{fmt.Sprintf("apply %d", uint64(math.MaxUint64)), fmt.Sprintf("reset 0 last %d", uint64(math.MaxUint64)), "apply 0"},
			last: 0},
		{name: "topic changed (connect mode) is a restart", canReplay: true, s: inOrder(5),
			events: []seqEvent{{kind: evLive, topic: "other", seq: 2}},
			script: engineScript{replies: []scriptReply{{seqs: []uint64{0, 1, 2}, ok: true}}},
			want: []string{"reset 2 last 5 topic", "replay from 0 upto 2", "apply 0 replayed", "apply 1 replayed", "apply 2 replayed",
				"replayed 0-2 complete", "drop 2 replayed"}, last: 2},
		{name: "topic changed in bind mode is not a restart", bound: bind, canReplay: true, s: inOrder(5),
			events: []seqEvent{{kind: evLive, topic: "other", seq: 6}}, want: []string{"apply 6"}, last: 6},
		{name: "bind: backwards seq confirmed by the engine's replay", bound: bind, canReplay: true, s: inOrder(9), events: []seqEvent{live(2)},
			script: engineScript{checks: []bool{true}, probes: []scriptProbe{{top: 3, saw: true, ok: true}},
				replies: []scriptReply{{seqs: []uint64{0, 1, 2, 3}, ok: true}}},
			want: []string{"check", "probe 2", "reset 2 last 9", "replay from 0 upto 2", "apply 0 replayed", "apply 1 replayed", "apply 2 replayed",
				"apply 3 replayed", "replayed 0-3 complete", "drop 2 applied"}, last: 3},
		{name: "bind: backwards seq the engine does not confirm", bound: bind, canReplay: true, s: inOrder(9), events: []seqEvent{live(2), live(10)},
			script: engineScript{checks: []bool{true}, probes: []scriptProbe{{top: 12, saw: true, ok: true}}},
			want:   []string{"check", "probe 2", "drop 2 unconfirmed", "apply 10"}, last: 10},
		{name: "bind: a confirmed restart's replay needs no second check", bound: bind, canReplay: true, s: inOrder(9), events: []seqEvent{live(1)},
			script: engineScript{checks: []bool{true}, probes: []scriptProbe{{top: 1, saw: true, ok: true}},
				replies: []scriptReply{{seqs: []uint64{0, 1}, ok: true}}},
			want: []string{"check", "probe 1", "reset 1 last 9", "replay from 0 upto 1", "apply 0 replayed", "apply 1 replayed",
				"replayed 0-1 complete", "drop 1 applied"}, last: 1},
		{name: "bind: the engine's replay reaches what was seen: no restart", bound: bind, canReplay: true, s: inOrder(9), events: []seqEvent{live(2)},
			script: engineScript{checks: []bool{true}, probes: []scriptProbe{{top: 9, saw: true, ok: true}}},
			want:   []string{"check", "probe 2", "drop 2 unconfirmed"}, last: 9},
		{name: "bind: a probe that fails confirms nothing", bound: bind, canReplay: true, s: inOrder(9), events: []seqEvent{live(2)},
			script: engineScript{checks: []bool{true}, probes: []scriptProbe{{ok: false}}},
			want:   []string{"check", "probe 2", "drop 2 unconfirmed"}, last: 9},
		{name: "bind: backwards check over the rate", bound: bind, canReplay: true, s: inOrder(9), events: []seqEvent{live(2)},
			script: engineScript{checks: []bool{false}}, want: []string{"check", "drop 2 throttled"}, last: 9},
		{name: "bind: gap check over the rate", bound: bind, canReplay: true, s: inOrder(4), events: []seqEvent{live(7), live(8)},
			script: engineScript{checks: []bool{false, true}, replies: []scriptReply{{seqs: []uint64{5, 6, 7, 8}, ok: true}}},
			want: []string{"gap", "check", "drop 7 throttled", "gap", "check", "replay from 5 upto 8", "apply 5 replayed", "apply 6 replayed",
				"apply 7 replayed", "apply 8 replayed", "replayed 5-8 complete", "drop 8 applied"}, last: 8},
		{name: "bind without replay: backwards seqs restart only when continued", bound: bind, s: inOrder(50),
			events: []seqEvent{live(3), live(7), live(8)},
			want:   []string{"drop 3 unconfirmed", "drop 7 unconfirmed", "reset 8 last 50", "apply 8"}, last: 8},
		{name: "bind without replay: a batch in order in between breaks the continuation", bound: bind, s: inOrder(50),
			events: []seqEvent{live(3), live(51), live(4)},
			want:   []string{"drop 3 unconfirmed", "apply 51", "drop 4 unconfirmed"}, last: 51},
		{name: "reconnect resumes after the last applied", canReplay: true, s: inOrder(7), events: []seqEvent{{kind: evConnected}, live(10)},
			script: engineScript{replies: []scriptReply{{seqs: []uint64{8, 9}, ok: true}}},
			want:   []string{"replay from 8", "apply 8 replayed", "apply 9 replayed", "replayed 8-9 complete", "apply 10"}, last: 10},
		{name: "reconnect without a replay endpoint: the next seq is applied", s: inOrder(7), events: []seqEvent{{kind: evConnected}, live(8)},
			want: []string{"apply 8"}, last: 8},
		{name: "quiet after a full queue fetches what was dropped", canReplay: true, s: inOrder(7), events: []seqEvent{{kind: evQuiet}},
			script: engineScript{replies: []scriptReply{{seqs: []uint64{8}, ok: true}}},
			want:   []string{"replay from 8", "apply 8 replayed", "replayed 8-8 complete"}, last: 8},
		{name: "quiet with nothing applied does nothing", canReplay: true, events: []seqEvent{{kind: evQuiet}}},
		{name: "bind retry fetches the buffer until something is applied", bound: bind, canReplay: true,
			events: []seqEvent{{kind: evRetry}, {kind: evRetry}, {kind: evRetry}},
			script: engineScript{replies: []scriptReply{{ok: false}, {seqs: []uint64{0}, ok: true}}},
			want:   []string{"replay from 0", "replayed 0 none failed", "replay from 0", "apply 0 replayed", "replayed 0-0 complete"}, last: 0},
		{name: "no retry in connect mode", canReplay: true, events: []seqEvent{{kind: evRetry}}},
		{name: "engine reset: the next batch is a first contact", canReplay: true, s: inOrder(9),
			events: []seqEvent{{kind: evEngineReset}, live(0)},
			script: engineScript{replies: []scriptReply{{seqs: []uint64{0}, ok: true}}},
			want:   []string{"replay from 0", "apply 0 replayed", "replayed 0-0 complete", "drop 0 replayed"}, last: 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			q := newSequencer(c.bound, c.canReplay)
			q.seqState = c.s
			sc := c.script
			var trace []string
			for _, ev := range c.events {
				trace = append(trace, drive(t, &q, &sc, ev)...)
			}
			if !slices.Equal(trace, c.want) {
				t.Errorf("actions:\n  %s\nwant:\n  %s", strings.Join(trace, "\n  "), strings.Join(c.want, "\n  "))
			}
			if len(sc.replies)+len(sc.checks)+len(sc.probes) > 0 {
				t.Errorf("script left unused: %+v", sc)
			}
			if len(c.want) > 0 && q.last != c.last {
				t.Errorf("last applied %d, want %d", q.last, c.last)
			}
		})
	}
}
