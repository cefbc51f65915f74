package index

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Load is a replica's queue and cache pressure, as its /metrics report it,
// plus the engine's cumulative prefill counters the router learns its
// prefill rate from (zero when the engine does not export them).
type Load struct {
	Running float64 // vllm:num_requests_running
	Waiting float64 // vllm:num_requests_waiting
	KVUsage float64 // vllm:kv_cache_usage_perc, 0..1

	PromptTokens   float64 // vllm:prompt_tokens_total
	CachedTokens   float64 // vllm:prompt_tokens_cached_total
	PrefillSeconds float64 // vllm:request_prefill_time_seconds_sum
	PrefillCount   float64 // vllm:request_prefill_time_seconds_count
}

// learnAlpha is the weight of a new sample in the learned prefill rate and
// mean prompt (exponential smoothing over scrapes).
const learnAlpha = 0.3

// Bounds on a learned prefill rate, tokens per second: a sample outside is
// an engine's bad counters, not a rate.
const (
	minLearnedRate = 1
	maxLearnedRate = 1e9
)

// replicaState is everything the index knows about one replica besides blocks.
type replicaState struct {
	name   string
	gen    uint32       // Replica.Gen of the handles that name it
	blocks atomic.Int64 // blocks held, any tier

	inFlight atomic.Int64 // routed here, stream not ended

	mu      sync.Mutex
	load    Load
	loadAt  time.Time
	healthy bool
	// inFlightAtLoad is inFlight when the last load was recorded: the part
	// of the scraped queue that is this router's own.
	inFlightAtLoad int64
	prev           Load // counters at the previous SetLoad
	havePrev       bool
	rate           float64 // learned prefill tokens/s; 0 until learned
	meanTokens     float64 // learned uncached prompt tokens per request; 0 until learned
	work           prefillQueue
	recentTokens   recentCount // uncached tokens of requests begun here, decayed

	promised promises // blocks in-flight routed requests were predicted to hit (Promise)
}

// RecentTokensTau is the time constant of ReplicaState.RecentTokens: tokens
// begun this long ago count 1/e. Shorter than the time a busy replica's
// cache takes to turn over (minutes), longer than a queue lasts (seconds),
// so the count says how fast a replica's cache is being written, not how
// busy it is this instant.
const RecentTokensTau = time.Minute

// recentCount is an exponentially decayed sum: value as of at.
type recentCount struct {
	value float64
	at    time.Time
}

// add counts n at now (an earlier now counts as at).
func (c *recentCount) add(now time.Time, n float64) {
	c.value = c.decayed(now) + n
	if now.After(c.at) {
		c.at = now
	}
}

// decayed is the count as of now (no earlier than at).
func (c recentCount) decayed(now time.Time) float64 {
	if c.value == 0 || !now.After(c.at) {
		return c.value
	}
	return c.value * math.Exp(-now.Sub(c.at).Seconds()/RecentTokensTau.Seconds())
}

// prefillQueue is this router's own outstanding prefill on one replica, as a
// fluid FIFO: tokens added by routed requests drain at the prefill rate; a
// request whose stream ends proves every token queued up to its own done
// (the engine admits in arrival order).
type prefillQueue struct {
	added   float64   // tokens ever added
	drained float64   // tokens known or estimated done
	at      time.Time // when drained was last advanced
	rate    float64   // the rate of the last BeginWork, for EndWork's drain
}

// drain advances the queue to now at rate tokens/s.
func (q *prefillQueue) drain(now time.Time, rate float64) {
	switch {
	case q.at.IsZero():
		q.at = now
	case rate > 0 && now.After(q.at):
		q.drained = math.Min(q.added, q.drained+now.Sub(q.at).Seconds()*rate)
		q.at = now
	}
}

// Ticket is a routed request's place in its replica's prefill queue, given
// by BeginWork and handed back to EndWork.
type Ticket struct{ upTo float64 }

