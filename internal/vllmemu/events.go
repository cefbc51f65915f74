package vllmemu

import (
	"encoding/binary"
	"math"
)

// eventKind tells the three vLLM KV-cache event classes apart.
type eventKind uint8

const (
	kindBlockStored eventKind = iota + 1
	kindBlockRemoved
	kindAllBlocksCleared
)

// blockHash is one block hash as an event carries it: the 64-bit value
// (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1, the default) or the full digest.
type blockHash struct {
	value  uint64
	digest []byte // non-nil: publish the digest bytes (msgpack bin)
}

// kvEvent is one BlockStored, BlockRemoved or AllBlocksCleared event with the
// fields the emulator fills in; the optional fields vLLM leaves as None on GPU
// events (kv_cache_spec_sliding_window, locality) are never set.
type kvEvent struct {
	kind        eventKind
	hashes      []blockHash
	parent      *blockHash // BlockStored: nil when the run starts at block 0
	tokenIDs    []int
	blockSize   int
	loraID      *int64
	loraName    *string
	extraKeys   [][]string // BlockStored: one entry per hash, nil entry = None
	groupIdx    int
	hasGroupIdx bool   // group_idx set (vLLM's KV-cache manager always sets it)
	specKind    string // BlockStored: kv_cache_spec_kind, "" = None
	hasExtraKey bool   // BlockStored: extra_keys list present (vLLM: always, one per hash)
}

// eventBatch is vLLM's KVEventBatch: [ts, events, data_parallel_rank].
type eventBatch struct {
	ts     float64
	events []kvEvent
	dpRank *int
}

// encodeBatch appends the msgpack encoding of b as vLLM's msgspec encoder
// writes it: the batch as a 3-element array (array_like), each event as a map
// tagged "type" with defaulted-None fields left out, or — legacy — as a
// positional array with every field of the 12-field BlockStored of vLLM
// ≤ 0.23 (vllm/distributed/kv_events.py, upstream main 5ac26849 and
// bcb9c133b; vllm/distributed/kv_events.py).
func encodeBatch(dst []byte, b *eventBatch, legacy bool) []byte {
	dst = append(dst, 0x93)
	dst = appendFloat64(dst, b.ts)
	dst = appendArrayHeader(dst, len(b.events))
	for i := range b.events {
		if legacy {
			dst = appendEventArray(dst, &b.events[i])
		} else {
			dst = appendEventMap(dst, &b.events[i])
		}
	}
	if b.dpRank == nil {
		return append(dst, 0xc0)
	}
	return appendInt(dst, int64(*b.dpRank))
}

func appendEventMap(dst []byte, e *kvEvent) []byte {
	switch e.kind {
	case kindBlockStored:
		n := 8 // type + 7 required fields
		if e.hasExtraKey {
			n++
		}
		if e.hasGroupIdx {
			n++
		}
		if e.specKind != "" {
			n++
		}
		// msgspec sizes the header for all 13 possible entries: fixmap.
		dst = append(dst, 0x80|byte(n))
		dst = appendStr(appendStr(dst, "type"), "BlockStored")
		dst = appendHashes(appendStr(dst, "block_hashes"), e.hashes)
		dst = appendParent(appendStr(dst, "parent_block_hash"), e.parent)
		dst = appendInts(appendStr(dst, "token_ids"), e.tokenIDs)
		dst = appendInt(appendStr(dst, "block_size"), int64(e.blockSize))
		dst = appendOptInt(appendStr(dst, "lora_id"), e.loraID)
		dst = appendStr(appendStr(dst, "medium"), mediumGPU)
		dst = appendOptStr(appendStr(dst, "lora_name"), e.loraName)
		if e.hasExtraKey {
			dst = appendExtraKeys(appendStr(dst, "extra_keys"), e.extraKeys)
		}
		if e.hasGroupIdx {
			dst = appendInt(appendStr(dst, "group_idx"), int64(e.groupIdx))
		}
		if e.specKind != "" {
			dst = appendStr(appendStr(dst, "kv_cache_spec_kind"), e.specKind)
		}
		return dst
	case kindBlockRemoved:
		if e.hasGroupIdx {
			dst = append(dst, 0x84)
		} else {
			dst = append(dst, 0x83)
		}
		dst = appendStr(appendStr(dst, "type"), "BlockRemoved")
		dst = appendHashes(appendStr(dst, "block_hashes"), e.hashes)
		dst = appendStr(appendStr(dst, "medium"), mediumGPU)
		if !e.hasGroupIdx {
			return dst
		}
		return appendInt(appendStr(dst, "group_idx"), int64(e.groupIdx))
	default:
		return appendStr(append(dst, 0x81, 0xa4, 't', 'y', 'p', 'e'), "AllBlocksCleared")
	}
}

