package vllmemu

import "time"

// The wire contract with vLLM's clients and collectors, in one place.

// Defaults follow vLLM's where it has one (vllm/config/cache.py,
// vllm/config/scheduler.py, vllm/config/kv_events.py, upstream main 5ac26849).
const (
	defaultBlockSize           = 16
	defaultNumBlocks           = 2048
	defaultMaxNumSeqs          = 8
	defaultMaxNumBatchedTokens = 2048
	defaultMaxModelLen         = 32768
	defaultReplayBuffer        = 10000
	defaultPrefillPerToken     = 50 * time.Microsecond
	defaultDecodePerToken      = 5 * time.Millisecond
	defaultCompletionMaxTokens = 16 // vLLM's CompletionRequest.max_tokens default
	defaultChatMaxTokens       = 16 // vLLM: the rest of the context; shortened here
	eventQueueSize             = 10000
)

// KV events (vllm/distributed/kv_events.py and vllm/v1/core/block_pool.py).
const (
	mediumGPU         = "GPU"
	specFullAttention = "full_attention"
)

// HTTP.
const (
	// HeaderDataParallelRank picks the DP rank of a request, as vLLM's
	// OpenAI server reads it (vllm/entrypoints/openai/api_server.py).
	HeaderDataParallelRank = "X-data-parallel-rank"
	maxBodyBytes           = 32 << 20
)

// Metric names and labels (vllm/v1/metrics/loggers.py).
const (
	metricRunning        = "vllm:num_requests_running"
	metricWaiting        = "vllm:num_requests_waiting"
	metricKVUsage        = "vllm:kv_cache_usage_perc"
	metricQueries        = "vllm:prefix_cache_queries_total"
	metricHits           = "vllm:prefix_cache_hits_total"
	metricPromptCached   = "vllm:prompt_tokens_cached_total"
	metricPromptTokens   = "vllm:prompt_tokens_total"
	metricGenTokens      = "vllm:generation_tokens_total"
	metricPreemptions    = "vllm:num_preemptions_total"
	metricSuccess        = "vllm:request_success_total"
	metricTTFT           = "vllm:time_to_first_token_seconds"
	metricE2E            = "vllm:e2e_request_latency_seconds"
	metricPrefillTime    = "vllm:request_prefill_time_seconds"
	metricQueueTime      = "vllm:request_queue_time_seconds"
	metricCacheConfig    = "vllm:cache_config_info"
	labelModelName       = "model_name"
	labelEngine          = "engine"
	labelFinishedReason  = "finished_reason"
	finishedReasonLength = "length"
)

// ttftBuckets are vLLM's histogram buckets for time to first token.
var ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
	1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}

// requestTimeBuckets are vLLM's buckets for the per-phase request times
// (queue, prefill, decode, inference).
var requestTimeBuckets = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
	50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}

// e2eBuckets are vLLM's buckets for request latency.
var e2eBuckets = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
	50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
