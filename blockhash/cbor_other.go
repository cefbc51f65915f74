//go:build !amd64 || purego

package blockhash

// useCBORSSE is false without the amd64 assembly.
var useCBORSSE = false

func putCBORUintsSSE(*byte, []uint64, *cborPairTable) (int, uint64) {
	panic("blockhash: no SSE assembly in this build")
}
