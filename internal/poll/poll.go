// Package poll is a test harness: waiting for a condition another goroutine
// or process makes true.
package poll

import (
	"testing"
	"time"
)

// Timeout is how long Until waits: long enough for a loaded 2-core machine
// running tests under -race.
const Timeout = 10 * time.Second

// every is the pause between two checks.
const every = 5 * time.Millisecond

// Until checks cond every 5 ms until it holds, and fails the test with what
// it waited for when Timeout passes first.
func Until(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(Timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", Timeout, what)
		}
		time.Sleep(every)
	}
}
