package ingest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/kvroute/kvroute/blockhash"
	"github.com/kvroute/kvroute/internal/vllmzmq"
	"github.com/kvroute/kvroute/internal/zmtpcap"
	"github.com/kvroute/kvroute/internal/zmtptest"
)

// rawHandshake plays a ZMTP peer of socketType over c: greeting and READY
// both ways, as zmq4 and libzmq do.
func rawHandshake(t *testing.T, c net.Conn, socketType string) {
	t.Helper()
	if err := tryHandshake(c, socketType); err != nil {
		t.Fatal(err)
	}
}

// tryHandshake is rawHandshake for a server whose peer may go away first
// (kvroute closing a reconnect attempt while a test ends).
func tryHandshake(c net.Conn, socketType string) error {
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(append(zmtptest.Greeting(), zmtptest.Ready(socketType)...)); err != nil {
		return err
	}
	var g [zmtpcap.GreetingLen]byte
	if _, err := io.ReadFull(c, g[:]); err != nil {
		return fmt.Errorf("greeting: %w", err)
	}
	var hdr [2]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil || hdr[0] != zmtpcap.FlagCommand {
		return fmt.Errorf("READY header % x: %v", hdr, err)
	}
	if _, err := io.ReadFull(c, make([]byte, hdr[1])); err != nil {
		return fmt.Errorf("READY body: %w", err)
	}
	return nil
}

// sendHugeHeader sends a message frame header announcing size bytes and
// waits for kvroute to close the connection.
func sendHugeHeader(t *testing.T, c net.Conn, size uint64) {
	t.Helper()
	if _, err := c.Write(binary.BigEndian.AppendUint64([]byte{zmtpcap.FlagLong}, size)); err != nil {
		t.Fatal(err)
	}
	waitHungUp(t, c)
}

// waitHungUp reads c until kvroute closes it (10 s at most).
func waitHungUp(t *testing.T, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, c); err != nil && !errors.Is(err, net.ErrClosed) && !strings.Contains(err.Error(), "reset") {
		t.Fatalf("kvroute did not close the connection: %v", err)
	}
}

// dialBound connects to kvroute's bound socket as soon as it listens.
func dialBound(t *testing.T, bind string) net.Conn {
	t.Helper()
	var c net.Conn
	waitFor(t, "dial the bound socket", func() bool {
		var err error
		c, err = net.Dial("tcp", strings.TrimPrefix(bind, "tcp://"))
		return err == nil
	})
	return c
}

// serveEngine connects an engine publishing on topic to kvroute's bound
// socket and waits for its first batch to be applied to replica.
func serveEngine(t *testing.T, h *harness, bind, topic, replica string, payload []byte) {
	t.Helper()
	p, err := vllmzmq.DialPublisher(bind, "", topic, 10)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	waitSubscribed(t, p)
	publish(t, p, payload)
	waitFor(t, "the engine's batch", func() bool { return h.status(replica).Batches == 1 })
}

// TestOversizeFrameOnBoundSocketIsRefused: peers that reach ingest.bind and
// announce frames of 2^62 and 2^40 bytes are disconnected and counted; an
// engine on the same socket keeps being served. Before the cap, zmq4 v0.17.0
// panicked on 2^62 (makeslice) and died of OOM on 2^40.
func TestOversizeFrameOnBoundSocketIsRefused(t *testing.T) {
	st := steps(t)
	cfg, bind := boundConfig(t)
	h := start(t, cfg)
	for _, size := range []uint64{1 << 62, 1 << 40} {
		c := dialBound(t, bind)
		rawHandshake(t, c, "PUB")
		sendHugeHeader(t, c, size)
		c.Close()
	}
	waitFor(t, "refusals counted", func() bool {
		return h.counter(metricFramesRefused, "socket", sockBind, "reason", zmtpcap.ReasonFrame) == 2
	})
	serveEngine(t, h, bind, "engine-a", "a", st[stepPrompt])
	if got := h.held("p", "a", tokenKeys(t, "p", promptTokens[:8], blockhash.RequestKeys{})); got != 2 {
		t.Errorf("%d blocks held, want 2", got)
	}
}

