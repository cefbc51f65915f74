package blockhash

import (
	"encoding/binary"
	"errors"
	"math/bits"
)

// Pickle protocol 5 as CPython's C pickler writes the shapes vLLM hashes
// (pickle.dumps(obj, protocol=5); vllm/utils/hashing.py). Every str, bytes and non-empty
// tuple is memoized; ints never are. The pickler memoizes by object identity,
// so the same Python object appearing twice in one block would be written as a
// BINGET the outside world cannot predict: vLLM builds distinct objects for the
// shapes in the vectors, and the *_cbor algorithms avoid the question entirely.

const (
	pickleProto          = 0x80
	pickleFrame          = 0x95
	pickleStop           = '.'
	pickleMemoize        = 0x94
	pickleShortBinBytes  = 'C'
	pickleBinBytes       = 'B'
	pickleShortBinUnicod = 0x8c
	pickleBinUnicode     = 'X'
	pickleBinInt1        = 'K'
	pickleBinInt2        = 'M'
	pickleBinInt         = 'J'
	pickleLong1          = 0x8a
	pickleNone           = 'N'
	pickleMark           = '('
	pickleTuple          = 't'
	pickleTuple1         = 0x85
	pickleEmptyTuple     = ')'

	// pickleFrameTarget is the C pickler's FRAME_SIZE_TARGET: it starts a new
	// frame once a frame reaches 64 KiB, at split points not reproduced here.
	pickleFrameTarget = 64 * 1024
)

// errPickleTooLarge reports a preimage the C pickler would split into frames.
var errPickleTooLarge = errors.New("pickle preimage reaches 64 KiB: the C pickler would split it into frames, which kvroute does not reproduce (use a *_cbor algorithm)")

// beginPickle writes PROTO 5 and a FRAME header whose length finishPickle patches.
func beginPickle(b []byte) ([]byte, int) {
	b = append(b, pickleProto, 5, pickleFrame, 0, 0, 0, 0, 0, 0, 0, 0)
	return b, len(b)
}

func finishPickle(b []byte, bodyStart int) ([]byte, error) {
	b = append(b, pickleStop)
	n := len(b) - bodyStart
	if n >= pickleFrameTarget {
		return b, errPickleTooLarge
	}
	binary.LittleEndian.PutUint64(b[bodyStart-8:bodyStart], uint64(n))
	return b, nil
}

func appendPickleUint(b []byte, n uint64) []byte {
	switch {
	case n <= 0xff:
		return append(b, pickleBinInt1, byte(n))
	case n <= 0xffff:
		return binary.LittleEndian.AppendUint16(append(b, pickleBinInt2), uint16(n))
	case n < 1<<31:
		return binary.LittleEndian.AppendUint32(append(b, pickleBinInt), uint32(n))
	}
	// LONG1: shortest little-endian two's complement; a positive value needs
	// a clear sign bit, hence bit_length/8 + 1 bytes.
	size := bits.Len64(n)/8 + 1
	b = append(b, pickleLong1, byte(size))
	for i := 0; i < size; i++ {
		if i < 8 {
			b = append(b, byte(n>>(8*i)))
		} else {
			b = append(b, 0)
		}
	}
	return b
}

func appendPickleInt(b []byte, n int64) []byte {
	switch {
	case n >= 0:
		return appendPickleUint(b, uint64(n))
	case n >= -1<<31:
		return binary.LittleEndian.AppendUint32(append(b, pickleBinInt), uint32(int32(n)))
	}
	// LONG1 for a negative value below -2^31: shortest two's complement.
	size := 8
	for size > 1 && byte(n>>(8*(size-1))) == 0xff && byte(n>>(8*(size-2)))&0x80 != 0 {
		size--
	}
	b = append(b, pickleLong1, byte(size))
	for i := 0; i < size; i++ {
		b = append(b, byte(n>>(8*i)))
	}
	return b
}

func appendPickleBytes(b []byte, data []byte) []byte {
	if len(data) < 256 {
		b = append(b, pickleShortBinBytes, byte(len(data)))
	} else {
		b = binary.LittleEndian.AppendUint32(append(b, pickleBinBytes), uint32(len(data)))
	}
	return append(append(b, data...), pickleMemoize)
}

func appendPickleStr(b []byte, s string) []byte {
	if len(s) < 256 {
		b = append(b, pickleShortBinUnicod, byte(len(s)))
	} else {
		b = binary.LittleEndian.AppendUint32(append(b, pickleBinUnicode), uint32(len(s)))
	}
	return append(append(b, s...), pickleMemoize)
}

// tupleOpen and tupleClose bracket n already-written items the way the C
// pickler does: TUPLE1/2/3 for short tuples, MARK ... TUPLE otherwise.
func pickleTupleOpen(b []byte, n int) []byte {
	if n > 3 {
		return append(b, pickleMark)
	}
	return b
}

func pickleTupleClose(b []byte, n int) []byte {
	switch {
	case n == 0:
		return append(b, pickleEmptyTuple)
	case n <= 3:
		return append(b, pickleTuple1+byte(n-1), pickleMemoize)
	default:
		return append(b, pickleTuple, pickleMemoize)
	}
}

func appendPickleValue(b []byte, v *Value) []byte {
	switch v.kind {
	case kindStr:
		return appendPickleStr(b, v.str)
	case kindInt:
		return appendPickleInt(b, v.num)
	case kindBytes:
		return appendPickleBytes(b, v.raw)
	case kindTuple:
		b = pickleTupleOpen(b, len(v.items))
		for i := range v.items {
			b = appendPickleValue(b, &v.items[i])
		}
		return pickleTupleClose(b, len(v.items))
	default:
		return append(b, pickleNone)
	}
}

// appendPickleBlock writes the preimage of (parent_digest_bytes, tuple(tokens), extra).
func appendPickleBlock[T Token](b []byte, parent []byte, tokens []T, extra []Value) ([]byte, error) {
	b, body := beginPickle(b)
	b = appendPickleBytes(b, parent)
	b = pickleTupleOpen(b, len(tokens))
	for _, t := range tokens {
		b = appendPickleUint(b, uint64(t))
	}
	b = pickleTupleClose(b, len(tokens))
	if len(extra) == 0 {
		b = append(b, pickleNone)
	} else {
		b = pickleTupleOpen(b, len(extra))
		for i := range extra {
			b = appendPickleValue(b, &extra[i])
		}
		b = pickleTupleClose(b, len(extra))
	}
	b = append(b, pickleTuple1+2, pickleMemoize)
	return finishPickle(b, body)
}
