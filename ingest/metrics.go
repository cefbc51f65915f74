package ingest

import (
	"github.com/kvroute/kvroute/internal/panics"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are ingest's Prometheus series. Labels are bounded: pool and
// replica rank names come from the config, the rest are fixed enums.
type metrics struct {
	panics         *panics.Counter        // component (kvroute_panics_total, shared with extproc and server)
	batches        *prometheus.CounterVec // pool, replica, source=live|replay
	events         *prometheus.CounterVec // pool, replica, type
	blocks         *prometheus.CounterVec // pool, replica, op=stored|removed
	decodeErrors   *prometheus.CounterVec // pool, replica
	gaps           *prometheus.CounterVec // pool, replica
	replays        *prometheus.CounterVec // pool, replica, outcome
	restarts       *prometheus.CounterVec // pool, replica
	restartsKept   *prometheus.CounterVec // pool, replica
	queueDrops     *prometheus.CounterVec // pool, replica
	parentUnknown  *prometheus.CounterVec // pool, replica
	seqJumps       *prometheus.CounterVec // pool, replica
	aliasesEvicted *prometheus.CounterVec // pool, replica
	aliasesOrphan  *prometheus.CounterVec // pool, replica
	replayJumps    *prometheus.CounterVec // pool, replica
	unverified     *prometheus.CounterVec // pool, replica, reason
	unroutable     *prometheus.CounterVec // pool, replica, reason
	connected      *prometheus.GaugeVec   // pool, replica
	lastSeq        *prometheus.GaugeVec   // pool, replica
	lag            *prometheus.GaugeVec   // pool, replica
	unknownTopic   prometheus.Counter
	framesRefused  *prometheus.CounterVec // socket=bind|events|replay, reason
	scrapes        *prometheus.CounterVec // pool, replica, outcome=ok|error|invalid|stalled
	probesFailed   *prometheus.CounterVec // pool, replica, reason=health_failed|health_stalled
	hitRate        *prometheus.GaugeVec   // pool, replica
	configMismatch *prometheus.CounterVec // pool, replica, field=block_size|hash_algorithm
	selfCheck      *prometheus.CounterVec // pool, verdict
	schemeMismatch *prometheus.CounterVec // pool
}

// Event-type label values of kvroute_ingest_events_total.
const (
	evStored           = "block_stored"
	evRemoved          = "block_removed"
	evCleared          = "all_blocks_cleared"
	evUnknown          = "unknown"
	evSkippedGroup     = "skipped_group"      // sliding-window/mamba/... group
	evSkippedBlockSize = "skipped_block_size" // event block size is not the pool's
	evSkippedNoTokens  = "skipped_no_tokens"  // tokens mode: token_ids do not cover the hashes
	evSkippedRemove    = "skipped_remove"     // tokens mode: BlockRemoved of a hash never stored
)

// Replay outcomes of kvroute_ingest_replays_total.
const (
	replayRequested = "requested"
	replaySucceeded = "succeeded"
	replayPartial   = "partial"
	replayFailed    = "failed"
)

func newMetrics(reg prometheus.Registerer) *metrics {
	rl := []string{"pool", "replica"}
	cv := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, append(append([]string{}, rl...), labels...))
	}
	gv := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, rl)
	}
	m := &metrics{
		batches:        cv(metricBatches, "KV-event batches applied, by source (live or replay).", "source"),
		events:         cv(metricEvents, "KV events seen, by type (and the reasons one was skipped).", "type"),
		blocks:         cv(metricBlocks, "Blocks written to the index from KV events, by op.", "op"),
		decodeErrors:   cv(metricDecodeErrors, "KV-event batches dropped as malformed (bad frames or msgpack)."),
		gaps:           cv(metricGaps, "Sequence gaps seen on a publisher's stream."),
		replays:        cv(metricReplays, "Replay requests and their outcomes.", "outcome"),
		restarts:       cv(metricRestarts, "Publisher restarts detected (sequence went backwards); the replica was cleared."),
		restartsKept:   cv(metricRestartsKept, "Changes of a replica's process_start_time_seconds that did not clear it: its event stream had not ended and the previous such change was under "+startTimeRestartEvery.String()+" before (a real restart takes longer; whoever answers /metrics could flip it every scrape)."),
		queueDrops:     cv(metricQueueDrops, "Batches dropped because the replica's queue was full (treated as a gap)."),
		parentUnknown:  cv(metricParentUnknown, "BlockStored runs skipped because their parent block was never seen (tokens keys)."),
		unroutable:     cv(metricUnroutable, "Times a replica became unroutable, by the signal that said its engine is gone or frozen.", "reason"),
		aliasesEvicted: cv(metricAliasesEvicted, "Engine hash → block key aliases (keys: tokens) dropped, oldest first, because the rank's key map reached its share of the alias budget (half of index.max_entries divided among the ranks); a later BlockRemoved of such a hash is skipped."),
		aliasesOrphan:  cv(metricAliasesOrphan, "Engine hash → block key aliases (keys: tokens) dropped because the index evicted their block (at index.max_entries or past index.ttl): an alias goes with its block."),
		replayJumps:    cv(metricReplayJumps, "Replayed batches skipped because their seq did not follow the previous one of the same replay reply (the engine's buffer is contiguous: corrupt or forged)."),
		unverified:     cv(metricUnverified, "Bind mode: live batches dropped unchecked, by reason: restart_unconfirmed (a seq going backwards the engine's replay or next batch does not confirm), check_throttled (a batch needing a replay check over the per-rank rate).", "reason"),
		seqJumps:       cv(metricSeqJumps, "Live batches dropped because their seq jumped beyond anything the engine published (forged or corrupt)."),
		probesFailed:   cv(metricProbesFailed, "/health probes that failed to connect, answered 5xx (health_failed) or went unanswered for ingest.stall_timeout (health_stalled).", "reason"),
		connected:      gv(metricConnected, "1 while the replica's KV-event stream is connected (bind mode: has delivered a batch)."),
		lastSeq:        gv(metricLastSeq, "Last applied KV-event sequence number."),
		lag:            gv(metricLag, "Seconds between the engine taking the last batch and kvroute applying it."),
		unknownTopic:   prometheus.NewCounter(prometheus.CounterOpts{Name: metricUnknownTopic, Help: "Batches dropped in bind mode because their topic names no configured replica."}),
		framesRefused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricFramesRefused,
			Help: "ZeroMQ connections closed because a frame header announced more than ingest.max_message_bytes, by socket and reason."}, []string{"socket", "reason"}),
		scrapes:        cv(metricScrapes, "/metrics scrapes of replicas, by outcome.", "outcome"),
		hitRate:        gv(metricHitRate, "Replica prefix-cache hit rate (tokens) between the last two scrapes."),
		configMismatch: cv(metricConfigMismatch, "Scrapes whose vllm:cache_config_info disagrees with the pool config.", "field"),
		selfCheck:      prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricSelfCheck, Help: "Block-hash self-checks of BlockStored runs from block 0, by verdict."}, []string{"pool", "verdict"}),
		schemeMismatch: prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricSchemeMismatch, Help: "BlockStored runs whose engine hashes the configured algorithm/seed/block size does not reproduce."}, []string{"pool"}),
	}
	if reg != nil {
		reg.MustRegister(m.batches, m.events, m.blocks, m.decodeErrors, m.gaps, m.replays, m.restarts, m.restartsKept, m.queueDrops,
			m.parentUnknown, m.seqJumps, m.aliasesEvicted, m.aliasesOrphan, m.replayJumps, m.unverified, m.unroutable, m.connected, m.lastSeq, m.lag, m.unknownTopic, m.framesRefused, m.scrapes, m.probesFailed, m.hitRate, m.configMismatch,
			m.selfCheck, m.schemeMismatch)
	}
	m.panics = panics.NewCounter(reg)
	return m
}