// rawServer accepts ZMTP connections as socketType and answers each with a
// frame header announcing size bytes.
func rawServer(t *testing.T, socketType string, size uint64) string {
	t.Helper()
	return acceptLoop(t, func(c net.Conn) {
		if err := tryHandshake(c, socketType); err != nil {
			return // a dial kvroute gave up on; the next one comes
		}
		_, _ = c.Write(binary.BigEndian.AppendUint64([]byte{zmtpcap.FlagLong}, size))
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, _ = io.Copy(io.Discard, c)
	})
}

// acceptLoop listens on a loopback port and serves each connection, one at
// a time, closing it after; the test's cleanup stops it.
func acceptLoop(t *testing.T, serve func(c net.Conn)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { l.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			serve(c)
			c.Close()
		}
	}()
	return "tcp://" + l.Addr().String()
}

// TestOversizeFrameOnConnectedSubscriberAndReplayIsRefused: a publisher
// (connect mode) and a replay ROUTER announcing 2^40-byte frames are
// disconnected and counted, and another replica goes on.
func TestOversizeFrameOnConnectedSubscriberAndReplayIsRefused(t *testing.T) {
	st := steps(t)
	good := newPublisher(t, "", 10)
	hostilePub := rawServer(t, "PUB", 1<<40)
	hostileReplay := rawServer(t, "ROUTER", 1<<40)
	cfg := baseConfig(poolConfig("p", keysTokens,
		replicaSpec{name: "bad", events: hostilePub},
		replicaSpec{name: "badreplay", events: freeEndpoint(t), replay: hostileReplay},
		replicaSpec{name: "good", events: good.Endpoint(), replay: good.ReplayEndpoint()}))
	h := start(t, cfg)
	waitSubscribed(t, good)
	publish(t, good, st[stepPrompt])
	waitFor(t, "the good replica's batch", func() bool { return h.status("good").Batches == 1 })
	waitFor(t, "events refusal counted", func() bool {
		return h.counter(metricFramesRefused, "socket", sockEvents, "reason", zmtpcap.ReasonFrame) >= 1
	})
	// The replay DEALER dials at first contact, which needs the live stream:
	// fetch directly, as the applier does.
	err := h.mgr.fetchReplay(t.Context(), hostileReplay, 0, func(uint64, []byte) { t.Error("a batch from the hostile replay") })
	if !errors.Is(err, zmtpcap.ErrOversize) && err == nil {
		t.Errorf("replay from a hostile ROUTER: %v", err)
	}
	waitFor(t, "replay refusal counted", func() bool {
		return h.counter(metricFramesRefused, "socket", sockReplay, "reason", zmtpcap.ReasonFrame) >= 1
	})
}

// malformedReadys are READY commands whose metadata stops short: a
// property name with no value length after it, a name longer than what
// follows, and a value length cut off after two bytes. zmq4 v0.17.0 sliced
// past the frame on each (third_party/zmq4/KVROUTE.md).
var malformedReadys = [][]byte{
	zmtptest.Frame(zmtpcap.FlagCommand, []byte("\x05READY\x01a")),
	zmtptest.Frame(zmtpcap.FlagCommand, []byte("\x05READY\x02a")),
	zmtptest.Frame(zmtpcap.FlagCommand, []byte("\x05READY\x0bSocket-Type\x00\x00")),
}

