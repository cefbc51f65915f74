package blockhash

import (
	"fmt"
	"math/bits"

	"github.com/cespare/xxhash/v2"
)

// TokenKeyer computes kvroute's own chained block keys ("keys: tokens", the
// default). They use vLLM's block boundaries and extra keys but not its hash,
// so they need no PYTHONHASHSEED alignment with the engines, and ingest
// computes them from a BlockStored event's token_ids and parent key exactly as
// the request path computes them from a prompt (both call this file).
//
// Definition (version 2; changing any step is a breaking change for every
// deployed index, so a new scheme gets a new version string):
//
//	mix(a, b) = hi64(a·b) XOR lo64(a·b)                 (128-bit product)
//	root      = XXH64(seed 0, "kvroute-tokens-v2" || 0x00 || poolSeed)
//	h         = key_{i-1} XOR c1 XOR n·c2               (n = tokens in the block)
//	for each pair of 64-bit words (w0, w1) of the block's tokens:
//	    h = mix(w0 XOR c2 XOR h, w1 XOR c3 XOR h)
//	key_i     = mix(h XOR c4, XXH64(seed 0, E_i) XOR c1)
//
// where key_{-1} = root; word j is uint32(t_{2j}) | uint32(t_{2j+1}) << 32 and a
// missing last token or word is 0; c1..c4 are tokensC1..tokensC4; block i
// covers tokens [i*B, (i+1)*B) and only full blocks have keys; E_i is block
// i's extra-keys tuple in canonical CBOR exactly as sha256_cbor writes it
// (0xf6 for None): the LoRA name on every block, then multimodal pairs, then
// cache_salt on block 0 — vLLM's order. Token ids must lie in [0, 2^32).
//
// Version 1 hashed the same bytes (parent, uint32 tokens, E_i) with one XXH64
// per block; version 2 reads the tokens as words straight into a
// multiply-fold chain (about 4× less work per block) and hashes only E_i,
// whose digest for None is a constant.
type TokenKeyer struct {
	root      uint64
	blockSize int
	noExtra   uint64 // XXH64(0xf6): E_i of a block without extra keys
}

// tokensSchemeV2 names the key definition above inside the root.
const tokensSchemeV2 = "kvroute-tokens-v2"

// The version-2 mixing constants (odd 64-bit values with well-spread bits).
const (
	tokensC1 = 0x9E3779B97F4A7C15
	tokensC2 = 0xC2B2AE3D27D4EB4F
	tokensC3 = 0x165667B19E3779F9
	tokensC4 = 0xD6E8FEB86659FD93
)

// NewTokenKeyer returns the keyer for a pool; poolSeed separates keyspaces
// (kvroute uses the pool name).
func NewTokenKeyer(poolSeed string, blockSizeTokens int) (*TokenKeyer, error) {
	if blockSizeTokens <= 0 {
		return nil, fmt.Errorf("block size %d: must be positive", blockSizeTokens)
	}
	var d xxhash.Digest
	d.Reset()
	d.WriteString(tokensSchemeV2)
	d.Write([]byte{0})
	d.WriteString(poolSeed)
	return &TokenKeyer{root: d.Sum64(), blockSize: blockSizeTokens, noExtra: xxhash.Sum64([]byte{cborNone})}, nil
}

// Root is the parent key of block 0.
func (k *TokenKeyer) Root() uint64 { return k.root }

// BlockSize is the block size in tokens.
func (k *TokenKeyer) BlockSize() int { return k.blockSize }

// BlockKey returns one block's key given its parent key (Root for block 0).
func BlockKey[T Token](k *TokenKeyer, parent uint64, tokens []T, extra []Value) (uint64, error) {
	var scratch [64]byte
	return tokensBlockKey(k, parent, tokens, extra, scratch[:0])
}

// AppendKeys appends the key of every full block of tokens, chained from
// parent (Root for a request's first block), with the request's LoRA name on
// every block and its cache_salt on the first block when parent is Root.
func AppendKeys[T Token](k *TokenKeyer, dst []uint64, parent uint64, tokens []T, rk RequestKeys) ([]uint64, error) {
	var scratch [64]byte
	var extraBuf [2]Value
	first := 1
	if parent == k.root {
		first = 0
	}
	for i := 0; (i+1)*k.blockSize <= len(tokens); i++ {
		var err error
		parent, err = tokensBlockKey(k, parent, tokens[i*k.blockSize:(i+1)*k.blockSize], rk.blockExtra(extraBuf[:0], i+first), scratch[:0])
		if err != nil {
			return dst, fmt.Errorf("block %d: %w", i, err)
		}
		dst = append(dst, parent)
	}
	return dst, nil
}

// tokensBlockKey is the version-2 step; buf is scratch for E_i's CBOR.
func tokensBlockKey[T Token](k *TokenKeyer, parent uint64, tokens []T, extra []Value, buf []byte) (uint64, error) {
	h := parent ^ tokensC1 ^ uint64(len(tokens))*tokensC2
	for len(tokens) >= 4 {
		t0, t1, t2, t3 := uint64(tokens[0]), uint64(tokens[1]), uint64(tokens[2]), uint64(tokens[3])
		if (t0|t1|t2|t3)>>32 != 0 {
			return 0, errTokenRange(tokens[:4])
		}
		h = mix(t0|t1<<32^tokensC2^h, t2|t3<<32^tokensC3^h)
		tokens = tokens[4:]
	}
	if len(tokens) > 0 {
		var w [4]uint64
		for j, t := range tokens {
			if uint64(t)>>32 != 0 {
				return 0, errTokenRange(tokens[j : j+1])
			}
			w[j] = uint64(t)
		}
		h = mix(w[0]|w[1]<<32^tokensC2^h, w[2]|w[3]<<32^tokensC3^h)
	}
	e := k.noExtra
	if len(extra) > 0 {
		e = xxhash.Sum64(appendCBORExtra(buf, extra))
	}
	return mix(h^tokensC4, e^tokensC1), nil
}

// mix is the 128-bit multiply folded to 64 bits.
func mix(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// errTokenRange names the first token id of ts outside [0, 2^32).
func errTokenRange[T Token](ts []T) error {
	for _, t := range ts {
		if uint64(t)>>32 != 0 {
			return fmt.Errorf("token id %d outside [0, 2^32)", int64(t))
		}
	}
	return nil
}
