package ingest

import (
	"slices"
	"testing"
)

// TestLiveOrder: where a live seq stands, from the state the applier left.
func TestLiveOrder(t *testing.T) {
	for _, c := range []struct {
		name string
		s    seqState
		seq  uint64
		want liveOrder
	}{
		{"nothing seen", seqState{}, 0, liveAhead},
		{"next in turn", seqState{have: true, last: 4, haveLive: true, live: 4}, 5, liveAhead},
		{"after a gap", seqState{have: true, last: 4}, 9, liveAhead},
		{"repeated on this connection", seqState{have: true, last: 4, haveLive: true, live: 4}, 4, liveBehind},
		{"below this connection's latest", seqState{have: true, last: 9, haveLive: true, live: 9}, 2, liveBehind},
		{"applied by the last replay", seqState{have: true, last: 9, haveReplay: true, replayStart: 5, replayEnd: 9}, 7, liveReplayed},
		{"the last replay's first", seqState{have: true, last: 9, haveReplay: true, replayStart: 5, replayEnd: 9}, 5, liveReplayed},
		{"the last replay's last", seqState{have: true, last: 9, haveReplay: true, replayStart: 5, replayEnd: 9}, 9, liveReplayed},
		{"applied before the last replay", seqState{have: true, last: 9, haveReplay: true, replayStart: 5, replayEnd: 9}, 3, liveBehind},
		{"a new connection restarting at 0", seqState{have: true, last: 9}, 0, liveBehind},
		{"replayed, but seen live already", seqState{have: true, last: 9, haveLive: true, live: 8, haveReplay: true, replayStart: 5, replayEnd: 9}, 7, liveBehind},
	} {
		if got := c.s.order(c.seq); got != c.want {
			t.Errorf("%s: order(%d) = %d, want %d", c.name, c.seq, got, c.want)
		}
	}
}

// TestReplayRun: which batches of a replay reply are applied, which are
// skipped as not following, and whether the index is left partial.
func TestReplayRun(t *testing.T) {
	for _, c := range []struct {
		name       string
		s          seqState
		start      uint64
		expectUpTo uint64
		reply      []uint64
		applied    []uint64
		end        uint64
		jumps      int
		partial    bool
	}{
		{"first contact, whole buffer", seqState{}, 0, 0, []uint64{0, 1, 2}, []uint64{0, 1, 2}, 2, 0, false},
		{"fills a gap", seqState{have: true, last: 3}, 4, 7, []uint64{4, 5, 6, 7}, []uint64{4, 5, 6, 7}, 7, 0, false},
		{"buffer no longer holds start", seqState{have: true, last: 3}, 4, 9, []uint64{6, 7, 8}, []uint64{6, 7, 8}, 8, 0, true},
		{"already applied ones are not again", seqState{have: true, last: 5}, 4, 0, []uint64{4, 5, 6}, []uint64{6}, 6, 0, false},
		{"a seq that does not follow is skipped", seqState{have: true, last: 3}, 4, 0, []uint64{4, 5, 900, 6}, []uint64{4, 5, 6}, 6, 1, true},
		{"a first seq far past start is skipped", seqState{}, 0, 0, []uint64{maxSeqJump + 1, 0, 1}, []uint64{0, 1}, 1, 1, true},
		{"empty reply, seqs known to exist", seqState{have: true, last: 3}, 4, 7, nil, nil, 3, 0, true},
		{"empty reply, nothing expected", seqState{have: true, last: 3}, 4, 0, nil, nil, 3, 0, false},
	} {
		s := c.s
		run := s.beginReplay(c.start)
		var applied []uint64
		for _, seq := range c.reply {
			if run.next(seq) {
				s.apply(seq)
				applied = append(applied, seq)
			}
		}
		run.done(c.expectUpTo)
		if !slices.Equal(applied, c.applied) || run.end != c.end || run.jumps != c.jumps || run.partial != c.partial {
			t.Errorf("%s: applied %v end %d jumps %d partial %v; want %v %d %d %v", c.name, applied, run.end, run.jumps, run.partial,
				c.applied, c.end, c.jumps, c.partial)
		}
		if len(c.reply) > run.jumps && (!s.haveReplay || s.replayStart != c.start || s.replayEnd != c.end) {
			t.Errorf("%s: live duplicates [%d, %d] (have %v), want [%d, %d]", c.name, s.replayStart, s.replayEnd, s.haveReplay, c.start, c.end)
		}
	}
}

// TestUnconfirmedSeqsNeedTheNextBatch: with nothing to verify against, a
// huge forward jump and a backwards seq (bind mode without replay) are each
// believed only when the next batch continues them.
func TestUnconfirmedSeqsNeedTheNextBatch(t *testing.T) {
	s := seqState{have: true, last: 10}
	for _, c := range []struct {
		seq  uint64
		want bool
	}{
		{11 + maxSeqJump - 1, true}, // within the plausible jump
		{10 + maxSeqJump + 5, false},
		{10 + maxSeqJump + 7, false}, // does not continue it: the new candidate
		{10 + maxSeqJump + 8, true},  // continues it
	} {
		if got := s.takeUnverifiedJump(c.seq); got != c.want {
			t.Errorf("jump to %d: taken %v, want %v", c.seq, got, c.want)
		}
	}
	b := seqState{have: true, last: 50}
	for _, c := range []struct {
		seq  uint64
		want bool
	}{{3, false}, {7, false}, {8, true}, {9, false}} {
		if got := b.backContinued(c.seq); got != c.want {
			t.Errorf("backwards %d: restart %v, want %v", c.seq, got, c.want)
		}
	}
}

// TestResumeAndSeen: where a reconnection's replay starts, and the highest
// seq a restart must fall below.
func TestResumeAndSeen(t *testing.T) {
	for _, c := range []struct {
		s            seqState
		resume, seen uint64
	}{
		{seqState{}, 0, 0},
		{seqState{have: true, last: 7}, 8, 7},
		{seqState{have: true, last: 7, haveLive: true, live: 12}, 8, 12},
		{seqState{have: true, last: 7, haveLive: true, live: 3}, 8, 7},
	} {
		if r, s := c.s.resumeFrom(), c.s.seen(); r != c.resume || s != c.seen {
			t.Errorf("%+v: resume %d seen %d, want %d %d", c.s, r, s, c.resume, c.seen)
		}
	}
}
