package blockhash

import "encoding/binary"

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
	b = append(b, cborArray<<5|3)
	b = appendCBORHead(b, cborBytes, uint64(len(parent)))
	b = append(b, parent...)
	b = appendCBORHead(b, cborArray, uint64(len(tokens)))
	for _, t := range tokens {
		b = appendCBORHead(b, cborUint, uint64(t))
	}
	return appendCBORExtra(b, extra)
}

// appendCBORLegacyBlock writes sha256_cbor_64bit's preimage (parent_u64, tokens, extra).
func appendCBORLegacyBlock[T Token](b []byte, parent uint64, tokens []T, extra []Value) []byte {
	b = append(b, cborArray<<5|3)
	b = appendCBORHead(b, cborUint, parent)
	b = appendCBORHead(b, cborArray, uint64(len(tokens)))
	for _, t := range tokens {
		b = appendCBORHead(b, cborUint, uint64(t))
	}
	return appendCBORExtra(b, extra)
}
