// Package vllmemu emulates one vLLM v1 engine closely enough to route
// against: the OpenAI HTTP API (/v1/completions, /v1/chat/completions with
// streaming, /v1/models, /tokenize, /health, /reset_prefix_cache), a paged
// prefix cache that behaves like vLLM's BlockPool (fixed capacity, LRU free
// queue, reference counts, vLLM's real block hashes through package
// blockhash), a scheduler with a waiting queue, a running set bounded by
// max_num_seqs and a per-step token budget, KV-cache events published over
// ZeroMQ byte for byte as vLLM encodes them, and /metrics with vLLM's names.
//
// Time is the only thing emulated: a step lasts PrefillPerToken per uncached
// prompt token scheduled plus DecodePerToken when any sequence decodes, so
// time to first token depends on prefix-cache hits and queueing as on a GPU.
// Generated text is filler. See docs/EMULATOR.md for what is faithful and
// what is simplified.
package vllmemu
