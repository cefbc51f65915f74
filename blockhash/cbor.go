package blockhash

import (
	"encoding/binary"
	"math"
	"math/bits"
	"slices"
	"unsafe"
)

// CBOR as cbor2.dumps(obj, canonical=True) writes the shapes vLLM hashes
// (RFC 8949 preferred encoding; vLLM's vllm/utils/hashing.py, cbor2 canonical): tuples are definite arrays,
// bytes major 2, str major 3, ints major 0/1, None 0xf6.

const (
	cborUint  = 0
	cborNeg   = 1
	cborBytes = 2
	cborText  = 3
	cborArray = 4
	cborNone  = 0xf6
)

func appendCBORHead(b []byte, major byte, n uint64) []byte {
	m := major << 5
	switch {
	case n < 24:
		return append(b, m|byte(n))
	case n <= 0xff:
		return append(b, m|24, byte(n))
	case n <= 0xffff:
		return binary.BigEndian.AppendUint16(append(b, m|25), uint16(n))
	case n <= 0xffffffff:
		return binary.BigEndian.AppendUint32(append(b, m|26), uint32(n))
	default:
		return binary.BigEndian.AppendUint64(append(b, m|27), n)
	}
}

func appendCBORInt(b []byte, n int64) []byte {
	if n < 0 {
		return appendCBORHead(b, cborNeg, uint64(-1-n))
	}
	return appendCBORHead(b, cborUint, uint64(n))
}

// appendCBORExtra writes a block's extra-keys tuple, or None when it is empty.
func appendCBORExtra(b []byte, extra []Value) []byte {
	if len(extra) == 0 {
		return append(b, cborNone)
	}
	b = appendCBORHead(b, cborArray, uint64(len(extra)))
	for i := range extra {
		b = appendCBORValue(b, &extra[i])
	}
	return b
}

func appendCBORValue(b []byte, v *Value) []byte {
	switch v.kind {
	case kindStr:
		b = appendCBORHead(b, cborText, uint64(len(v.str)))
		return append(b, v.str...)
	case kindInt:
		return appendCBORInt(b, v.num)
	case kindBytes:
		b = appendCBORHead(b, cborBytes, uint64(len(v.raw)))
		return append(b, v.raw...)
	case kindTuple:
		b = appendCBORHead(b, cborArray, uint64(len(v.items)))
		for i := range v.items {
			b = appendCBORValue(b, &v.items[i])
		}
		return b
	default:
		return append(b, cborNone)
	}
}

// appendCBORBlock writes the preimage (parent_digest_bytes, tuple(tokens), extra).
func appendCBORBlock[T Token](b []byte, parent []byte, tokens []T, extra []Value) []byte {
	b = appendCBORBlockHead(b, parent)
	b = appendCBORTokens(b, tokens)
	return appendCBORExtra(b, extra)
}

// appendCBORBlockHead writes the preimage up to the tokens: the 3-tuple's
// head and the parent digest bytes, which are its last bytes.
func appendCBORBlockHead(b []byte, parent []byte) []byte {
	b = append(b, cborArray<<5|3)
	b = appendCBORHead(b, cborBytes, uint64(len(parent)))
	return append(b, parent...)
}

// appendCBORLegacyBlock writes sha256_cbor_64bit's preimage (parent_u64, tokens, extra).
func appendCBORLegacyBlock[T Token](b []byte, parent uint64, tokens []T, extra []Value) []byte {
	b = append(b, cborArray<<5|3)
	b = appendCBORHead(b, cborUint, parent)
	b = appendCBORTokens(b, tokens)
	return appendCBORExtra(b, extra)
}

// appendCBORTokens writes tuple(tokens), each id as appendCBORHead would,
// without its branches (token ids of mixed widths make them mispredict): one
// 8-byte store per id below 2^32 of its head and big-endian value, zero-filled,
// of which the first 1, 2, 3 or 5 bytes count, the width from a table; or with
// SSE, 16 bytes per pair of ids. Ids of 2^32 or more (rare) take
// appendCBORHead's path for the whole tuple.
func appendCBORTokens[T Token](b []byte, tokens []T) []byte {
	b = appendCBORHead(b, cborArray, uint64(len(tokens)))
	w := slices.Grow(b, 5*len(tokens)+16)
	n, all := putCBORUints(w[:cap(w)], len(b), tokens)
	if all > math.MaxUint32 {
		return appendCBORUints(b, tokens)
	}
	return w[:n]
}

