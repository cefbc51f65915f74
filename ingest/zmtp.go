package ingest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/transport"
)

// go-zeromq/zmq4 v0.17.0 allocates every frame at the length its peer
// announces (conn.go, Conn.read: `make([]byte, size)`) with no option to
// bound it: a header claiming 2^62 bytes panics the reader, 2^40 exhausts
// memory. kvroute does not fork the library; it registers capped transports
// whose connections parse the ZMTP 3 framing (RFC 23/37) of the bytes zmq4
// is about to read and fail the read the moment a frame header announces
// more than the limit, before zmq4 sees the length. Every socket ingest
// opens (bind-mode SUB, connect-mode SUB, replay DEALER) uses them.

// Capped transport names; CappedEndpoint rewrites tcp:// and ipc:// to them.
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

// CappedEndpoint is ep on the capped transport (inproc stays: it never
// leaves the process). A zmq4 socket made with a context carrying a frame
// limit (withFrameLimit) and bound or dialled on it refuses oversize frames.
func CappedEndpoint(ep string) string {
	if rest, ok := strings.CutPrefix(ep, "tcp://"); ok {
		return cappedTCP + "://" + rest
	}
	if rest, ok := strings.CutPrefix(ep, "ipc://"); ok {
		return cappedIPC + "://" + rest
	}
	return ep
}

// Sockets whose frames are capped (label values of kvroute_ingest_frames_refused_total).
const (
	sockBind   = "bind"
	sockEvents = "events"
	sockReplay = "replay"
)

// Refusal reasons.
const (
	refuseFrame   = "frame_too_large"
	refuseMessage = "message_too_large"
)

// frameLimit is what a capped connection enforces; it travels in the
// context the socket was created with (zmq4 hands that context to the
// transport's Dial and Listen).
type frameLimit struct {
	maxMessageBytes uint64
	onRefuse        func(r refusal)
	// handshakeTimeout overrides zmtpHandshakeTimeout when positive (tests).
	handshakeTimeout time.Duration
}

// refusal describes one connection closed for an oversize frame.
type refusal struct {
	reason       string
	peer         string
	frameBytes   uint64 // the length the frame header announced
	messageBytes uint64 // the message's length with that frame
	limitBytes   uint64
}

type frameLimitKey struct{}

// CappedContext is ctx carrying a frame limit for a zmq4 socket created
// with it and dialled or bound on CappedEndpoint: a peer whose frame header
// announces more than maxMessageBytes (alone or with the frames of its
// message before it) is disconnected before zmq4 allocates anything, and
// the socket's Recv fails with the lengths. `kvroute events tail` uses it.
func CappedContext(ctx context.Context, maxMessageBytes uint64) context.Context {
	return withFrameLimit(ctx, &frameLimit{maxMessageBytes: maxMessageBytes})
}

func withFrameLimit(ctx context.Context, l *frameLimit) context.Context {
	return context.WithValue(ctx, frameLimitKey{}, l)
}

// fallbackFrameLimit applies to a capped socket created without a limit in
// its context — a programming error: it refuses every non-empty frame, so
// it shows at once and is never unbounded. (The limit itself is the
// caller's, Settings.MaxMessageBytes; ingest owns no default.)
var fallbackFrameLimit = &frameLimit{}

func frameLimitOf(ctx context.Context) *frameLimit {
	if l, ok := ctx.Value(frameLimitKey{}).(*frameLimit); ok && l != nil {
		return l
	}
	return fallbackFrameLimit
}

// errOversize is the read error a capped connection returns; zmq4 then
// closes that connection (one peer), and the socket goes on.
var errOversize = errors.New("ZMTP frame over the size limit")

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
	lim *frameLimit
}

func (l cappedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return newCappedConn(l.ctx, c, l.lim), nil
}

// zmtpHandshakeTimeout bounds a capped connection's ZMTP handshake, from
// the connection to the end of the peer's first command (its READY), as
// libzmq's ZMQ_HANDSHAKE_IVL (30 s by default) does. zmq4 sets no deadline
// of its own: a peer that connected and sent nothing held a connection
// kvroute dialled, or one a bound socket accepted, forever.
const zmtpHandshakeTimeout = 30 * time.Second

