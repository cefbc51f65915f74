//go:build linux

package rhmap

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
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

// waitDrained waits, boundedly, until q's drain goroutine has ended.
func waitDrained(t *testing.T, q *collapseQueue) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		q.mu.Lock()
		done := !q.draining
		q.mu.Unlock()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the collapse queue did not drain in 10 s")
		}
	}
}

// The collapse queue hands every range to its goroutine, in order, and the
// goroutine ends once the queue is empty.
func TestCollapseQueueDrainsEveryRangeInOrder(t *testing.T) {
	var mu sync.Mutex
	var got []hugeRange
	q := &collapseQueue{do: func(r hugeRange) { mu.Lock(); got = append(got, r); mu.Unlock() }}
	var want []hugeRange
	for i := range uintptr(100) {
		r := hugeRange{i * hugePageBytes, (i + 1) * hugePageBytes}
		want = append(want, r)
		if !q.queue(r) {
			t.Fatalf("range %d refused by a queue that is not full", i)
		}
	}
	waitDrained(t, q)
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(got, want) {
		t.Fatalf("collapsed %d ranges %v…, want %d in order", len(got), got[:min(len(got), 3)], len(want))
	}
}

// While its goroutine is busy, the queue keeps at most maxQueuedCollapses
// ranges and refuses the rest: a burst of growth cannot grow it.
func TestCollapseQueueRefusesBeyondItsBound(t *testing.T) {
	release := make(chan struct{})
	var done atomic.Int64
	q := &collapseQueue{do: func(hugeRange) { <-release; done.Add(1) }}
	kept := 0
	for i := range uintptr(3 * maxQueuedCollapses) {
		if q.queue(hugeRange{i * hugePageBytes, (i + 1) * hugePageBytes}) {
			kept++
		}
	}
	// The goroutine may have taken the first batch off the queue before it
	// blocked: at most one bound's worth more.
	if kept < maxQueuedCollapses || kept > 2*maxQueuedCollapses {
		t.Fatalf("kept %d of %d ranges, want %d to %d", kept, 3*maxQueuedCollapses, maxQueuedCollapses, 2*maxQueuedCollapses)
	}
	close(release)
	waitDrained(t, q)
	if int(done.Load()) != kept {
		t.Fatalf("collapsed %d ranges, kept %d", done.Load(), kept)
	}
}
