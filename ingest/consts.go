package ingest

// The wire contract with vLLM and the metric names, in one place.

// KV-cache spec kinds whose events ingest applies: groups that keep every
// block of the prefix. Sliding-window, chunked-local and mamba groups drop
// old blocks as a matter of course, so their removals would wrongly erase
// prefixes the full-attention group still holds.
var prefixKinds = map[string]bool{
	"full_attention":      true,
	"mla_attention":       true,
	"sink_full_attention": true,
	"unknown":             true,
}

// ZMQ framing (vllm/distributed/kv_events.py, ZmqEventPublisher): live [topic, seq(8 BE), payload]; replay request
// ["", start_seq(8 BE)] from a DEALER; the reply stream ends with seq ffx8.
const (
	seqLen       = 8
	replayEndSeq = ^uint64(0)
)

// Metric names.
const (
	metricBatches        = "kvroute_ingest_batches_total"
	metricEvents         = "kvroute_ingest_events_total"
	metricBlocks         = "kvroute_ingest_blocks_total"
	metricDecodeErrors   = "kvroute_ingest_decode_errors_total"
	metricGaps           = "kvroute_ingest_gaps_total"
	metricReplays        = "kvroute_ingest_replays_total"
	metricRestarts       = "kvroute_ingest_restarts_total"
	metricRestartsKept   = "kvroute_ingest_restarts_throttled_total"
	metricQueueDrops     = "kvroute_ingest_queue_drops_total"
	metricParentUnknown  = "kvroute_ingest_parent_unknown_total"
	metricSeqJumps       = "kvroute_ingest_seq_jumps_total"
	metricReplayJumps    = "kvroute_ingest_replay_seq_jumps_total"
	metricUnverified     = "kvroute_ingest_unverified_batches_total"
	metricAliasesEvicted = "kvroute_ingest_aliases_evicted_total"
	metricAliasesOrphan  = "kvroute_ingest_aliases_orphaned_total"
	metricUnroutable     = "kvroute_ingest_unroutable_total"
	metricConnected      = "kvroute_ingest_connected"
	metricLastSeq        = "kvroute_ingest_last_seq"
	metricLag            = "kvroute_ingest_lag_seconds"
	metricUnknownTopic   = "kvroute_ingest_unknown_topic_total"
	metricFramesRefused  = "kvroute_ingest_frames_refused_total"
	metricScrapes        = "kvroute_ingest_scrapes_total"
	metricProbesFailed   = "kvroute_ingest_health_probes_failed_total"
	metricHitRate        = "kvroute_ingest_prefix_cache_hit_rate"
	metricConfigMismatch = "kvroute_ingest_config_mismatch_total"
	metricSelfCheck      = "kvroute_ingest_hash_selfcheck_total"
	metricSchemeMismatch = "kvroute_hash_scheme_mismatch_total"
)

// vLLM /metrics names (vllm/v1/metrics/loggers.py).
const (
	vllmRunning        = "vllm:num_requests_running"
	vllmWaiting        = "vllm:num_requests_waiting"
	vllmKVUsage        = "vllm:kv_cache_usage_perc"
	vllmKVUsageOld     = "vllm:gpu_cache_usage_perc"
	vllmQueries        = "vllm:prefix_cache_queries"
	vllmHits           = "vllm:prefix_cache_hits"
	vllmQueriesOld     = "vllm:gpu_prefix_cache_queries"
	vllmHitsOld        = "vllm:gpu_prefix_cache_hits"
	vllmCacheConfig    = "vllm:cache_config_info"
	processStartTime   = "process_start_time_seconds" // prometheus_client's process collector
	vllmPromptTokens   = "vllm:prompt_tokens"
	vllmPromptCached   = "vllm:prompt_tokens_cached"
	vllmPrefillTime    = "vllm:request_prefill_time_seconds"
	labelModelName     = "model_name"
	labelEngine        = "engine"
	labelBlockSize     = "block_size"
	labelHashAlgorithm = "prefix_caching_hash_algo"
)
