package ingest

import (
	"context"
	"encoding/binary"
	"net"
	"runtime"
	"strings"
	"testing"

	"github.com/go-zeromq/zmq4"

	"github.com/kvroute/kvroute/internal/zmtpcap"
	"github.com/kvroute/kvroute/internal/zmtptest"
)

// TestClosedSocketLeavesNoReaderBehind: every socket kind ingest opens, on
// the capped transport, closed while its peer floods it and nobody reads
// (the state subscribeOnce, readBound and fetchReplay leave a socket in
// when they stop: cancelled, a replay reply of the wrong layout, a replay
// timeout). zmq4 v0.17.0's per-connection reader blocked forever handing
// the 11th message to the socket's full 10-message queue, ignoring the
// socket's closed context: each such close leaked the goroutine and up to
// 11 messages of up to Settings.MaxMessageBytes. third_party/zmq4 carries
// the fix; before it this test failed on every kind (checked).
func TestClosedSocketLeavesNoReaderBehind(t *testing.T) {
	lim := &zmtpcap.Limit{MaxMessageBytes: 1 << 20}
	for _, tc := range []struct {
		name, peerType string
		newSock        func(ctx context.Context) zmq4.Socket
		bind           bool
	}{
		{"connected SUB", "PUB", func(ctx context.Context) zmq4.Socket { return zmq4.NewSub(ctx, zmtpcap.Quiet) }, false},
		{"bound SUB", "PUB", func(ctx context.Context) zmq4.Socket { return zmq4.NewSub(ctx, zmtpcap.Quiet) }, true},
		{"replay DEALER", "ROUTER", func(ctx context.Context) zmq4.Socket { return zmq4.NewDealer(ctx, zmtpcap.Quiet) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := blockedReaders() // a failure of an earlier kind stays blocked
			s := tc.newSock(zmtpcap.Context(t.Context(), lim))
			if err := s.SetOption(zmq4.OptionSubscribe, ""); err != nil {
				t.Fatal(err)
			}
			var peer net.Conn
			if tc.bind {
				ep := freeEndpoint(t)
				if err := s.Listen(zmtpcap.Endpoint(ep)); err != nil {
					t.Fatal(err)
				}
				c, err := net.Dial("tcp", strings.TrimPrefix(ep, "tcp://"))
				if err != nil {
					t.Fatal(err)
				}
				rawHandshake(t, c, tc.peerType)
				peer = c
			} else {
				l, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				accepted := make(chan net.Conn, 1)
				go func() { // zmq4's Dial returns after the handshake
					c, err := l.Accept()
					if err == nil {
						rawHandshake(t, c, tc.peerType)
						accepted <- c
					}
					close(accepted)
				}()
				if err := s.Dial(zmtpcap.Endpoint("tcp://" + l.Addr().String())); err != nil {
					t.Fatal(err)
				}
				peer = <-accepted
				l.Close()
				if peer == nil {
					t.Fatal("no connection accepted")
				}
			}
			defer peer.Close() // the peer stays up while kvroute closes
			if _, err := peer.Write(flood(64)); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the reader blocked on the full queue", func() bool { return blockedReaders() == before+1 })
			if err := s.Close(); err != nil {
				t.Logf("close: %v", err)
			}
			waitFor(t, "the closed socket's reader to exit", func() bool { return blockedReaders() == before })
		})
	}
}

// flood is n messages of [topic, seq, payload], framed as a PUB sends them
// (a ROUTER's reply to a DEALER reads the same on the DEALER's side).
func flood(n int) []byte {
	var out []byte
	for seq := range uint64(n) {
		out = append(out, zmtptest.Frame(zmtpcap.FlagMore, []byte("topic"))...)
		out = append(out, zmtptest.Frame(zmtpcap.FlagMore, binary.BigEndian.AppendUint64(nil, seq))...)
		out = append(out, zmtptest.Frame(0, []byte("payload"))...)
	}
	return out
}

// blockedReaders counts zmq4 per-connection readers blocked handing a
// message to their socket's queue (a reader waiting for bytes is in IO wait).
func blockedReaders() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	blocked := 0
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		waiting := strings.Contains(g, "[chan send") || strings.Contains(g, "[select") // before the fix, after it
		if waiting && strings.Contains(g, "zmq4.(*qreader).listen(") {
			blocked++
		}
	}
	return blocked
}
