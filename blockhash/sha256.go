package blockhash

import (
	"crypto/sha256"
	"encoding/binary"
	"slices"
)

// sum256 returns the SHA-256 of msg. With the SHA extensions (amd64) it pads
// msg in place, in its spare capacity (grown when short), and hashes every
// 64-byte block in one assembly call: none of crypto/sha256's buffering and
// finalisation, which cost about as much as the rounds for the two-block
// preimages of a block hash. The returned slice is msg's possibly grown
// backing array, for the caller to reuse. Elsewhere it is crypto/sha256.Sum256,
// whose own assembly (AVX2, ARMv8 SHA2) is then the fastest there is.
func sum256(msg []byte) (sum [32]byte, scratch []byte) {
	if !useSHANI {
		return sha256.Sum256(msg), msg
	}
	padded := padSHA256(msg)
	sum256SHANI(&sum, padded)
	return sum, padded[:len(msg)]
}

// padSHA256 appends SHA-256's padding to msg (FIPS 180-4 §5.1.1): 0x80, zeros
// up to 56 mod 64, then the message length in bits, big-endian.
func padSHA256(msg []byte) []byte {
	n := len(msg)
	end := (n + 1 + 8 + 63) &^ 63
	b := slices.Grow(msg, 1+64+8)[:n+1+64+8]
	b[n] = 0x80
	clear(b[n+1:][:64]) // at least up to the length; a constant size clears without a call
	binary.BigEndian.PutUint64(b[end-8:end], uint64(n)<<3)
	return b[:end]
}