func appendEventArray(dst []byte, e *kvEvent) []byte {
	switch e.kind {
	case kindBlockStored:
		dst = appendStr(append(dst, 0x9c), "BlockStored")
		dst = appendHashes(dst, e.hashes)
		dst = appendParent(dst, e.parent)
		dst = appendInts(dst, e.tokenIDs)
		dst = appendInt(dst, int64(e.blockSize))
		dst = appendOptInt(dst, e.loraID)
		dst = appendStr(dst, mediumGPU)
		dst = appendOptStr(dst, e.loraName)
		if e.hasExtraKey {
			dst = appendExtraKeys(dst, e.extraKeys)
		} else {
			dst = append(dst, 0xc0)
		}
		dst = appendOptGroup(dst, e)
		if e.specKind != "" {
			dst = appendStr(dst, e.specKind)
		} else {
			dst = append(dst, 0xc0)
		}
		return append(dst, 0xc0) // kv_cache_spec_sliding_window
	case kindBlockRemoved:
		dst = appendStr(append(dst, 0x94), "BlockRemoved")
		dst = appendHashes(dst, e.hashes)
		dst = appendStr(dst, mediumGPU)
		return appendOptGroup(dst, e)
	default:
		return appendStr(append(dst, 0x91), "AllBlocksCleared")
	}
}

func appendOptGroup(dst []byte, e *kvEvent) []byte {
	if !e.hasGroupIdx {
		return append(dst, 0xc0)
	}
	return appendInt(dst, int64(e.groupIdx))
}

func appendHashes(dst []byte, hs []blockHash) []byte {
	dst = appendArrayHeader(dst, len(hs))
	for i := range hs {
		dst = appendHash(dst, &hs[i])
	}
	return dst
}

func appendParent(dst []byte, h *blockHash) []byte {
	if h == nil {
		return append(dst, 0xc0)
	}
	return appendHash(dst, h)
}

func appendHash(dst []byte, h *blockHash) []byte {
	if h.digest != nil {
		return appendBin(dst, h.digest)
	}
	return appendUint(dst, h.value)
}

func appendExtraKeys(dst []byte, keys [][]string) []byte {
	dst = appendArrayHeader(dst, len(keys))
	for _, k := range keys {
		if k == nil {
			dst = append(dst, 0xc0)
			continue
		}
		dst = appendArrayHeader(dst, len(k))
		for _, s := range k {
			dst = appendStr(dst, s)
		}
	}
	return dst
}

func appendInts(dst []byte, v []int) []byte {
	dst = appendArrayHeader(dst, len(v))
	for _, x := range v {
		dst = appendInt(dst, int64(x))
	}
	return dst
}

func appendOptInt(dst []byte, v *int64) []byte {
	if v == nil {
		return append(dst, 0xc0)
	}
	return appendInt(dst, *v)
}

func appendOptStr(dst []byte, v *string) []byte {
	if v == nil {
		return append(dst, 0xc0)
	}
	return appendStr(dst, *v)
}

// The scalar encoders below write msgpack's smallest form, as msgspec does.

func appendArrayHeader(dst []byte, n int) []byte {
	switch {
	case n < 16:
		return append(dst, 0x90|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(dst, 0xdc), uint16(n))
	default:
		return binary.BigEndian.AppendUint32(append(dst, 0xdd), uint32(n))
	}
}

func appendStr(dst []byte, s string) []byte {
	if n := len(s); n < 32 {
		dst = append(dst, 0xa0|byte(n))
	} else {
		dst = appendLen(dst, 0xd9, n) // str 8, 16, 32
	}
	return append(dst, s...)
}

func appendBin(dst []byte, b []byte) []byte {
	return append(appendLen(dst, 0xc4, len(b)), b...) // bin 8, 16, 32
}

// appendLen writes a str or bin header: the length n in one, two or four
// big-endian bytes after the type code c8, c8+1 or c8+2.
func appendLen(dst []byte, c8 byte, n int) []byte {
	switch {
	case n <= math.MaxUint8:
		return append(dst, c8, byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(dst, c8+1), uint16(n))
	default:
		return binary.BigEndian.AppendUint32(append(dst, c8+2), uint32(n))
	}
}

func appendUint(dst []byte, v uint64) []byte {
	switch {
	case v <= 0x7f:
		return append(dst, byte(v))
	case v <= math.MaxUint8:
		return append(dst, 0xcc, byte(v))
	case v <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(dst, 0xcd), uint16(v))
	case v <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(dst, 0xce), uint32(v))
	default:
		return binary.BigEndian.AppendUint64(append(dst, 0xcf), v)
	}
}

func appendInt(dst []byte, v int64) []byte {
	switch {
	case v >= 0:
		return appendUint(dst, uint64(v))
	case v >= -32:
		return append(dst, byte(v))
	case v >= math.MinInt8:
		return append(dst, 0xd0, byte(v))
	case v >= math.MinInt16:
		return binary.BigEndian.AppendUint16(append(dst, 0xd1), uint16(v))
	case v >= math.MinInt32:
		return binary.BigEndian.AppendUint32(append(dst, 0xd2), uint32(v))
	default:
		return binary.BigEndian.AppendUint64(append(dst, 0xd3), uint64(v))
	}
}

func appendFloat64(dst []byte, f float64) []byte {
	return binary.BigEndian.AppendUint64(append(dst, 0xcb), math.Float64bits(f))
}
