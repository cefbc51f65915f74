package blockhash

import (
	"slices"
	"unsafe"
)

// chainRingLen is the stack room for chainSHA256CBOR's two preimage slots.
// Blocks whose preimages need more (over ~190 tokens, or long extra keys)
// are hashed one call per block.
const chainRingLen = 2048

// chainCallBlocks bounds the blocks of one chainSHA256CBOR call (about
// 90 µs at 16 tokens a block): the goroutine cannot be preempted inside it.
const chainCallBlocks = 1024

// chainParams is what chainSHA256CBOR needs besides the ids; the assembly
// reads its fields by the offsets go_asm.h gives.
type chainParams struct {
	head      [48]byte       // a preimage up to its ids, parent bytes zero; then zeros
	headLen   uintptr        // the bytes of head that count
	quads     uintptr        // ids per block / 4
	extra0    *byte          // block 0's extra keys' CBOR, readable 16 bytes past extra0Len
	extra0Len uintptr        // ≥ 1: None is one byte
	extra     *byte          // the other blocks'
	extraLen  uintptr        // ≥ 1
	pairs     *cborPairTable // the id writer's table
	ring      *byte          // two slots of stride bytes
	stride    uintptr        // a slot's bytes, a multiple of 64
	digests   bool           // store Digests, not event values
}

// cborZeroParentHead is a sha256_cbor preimage up to its tokens with the
// parent digest's 32 bytes zero: the 3-tuple's head and a bytes(32) head.
var cborZeroParentHead = [3 + 32]byte{cborArray<<5 | 3, cborBytes<<5 | 24, 32}

// appendChainSHANI is appendChain for sha256_cbor with the SHA extensions.
// Where the ids are 64-bit words in groups of four (every 8-byte Token type;
// block sizes that are multiples of 4) and dst holds event values or Digests
// (out is then Digest.EventValue or the identity: appendChain's two
// callers), one chainSHA256CBOR call writes each preimage while the previous
// one's rounds run, keeps the chain in registers and stores the results
// straight into dst; otherwise, or when an id is 2^32 or more, one call per
// block.
func appendChainSHANI[T Token, H any](e *Engine, dst []H, tokens []T, rk RequestKeys, out func(Digest) H) []H {
	bs := e.blockSize
	n := len(tokens) / bs
	if n == 0 {
		return dst
	}
	var extraBuf [2]Value
	var p chainParams
	_, p.digests = any(dst).([]Digest)
	_, events := any(dst).([]uint64)
	if unsafe.Sizeof(*new(T)) != 8 || bs%4 != 0 || !useCBORSSE || !p.digests && !events {
		return appendBlocksSlow(bs, dst, tokens[:n*bs], e.none, rk, out)
	}
	var extraScratch [2][64]byte
	extra0 := slices.Grow(appendCBORExtra(extraScratch[0][:0], rk.blockExtra(extraBuf[:0], 0)), 16)
	extra := slices.Grow(appendCBORExtra(extraScratch[1][:0], rk.blockExtra(extraBuf[:0], 1)), 16)
	head := appendCBORHead(append(p.head[:0], cborZeroParentHead[:]...), cborArray, uint64(bs))
	// A slot holds the head, up to 5 bytes an id and the last pair's 16-byte
	// store, the extra keys and their last 16-byte copy, 0x80 and 64 zeros.
	stride := (len(head) + 5*bs + 16 + max(len(extra0), len(extra)) + 16 + 1 + 64 + 63) &^ 63
	var ring [chainRingLen]byte
	if 2*stride > len(ring) {
		return appendBlocksSlow(bs, dst, tokens[:n*bs], e.none, rk, out)
	}
	p.headLen = uintptr(len(head))
	p.quads = uintptr(bs / 4)
	p.extra0, p.extra0Len = &extra0[0], uintptr(len(extra0))
	p.extra, p.extraLen = &extra[0], uintptr(len(extra))
	p.pairs = &cborPairs
	p.ring = &ring[0]
	p.stride = uintptr(stride)

	// Every 8-byte Token type is a two's complement integer: read as uint64.
	ids := unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(tokens))), n*bs)
	dst = slices.Grow(dst, n)
	parent := e.none.b
	for done := 0; done < n; {
		k := min(n-done, chainCallBlocks)
		if chainSHA256CBOR(&parent, ids[done*bs:(done+k)*bs], k, &p, unsafe.Pointer(unsafe.SliceData(dst[len(dst)+done:cap(dst)]))) != 0 {
			// An id of 2^32 or more: the general way.
			return appendBlocksSlow(bs, dst, tokens[:n*bs], e.none, rk, out)
		}
		p.extra0, p.extra0Len = p.extra, p.extraLen // block 0 is behind
		done += k
	}
	return dst[:len(dst)+n]
}

// appendBlocksSlow is appendChainSHANI one call per block.
func appendBlocksSlow[T Token, H any](bs int, dst []H, tokens []T, parent Digest, rk RequestKeys, out func(Digest) H) []H {
	var extraBuf [2]Value
	dst, parent = appendBlocksSHANI(bs, dst, tokens[:bs], parent, rk.blockExtra(extraBuf[:0], 0), out)
	dst, _ = appendBlocksSHANI(bs, dst, tokens[bs:], parent, rk.blockExtra(extraBuf[:0], 1), out)
	return dst
}

// appendBlocksSHANI hashes the full blocks of tokens one call each, chained
// from parent, all with the same extra keys; it returns the last digest.
// Each preimage is padded and hashed in the buffer it was written in, and
// the digest lands on the parent bytes, the one part of the next preimage
// that depends on it.
func appendBlocksSHANI[T Token, H any](bs int, dst []H, tokens []T, parent Digest, extra []Value, out func(Digest) H) ([]H, Digest) {
	var scratch [scratchLen]byte
	buf := appendCBORBlockHead(scratch[:0], parent.Bytes())
	headLen := len(buf)
	at := headLen - parent.Len()
	for i := 0; (i+1)*bs <= len(tokens); i++ {
		b := appendCBORTokens(buf[:headLen], tokens[i*bs:(i+1)*bs])
		b = padSHA256(appendCBORExtra(b, extra))
		d := (*[32]byte)(b[at:headLen])
		sum256SHANI(d, b)
		parent = Digest{b: *d, n: 32}
		dst = append(dst, out(parent))
		buf = b
	}
	return dst, parent
}
