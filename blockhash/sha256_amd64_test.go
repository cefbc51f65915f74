//go:build !purego

package blockhash

import (
	"os"
	"strings"
	"testing"
)

// TestSHANIDetectedWhereTheKernelSeesIt guards the fast path against a broken
// CPUID check: where Linux lists the sha_ni flag, useSHANI must be on.
func TestSHANIDetectedWhereTheKernelSeesIt(t *testing.T) {
	info, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		t.Skipf("no /proc/cpuinfo: %v", err)
	}
	for line := range strings.Lines(string(info)) {
		if name, flags, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(name) == "flags" {
			kernel := strings.Contains(flags+" ", " sha_ni ") && strings.Contains(flags+" ", " sse4_1 ") && strings.Contains(flags+" ", " ssse3 ")
			if kernel != useSHANI {
				t.Fatalf("kernel reports sha_ni+sse4_1+ssse3 = %v, useSHANI = %v", kernel, useSHANI)
			}
			return
		}
	}
	t.Skip("no flags line in /proc/cpuinfo")
}

// BenchmarkSHANIRounds_625Blocks is the floor under EngineKeys_10kTokens_SHA256CBOR:
// 625 two-block messages (a 100-byte preimage, padded), each hashed with the
// assembly into the parent bytes of the next, as the block-per-call path
// does, with no preimage to write: the rounds' dependency chain and little
// else (chainSHA256CBOR keeps even the digest in registers).
func BenchmarkSHANIRounds_625Blocks(b *testing.B) {
	if !useSHANI {
		b.Skip("no SHA extensions on this CPU")
	}
	msg := padSHA256(make([]byte, 100, 256))
	for b.Loop() {
		for range 625 {
			sum256SHANI((*[32]byte)(msg[3:35]), msg)
		}
	}
}
