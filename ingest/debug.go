package ingest

import (
	"encoding/json"
	"net/http"
	"sync"
	"time"
)

// rankStatus is what /debug/replicas shows for one replica rank besides
// what the index knows.
type rankStatus struct {
	Batches          int64
	Gaps             int64
	Replays          int64
	ReplaysPartial   int64
	Restarts         int64
	DecodeErrors     int64
	QueueDrops       int64
	ParentUnknown    int64
	SchemeMismatches int64
	SeqJumps         int64
	EnginesGone      int64
	Partial          bool
	LastSeq          uint64
	HasSeq           bool
	LastBatchAt      time.Time
	LagSeconds       float64
	LastError        string
	LastErrorAt      time.Time
	HitRate          float64
	HasHitRate       bool
	ScrapeFailures   int64
	LastScrapeAt     time.Time
	// What the engine announces: the block_size of its last BlockStored
	// event, and its vllm:cache_config_info block_size and
	// prefix_caching_hash_algo labels (0 and "": not seen).
	EventBlockSize  int
	EngineBlockSize int
	EngineHashAlgo  string
	// Block-hash self-checks that ran (match or mismatch) and the verdict of
	// the last one ("" before the first).
	SelfChecks    int64
	LastSelfCheck string
	// BlocksStoredAgain counts GPU blocks the engine computed again that
	// kvroute had predicted cached (index.Store's restored): held by the
	// index for this rank (an eviction it never heard of), or removed while
	// a request predicted to hit them was in flight and computed for it.
	BlocksStoredAgain int64
	// EngineCached is the engine's cached prompt tokens counter, read from
	// EngineCachedMetric by a scrape that began at EngineCachedAt: the value
	// is no older than that.
	EngineCached       float64
	EngineCachedMetric string
	EngineCachedAt     time.Time

	lastMismatchLog time.Time
}

// maxErrorLen bounds the error text kept per rank.
const maxErrorLen = 300

func (s *rankStatus) setError(at time.Time, msg string) {
	if len(msg) > maxErrorLen {
		msg = msg[:maxErrorLen]
	}
	s.LastError, s.LastErrorAt = msg, at
}

// statusBox guards a rankStatus; updates are rare next to index writes.
type statusBox struct {
	mu sync.Mutex
	s  rankStatus
}

func (b *statusBox) update(f func(*rankStatus)) {
	b.mu.Lock()
	f(&b.s)
	b.mu.Unlock()
}

func (b *statusBox) get() rankStatus {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.s
}

// ReplicaStatus is one replica rank in GET /debug/replicas.
type ReplicaStatus struct {
	Pool string `json:"pool"`
	// Replica is the rank's name (the replica's, or NAME/dpR with data
	// parallelism), ReplicaName its replica's.
	Replica          string     `json:"replica"`
	ReplicaName      string     `json:"replica_name"`
	DPRank           int        `json:"dp_rank"`
	Events           string     `json:"events,omitempty"`
	Replay           string     `json:"replay,omitempty"`
	Connected        bool       `json:"connected"`
	LastSeq          *uint64    `json:"last_seq"`
	BlocksHeld       int64      `json:"blocks_held"`
	Batches          int64      `json:"batches"`
	Gaps             int64      `json:"gaps"`
	Replays          int64      `json:"replays"`
	ReplaysPartial   int64      `json:"replays_partial"`
	Partial          bool       `json:"partial"`
	Restarts         int64      `json:"restarts"`
	DecodeErrors     int64      `json:"decode_errors"`
	QueueDrops       int64      `json:"queue_drops"`
	ParentUnknown    int64      `json:"parent_unknown"`
	SchemeMismatches int64      `json:"scheme_mismatches"`
	SeqJumps         int64      `json:"seq_jumps"`
	EnginesGone      int64      `json:"engines_gone"`
	LastBatchAt      *time.Time `json:"last_batch_at,omitempty"`
	LagSeconds       float64    `json:"lag_seconds"`
	LastError        string     `json:"last_error,omitempty"`
	LastErrorAt      *time.Time `json:"last_error_at,omitempty"`
	Healthy          bool       `json:"healthy"`
	Load             *LoadView  `json:"load"`
	PrefixHitRate    *float64   `json:"prefix_cache_hit_rate"`
	PoolBlockSize    int        `json:"pool_block_size"`
	// What the engine announces (0 and "": not seen yet) and the block-hash
	// self-checks of its BlockStored runs.
	EventBlockSize      int    `json:"event_block_size"`
	EngineBlockSize     int    `json:"engine_block_size"`
	EngineHashAlgorithm string `json:"engine_hash_algorithm"`
	SelfChecks          int64  `json:"self_checks"`
	LastSelfCheck       string `json:"last_self_check,omitempty"`
	// BlocksStoredAgain: GPU blocks the engine computed again that kvroute
	// had predicted cached on this rank (the funnel's stale, in blocks).
	BlocksStoredAgain int64 `json:"blocks_stored_again"`
	// EngineCachedTokens is the engine's cached prompt tokens counter
	// (EngineCachedMetric: vllm:prompt_tokens_cached_total, else
	// vllm:prefix_cache_hits_total) read by the last scrape, which began at
	// EngineCachedAt.
	EngineCachedTokens *float64   `json:"engine_cached_tokens,omitempty"`
	EngineCachedMetric string     `json:"engine_cached_metric,omitempty"`
	EngineCachedAt     *time.Time `json:"engine_cached_at,omitempty"`
}

