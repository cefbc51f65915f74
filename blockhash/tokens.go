package blockhash

import (
	"fmt"
	"math/bits"
	"slices"

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
	chain     chainConsts
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
	start := tokensC1 ^ uint64(blockSizeTokens)*tokensC2
	return &TokenKeyer{
		root:      d.Sum64(),
		blockSize: blockSizeTokens,
		noExtra:   xxhash.Sum64([]byte{cborNone}),
		chain:     chainConsts{startA: start ^ tokensC2, startB: start ^ tokensC3, c2: tokensC2, c3: tokensC3, c4: tokensC4},
	}, nil
}

// Root is the parent key of block 0.
func (k *TokenKeyer) Root() uint64 { return k.root }

// BlockSize is the block size in tokens.
func (k *TokenKeyer) BlockSize() int { return k.blockSize }

// BlockKey returns one block's key given its parent key (Root for block 0).
func BlockKey[T Token](k *TokenKeyer, parent uint64, tokens []T, extra []Value) (uint64, error) {
	var scratch [64]byte
	return tokensBlockKey(parent, tokens, k.extraDigest(extra, scratch[:0]))
}

// AppendKeys appends the key of every full block of tokens, chained from
// parent (Root for a request's first block), with the request's LoRA name on
// every block and its cache_salt on the first block when parent is Root.
func AppendKeys[T Token](k *TokenKeyer, dst []uint64, parent uint64, tokens []T, rk RequestKeys) ([]uint64, error) {
	bs := k.blockSize
	n := len(tokens) / bs
	if n == 0 {
		return dst, nil
	}
	var scratch [64]byte
	var extraBuf [2]Value
	rest := k.extraDigest(rk.blockExtra(extraBuf[:0], 1), scratch[:0])
	first := rest
	if parent == k.root {
		first = k.extraDigest(rk.blockExtra(extraBuf[:0], 0), scratch[:0])
	}
	if bs%16 != 0 {
		for i := range n {
			key, err := tokensBlockKey(parent, tokens[i*bs:(i+1)*bs], first)
			if err != nil {
				return dst, fmt.Errorf("block %d: %w", i, err)
			}
			dst = append(dst, key)
			parent, first = key, rest
		}
		return dst, nil
	}
	dst = slices.Grow(dst, n)
	keys := dst[len(dst) : len(dst)+n]
	if i := chainTokenKeys(keys, parent, tokens[:n*bs], bs, &k.chain, first, rest); i < n {
		return dst[:len(dst)+i], fmt.Errorf("block %d: %w", i, errTokenRange(tokens[i*bs:(i+1)*bs]))
	}
	return dst[:len(dst)+n], nil
}

// extraDigest is XXH64 of E_i, the CBOR of a block's extra keys; buf is
// scratch for the CBOR.
func (k *TokenKeyer) extraDigest(extra []Value, buf []byte) uint64 {
	if len(extra) == 0 {
		return k.noExtra
	}
	return xxhash.Sum64(appendCBORExtra(buf, extra))
}

// tokensBlockKey is the version-2 step for one block, word pair by word pair
// as defined; e is XXH64(E_i).
func tokensBlockKey[T Token](parent uint64, tokens []T, e uint64) (uint64, error) {
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
	return mix(h^tokensC4, e^tokensC1), nil
}

// chainTokenKeys sets keys[i] to the key of the i-th block of bs tokens
// (bs a positive multiple of 16, len(tokens) = len(keys)·bs), chained from
// parent, block 0 with extra-keys digest first and the others with rest. It
// stops before the first block with an id outside [0, 2^32) and returns how
// many keys it set.
//
// It computes tokensBlockKey's values with a shorter dependency chain, the
// one that bounds it: each mix's product is kept as (hi, lo) and the next
// mix's inputs are hi ^ (lo ^ x), where x (the words and constants) and
// lo ^ x are ready before hi, so one XOR follows each multiply; the block
// start's h = parent ^ c1 ^ n·c2 is folded into the first pair's constants.
func chainTokenKeys[T Token](keys []uint64, parent uint64, tokens []T, bs int, c *chainConsts, first, rest uint64) int {
	hi, lo := parent, uint64(0)
	e := first ^ tokensC1
	off := 0
	for i := range keys {
		ka, kb := c.startA, c.startB
		for end := off + bs; off < end; off += 16 {
			q := (*[16]T)(tokens[off : off+16])
			t0, t1, t2, t3 := uint64(q[0]), uint64(q[1]), uint64(q[2]), uint64(q[3])
			ids := t0 | t1 | t2 | t3
			hi, lo = bits.Mul64(hi^(lo^(t0|t1<<32^ka)), hi^(lo^(t2|t3<<32^kb)))
			t0, t1, t2, t3 = uint64(q[4]), uint64(q[5]), uint64(q[6]), uint64(q[7])
			ids |= t0 | t1 | t2 | t3
			hi, lo = bits.Mul64(hi^(lo^(t0|t1<<32^c.c2)), hi^(lo^(t2|t3<<32^c.c3)))
			t0, t1, t2, t3 = uint64(q[8]), uint64(q[9]), uint64(q[10]), uint64(q[11])
			ids |= t0 | t1 | t2 | t3
			hi, lo = bits.Mul64(hi^(lo^(t0|t1<<32^c.c2)), hi^(lo^(t2|t3<<32^c.c3)))
			t0, t1, t2, t3 = uint64(q[12]), uint64(q[13]), uint64(q[14]), uint64(q[15])
			ids |= t0 | t1 | t2 | t3
			hi, lo = bits.Mul64(hi^(lo^(t0|t1<<32^c.c2)), hi^(lo^(t2|t3<<32^c.c3)))
			if ids>>32 != 0 {
				return i
			}
			ka, kb = c.c2, c.c3
		}
		hi, lo = bits.Mul64(hi^(lo^c.c4), e)
		keys[i] = hi ^ lo
		e = rest ^ tokensC1
	}
	return len(keys)
}

// chainConsts are chainTokenKeys' constants as values: the compiler moves a
// constant operand of an XOR chain to its end, after hi, which would put a
// second XOR on the dependency chain.
type chainConsts struct {
	startA, startB uint64 // c1 ^ n·c2 ^ c2, c1 ^ n·c2 ^ c3
	c2, c3, c4     uint64
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
