package ingest

import (
	"context"
	"time"

	"golang.org/x/time/rate"
)

// In bind mode any peer that reaches ingest.bind can send frames under a
// configured topic, so a live batch is not the engine's word: a seq that
// goes backwards restarts the replica only when the engine confirms it, and
// the replays that check a suspicious seq, like the warnings about it, are
// rate-limited per rank. (In connect mode the stream is kvroute's own
// connection to the engine.)

// Rates of the bind-mode checks, per rank.
const (
	// bindChecksPerSecond (burst bindCheckBurst) bounds the replays a
	// rank's suspicious live batches (a gap, a seq going backwards) may
	// trigger; beyond it such a batch is dropped unchecked, and the gap
	// stays for the next batch or replay to fill.
	bindChecksPerSecond = 1
	bindCheckBurst      = 4
	// seqWarnEvery is the least time between two warnings of one rank
	// about dropped or refused batches (the rest are counted).
	seqWarnEvery = time.Minute
	// startTimeRestartEvery bounds how often a changed
	// process_start_time_seconds on a rank's /metrics (whoever answers
	// there) may drop the rank's blocks when its event stream did not end:
	// more often, the blocks are kept and the change counted. A real
	// engine restart takes longer than this, and ends the stream in
	// connect mode.
	startTimeRestartEvery = 10 * time.Second
)

// Reasons of kvroute_ingest_unverified_batches_total.
const (
	unverifiedRestart   = "restart_unconfirmed" // a backwards seq the engine does not confirm
	unverifiedThrottled = "check_throttled"     // a batch needing a replay check over the rate
)

// bindLimits are a rank's rate limits (applier-owned).
type bindLimits struct {
	checks   *rate.Limiter
	warns    *rate.Limiter
	restarts *rate.Limiter // unconfirmed restarts from the start time
	// suppressed counts warnings not logged since the last one.
	suppressed int
}

func newBindLimits() bindLimits {
	return bindLimits{checks: rate.NewLimiter(bindChecksPerSecond, bindCheckBurst), warns: rate.NewLimiter(rate.Every(seqWarnEvery), 1),
		restarts: rate.NewLimiter(rate.Every(startTimeRestartEvery), 1)}
}

// mayRestartOnStartTime reports whether a changed process start time may
// drop the rank's blocks now; over the rate (startTimeRestartEvery) the
// change is counted and the blocks stay.
func (rs *rankState) mayRestartOnStartTime() bool {
	if rs.limits.restarts.Allow() {
		return true
	}
	rs.met.restartsThrottled.Inc()
	rs.warnSeq("ingest: kept the blocks of a replica whose process start time changed again too soon", "every", startTimeRestartEvery)
	return false
}

// bound reports whether the rank's live batches come through the shared
// bind-mode socket.
func (rs *rankState) bound() bool { return rs.events == "" }

// probe fetches the engine's replay from seq only to see the seqs it
// holds: a bind-mode check of a seq that went backwards (the sequencer
// confirms a restart when the engine's sequence is below what it saw).
func (rs *rankState) probe(ctx context.Context, seq uint64) (top uint64, saw bool, err error) {
	err = rs.mgr.fetchReplay(ctx, rs.replay, seq, func(q uint64, _ []byte) {
		top, saw = max(top, q), true
	})
	return top, saw, err
}

// warnSeq logs a warning about dropped batches at most once per
// seqWarnEvery per rank, with how many were not logged before it.
func (rs *rankState) warnSeq(msg string, args ...any) {
	if !rs.limits.warns.Allow() {
		rs.limits.suppressed++
		return
	}
	rs.mgr.log.Warn(msg, append([]any{"pool", rs.pool.in.Name, "replica", rs.name, "not_logged_before", rs.limits.suppressed}, args...)...)
	rs.limits.suppressed = 0
}