// ReplicaState is a snapshot of one replica.
type ReplicaState struct {
	Replica
	Name   string
	Load   Load
	LoadAt time.Time // zero until the first SetLoad
	// At is when the snapshot was taken (the index's clock).
	At      time.Time
	Healthy bool
	// InFlight counts requests routed here whose streams have not ended.
	InFlight int64
	// InFlightAtLoad is InFlight when Load was recorded.
	InFlightAtLoad int64
	// Blocks counts blocks held, any tier.
	Blocks int64
	// PrefillRate is the prefill throughput learned from the engine's
	// counters, tokens/s; 0 until learned.
	PrefillRate float64
	// MeanPromptTokens is the learned mean of uncached prompt tokens per
	// request; 0 until learned.
	MeanPromptTokens float64
	// PendingTokens is this router's outstanding uncached prefill on the
	// replica at the snapshot's time, drained at the rate given to Snapshot.
	PendingTokens float64
	// recentTokens sums the uncached tokens of the requests begun here
	// (this router's and, over the peer mesh, its peers'), decayed over
	// RecentTokensTau.
	recentTokens recentCount
}

// RecentTokens is the uncached prompt tokens of the requests begun on the
// replica (this router's and its peers'), decayed with time constant
// RecentTokensTau, as of the snapshot: how fast its cache is being written.
func (s ReplicaState) RecentTokens() float64 { return s.recentTokens.decayed(s.At) }

// SetLoad records a replica's load as read at time at, and learns the
// prefill rate and mean uncached prompt from the counters' increase since the
// previous call (a decrease is an engine restart: nothing is learned).
func (ix *Index) SetLoad(r Replica, l Load, at time.Time) {
	rs := ix.replicaState(r)
	if rs == nil {
		return
	}
	rs.setLoad(l, at)
	ix.loadChanged(r.Pool)
}

// SetLoadHook makes the index call f with a replica's pool after every
// SetLoad and SetHealthy from now on (nil: nobody): a replica's load may
// have fallen. f runs on the writer's goroutine and must return at once.
func (ix *Index) SetLoadHook(f func(PoolID)) {
	if f == nil {
		ix.loadHook.Store(nil)
		return
	}
	ix.loadHook.Store(&f)
}

func (ix *Index) loadChanged(p PoolID) {
	if f := ix.loadHook.Load(); f != nil {
		(*f)(p)
	}
}

// setLoad is SetLoad under rs's lock, released on every exit, a panic
// included.
func (rs *replicaState) setLoad(l Load, at time.Time) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.load, rs.loadAt = l, at
	rs.inFlightAtLoad = rs.inFlight.Load()
	if !rs.havePrev || rs.learn(rs.prev, l) {
		rs.prev, rs.havePrev = l, true
	}
}

// minLearnRequests is the fewest prefills a learning window spans: the
// counters move at each request's first token, so a window of one or two
// long prompts is mostly noise.
const minLearnRequests = 4

// learn folds the counters' increase since prev into the learned rate and
// reports whether prev is consumed (false: the window is still too short).
func (rs *replicaState) learn(prev, cur Load) bool {
	dPrompt := cur.PromptTokens - prev.PromptTokens
	dCached := cur.CachedTokens - prev.CachedTokens
	dSec := cur.PrefillSeconds - prev.PrefillSeconds
	dCount := cur.PrefillCount - prev.PrefillCount
	uncached := dPrompt - dCached
	for _, v := range []float64{dPrompt, dCached, dSec, dCount, uncached} {
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return true // a restart or bad counters: start a new window
		}
	}
	if dCount < minLearnRequests {
		return false
	}
	if dSec <= 0 {
		return true
	}
	if rate := uncached / dSec; rate >= minLearnedRate && rate <= maxLearnedRate {
		rs.rate = smooth(rs.rate, rate)
	}
	rs.meanTokens = smooth(rs.meanTokens, uncached/dCount)
	return true
}

func smooth(old, sample float64) float64 {
	if old == 0 {
		return sample
	}
	return old + learnAlpha*(sample-old)
}

