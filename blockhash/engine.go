package blockhash

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/zeebo/xxh3"
)

// Token is any integer type token ids arrive in: the tokenizer's []int, an
// event decoder's []uint64. Ids must be non-negative.
type Token interface {
	~int | ~int32 | ~int64 | ~uint32 | ~uint64
}

// ErrNoSeed means no PYTHONHASHSEED is configured. vLLM then draws NONE_HASH
// from os.urandom per process, so its block hashes cannot be reproduced.
var ErrNoSeed = errors.New("no PYTHONHASHSEED configured: vLLM's root hash (NONE_HASH) is random per engine process without it, so engine hashes cannot be reproduced; set the same seed on the engines and in the pool's hash.seed, or use keys: tokens")

// Engine computes vLLM's block hashes for one algorithm, PYTHONHASHSEED and
// hash block size. It is immutable and safe for concurrent use.
type Engine struct {
	algo      Algorithm
	blockSize int
	none      Digest
}

// scratchLen is the stack buffer for one preimage; larger blocks spill to the
// heap once per call, never once per block.
const scratchLen = 4096

// NewEngine returns the hasher for algo with NONE_HASH derived from seed, the
// engine's PYTHONHASHSEED string (nil when unknown: ErrNoSeed).
func NewEngine(algo Algorithm, seed *string, blockSizeTokens int) (*Engine, error) {
	if seed == nil {
		return nil, ErrNoSeed
	}
	if _, err := ParseAlgorithm(algo.String()); err != nil {
		return nil, err
	}
	if blockSizeTokens <= 0 {
		return nil, fmt.Errorf("block size %d: must be positive", blockSizeTokens)
	}
	e := &Engine{algo: algo, blockSize: blockSizeTokens}
	none, err := e.rootHash(*seed)
	if err != nil {
		return nil, err
	}
	e.none = none
	return e, nil
}

// Algorithm is the engine's hash algorithm.
func (e *Engine) Algorithm() Algorithm { return e.algo }

// BlockSize is the hash block size in tokens.
func (e *Engine) BlockSize() int { return e.blockSize }

// NoneHash is the parent of block 0: the algorithm's hash of the seed string
// (init_none_hash in vllm/v1/core/kv_cache_utils.py).
func (e *Engine) NoneHash() Digest { return e.none }

func (e *Engine) rootHash(seed string) (Digest, error) {
	b, err := e.rootPreimage(nil, seed)
	if err != nil {
		return Digest{}, err
	}
	d, _ := e.digest(b)
	return d, nil
}

// rootPreimage is the seed *string* in the algorithm's own serialization.
func (e *Engine) rootPreimage(b []byte, seed string) ([]byte, error) {
	if !e.algo.usesPickle() {
		b = appendCBORHead(b, cborText, uint64(len(seed)))
		return append(b, seed...), nil
	}
	b, body := beginPickle(b)
	return finishPickle(appendPickleStr(b, seed), body)
}

// digest hashes preimage. The SHA-256 algorithms may write their padding into
// preimage's spare capacity; the returned slice is its (possibly grown) backing
// array for the next preimage.
func (e *Engine) digest(preimage []byte) (Digest, []byte) {
	var d Digest
	switch e.algo {
	case XXHash, XXHashCBOR:
		// xxh3_128_digest: the canonical big-endian form, high half first.
		h := xxh3.Hash128(preimage)
		binary.BigEndian.PutUint64(d.b[0:8], h.Hi)
		binary.BigEndian.PutUint64(d.b[8:16], h.Lo)
		d.n = 16
	case SHA256CBOR64Bit:
		var sum [32]byte
		sum, preimage = sum256(preimage)
		copy(d.b[:8], sum[24:32])
		d.n = 8
	default:
		d.b, preimage = sum256(preimage)
		d.n = 32
	}
	return d, preimage
}

// Preimage appends the exact bytes vLLM hashes for one block with the given
// parent digest, tokens and extra keys (nil: None).
func Preimage[T Token](e *Engine, dst []byte, parent Digest, tokens []T, extra []Value) ([]byte, error) {
	switch e.algo {
	case SHA256, XXHash:
		return appendPickleBlock(dst, parent.Bytes(), tokens, extra)
	case SHA256CBOR64Bit:
		return appendCBORLegacyBlock(dst, parent.EventValue(), tokens, extra), nil
	default:
		return appendCBORBlock(dst, parent.Bytes(), tokens, extra), nil
	}
}

// HashBlock returns the digest of one block: H(serialize((parent, tuple(tokens), extra))).
func HashBlock[T Token](e *Engine, parent Digest, tokens []T, extra []Value) (Digest, error) {
	var scratch [scratchLen]byte
	b, err := Preimage(e, scratch[:0], parent, tokens, extra)
	if err != nil {
		return Digest{}, err
	}
	d, _ := e.digest(b)
	return d, nil
}

// AppendDigests appends the digest of every full block of tokens, chained from
// NONE_HASH, with the request's LoRA name on every block and its cache_salt on
// block 0. A trailing partial block has no digest.
func AppendDigests[T Token](e *Engine, dst []Digest, tokens []T, rk RequestKeys) ([]Digest, error) {
	return appendChain(e, dst, tokens, rk, func(d Digest) Digest { return d })
}

// AppendEventKeys appends the 64-bit event value of every full block's digest:
// the keys vLLM publishes in BlockStored with int block hashes (the default).
func AppendEventKeys[T Token](e *Engine, dst []uint64, tokens []T, rk RequestKeys) ([]uint64, error) {
	return appendChain(e, dst, tokens, rk, Digest.EventValue)
}

// appendChain is AppendDigests (out the identity) and AppendEventKeys (out
// Digest.EventValue); the sha256_cbor fast path stores those two itself.
func appendChain[T Token, H any](e *Engine, dst []H, tokens []T, rk RequestKeys, out func(Digest) H) ([]H, error) {
	if e.algo == SHA256CBOR && useSHANI {
		return appendChainSHANI(e, dst, tokens, rk, out), nil
	}
	var scratch [scratchLen]byte
	var extraBuf [2]Value
	buf := scratch[:0]
	parent := e.none
	for i := 0; (i+1)*e.blockSize <= len(tokens); i++ {
		var err error
		buf, err = Preimage(e, buf[:0], parent, tokens[i*e.blockSize:(i+1)*e.blockSize], rk.blockExtra(extraBuf[:0], i))
		if err != nil {
			return dst, fmt.Errorf("block %d: %w", i, err)
		}
		parent, buf = e.digest(buf)
		dst = append(dst, out(parent))
	}
	return dst, nil
}
