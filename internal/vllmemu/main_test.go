package vllmemu

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind: an
// emulated engine's PUB and ROUTER sockets must stop theirs on Close
// (zmq4 v0.17.0's PUB writer never did; third_party/zmq4 fixes it).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