// rankMetrics are one replica rank's series, resolved once.
type rankMetrics struct {
	live, replayed                      prometheus.Counter
	stored, removed, cleared, unknown   prometheus.Counter
	skipGroup, skipBS, skipTok, skipRem prometheus.Counter
	blocksStored, blocksRemoved         prometheus.Counter
	decodeErrors, gaps, restarts, drops prometheus.Counter
	restartsThrottled                   prometheus.Counter
	parentUnknown, seqJumps             prometheus.Counter
	aliasesEvicted, replayJumps         prometheus.Counter
	aliasesOrphaned                     prometheus.Counter
	replayReq, replayOK, replayPartial  prometheus.Counter
	replayFailed                        prometheus.Counter
	connected, lastSeq, lag, hitRate    prometheus.Gauge
	scrapeOK, scrapeErr, scrapeInvalid  prometheus.Counter
	scrapeStalled                       prometheus.Counter
	probeFailed, probeStalled           prometheus.Counter
	mismatchBS, mismatchAlgo            prometheus.Counter
	unroutableVec, unverifiedVec        *prometheus.CounterVec
	pool, replica                       string
}

// unroutable is the rank's kvroute_ingest_unroutable_total{reason}.
func (r *rankMetrics) unroutable(reason string) prometheus.Counter {
	return r.unroutableVec.WithLabelValues(r.pool, r.replica, reason)
}

