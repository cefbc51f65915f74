//go:build !purego

package blockhash

import "unsafe"

// sum256SHANI writes the SHA-256 of an already padded message (a positive
// multiple of 64 bytes) to out using the SHA extensions; out may overlap
// padded, which is read first. Only when useSHANI.
//
//go:noescape
func sum256SHANI(out *[32]byte, padded []byte)

// chainSHA256CBOR hashes blocks sha256_cbor blocks of ids in a chain from
// *parent, writing each preimage as p describes while the previous one is
// hashed, and stores each block's event value (uint64) or, with p.digests,
// its Digest from out on; see sha256_amd64.s. A non-zero high means an id of
// 2^32 or more: the results are wrong. Only when useSHANI and useCBORSSE.
//
//go:noescape
func chainSHA256CBOR(parent *[32]byte, ids []uint64, blocks int, p *chainParams, out unsafe.Pointer) (high uint64)

func cpuid(leaf, subleaf uint32) (eax, ebx, ecx, edx uint32)

// useSHANI reports the SHA extensions (CPUID.7.0:EBX bit 29) and the SSSE3
// (CPUID.1:ECX bit 9) and SSE4.1 (bit 19) instructions sum256SHANI also uses.
var useSHANI = func() bool {
	if maxLeaf, _, _, _ := cpuid(0, 0); maxLeaf < 7 {
		return false
	}
	_, _, ecx1, _ := cpuid(1, 0)
	_, ebx7, _, _ := cpuid(7, 0)
	return ecx1&(1<<9) != 0 && ecx1&(1<<19) != 0 && ebx7&(1<<29) != 0
}()
