// Package zmtptest writes ZMTP 3 bytes for tests that play a raw peer
// against kvroute's ZeroMQ sockets: the greeting, frames and the READY
// command (RFC 23, with the NULL mechanism as zmq4 and libzmq send it).
// The framing constants are internal/zmtpcap's.
package zmtptest

import (
	"encoding/binary"

	"github.com/kvroute/kvroute/internal/zmtpcap"
)

// Greeting is a ZMTP 3.0 greeting with the NULL mechanism.
func Greeting() []byte {
	g := make([]byte, zmtpcap.GreetingLen)
	g[0], g[9], g[10], g[11] = 0xff, 0x7f, 3, 0
	copy(g[12:], "NULL")
	return g
}

// Frame encodes one frame with the given flags (zmtpcap.FlagMore,
// FlagCommand); FlagLong is set when the body needs it.
func Frame(flags byte, body []byte) []byte {
	if len(body) > 255 {
		return append(binary.BigEndian.AppendUint64([]byte{flags | zmtpcap.FlagLong}, uint64(len(body))), body...)
	}
	return append([]byte{flags, byte(len(body))}, body...)
}

// Ready is a READY command announcing socketType.
func Ready(socketType string) []byte {
	body := []byte("\x05READY\x0bSocket-Type")
	body = binary.BigEndian.AppendUint32(body, uint32(len(socketType)))
	body = append(body, socketType...)
	return Frame(zmtpcap.FlagCommand, body)
}
