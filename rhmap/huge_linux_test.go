//go:build linux

package rhmap

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"testing"
	"unsafe"
)

// A table of hugeAdviseBytes or more lies in memory advised for huge pages:
// its mapping's VmFlags in /proc/self/smaps has "hg". Without THP in the
// kernel the advice cannot be given.
func TestLargeTablesAreAdvisedForHugePages(t *testing.T) {
	if _, err := os.Stat("/sys/kernel/mm/transparent_hugepage"); err != nil {
		t.Skip("kernel without transparent huge pages:", err)
	}
	var m Map[val]
	for k := uint64(1); uintptr(m.size)*unsafe.Sizeof(slot[val]{}) < hugeAdviseBytes; k++ {
		m.Put(k, val{})
	}
	flags, err := vmFlags(uintptr(unsafe.Pointer(&m.segs[0][0])))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(flags, " hg") {
		t.Fatalf("a table of %d bytes: its mapping's VmFlags are %q, no hg", uintptr(m.size)*unsafe.Sizeof(slot[val]{}), flags)
	}
}

// vmFlags is the VmFlags line of the mapping holding addr.
func vmFlags(addr uintptr) (string, error) {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return "", err
	}
	defer f.Close()
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		var lo, hi uintptr
		if n, _ := fmt.Sscanf(line, "%x-%x ", &lo, &hi); n == 2 {
			in = lo <= addr && addr < hi
			continue
		}
		if in && strings.HasPrefix(line, "VmFlags:") {
			return line, nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("no mapping holds %#x", addr)
}
