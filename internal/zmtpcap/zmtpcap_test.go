package zmtpcap

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

// zmtpGreeting is a ZMTP 3.0 greeting with the NULL mechanism.
func zmtpGreeting() []byte {
	g := make([]byte, zmtpGreetingLen)
	g[0], g[9], g[10], g[11] = 0xff, 0x7f, 3, 0
	copy(g[12:], "NULL")
	return g
}

// zmtpFrame encodes one frame with the given flags (the long flag is set
// when the body needs it).
func zmtpFrame(flags byte, body []byte) []byte {
	if len(body) > 255 {
		return append(binary.BigEndian.AppendUint64([]byte{flags | zmtpFlagLong}, uint64(len(body))), body...)
	}
	return append([]byte{flags, byte(len(body))}, body...)
}

// zmtpReady is a READY command announcing socketType.
func zmtpReady(socketType string) []byte {
	body := []byte("\x05READY\x0bSocket-Type")
	body = binary.BigEndian.AppendUint32(body, uint32(len(socketType)))
	body = append(body, socketType...)
	return zmtpFrame(zmtpFlagCommand, body)
}

func TestZMTPScannerLimits(t *testing.T) {
	greet := zmtpGreeting()
	const limit = 1000
	cases := []struct {
		name   string
		stream []byte
		reason string
	}{
		{"small message", concat(greet, zmtpReady("PUB"), zmtpFrame(zmtpFlagMore, []byte("topic")), zmtpFrame(0, make([]byte, 900))), ""},
		{"frame at the limit", concat(greet, zmtpFrame(0, make([]byte, limit))), ""},
		{"frame over the limit", concat(greet, zmtpFrame(0, make([]byte, limit+1))), ReasonFrame},
		{"2^62 header", concat(greet, binary.BigEndian.AppendUint64([]byte{zmtpFlagLong}, 1<<62)), ReasonFrame},
		{"max uint64 header", concat(greet, binary.BigEndian.AppendUint64([]byte{zmtpFlagLong | zmtpFlagMore}, ^uint64(0))), ReasonFrame},
		{"message over the limit", concat(greet, zmtpFrame(zmtpFlagMore, make([]byte, 600)), zmtpFrame(0, make([]byte, 600))), ReasonMessage},
		{"limit applies per message", concat(greet, zmtpFrame(0, make([]byte, 600)), zmtpFrame(0, make([]byte, 600))), ""},
		{"oversize command", concat(greet, zmtpFrame(zmtpFlagCommand, make([]byte, limit+1))), ReasonFrame},
	}
	for _, tc := range cases {
		for _, chunk := range []int{1, 3, 64, len(tc.stream)} {
			s := zmtpScanner{maxMessageBytes: limit}
			var err error
			for b := tc.stream; len(b) > 0 && err == nil; {
				n := min(chunk, len(b))
				err = s.scan(b[:n])
				b = b[n:]
			}
			var r Refusal
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
	greet := zmtpGreeting()
	f.Add(concat(greet, zmtpReady("PUB"), zmtpFrame(zmtpFlagMore, []byte("t")), zmtpFrame(0, make([]byte, 300))), uint8(7))
	f.Add(concat(greet, binary.BigEndian.AppendUint64([]byte{zmtpFlagLong}, 1<<62)), uint8(1))
	f.Add(concat(greet, zmtpFrame(zmtpFlagMore, make([]byte, 200)), zmtpFrame(0, make([]byte, 200))), uint8(64))
	f.Fuzz(func(t *testing.T, stream []byte, chunk uint8) {
		const limit = 256
		whole := zmtpScanner{maxMessageBytes: limit}
		errWhole := whole.scan(stream)
		s := zmtpScanner{maxMessageBytes: limit}
		var err error
		step := int(chunk%32) + 1
		for b := stream; len(b) > 0 && err == nil; {
			n := min(step, len(b))
			err = s.scan(b[:n])
			b = b[n:]
		}
		if (err == nil) != (errWhole == nil) {
			t.Fatalf("chunking changed the verdict: %v vs %v", err, errWhole)
		}
		if err == nil && (s.body > limit || s.message > limit) {
			t.Fatalf("passed a frame of %d bytes in a message of %d (limit %d)", s.body, s.message, limit)
		}
	})
}
