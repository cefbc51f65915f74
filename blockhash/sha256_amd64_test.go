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