// LoadView is a replica's last /metrics reading.
type LoadView struct {
	Running float64   `json:"running"`
	Waiting float64   `json:"waiting"`
	KVUsage float64   `json:"kv_usage"`
	At      time.Time `json:"at"`
}

// Status returns every replica rank's state, in config order.
func (m *Manager) Status() []ReplicaStatus {
	ranks := m.allRanks()
	out := make([]ReplicaStatus, 0, len(ranks))
	for _, rs := range ranks {
		s := rs.st.get()
		v := ReplicaStatus{
			Pool: rs.pool.in.Name, Replica: rs.name, ReplicaName: rs.in.ReplicaName, DPRank: rs.rank, Events: rs.events, Replay: rs.replay,
			Connected: rs.connected.Load(), Batches: s.Batches, Gaps: s.Gaps, Replays: s.Replays,
			ReplaysPartial: s.ReplaysPartial, Partial: s.Partial, Restarts: s.Restarts, DecodeErrors: s.DecodeErrors,
			QueueDrops: s.QueueDrops, ParentUnknown: s.ParentUnknown, SchemeMismatches: s.SchemeMismatches,
			SeqJumps:   s.SeqJumps,
			LagSeconds: s.LagSeconds, LastError: s.LastError, PoolBlockSize: rs.pool.keys.BlockSize(),
			EventBlockSize: s.EventBlockSize, EngineBlockSize: s.EngineBlockSize, EngineHashAlgorithm: s.EngineHashAlgo,
			SelfChecks: s.SelfChecks, LastSelfCheck: s.LastSelfCheck,
		}
		if s.HasSeq {
			seq := s.LastSeq
			v.LastSeq = &seq
		}
		if !s.LastBatchAt.IsZero() {
			t := s.LastBatchAt
			v.LastBatchAt = &t
		}
		if !s.LastErrorAt.IsZero() {
			t := s.LastErrorAt
			v.LastErrorAt = &t
		}
		if s.HasHitRate {
			hr := s.HitRate
			v.PrefixHitRate = &hr
		}
		v.BlocksStoredAgain = s.BlocksStoredAgain
		if !s.EngineCachedAt.IsZero() {
			c, at := s.EngineCached, s.EngineCachedAt
			v.EngineCachedTokens, v.EngineCachedMetric, v.EngineCachedAt = &c, s.EngineCachedMetric, &at
		}
		if st, ok := m.ix.Replica(rs.r); ok {
			v.BlocksHeld, v.Healthy = st.Blocks, st.Healthy
			if !st.LoadAt.IsZero() {
				v.Load = &LoadView{Running: st.Load.Running, Waiting: st.Load.Waiting, KVUsage: st.Load.KVUsage, At: st.LoadAt}
			}
		}
		out = append(out, v)
	}
	return out
}

// DebugHandler serves GET /debug/replicas: Status as JSON.
func (m *Manager) DebugHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(map[string]any{"replicas": m.Status()})
	})
}