// putCBORUints writes the tokens from w[n:] as appendCBORTokens describes,
// ids of 2^32 or more wrongly; it returns the end and a value above 2^32-1
// when there was such an id (the OR of the ids written one at a time).
// 64-bit ids go four at a time through putCBORUintsSSE where the CPU has it.
func putCBORUints[T Token](w []byte, n int, tokens []T) (int, uint64) {
	var all uint64
	if q := len(tokens) &^ 3; useCBORSSE && unsafe.Sizeof(*new(T)) == 8 && q > 0 && len(w)-n >= 5*q+16 {
		// Every 8-byte Token type is a two's complement integer: read as uint64.
		ids := unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(tokens))), q)
		written, high := putCBORUintsSSE(&w[n], ids, &cborPairs)
		n += written
		if high != 0 {
			all = 1 << 32
		}
		tokens = tokens[q:]
	}
	for _, t := range tokens {
		all |= uint64(t)
		x := uint32(t)
		small := (uint64(x) - 24) >> 63 // x < 24: the value is its own head
		c := &cborUintWidths[(bits.Len32(x)|int(small)<<6)&127]
		// The big-endian value in bits 8..39 and the head at bit rot, rotated
		// right by rot: only zero bytes wrap round.
		v := bits.RotateLeft64(uint64(bits.ReverseBytes32(x))<<8|c.head, -int(c.rot))
		binary.LittleEndian.PutUint64(w[n:n+8], v)
		n += int(c.len)
	}
	return n, all
}

// cborPairTable drives putCBORUintsSSE. For two ids of classes c0 and c1
// (0: below 24, 1: below 256, 2: below 65536, 3: below 2^32), entry
// c0+4*c1 holds the PSHUFB mask that writes both from a source register
// holding the two ids little-endian in bytes 0..7 and the heads 0x18, 0x19,
// 0x1a in bytes 8..10, and the number of bytes written.
type cborPairTable struct {
	masks [16][16]byte
	lens  [16]uint8
}

var cborPairs = func() (t cborPairTable) {
	// encode lists the source bytes of an id of class c at byte base.
	encode := func(c, base byte) []byte {
		switch c {
		case 0:
			return []byte{base}
		case 1:
			return []byte{8, base}
		case 2:
			return []byte{9, base + 1, base}
		default:
			return []byte{10, base + 3, base + 2, base + 1, base}
		}
	}
	for key := range t.masks {
		m := append(encode(byte(key%4), 0), encode(byte(key/4), 4)...)
		t.lens[key] = uint8(len(m))
		for i := range t.masks[key] {
			t.masks[key][i] = 0x80 // PSHUFB writes zero
		}
		copy(t.masks[key][:], m)
	}
	return t
}()

// cborUintWidth is how appendCBORTokens writes an id below 2^32.
type cborUintWidth struct {
	head uint64 // the head byte, at bit rot
	rot  uint8  // 0, 16, 24 or 32 for 4, 2, 1 or no value bytes
	len  uint8  // bytes written: head and value
}

// cborUintWidths is indexed by the id's bit length, plus 64 below 24.
var cborUintWidths = func() (t [128]cborUintWidth) {
	for i := range t {
		switch bitLen := i; {
		case i >= 64 || bitLen <= 4:
			t[i] = cborUintWidth{rot: 32, len: 1}
		case bitLen <= 8:
			t[i] = cborUintWidth{head: (cborUint<<5 | 24) << 24, rot: 24, len: 2}
		case bitLen <= 16:
			t[i] = cborUintWidth{head: (cborUint<<5 | 25) << 16, rot: 16, len: 3}
		default:
			t[i] = cborUintWidth{head: cborUint<<5 | 26, rot: 0, len: 5}
		}
	}
	return t
}()

// appendCBORUints writes each token as a CBOR unsigned integer.
func appendCBORUints[T Token](b []byte, tokens []T) []byte {
	for _, t := range tokens {
		b = appendCBORHead(b, cborUint, uint64(t))
	}
	return b
}
