//go:build !amd64 || purego

package blockhash

import "unsafe"

// useSHANI is false without the amd64 assembly: sum256 uses crypto/sha256.
var useSHANI = false

func sum256SHANI(*[32]byte, []byte) { panic("blockhash: no SHA-NI assembly in this build") }

func chainSHA256CBOR(*[32]byte, []uint64, int, *chainParams, unsafe.Pointer) uint64 {
	panic("blockhash: no SHA-NI assembly in this build")
}
