package poll

import (
	"sync/atomic"
	"testing"
	"time"
)

// TestUntilWaitsForAnotherGoroutine: Until returns once a condition another
// goroutine sets holds, having checked it more than once.
func TestUntilWaitsForAnotherGoroutine(t *testing.T) {
	var set atomic.Bool
	checks := 0
	time.AfterFunc(30*time.Millisecond, func() { set.Store(true) })
	Until(t, "the flag", func() bool { checks++; return set.Load() })
	if checks < 2 {
		t.Errorf("%d checks, want more than one", checks)
	}
}
