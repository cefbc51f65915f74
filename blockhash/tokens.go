package blockhash

import (
	"encoding/binary"
	"fmt"

	"github.com/cespare/xxhash/v2"
)

// TokenKeyer computes kvroute's own chained block keys ("keys: tokens", the
// default). They use vLLM's block boundaries and extra keys but not its hash,
// so they need no PYTHONHASHSEED alignment with the engines, and ingest
// computes them from a BlockStored event's token_ids and parent key exactly as
// the request path computes them from a prompt.
//
// Definition (version 1; changing any byte is a breaking change for every
// deployed index, so a new scheme gets a new version string):
//
//	root  = XXH64(seed 0, "kvroute-tokens-v1" || 0x00 || poolSeed)
//	key_i = XXH64(seed 0, uint64le(key_{i-1}) || uint32le(t) for each of the B tokens || E_i)
//
// where key_{-1} = root, block i covers tokens [i*B, (i+1)*B), only full blocks
// have keys, and E_i is block i's extra-keys tuple in canonical CBOR exactly as
// sha256_cbor writes it (0xf6 for None): the LoRA name on every block, then
// multimodal pairs, then cache_salt on block 0 — vLLM's order. Token ids must
// lie in [0, 2^32).
type TokenKeyer struct {
	root      uint64
	blockSize int
}

// tokensSchemeV1 names the key definition above inside the root.
const tokensSchemeV1 = "kvroute-tokens-v1"

// NewTokenKeyer returns the keyer for a pool; poolSeed separates keyspaces
// (kvroute uses the pool name).
func NewTokenKeyer(poolSeed string, blockSizeTokens int) (*TokenKeyer, error) {
	if blockSizeTokens <= 0 {
		return nil, fmt.Errorf("block size %d: must be positive", blockSizeTokens)
	}
	var d xxhash.Digest
	d.Reset()
	d.WriteString(tokensSchemeV1)
	d.Write([]byte{0})
	d.WriteString(poolSeed)
	return &TokenKeyer{root: d.Sum64(), blockSize: blockSizeTokens}, nil
}

// Root is the parent key of block 0.
func (k *TokenKeyer) Root() uint64 { return k.root }

// BlockSize is the block size in tokens.
func (k *TokenKeyer) BlockSize() int { return k.blockSize }

// BlockKey returns one block's key given its parent key (Root for block 0).
func BlockKey[T Token](k *TokenKeyer, parent uint64, tokens []T, extra []Value) (uint64, error) {
	var scratch [scratchLen]byte
	b, err := appendTokensPreimage(scratch[:0], parent, tokens, extra)
	if err != nil {
		return 0, err
	}
	return xxhash.Sum64(b), nil
}

// AppendKeys appends the key of every full block of tokens, chained from
// parent (Root for a request's first block), with the request's LoRA name on
// every block and its cache_salt on the first block when parent is Root.
func AppendKeys[T Token](k *TokenKeyer, dst []uint64, parent uint64, tokens []T, rk RequestKeys) ([]uint64, error) {
	var scratch [scratchLen]byte
	var extraBuf [2]Value
	buf := scratch[:0]
	first := 1
	if parent == k.root {
		first = 0
	}
	for i := 0; (i+1)*k.blockSize <= len(tokens); i++ {
		var err error
		buf, err = appendTokensPreimage(buf[:0], parent, tokens[i*k.blockSize:(i+1)*k.blockSize], rk.blockExtra(extraBuf[:0], i+first))
		if err != nil {
			return dst, fmt.Errorf("block %d: %w", i, err)
		}
		parent = xxhash.Sum64(buf)
		dst = append(dst, parent)
	}
	return dst, nil
}

func appendTokensPreimage[T Token](b []byte, parent uint64, tokens []T, extra []Value) ([]byte, error) {
	b = binary.LittleEndian.AppendUint64(b, parent)
	for _, t := range tokens {
		if uint64(t) > 0xffffffff {
			return b, fmt.Errorf("token id %d outside [0, 2^32)", int64(t))
		}
		b = binary.LittleEndian.AppendUint32(b, uint32(t))
	}
	return appendCBORExtra(b, extra), nil
}
