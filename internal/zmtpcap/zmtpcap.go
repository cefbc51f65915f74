// Package zmtpcap bounds what a go-zeromq/zmq4 socket allocates for a
// peer's frames.
//
// go-zeromq/zmq4 v0.17.0 allocates every frame at the length its peer
// announces (conn.go, Conn.read: `make([]byte, size)`) with no option to
// bound it: a header claiming 2^62 bytes panics the reader, 2^40 exhausts
// memory. This package registers capped transports whose connections parse
// the ZMTP 3 framing (RFC 23/37) of the bytes zmq4 is about to read and fail
// the read the moment a frame header announces more than the limit, before
// zmq4 sees the length. A socket made with Context and bound or dialled on
// Endpoint(ep) is capped; ingest opens every socket so.
package zmtpcap

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"strings"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/transport"
)

// Capped transport names; Endpoint rewrites tcp:// and ipc:// to them.
const (
	cappedTCP = "kvroute-tcp"
	cappedIPC = "kvroute-ipc"
)

func init() {
	for name, network := range map[string]string{cappedTCP: "tcp", cappedIPC: "unix"} {
		if err := zmq4.RegisterTransport(name, cappedTransport{inner: transport.New(network)}); err != nil {
			panic(err) // only a second registration of the same name: a programming error
		}
	}
}

// Endpoint is ep on the capped transport (inproc stays: it never leaves the
// process). A zmq4 socket made with Context and bound or dialled on it
// refuses oversize frames.
func Endpoint(ep string) string {
	if rest, ok := strings.CutPrefix(ep, "tcp://"); ok {
		return cappedTCP + "://" + rest
	}
	if rest, ok := strings.CutPrefix(ep, "ipc://"); ok {
		return cappedIPC + "://" + rest
	}
	return ep
}

// Refusal reasons (label values).
const (
	ReasonFrame   = "frame_too_large"
	ReasonMessage = "message_too_large"
)

// Limit is what a capped connection enforces; it travels in the context the
// socket was created with (zmq4 hands that context to the transport's Dial
// and Listen).
type Limit struct {
	// MaxMessageBytes bounds one message (and so each of its frames).
	MaxMessageBytes uint64
	// OnRefuse, when set, hears of every connection closed for an oversize
	// frame.
	OnRefuse func(Refusal)
	// HandshakeTimeout overrides DefaultHandshakeTimeout when positive.
	HandshakeTimeout time.Duration
}

// Refusal is one connection a capped socket closed for an oversize frame:
// lengths and the peer's address, never content.
type Refusal struct {
	Reason       string // ReasonFrame or ReasonMessage
	Peer         string
	FrameBytes   uint64 // the length the frame header announced
	MessageBytes uint64 // the message's length with that frame
	LimitBytes   uint64
}

type frameLimitKey struct{}

// Context is ctx carrying lim for a zmq4 socket created with it and bound or
// dialled on Endpoint: a peer whose frame header announces more than
// lim.MaxMessageBytes (alone or with the frames of its message before it) is
// disconnected before zmq4 allocates anything.
func Context(ctx context.Context, lim *Limit) context.Context {
	return context.WithValue(ctx, frameLimitKey{}, lim)
}

// fallbackFrameLimit applies to a capped socket created without a limit in
// its context — a programming error: it refuses every non-empty frame, so
// it shows at once and is never unbounded. (The limit itself is the
// caller's; this package owns no default.)
var fallbackFrameLimit = &Limit{}

func frameLimitOf(ctx context.Context) *Limit {
	if l, ok := ctx.Value(frameLimitKey{}).(*Limit); ok && l != nil {
		return l
	}
	return fallbackFrameLimit
}

// ErrOversize is the read error a capped connection returns; zmq4 then
// closes that connection (one peer), and the socket goes on.
var ErrOversize = errors.New("ZMTP frame over the size limit")

type cappedTransport struct{ inner transport.Transport }

func (t cappedTransport) Dial(ctx context.Context, d transport.Dialer, addr string) (net.Conn, error) {
	c, err := t.inner.Dial(ctx, d, addr)
	if err != nil {
		return nil, err
	}
	return newCappedConn(ctx, c, frameLimitOf(ctx)), nil
}

func (t cappedTransport) Listen(ctx context.Context, addr string) (net.Listener, error) {
	l, err := t.inner.Listen(ctx, addr)
	if err != nil {
		return nil, err
	}
	return cappedListener{Listener: l, ctx: ctx, lim: frameLimitOf(ctx)}, nil
}

func (t cappedTransport) Addr(ep string) (string, error) { return t.inner.Addr(ep) }

type cappedListener struct {
	net.Listener
	ctx context.Context
	lim *Limit
}

func (l cappedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return newCappedConn(l.ctx, c, l.lim), nil
}

// DefaultHandshakeTimeout bounds a capped connection's ZMTP handshake, from
// the connection to the end of the peer's first command (its READY), as
// libzmq's ZMQ_HANDSHAKE_IVL (30 s by default) does. zmq4 sets no deadline
// of its own: a peer that connected and sent nothing held a connection
// kvroute dialled, or one a bound socket accepted, forever.
const DefaultHandshakeTimeout = 30 * time.Second

