package ingest

// seqState tracks one publisher's sequence numbers (vllm/distributed/kv_events.py: 0,1,2…
// per publisher, reset by a restart). It does no I/O: the sequencer
// (sequencer.go) asks it where a live or replayed batch stands, and the
// rank's applier tells it what was applied (sequence_test.go tables every
// answer).
type seqState struct {
	have        bool   // last is valid
	last        uint64 // last applied seq
	haveLive    bool   // live is valid (reset on every new connection)
	live        uint64 // last seq seen live on the current connection
	haveReplay  bool
	replayStart uint64 // start of the last replay: live seqs in [replayStart, replayEnd] are duplicates
	replayEnd   uint64 // highest seq the last replay delivered
	haveJump    bool
	jump        uint64 // an unconfirmed huge jump (no replay): taken if the next batch continues it
	haveBack    bool
	back        uint64 // bind mode, no replay: an unconfirmed backwards seq, a restart if the next batch continues it
	haveTopic   bool
	topic       string
	initialDone bool // the first-contact replay was tried
}

// maxSeqJump is the largest forward sequence jump taken on trust when no
// replay can confirm it: ~2.8 hours of batches at 100 per second.
const maxSeqJump = 1 << 20

// liveOrder is where a live batch's seq stands.
type liveOrder uint8

const (
	// liveAhead: past everything applied (next in turn, or after a gap).
	liveAhead liveOrder = iota
	// liveReplayed: the last replay applied it already; drop it.
	liveReplayed
	// liveBehind: at or below a seq already seen; a restart if confirmed.
	liveBehind
)

// order says where live seq stands against what was seen and applied.
func (s *seqState) order(seq uint64) liveOrder {
	switch {
	case s.haveLive && seq <= s.live:
		return liveBehind
	case s.have && seq <= s.last:
		if s.haveReplay && seq >= s.replayStart && seq <= s.replayEnd {
			return liveReplayed
		}
		return liveBehind
	}
	return liveAhead
}

// applied reports whether seq is at or below the last applied seq.
func (s *seqState) applied(seq uint64) bool { return s.have && seq <= s.last }

// apply records that seq was applied (a malformed payload's seq counts).
func (s *seqState) apply(seq uint64) { s.last, s.have = seq, true }

// seenLive records seq as the current connection's latest live seq.
func (s *seqState) seenLive(seq uint64) { s.live, s.haveLive = seq, true }

// resumeFrom is the first seq a replay after a (re)connection asks for:
// the one after the last applied, or 0 when nothing is.
func (s *seqState) resumeFrom() uint64 {
	if s.have {
		return s.last + 1
	}
	return 0
}

// seen is the highest seq seen: applied, or live on this connection.
func (s *seqState) seen() uint64 {
	if s.haveLive {
		return max(s.last, s.live)
	}
	return s.last
}

// gapBefore reports whether live seq (liveAhead) leaves applied seqs out.
func (s *seqState) gapBefore(seq uint64) bool { return s.have && seq > s.last+1 }

// takeUnverifiedJump reports whether a live seq after a gap that no replay
// verified is applied: a jump of at most maxSeqJump is; a larger one only
// when it continues the previous such jump, which it otherwise becomes.
func (s *seqState) takeUnverifiedJump(seq uint64) bool {
	if seq-s.last <= maxSeqJump || s.haveJump && seq == s.jump+1 {
		return true
	}
	s.jump, s.haveJump = seq, true
	return false
}

// backContinued reports whether a backwards live seq, with no replay to
// check it against, continues the previous backwards seq (then the
// publisher restarted); otherwise it becomes the one to continue.
func (s *seqState) backContinued(seq uint64) bool {
	confirmed := s.haveBack && seq == s.back+1
	s.back, s.haveBack = seq, !confirmed
	return confirmed
}

// replayRun follows one replay reply, batch by batch.
type replayRun struct {
	s       *seqState
	start   uint64 // the seq asked for
	end     uint64 // the last batch accepted (start-1 before any)
	n       int    // batches accepted
	jumps   int    // batches skipped: their seq does not follow
	partial bool   // start was gone from the buffer, or a batch is missing
}

// beginReplay starts following a replay reply from start.
func (s *seqState) beginReplay(start uint64) *replayRun {
	s.haveReplay = false
	return &replayRun{s: s, start: start, end: start - 1}
}

// next takes the reply's next batch and reports whether to apply it. The
// engine's buffer is contiguous: a seq that does not follow the reply's
// previous one (or, first, lies over maxSeqJump past start) is not a batch
// the engine published in turn, and applying it would make every later
// real batch look applied: it is skipped and counted. Live seqs in
// [start, end] become duplicates; batches already applied are not again.
func (r *replayRun) next(seq uint64) bool {
	if r.n == 0 && seq != r.start {
		r.partial = true // the buffer no longer holds start
	}
	if r.n > 0 && seq != r.end+1 || r.n == 0 && seq > r.start && seq-r.start > maxSeqJump {
		r.jumps++
		r.partial = true
		return false
	}
	r.n++
	if seq > r.end || r.n == 1 {
		r.end = seq
	}
	s := r.s
	s.replayStart, s.replayEnd, s.haveReplay = r.start, r.end, true
	if s.applied(seq) {
		return false
	}
	if s.gapBefore(seq) {
		r.partial = true
	}
	return true
}

// done ends the run: expectUpTo > start means seqs [start, expectUpTo)
// were known to exist, so a reply without batches is partial.
func (r *replayRun) done(expectUpTo uint64) {
	if r.n == 0 && expectUpTo > r.start {
		r.partial = true
	}
}
