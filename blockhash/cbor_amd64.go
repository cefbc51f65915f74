//go:build !purego

package blockhash

// putCBORUintsSSE is described in cbor_amd64.s. Only when useCBORSSE; dst
// must have room for 5*len(ids)+16 bytes.
//
//go:noescape
func putCBORUintsSSE(dst *byte, ids []uint64, tab *cborPairTable) (written int, high uint64)

// useCBORSSE reports SSSE3 (CPUID.1:ECX bit 9) and SSE4.1 (bit 19).
var useCBORSSE = func() bool {
	_, _, ecx1, _ := cpuid(1, 0)
	return ecx1&(1<<9) != 0 && ecx1&(1<<19) != 0
}()