// cappedConn checks the bytes zmq4 reads before handing them over, bounds
// the handshake in time, and is closed when the socket's context ends:
// zmq4 runs the handshake inside Dial with no deadline of its own, so a peer
// that accepted TCP and never spoke held Dial (and whoever waits for the
// dialling goroutine, such as a replica's removal) for the whole handshake
// timeout.
type cappedConn struct {
	net.Conn
	lim        *Limit
	scan       zmtpScanner
	err        error // sticky: once refused, every read fails
	handshaken bool  // the handshake deadline is cleared
	unwatch    func() bool
}

func newCappedConn(ctx context.Context, c net.Conn, lim *Limit) *cappedConn {
	timeout := DefaultHandshakeTimeout
	if lim.HandshakeTimeout > 0 {
		timeout = lim.HandshakeTimeout
	}
	_ = c.SetDeadline(time.Now().Add(timeout))
	return &cappedConn{Conn: c, lim: lim, scan: zmtpScanner{maxMessageBytes: lim.MaxMessageBytes},
		unwatch: context.AfterFunc(ctx, func() { _ = c.Close() })}
}

// Close closes the connection and stops watching the socket's context.
func (c *cappedConn) Close() error {
	c.unwatch()
	return c.Conn.Close()
}

func (c *cappedConn) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	n, err := c.Conn.Read(p)
	if serr := c.scan.scan(p[:n]); serr != nil {
		var r Refusal
		if errors.As(serr, &r) {
			r.Peer = c.RemoteAddr().String()
			if c.lim.OnRefuse != nil {
				c.lim.OnRefuse(r)
			}
		}
		c.err = fmt.Errorf("%w: %v", ErrOversize, serr)
		_ = c.Conn.Close()
		return 0, c.err
	}
	if !c.handshaken && c.scan.commandSeen {
		c.handshaken = true
		_ = c.Conn.SetDeadline(time.Time{})
	}
	return n, err
}

func (r Refusal) Error() string {
	return fmt.Sprintf("%s: frame of %d bytes, message of %d bytes, limit %d", r.Reason, r.FrameBytes, r.MessageBytes, r.LimitBytes)
}

// ZMTP 3 framing (RFC 23 §"Framing"): a GreetingLen-byte greeting, then
// frames of [flags][size: 1 byte, or 8 bytes big-endian when flags&FlagLong]
// [body]. internal/zmtptest writes it for tests.
const (
	GreetingLen = 64
	FlagMore    = 0x01
	FlagLong    = 0x02
	FlagCommand = 0x04
)

// zmtpScanner follows the ZMTP byte stream one read at a time and refuses a
// frame whose announced length, alone or added to the frames of its
// multipart message before it, exceeds maxMessageBytes. It never allocates.
type zmtpScanner struct {
	maxMessageBytes uint64
	greeting        int  // greeting bytes consumed
	flags           byte // current frame's flags
	sizeBuf         [8]byte
	sizeWant        int    // size bytes of the current header (0: expecting flags)
	sizeHave        int    // size bytes read so far
	body            uint64 // body bytes still to pass
	message         uint64 // bytes of the current multipart message so far
	inHeader        bool
	commandSeen     bool // a whole command frame (the peer's READY first) has passed
}

// scan consumes b; the error is a refusal (the stream is then unusable).
func (s *zmtpScanner) scan(b []byte) error {
	for len(b) > 0 {
		switch {
		case s.greeting < GreetingLen:
			n := min(GreetingLen-s.greeting, len(b))
			s.greeting += n
			b = b[n:]
		case s.body > 0:
			n := uint64(len(b))
			if n > s.body {
				n = s.body
			}
			s.body -= n
			b = b[n:]
			if s.body == 0 && s.flags&FlagCommand != 0 {
				s.commandSeen = true
			}
		case !s.inHeader:
			s.flags = b[0]
			b = b[1:]
			s.inHeader, s.sizeHave, s.sizeWant = true, 0, 1
			if s.flags&FlagLong != 0 {
				s.sizeWant = 8
			}
		default:
			n := copy(s.sizeBuf[s.sizeHave:s.sizeWant], b)
			s.sizeHave += n
			b = b[n:]
			if s.sizeHave < s.sizeWant {
				return nil
			}
			if err := s.frame(); err != nil {
				return err
			}
		}
	}
	return nil
}

// frame checks a complete header and starts its body.
func (s *zmtpScanner) frame() error {
	s.inHeader = false
	size := uint64(s.sizeBuf[0])
	if s.sizeWant == 8 {
		size = binary.BigEndian.Uint64(s.sizeBuf[:])
	}
	if size > s.maxMessageBytes {
		return Refusal{Reason: ReasonFrame, FrameBytes: size, MessageBytes: satAdd(s.message, size), LimitBytes: s.maxMessageBytes}
	}
	if s.flags&FlagCommand != 0 {
		s.body = size // commands are single frames, counted on their own
		s.commandSeen = s.commandSeen || size == 0
		return nil
	}
	msg := s.message + size // both ≤ max ≤ 2^63: no overflow
	if msg > s.maxMessageBytes {
		return Refusal{Reason: ReasonMessage, FrameBytes: size, MessageBytes: msg, LimitBytes: s.maxMessageBytes}
	}
	s.message = msg
	if s.flags&FlagMore == 0 {
		s.message = 0
	}
	s.body = size
	return nil
}

func satAdd(a, b uint64) uint64 {
	if a+b < a {
		return ^uint64(0)
	}
	return a + b
}

// Quiet is the zmq4 socket option that keeps zmq4's own logger out of
// kvroute's logs.
var Quiet = zmq4.WithLogger(log.New(io.Discard, "", 0))
