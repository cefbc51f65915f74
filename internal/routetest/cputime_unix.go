//go:build unix

package routetest

import (
	"syscall"
	"time"
)

// ProcessCPU is the CPU time this process has used (user + system, every
// thread: the work, the GC and the runtime). Benchmarks report it per
// operation because on a shared machine it moves far less than wall time.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