// unverified is the rank's kvroute_ingest_unverified_batches_total{reason}.
func (r *rankMetrics) unverified(reason string) prometheus.Counter {
	return r.unverifiedVec.WithLabelValues(r.pool, r.replica, reason)
}

func (m *metrics) forRank(pool, replica string) *rankMetrics {
	l := prometheus.Labels{"pool": pool, "replica": replica}
	with := func(v *prometheus.CounterVec, extra ...string) prometheus.Counter {
		labels := prometheus.Labels{"pool": pool, "replica": replica}
		for i := 0; i+1 < len(extra); i += 2 {
			labels[extra[i]] = extra[i+1]
		}
		return v.With(labels)
	}
	return &rankMetrics{
		live: with(m.batches, "source", "live"), replayed: with(m.batches, "source", "replay"),
		stored: with(m.events, "type", evStored), removed: with(m.events, "type", evRemoved),
		cleared: with(m.events, "type", evCleared), unknown: with(m.events, "type", evUnknown),
		skipGroup: with(m.events, "type", evSkippedGroup), skipBS: with(m.events, "type", evSkippedBlockSize),
		skipTok: with(m.events, "type", evSkippedNoTokens), skipRem: with(m.events, "type", evSkippedRemove),
		blocksStored: with(m.blocks, "op", "stored"), blocksRemoved: with(m.blocks, "op", "removed"),
		decodeErrors: with(m.decodeErrors), gaps: with(m.gaps), restarts: with(m.restarts), restartsThrottled: with(m.restartsKept), drops: with(m.queueDrops),
		parentUnknown: with(m.parentUnknown), seqJumps: with(m.seqJumps), aliasesEvicted: with(m.aliasesEvicted), aliasesOrphaned: with(m.aliasesOrphan), replayJumps: with(m.replayJumps),
		unroutableVec: m.unroutable, unverifiedVec: m.unverified, pool: pool, replica: replica,
		replayReq: with(m.replays, "outcome", replayRequested), replayOK: with(m.replays, "outcome", replaySucceeded),
		replayPartial: with(m.replays, "outcome", replayPartial), replayFailed: with(m.replays, "outcome", replayFailed),
		connected: m.connected.With(l), lastSeq: m.lastSeq.With(l), lag: m.lag.With(l), hitRate: m.hitRate.With(l),
		scrapeOK: with(m.scrapes, "outcome", "ok"), scrapeErr: with(m.scrapes, "outcome", "error"),
		scrapeInvalid: with(m.scrapes, "outcome", "invalid"), scrapeStalled: with(m.scrapes, "outcome", "stalled"),
		probeFailed: with(m.probesFailed, "reason", downProbeFailed), probeStalled: with(m.probesFailed, "reason", downProbeStall),
		mismatchBS: with(m.configMismatch, "field", "block_size"), mismatchAlgo: with(m.configMismatch, "field", "hash_algorithm"),
	}
}
