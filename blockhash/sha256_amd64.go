//go:build !purego

package blockhash

// sum256SHANI writes the SHA-256 of an already padded message (a positive
// multiple of 64 bytes) to out using the SHA extensions; out may overlap
// padded, which is read first. Only when useSHANI.
//
//go:noescape
func sum256SHANI(out *[32]byte, padded []byte)

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
