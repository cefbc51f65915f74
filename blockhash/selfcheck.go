package blockhash

import (
	"bytes"
	"fmt"
)

// EventHash is one block hash as a KV event carries it: a 64-bit value (the
// default int mode) or, when Raw is non-nil, the full digest bytes
// (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0).
type EventHash struct {
	Value uint64
	Raw   []byte
}

// Verdict is the outcome of a self-check.
type Verdict uint8

// The self-check outcomes.
const (
	// Unchecked: the event does not carry enough to decide (see the reason).
	Unchecked Verdict = iota
	// Match: the recomputed hashes equal the event's.
	Match
	// Mismatch: the configured algorithm, seed or block size is not the engine's.
	Mismatch
)

// StoredRun is what the self-check needs from a BlockStored event whose run
// starts at block 0 (parent_block_hash nil).
type StoredRun[T Token] struct {
	Hashes          []EventHash
	TokenIDs        []T
	BlockSizeTokens int
	LoRAName        string
	// ExtraKeys has one entry per hash (nil entry: None), as vLLM sends it
	// since PR #33304; nil when the event predates the field.
	ExtraKeys [][]Value
}

// SelfCheck recomputes a run's engine hashes from NONE_HASH and compares them
// with the event's, so a wrong seed, algorithm or block size shows up as soon
// as an engine stores a prompt. The reason explains any verdict but Match.
func SelfCheck[T Token](e *Engine, run StoredRun[T]) (Verdict, string) {
	s := run.BlockSizeTokens
	if len(run.Hashes) == 0 {
		return Unchecked, "no hashes"
	}
	if s <= 0 || len(run.TokenIDs) != len(run.Hashes)*s {
		return Unchecked, fmt.Sprintf("%d token ids for %d hashes of %d tokens (placeholder or skipped blocks)", len(run.TokenIDs), len(run.Hashes), s)
	}
	if s%e.blockSize != 0 {
		return Mismatch, fmt.Sprintf("event block size %d is not a multiple of the configured %d", s, e.blockSize)
	}
	k := s / e.blockSize
	if k > 1 && run.ExtraKeys != nil {
		for _, x := range run.ExtraKeys {
			if len(x) > 0 {
				return Unchecked, "extra keys on a coarse (hybrid) view"
			}
		}
	}
	var loraBuf [1]Value
	lora := loraBuf[:0]
	if run.LoRAName != "" {
		lora = append(lora, Str(run.LoRAName))
	}
	parent := e.none
	for i := 0; i < len(run.TokenIDs)/e.blockSize; i++ {
		extra := lora
		if k == 1 && run.ExtraKeys != nil && i < len(run.ExtraKeys) {
			extra = run.ExtraKeys[i]
		}
		d, err := HashBlock(e, parent, run.TokenIDs[i*e.blockSize:(i+1)*e.blockSize], extra)
		if err != nil {
			return Unchecked, err.Error()
		}
		parent = d
		if (i+1)%k != 0 {
			continue
		}
		want := run.Hashes[(i+1)/k-1]
		if !hashEqual(d, want) {
			if i == 0 && run.ExtraKeys == nil {
				return Unchecked, "block 0 differs and the event carries no extra keys (a cache_salt would explain it)"
			}
			return Mismatch, fmt.Sprintf("block %d: recomputed %s under %s, event has %s", (i+1)/k-1, d.Hex(), e.algo, want)
		}
	}
	return Match, ""
}

func hashEqual(d Digest, h EventHash) bool {
	if h.Raw != nil {
		return bytes.Equal(d.Bytes(), h.Raw)
	}
	return d.EventValue() == h.Value
}

// String prints the hash as the event carried it.
func (h EventHash) String() string {
	if h.Raw != nil {
		return fmt.Sprintf("%x", h.Raw)
	}
	return fmt.Sprintf("%d", h.Value)
}

// String names the verdict.
func (v Verdict) String() string {
	switch v {
	case Match:
		return "match"
	case Mismatch:
		return "mismatch"
	default:
		return "unchecked"
	}
}