// TestMalformedReadyIsRefused: a peer on ingest.bind and an engine kvroute
// connects to that send a READY whose metadata stops short are
// disconnected, and kvroute goes on serving engines. With zmq4 v0.17.0's
// metadata parsing the first one ended the process from zmq4's accept
// goroutine (a panic no recover in kvroute could catch).
func TestMalformedReadyIsRefused(t *testing.T) {
	st := steps(t)
	hostile := make([]replicaSpec, len(malformedReadys))
	hungUp := make([]<-chan struct{}, len(malformedReadys))
	for i, ready := range malformedReadys {
		var ep string
		ep, hungUp[i] = peerServer(t, ready)
		hostile[i] = replicaSpec{name: fmt.Sprintf("bad%d", i), events: ep}
	}
	start(t, baseConfig(poolConfig("p", keysTokens, hostile...)))
	for i := range hungUp {
		waitHungUpOn(t, hungUp[i], fmt.Sprintf("engine %d after its malformed READY", i))
	}
	cfg, bind := boundConfig(t)
	h := start(t, cfg)
	for _, ready := range malformedReadys {
		c := dialBound(t, bind)
		if _, err := c.Write(append(zmtptest.Greeting(), ready...)); err != nil {
			t.Fatal(err)
		}
		waitHungUp(t, c)
		c.Close()
	}
	serveEngine(t, h, bind, "engine-a", "a", st[stepPrompt])
}

// TestSilentPeersTimeOutAndBlockNobody: an engine kvroute connects to that
// accepts and stays silent is hung up on after the handshake timeout (zmq4
// v0.17.0 set none and waited forever); a peer on ingest.bind that connects
// and sends nothing neither keeps an engine from connecting after it (zmq4
// ran each handshake in its accept loop) nor keeps its connection past the
// timeout.
func TestSilentPeersTimeOutAndBlockNobody(t *testing.T) {
	st := steps(t)
	const timeout = 300 * time.Millisecond
	shorten := func(m *Manager) {
		for _, l := range m.limits {
			l.HandshakeTimeout = timeout
		}
	}
	silent, hungUp := peerServer(t, nil)
	start(t, baseConfig(poolConfig("p", keysTokens, replicaSpec{name: "silent", events: silent})), shorten)
	waitHungUpOn(t, hungUp, "a silent engine")
	// On a bound socket at the default timeout (30 s), an engine comes in
	// while a silent peer holds its connection; at a short one, the silent
	// peer is hung up on.
	for _, short := range []bool{false, true} {
		cfg, bind := boundConfig(t)
		var h *harness
		if short {
			h = start(t, cfg, shorten)
		} else {
			h = start(t, cfg)
		}
		c := dialBound(t, bind)
		defer c.Close()
		if short {
			waitHungUp(t, c)
			continue
		}
		began := time.Now()
		serveEngine(t, h, bind, "engine-a", "a", st[stepPrompt])
		if took := time.Since(began); took > zmtpcap.DefaultHandshakeTimeout/3 {
			t.Fatalf("the engine waited %s for a silent peer's handshake", took)
		}
	}
}

// peerServer accepts TCP connections, sends each a ZMTP greeting and ready
// (nothing at all when ready is nil), and reports on hungUp when kvroute
// closes one (a buffered channel; later ones are not reported).
func peerServer(t *testing.T, ready []byte) (endpoint string, hungUp <-chan struct{}) {
	t.Helper()
	gone := make(chan struct{}, 1)
	return acceptLoop(t, func(c net.Conn) {
		_ = c.SetDeadline(time.Now().Add(20 * time.Second))
		if ready != nil {
			_, _ = c.Write(append(zmtptest.Greeting(), ready...))
		}
		if _, err := io.Copy(io.Discard, c); err == nil {
			select {
			case gone <- struct{}{}:
			default:
			}
		}
	}), gone
}

// waitHungUpOn waits (10 s at most) for peerServer's report that kvroute
// closed a connection to it; who names the peer in the failure.
func waitHungUpOn(t *testing.T, hungUp <-chan struct{}, who string) {
	t.Helper()
	select {
	case <-hungUp:
	case <-time.After(10 * time.Second):
		t.Fatalf("kvroute kept its connection to %s", who)
	}
}

// freeEndpoint is a tcp endpoint on 127.0.0.1 nobody listens on.
func freeEndpoint(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return "tcp://" + l.Addr().String()
}

