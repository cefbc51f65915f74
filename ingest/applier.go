package ingest

import (
	"errors"
	"io"
	"log/slog"
	"time"

	"github.com/kvroute/kvroute/index"
)

// Applier applies one replica's KV-event batches (vLLM's msgpack payloads)
// to the index in process: the same decoder and apply path as a live
// subscriber — key modes, block-size learning, parent chaining, removals,
// AllBlocksCleared — without sockets, sequence tracking or replay. The fleet
// simulator (kvroute-bench sim) feeds it every engine step's events.
// It is not safe for concurrent use.
type Applier struct {
	rs  *rankState
	seq uint64
}

// NewApplier prepares an applier for rank of pool (both registered in ix;
// pool.Keys is the object the router keys requests with). now is the clock
// for the applier's freshness figures; nil means time.Now.
func NewApplier(ix *index.Index, pool Pool, rank Rank, now func() time.Time) (*Applier, error) {
	if pool.Keys == nil {
		return nil, errors.New("ingest: applier's pool has no Keys")
	}
	pid, ok := ix.PoolByName(pool.Name)
	if !ok || pid != pool.ID || pid != rank.Replica.Pool {
		return nil, errors.New("ingest: applier's pool is not the replica's pool in the index")
	}
	if now == nil {
		now = time.Now
	}
	m := &Manager{set: Settings{QueueSize: 1}, ix: ix, log: slog.New(slog.NewTextHandler(io.Discard, nil)), now: now,
		m: newMetrics(nil), tuning: defaultTuning}
	rs, err := m.newRank(&poolState{in: pool, keys: pool.Keys}, rank, 0)
	if err != nil {
		return nil, err
	}
	return &Applier{rs: rs}, nil
}

// Apply decodes one batch and applies its events. A malformed batch is
// dropped whole (counted, as live) and reported.
func (a *Applier) Apply(payload []byte) error {
	before := a.rs.st.get().DecodeErrors
	a.rs.applyPayload(a.seq, payload, false)
	a.seq++
	if a.rs.st.get().DecodeErrors != before {
		return errors.New("ingest: undecodable KV-event batch")
	}
	return nil
}

// BlocksStoredAgain is the GPU blocks the engine stored while the index
// already held them for this rank, since the applier began (ReplicaStatus).
func (a *Applier) BlocksStoredAgain() int64 { return a.rs.st.get().BlocksStoredAgain }
