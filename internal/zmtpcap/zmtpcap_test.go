package zmtpcap_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/kvroute/kvroute/internal/zmtpcap"
	"github.com/kvroute/kvroute/internal/zmtptest"
)

func TestZMTPScannerLimits(t *testing.T) {
	greet := zmtptest.Greeting()
	const limit = 1000
	cases := []struct {
		name   string
		stream []byte
		reason string
	}{
		{"small message", concat(greet, zmtptest.Ready("PUB"), zmtptest.Frame(zmtpcap.FlagMore, []byte("topic")), zmtptest.Frame(0, make([]byte, 900))), ""},
		{"frame at the limit", concat(greet, zmtptest.Frame(0, make([]byte, limit))), ""},
		{"frame over the limit", concat(greet, zmtptest.Frame(0, make([]byte, limit+1))), zmtpcap.ReasonFrame},
		{"2^62 header", concat(greet, binary.BigEndian.AppendUint64([]byte{zmtpcap.FlagLong}, 1<<62)), zmtpcap.ReasonFrame},
		{"max uint64 header", concat(greet, binary.BigEndian.AppendUint64([]byte{zmtpcap.FlagLong | zmtpcap.FlagMore}, ^uint64(0))), zmtpcap.ReasonFrame},
		{"message over the limit", concat(greet, zmtptest.Frame(zmtpcap.FlagMore, make([]byte, 600)), zmtptest.Frame(0, make([]byte, 600))), zmtpcap.ReasonMessage},
		{"limit applies per message", concat(greet, zmtptest.Frame(0, make([]byte, 600)), zmtptest.Frame(0, make([]byte, 600))), ""},
		{"oversize command", concat(greet, zmtptest.Frame(zmtpcap.FlagCommand, make([]byte, limit+1))), zmtpcap.ReasonFrame},
	}
	for _, tc := range cases {
		for _, chunk := range []int{1, 3, 64, len(tc.stream)} {
			s := zmtpcap.NewScanner(limit)
			var err error
			for b := tc.stream; len(b) > 0 && err == nil; {
				n := min(chunk, len(b))
				err = s.Scan(b[:n])
				b = b[n:]
			}
			var r zmtpcap.Refusal
			switch {
			case tc.reason == "" && err != nil:
				t.Errorf("%s (chunks of %d): refused: %v", tc.name, chunk, err)
			case tc.reason != "" && (!errors.As(err, &r) || r.Reason != tc.reason):
				t.Errorf("%s (chunks of %d): %v, want %s", tc.name, chunk, err, tc.reason)
			}
		}
	}
}

func concat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// FuzzZMTPScanner: any byte stream, read in any chunking, is refused or
// passed identically, never panics, and nothing passed exceeds the limit.
func FuzzZMTPScanner(f *testing.F) {
	greet := zmtptest.Greeting()
	f.Add(concat(greet, zmtptest.Ready("PUB"), zmtptest.Frame(zmtpcap.FlagMore, []byte("t")), zmtptest.Frame(0, make([]byte, 300))), uint8(7))
	f.Add(concat(greet, binary.BigEndian.AppendUint64([]byte{zmtpcap.FlagLong}, 1<<62)), uint8(1))
	f.Add(concat(greet, zmtptest.Frame(zmtpcap.FlagMore, make([]byte, 200)), zmtptest.Frame(0, make([]byte, 200))), uint8(64))
	f.Fuzz(func(t *testing.T, stream []byte, chunk uint8) {
		const limit = 256
		whole := zmtpcap.NewScanner(limit)
		errWhole := whole.Scan(stream)
		s := zmtpcap.NewScanner(limit)
		var err error
		step := int(chunk%32) + 1
		for b := stream; len(b) > 0 && err == nil; {
			n := min(step, len(b))
			err = s.Scan(b[:n])
			b = b[n:]
		}
		if (err == nil) != (errWhole == nil) {
			t.Fatalf("chunking changed the verdict: %v vs %v", err, errWhole)
		}
		if body, message := s.Passing(); err == nil && (body > limit || message > limit) {
			t.Fatalf("passed a frame of %d bytes in a message of %d (limit %d)", body, message, limit)
		}
	})
}