// TestBindWithoutHostListensOnLoopbackOnly: ingest.bind tcp://*:PORT binds
// 127.0.0.1, so engines elsewhere cannot reach it unless 0.0.0.0 is named.
func TestBindWithoutHostListensOnLoopbackOnly(t *testing.T) {
	var external net.IP
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			external = n.IP
			break
		}
	}
	if external == nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("no non-loopback IPv4 address to check the bind address against")
		}
		t.Skip("SKIP: no non-loopback IPv4 address on this host to check that the bind socket is not reachable on it")
	}
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(freeEndpoint(t), "tcp://"))
	cfg := baseConfig(poolConfig("p", keysTokens, replicaSpec{name: "a", topic: "engine-a"}))
	cfg.Settings.Bind = "tcp://*:" + port
	start(t, cfg)
	waitFor(t, "the loopback listener", func() bool {
		c, err := net.Dial("tcp", "127.0.0.1:"+port)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	if c, err := net.Dial("tcp", net.JoinHostPort(external.String(), port)); err == nil {
		c.Close()
		t.Errorf("the bind socket is reachable on %s", external)
	}
	for ep, want := range map[string]string{
		"tcp://*:5557": "tcp://127.0.0.1:5557", "tcp://:5557": "tcp://127.0.0.1:5557",
		"tcp://0.0.0.0:5557": "tcp://0.0.0.0:5557", "tcp://10.0.0.1:5557": "tcp://10.0.0.1:5557", "ipc:///tmp/x": "ipc:///tmp/x",
	} {
		if got := loopbackByDefault(ep); got != want {
			t.Errorf("loopbackByDefault(%s) = %s, want %s", ep, got, want)
		}
	}
}

// TestUnknownTopicsAreNotCached: a peer on the bound socket sending many
// distinct (and long) topics is rejected and counted without filling the
// topic cache, which keeps only topics that name a replica.
func TestUnknownTopicsAreNotCached(t *testing.T) {
	st := steps(t)
	cfg, bind := boundConfig(t)
	h := start(t, cfg)
	forger := zmq4.NewPub(t.Context(), zmtpcap.Quiet)
	t.Cleanup(func() { forger.Close() })
	if err := forger.Dial(bind); err != nil {
		t.Fatal(err)
	}
	seq := binary.BigEndian.AppendUint64(nil, 0)
	sent := 0
	waitFor(t, "the forged topics rejected", func() bool {
		for range 100 {
			topic := []byte(fmt.Sprintf("kv@10.9.%d.%d:8000@m-p", sent/256, sent%256))
			if sent%10 == 0 {
				topic = append(topic, bytes.Repeat([]byte("x"), 64<<10)...)
			}
			if forger.Send(zmq4.NewMsgFrom(topic, seq, st[stepPrompt])) == nil {
				sent++
			}
		}
		return h.counter(metricUnknownTopic) >= 5000
	})
	h.mgr.topicMu.Lock()
	n := len(h.mgr.topicCache)
	h.mgr.topicMu.Unlock()
	if n != 0 {
		t.Errorf("%d rejected topics cached", n)
	}
}

// FuzzZMQMetadata: zmq4's parsing of a peer's READY metadata (patched in
// third_party/zmq4) never panics, whatever the peer sends. (It accepts some
// metadata it would not send, such as an empty name; the handshake only
// reads the socket type from it.)
func FuzzZMQMetadata(f *testing.F) {
	for _, b := range []string{"", "\x01a", "\x02a", "\x0bSocket-Type\x00\x00", "\x0bSocket-Type\x00\x00\x00\x03SUB",
		"\x08Identity\x00\x00\x00\x00\x0bSocket-Type\x00\x00\x00\x03PUB", "\xff", "\x01a\xff\xff\xff\xff"} {
		f.Add([]byte(b))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		exact := append(make([]byte, 0, len(body)), body...) // as zmq4 sizes a frame: no spare capacity
		md := make(zmq4.Metadata)
		_ = md.UnmarshalZMTP(exact)
	})
}
