// Package prefetch asks the CPU to start loading a cache line ahead of its
// use: one PREFETCHT0 in assembly on amd64, nothing elsewhere or under
// -tags purego. It imports nothing of kvroute; rhmap's tables and the
// tokenizer's word cache use it.
package prefetch