// SetHealthy marks a replica usable or not (scrapes failing, engine gone).
func (ix *Index) SetHealthy(r Replica, healthy bool) {
	rs := ix.replicaState(r)
	if rs == nil {
		return
	}
	rs.setHealthy(healthy)
	ix.loadChanged(r.Pool)
}

func (rs *replicaState) setHealthy(healthy bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.healthy = healthy
}

// BeginWork counts a request the router sent to r with tokens uncached
// prompt tokens to prefill; the replica's own queue drains at rate tokens/s
// (the router's current estimate) until then. EndWork must follow.
func (ix *Index) BeginWork(r Replica, tokens int, rate float64) Ticket {
	rs := ix.replicaState(r)
	if rs == nil {
		return Ticket{}
	}
	rs.inFlight.Add(1)
	now := ix.now()
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.work.drain(now, rate)
	rs.work.rate = rate
	rs.work.added += float64(max(tokens, 0))
	rs.recentTokens.add(now, float64(max(tokens, 0)))
	return Ticket{upTo: rs.work.added}
}

// EndWork records the end of a request begun with BeginWork: its stream
// ended, so its prefill (and all queued before it) is done.
func (ix *Index) EndWork(r Replica, t Ticket) {
	rs := ix.replicaState(r)
	if rs == nil {
		return
	}
	if rs.inFlight.Add(-1) < 0 {
		rs.inFlight.Store(0)
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.work.drain(ix.now(), rs.work.rate)
	rs.work.drained = math.Min(rs.work.added, math.Max(rs.work.drained, t.upTo))
	if rs.inFlight.Load() == 0 {
		rs.work.drained = rs.work.added
	}
}

// Replica returns a snapshot of one replica; PendingTokens is drained to now
// at the replica's learned rate, or at defaultRate while none is learned.
func (ix *Index) Replica(r Replica) (ReplicaState, bool) {
	return ix.ReplicaAt(r, 0, ix.Now())
}

// ReplicaAt is Replica at time now (the index's clock, Now: a router
// snapshotting every candidate of a decision reads it once) with the drain
// rate to use until one is learned.
func (ix *Index) ReplicaAt(r Replica, defaultRate float64, now time.Time) (ReplicaState, bool) {
	rs := ix.replicaState(r)
	if rs == nil {
		return ReplicaState{}, false
	}
	return rs.snapshot(r, now, defaultRate), true
}

// Replicas returns snapshots of a pool's replicas, by id.
func (ix *Index) Replicas(pool PoolID) []ReplicaState {
	p := ix.pool(pool)
	if p == nil {
		return nil
	}
	var out []ReplicaState
	now := ix.now()
	for i := range p.replicas {
		if rs := p.replicas[i].Load(); rs != nil {
			out = append(out, rs.snapshot(Replica{pool, ReplicaID(i), rs.gen}, now, 0))
		}
	}
	return out
}

func (ix *Index) replicaState(r Replica) *replicaState {
	_, rs := ix.liveReplica(r)
	return rs
}

// liveReplica is r's pool and state when r names the current replica of a
// known pool, else nils.
func (ix *Index) liveReplica(r Replica) (*pool, *replicaState) {
	if p := ix.pool(r.Pool); p != nil {
		if rs := p.live(r); rs != nil {
			return p, rs
		}
	}
	return nil, nil
}

func (rs *replicaState) snapshot(r Replica, now time.Time, defaultRate float64) ReplicaState {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rate := rs.rate
	if rate == 0 {
		rate = defaultRate
	}
	q := rs.work
	q.drain(now, rate)
	return ReplicaState{
		Replica:          r,
		Name:             rs.name,
		Load:             rs.load,
		LoadAt:           rs.loadAt,
		At:               now,
		Healthy:          rs.healthy,
		InFlight:         rs.inFlight.Load(),
		InFlightAtLoad:   rs.inFlightAtLoad,
		Blocks:           rs.blocks.Load(),
		PrefillRate:      rs.rate,
		MeanPromptTokens: rs.meanTokens,
		PendingTokens:    q.added - q.drained,
		recentTokens:     rs.recentTokens,
	}
}
