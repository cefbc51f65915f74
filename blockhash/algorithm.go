// Package blockhash turns a request's token ids into per-block keys the way
// vLLM's prefix cache does: block i covers tokens [i*B, (i+1)*B), only full
// blocks count, and each block's key chains in its parent's.
//
// Two key schemes are offered. Engine keys reproduce vLLM's own block hashes
// byte for byte for every --prefix-caching-hash-algo (see Engine). Token keys
// are kvroute's own chained 64-bit keys (see TokenKeyer): they need no
// PYTHONHASHSEED alignment with the engines and are computed identically from a
// request and from a BlockStored event.
//
// Source of truth: vllm/utils/hashing.py and vllm/v1/core/kv_cache_utils.py at
// upstream main 5ac26849 (2026-08-07); docs/BLOCKHASH.md describes the scheme
// and testdata/vllm/ holds vLLM's own outputs.
package blockhash

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strings"
)

// Algorithm is one of vLLM's --prefix-caching-hash-algo choices.
type Algorithm uint8

// The algorithms vLLM offers, plus the legacy 64-bit CBOR scheme of vLLM ≤ 0.10.1.
const (
	// SHA256 is vLLM's default: SHA-256 over pickle protocol 5.
	SHA256 Algorithm = iota + 1
	// SHA256CBOR is SHA-256 over canonical CBOR.
	SHA256CBOR
	// XXHash is XXH3-128 (seed 0) over pickle protocol 5.
	XXHash
	// XXHashCBOR is XXH3-128 (seed 0) over canonical CBOR.
	XXHashCBOR
	// SHA256CBOR64Bit is the removed sha256_cbor_64bit of vLLM ≤ 0.10.1: integer
	// parents and the low 64 bits of SHA-256 over CBOR as the whole hash.
	SHA256CBOR64Bit
)

var algorithmNames = [...]string{
	SHA256:          "sha256",
	SHA256CBOR:      "sha256_cbor",
	XXHash:          "xxhash",
	XXHashCBOR:      "xxhash_cbor",
	SHA256CBOR64Bit: "sha256_cbor_64bit",
}

// ParseAlgorithm maps vLLM's flag value to an Algorithm.
func ParseAlgorithm(name string) (Algorithm, error) {
	for a, n := range algorithmNames {
		if n != "" && n == name {
			return Algorithm(a), nil
		}
	}
	return 0, fmt.Errorf("unknown hash algorithm %q (known: %s)", name, strings.Join(algorithmNames[1:], ", "))
}

// String returns vLLM's name for the algorithm.
func (a Algorithm) String() string {
	if int(a) < len(algorithmNames) && algorithmNames[a] != "" {
		return algorithmNames[a]
	}
	return fmt.Sprintf("Algorithm(%d)", uint8(a))
}

func (a Algorithm) usesPickle() bool { return a == SHA256 || a == XXHash }

// Digest is one block's full hash: 32 bytes for sha256*, 16 for xxhash*, and
// the 8-byte big-endian integer for sha256_cbor_64bit.
type Digest struct {
	b [32]byte
	n uint8
}

// Bytes returns the digest bytes.
func (d *Digest) Bytes() []byte { return d.b[:d.n] }

// Len is the digest length in bytes; 0 for the zero Digest.
func (d Digest) Len() int { return int(d.n) }

// Hex returns the digest in lower-case hex.
func (d Digest) Hex() string { return hex.EncodeToString(d.b[:d.n]) }

// EventValue is the 64-bit value vLLM publishes for this digest in KV events
// (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1, the default): the last 8 digest bytes
// read big-endian.
func (d Digest) EventValue() uint64 {
	if d.n < 8 {
		var tmp [8]byte
		copy(tmp[8-d.n:], d.b[:d.n])
		return binary.BigEndian.Uint64(tmp[:])
	}
	return binary.BigEndian.Uint64(d.b[d.n-8 : d.n])
}
