package index

import (
	"sync"
	"sync/atomic"
	"time"
)

// Load is a replica's queue and cache pressure, as its /metrics report it.
type Load struct {
	Running float64 // vllm:num_requests_running
	Waiting float64 // vllm:num_requests_waiting
	KVUsage float64 // vllm:kv_cache_usage_perc, 0..1
}

// replicaState is everything the index knows about one replica besides blocks.
type replicaState struct {
	name   string
	blocks atomic.Int64 // blocks held, any tier

	inFlight         atomic.Int64 // routed here, stream not ended
	startedSinceLoad atomic.Int64 // routed here since the last SetLoad

	mu      sync.Mutex
	load    Load
	loadAt  time.Time
	healthy bool
}

// ReplicaState is a snapshot of one replica.
type ReplicaState struct {
	Replica
	Name    string
	Load    Load
	LoadAt  time.Time // zero until the first SetLoad
	Healthy bool
	// InFlight counts requests routed here whose streams have not ended.
	InFlight int64
	// StartedSinceLoad counts requests routed here since the last SetLoad:
	// work the engine's own figures cannot show yet.
	StartedSinceLoad int64
	// Blocks counts blocks held, any tier.
	Blocks int64
}

// QueuedWork is the replica's queue as the router sees it: running and waiting
// from its last /metrics plus the requests routed to it since (which that
// scrape could not include), bounded by those still in flight.
func (s ReplicaState) QueuedWork() float64 {
	return s.Load.Running + s.Load.Waiting + float64(min(s.InFlight, s.StartedSinceLoad))
}

// SetLoad records a replica's load as read at time at.
func (ix *Index) SetLoad(r Replica, l Load, at time.Time) {
	rs := ix.replicaState(r)
	if rs == nil {
		return
	}
	rs.mu.Lock()
	rs.load, rs.loadAt = l, at
	rs.mu.Unlock()
	rs.startedSinceLoad.Store(0)
}

// SetHealthy marks a replica usable or not (scrapes failing, engine gone).
func (ix *Index) SetHealthy(r Replica, healthy bool) {
	rs := ix.replicaState(r)
	if rs == nil {
		return
	}
	rs.mu.Lock()
	rs.healthy = healthy
	rs.mu.Unlock()
}

// BeginRequest counts a request the router sent to r.
func (ix *Index) BeginRequest(r Replica) {
	if rs := ix.replicaState(r); rs != nil {
		rs.inFlight.Add(1)
		rs.startedSinceLoad.Add(1)
	}
}

// EndRequest counts the end of a request begun with BeginRequest.
func (ix *Index) EndRequest(r Replica) {
	if rs := ix.replicaState(r); rs != nil {
		if rs.inFlight.Add(-1) < 0 {
			rs.inFlight.Store(0)
		}
	}
}

// Replica returns a snapshot of one replica.
func (ix *Index) Replica(r Replica) (ReplicaState, bool) {
	rs := ix.replicaState(r)
	if rs == nil {
		return ReplicaState{}, false
	}
	return rs.snapshot(r), true
}

// Replicas returns snapshots of a pool's replicas, by id.
func (ix *Index) Replicas(pool PoolID) []ReplicaState {
	p := ix.pool(pool)
	if p == nil {
		return nil
	}
	var out []ReplicaState
	for i := range p.replicas {
		if rs := p.replicas[i].Load(); rs != nil {
			out = append(out, rs.snapshot(Replica{pool, ReplicaID(i)}))
		}
	}
	return out
}

func (ix *Index) replicaState(r Replica) *replicaState {
	p := ix.pool(r.Pool)
	if p == nil {
		return nil
	}
	return p.replica(r.ID)
}

func (rs *replicaState) snapshot(r Replica) ReplicaState {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return ReplicaState{
		Replica:          r,
		Name:             rs.name,
		Load:             rs.load,
		LoadAt:           rs.loadAt,
		Healthy:          rs.healthy,
		InFlight:         rs.inFlight.Load(),
		StartedSinceLoad: rs.startedSinceLoad.Load(),
		Blocks:           rs.blocks.Load(),
	}
}
