package blockhash

import (
	"slices"
	"unsafe"
)

// chainChunkBlocks is how many blocks one chainSHA256CBOR call hashes: the
// size of its digest buffer on the stack.
const chainChunkBlocks = 64

// chainRingLen is the stack room for chainSHA256CBOR's two preimage slots.
// Blocks whose preimages need more (over ~190 tokens, or long extra keys)
// are hashed one call per block.
const chainRingLen = 2048

// chainParams is what chainSHA256CBOR needs besides the ids; the assembly
// reads its fields by the offsets go_asm.h gives.
type chainParams struct {
	head     [48]byte       // a preimage up to its ids, parent bytes zero; then zeros
	headLen  uintptr        // the bytes of head that count
	quads    uintptr        // ids per block / 4
	extra    *byte          // the extra keys' CBOR, readable 16 bytes past extraLen
	extraLen uintptr        // ≥ 1: None is one byte
	pairs    *cborPairTable // the id writer's table
	ring     *byte          // two slots of stride bytes
	stride   uintptr
}

// cborZeroParentHead is a sha256_cbor preimage up to its tokens with the
// parent digest's 32 bytes zero: the 3-tuple's head and a bytes(32) head.
var cborZeroParentHead = [3 + 32]byte{cborArray<<5 | 3, cborBytes<<5 | 24, 32}

// appendChainSHANI is appendChain for sha256_cbor with the SHA extensions.
// Block 0, which alone may carry the cache_salt, is hashed on its own. The
// rest go through chainSHA256CBOR where the ids are 64-bit words in groups
// of four (every 8-byte Token type; block sizes that are multiples of 4),
// which writes each preimage while the previous one's rounds run and keeps
// the chain in registers; otherwise one block at a time.
func appendChainSHANI[T Token, H any](e *Engine, dst []H, tokens []T, rk RequestKeys, out func(Digest) H) []H {
	bs := e.blockSize
	n := len(tokens) / bs
	if n == 0 {
		return dst
	}
	var extraBuf [2]Value
	dst, parent := appendBlocksSHANI(bs, dst, tokens[:bs], e.none, rk.blockExtra(extraBuf[:0], 0), out)
	rest := tokens[bs : n*bs]
	extra := rk.blockExtra(extraBuf[:0], 1)
	if len(rest) == 0 || unsafe.Sizeof(*new(T)) != 8 || bs%4 != 0 || !useCBORSSE {
		dst, _ = appendBlocksSHANI(bs, dst, rest, parent, extra, out)
		return dst
	}

	var p chainParams
	var extraScratch [64]byte
	extraCBOR := slices.Grow(appendCBORExtra(extraScratch[:0], extra), 16)
	head := appendCBORHead(append(p.head[:0], cborZeroParentHead[:]...), cborArray, uint64(bs))
	// A slot holds the head, up to 5 bytes an id and the last pair's 16-byte
	// store, the extra keys and their last 16-byte copy, 0x80 and 64 zeros.
	stride := (len(head) + 5*bs + 16 + len(extraCBOR) + 16 + 1 + 64 + 63) &^ 63
	var ring [chainRingLen]byte
	if 2*stride > len(ring) {
		dst, _ = appendBlocksSHANI(bs, dst, rest, parent, extra, out)
		return dst
	}
	p.headLen = uintptr(len(head))
	p.quads = uintptr(bs / 4)
	p.extra = &extraCBOR[0]
	p.extraLen = uintptr(len(extraCBOR))
	p.pairs = &cborPairs
	p.ring = &ring[0]
	p.stride = uintptr(stride)

	// Every 8-byte Token type is a two's complement integer: read as uint64.
	ids := unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(rest))), len(rest))
	var digests [chainChunkBlocks][32]byte
	for len(rest) > 0 {
		k := min(len(rest)/bs, chainChunkBlocks)
		if chainSHA256CBOR(&parent.b, ids[:k*bs], k, &p, &digests[0]) != 0 {
			// An id of 2^32 or more: these blocks the general way.
			dst, parent = appendBlocksSHANI(bs, dst, rest[:k*bs], parent, extra, out)
		} else {
			for j := range digests[:k] {
				dst = append(dst, out(Digest{b: digests[j], n: 32}))
			}
			parent = Digest{b: digests[k-1], n: 32}
		}
		rest, ids = rest[k*bs:], ids[k*bs:]
	}
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
