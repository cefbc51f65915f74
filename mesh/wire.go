package mesh

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/kvroute/kvroute/index"
)

// The mesh's wire format, kvroute's own (no other system speaks it): one
// gRPC message per message (transport.go), little-endian.
//
//	offset  size  field
//	0       4     magic "KVRM"
//	4       1     version (1)
//	5       1     kind: 1 hello, 2 begin, 3 end
//	6       2     reserved, 0
//	8       8     sender: random per kvroute process
//	16      8     seq: the sender's message count, from 1
//	24      8     layout: fingerprint of the sender's pools (Layout)
//	32      8     sent: the sender's wall clock, Unix nanoseconds (the
//	              receiver's delay metric; clocks are only as close as NTP)
//	hello:  nothing more
//	end:    40 8  request id
//	begin:  40 8  request id
//	        48 4  uncached prompt tokens
//	        52 4  matched blocks (≤ key count)
//	        56 4  key count n
//	        60 1  pool name length p (1..255), then p bytes
//	        .  1  endpoint name length e (1..255), then e bytes
//	        .  8n block keys
const (
	magic      = "KVRM"
	version    = 1
	headerLen  = 40
	endLen     = headerLen + 8
	beginFixed = headerLen + 8 + 4 + 4 + 4 // before the names
	maxNameLen = 255
)

// Message kinds.
const (
	kindHello byte = 1
	kindBegin byte = 2
	kindEnd   byte = 3
)

// kindNames label the message metrics.
var kindNames = map[byte]string{kindHello: "hello", kindBegin: "begin", kindEnd: "end"}

// header is the part every message has.
type header struct {
	sender, seq, layout uint64
	sent                int64 // Unix nanoseconds
}

// message is one decoded mesh message.
type message struct {
	header
	kind     byte
	request  uint64
	uncached uint32
	matched  uint32
	pool     []byte // aliases the message
	endpoint []byte // aliases the message
	keys     []index.BlockKey
}

// Decode errors (wrapped with lengths, never content).
var (
	errShort    = errors.New("short message")
	errMagic    = errors.New("not a kvroute mesh message")
	errVersion  = errors.New("unknown version")
	errKind     = errors.New("unknown kind")
	errReserved = errors.New("reserved bytes set")
	errLength   = errors.New("length does not match its fields")
	errName     = errors.New("empty name")
	errMatched  = errors.New("matched blocks exceed the keys")
)

// decode parses b into m; m.keys reuses its backing array (the message's
// length bounds it: the transport capped the message before it was read).
func decode(b []byte, m *message) error {
	if len(b) < headerLen {
		return fmt.Errorf("%w: %d bytes", errShort, len(b))
	}
	if string(b[:4]) != magic {
		return errMagic
	}
	if b[4] != version {
		return fmt.Errorf("%w %d", errVersion, b[4])
	}
	if b[6] != 0 || b[7] != 0 {
		return errReserved
	}
	m.kind = b[5]
	m.sender = binary.LittleEndian.Uint64(b[8:])
	m.seq = binary.LittleEndian.Uint64(b[16:])
	m.layout = binary.LittleEndian.Uint64(b[24:])
	m.sent = int64(binary.LittleEndian.Uint64(b[32:]))
	m.request, m.uncached, m.matched = 0, 0, 0
	m.pool, m.endpoint, m.keys = nil, nil, m.keys[:0]
	switch m.kind {
	case kindHello:
		if len(b) != headerLen {
			return fmt.Errorf("%w: hello of %d bytes", errLength, len(b))
		}
	case kindEnd:
		if len(b) != endLen {
			return fmt.Errorf("%w: end of %d bytes", errLength, len(b))
		}
		m.request = binary.LittleEndian.Uint64(b[headerLen:])
	case kindBegin:
		return decodeBegin(b, m)
	default:
		return fmt.Errorf("%w %d", errKind, m.kind)
	}
	return nil
}

func decodeBegin(b []byte, m *message) error {
	if len(b) < beginFixed+2 {
		return fmt.Errorf("%w: begin of %d bytes", errShort, len(b))
	}
	m.request = binary.LittleEndian.Uint64(b[headerLen:])
	m.uncached = binary.LittleEndian.Uint32(b[headerLen+8:])
	m.matched = binary.LittleEndian.Uint32(b[headerLen+12:])
	n := uint64(binary.LittleEndian.Uint32(b[headerLen+16:]))
	rest := b[beginFixed:]
	var ok bool
	if m.pool, rest, ok = name(rest); !ok {
		return fmt.Errorf("%w: pool name of a %d-byte begin", errName, len(b))
	}
	if m.endpoint, rest, ok = name(rest); !ok {
		return fmt.Errorf("%w: endpoint name of a %d-byte begin", errName, len(b))
	}
	if uint64(len(rest)) != 8*n {
		return fmt.Errorf("%w: %d keys in %d bytes", errLength, n, len(rest))
	}
	if uint64(m.matched) > n {
		return fmt.Errorf("%w: %d of %d", errMatched, m.matched, n)
	}
	for i := 0; i < len(rest); i += 8 {
		m.keys = append(m.keys, index.BlockKey(binary.LittleEndian.Uint64(rest[i:])))
	}
	return nil
}

// name reads a length-prefixed non-empty name.
func name(b []byte) (v, rest []byte, ok bool) {
	if len(b) < 1 || b[0] == 0 || len(b) < 1+int(b[0]) {
		return nil, nil, false
	}
	return b[1 : 1+int(b[0])], b[1+int(b[0]):], true
}

// appendHeader starts a message of kind.
func appendHeader(dst []byte, kind byte, h header) []byte {
	dst = append(dst, magic...)
	dst = append(dst, version, kind, 0, 0)
	dst = binary.LittleEndian.AppendUint64(dst, h.sender)
	dst = binary.LittleEndian.AppendUint64(dst, h.seq)
	dst = binary.LittleEndian.AppendUint64(dst, h.layout)
	return binary.LittleEndian.AppendUint64(dst, uint64(h.sent))
}

// appendBegin appends a begin message; names longer than maxNameLen or
// empty, or counts beyond 32 bits, are the caller's error.
func appendBegin(dst []byte, h header, request uint64, uncached, matched uint32, pool, endpoint string, keys []index.BlockKey) []byte {
	dst = appendHeader(dst, kindBegin, h)
	dst = binary.LittleEndian.AppendUint64(dst, request)
	dst = binary.LittleEndian.AppendUint32(dst, uncached)
	dst = binary.LittleEndian.AppendUint32(dst, matched)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(keys)))
	dst = append(dst, byte(len(pool)))
	dst = append(dst, pool...)
	dst = append(dst, byte(len(endpoint)))
	dst = append(dst, endpoint...)
	for _, k := range keys {
		dst = binary.LittleEndian.AppendUint64(dst, uint64(k))
	}
	return dst
}

// beginLen is the length of a begin message.
func beginLen(pool, endpoint string, keys int) int {
	return beginFixed + 2 + len(pool) + len(endpoint) + 8*keys
}

func appendEnd(dst []byte, h header, request uint64) []byte {
	dst = appendHeader(dst, kindEnd, h)
	return binary.LittleEndian.AppendUint64(dst, request)
}