// cappedConn checks the bytes zmq4 reads before handing them over, bounds
// the handshake in time, and is closed when the socket's context ends:
// zmq4 runs the handshake inside Dial with no deadline of its own, so a peer
// that accepted TCP and never spoke held Dial (and whoever waits for the
// dialling goroutine, such as a replica's removal) for the whole handshake
// timeout.
type cappedConn struct {
	net.Conn
	lim        *frameLimit
	scan       zmtpScanner
	err        error // sticky: once refused, every read fails
	handshaken bool  // the handshake deadline is cleared
	unwatch    func() bool
}

func newCappedConn(ctx context.Context, c net.Conn, lim *frameLimit) *cappedConn {
	timeout := zmtpHandshakeTimeout
	if lim.handshakeTimeout > 0 {
		timeout = lim.handshakeTimeout
	}
	_ = c.SetDeadline(time.Now().Add(timeout))
	return &cappedConn{Conn: c, lim: lim, scan: zmtpScanner{maxMessageBytes: lim.maxMessageBytes},
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
		var r refusal
		if errors.As(serr, &r) {
			r.peer = c.RemoteAddr().String()
			if c.lim.onRefuse != nil {
				c.lim.onRefuse(r)
			}
		}
		c.err = fmt.Errorf("%w: %v", errOversize, serr)
		_ = c.Conn.Close()
		return 0, c.err
	}
	if !c.handshaken && c.scan.commandSeen {
		c.handshaken = true
		_ = c.Conn.SetDeadline(time.Time{})
	}
	return n, err
}

func (r refusal) Error() string {
	return fmt.Sprintf("%s: frame of %d bytes, message of %d bytes, limit %d", r.reason, r.frameBytes, r.messageBytes, r.limitBytes)
}

// ZMTP 3 framing (RFC 23 §"Framing"): a 64-byte greeting, then frames of
// [flags][size: 1 byte, or 8 bytes big-endian when flags&long][body].
const (
	zmtpGreetingLen = 64
	zmtpFlagMore    = 0x01
	zmtpFlagLong    = 0x02
	zmtpFlagCommand = 0x04
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
		case s.greeting < zmtpGreetingLen:
			n := min(zmtpGreetingLen-s.greeting, len(b))
			s.greeting += n
			b = b[n:]
		case s.body > 0:
			n := uint64(len(b))
			if n > s.body {
				n = s.body
			}
			s.body -= n
			b = b[n:]
			if s.body == 0 && s.flags&zmtpFlagCommand != 0 {
				s.commandSeen = true
			}
		case !s.inHeader:
			s.flags = b[0]
			b = b[1:]
			s.inHeader, s.sizeHave, s.sizeWant = true, 0, 1
			if s.flags&zmtpFlagLong != 0 {
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
		return refusal{reason: refuseFrame, frameBytes: size, messageBytes: satAdd(s.message, size), limitBytes: s.maxMessageBytes}
	}
	if s.flags&zmtpFlagCommand != 0 {
		s.body = size // commands are single frames, counted on their own
		s.commandSeen = s.commandSeen || size == 0
		return nil
	}
	msg := s.message + size // both ≤ max ≤ 2^63: no overflow
	if msg > s.maxMessageBytes {
		return refusal{reason: refuseMessage, frameBytes: size, messageBytes: msg, limitBytes: s.maxMessageBytes}
	}
	s.message = msg
	if s.flags&zmtpFlagMore == 0 {
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

// frameLimit returns the limit for ingest's sockets of one kind; refusals
// are counted and logged (lengths and the peer address only, at most once
// a second per kind).
func (m *Manager) frameLimit(kind string) *frameLimit {
	var lastLog atomic.Int64
	counter := m.m.framesRefused
	return &frameLimit{
		maxMessageBytes: uint64(m.set.MaxMessageBytes),
		onRefuse: func(r refusal) {
			counter.WithLabelValues(kind, r.reason).Inc()
			now := time.Now().UnixNano()
			if last := lastLog.Load(); now-last < int64(time.Second) || !lastLog.CompareAndSwap(last, now) {
				return
			}
			m.log.LogAttrs(context.Background(), slog.LevelWarn, "ingest: refused an oversize ZeroMQ frame; closed the connection",
				slog.String("socket", kind), slog.String("reason", r.reason), slog.String("peer", r.peer),
				slog.Uint64("frame_bytes", r.frameBytes), slog.Uint64("message_bytes", r.messageBytes),
				slog.Uint64("limit_bytes", r.limitBytes))
		},
	}
}
