// Package vllmzmq is a stand-in for vLLM's ZmqEventPublisher over real
// ZeroMQ sockets (go-zeromq/zmq4): a PUB socket sending
// [topic, seq (8-byte big-endian), payload] and a ROUTER socket serving
// replay requests from a bounded buffer, in the current reply layout or the
// older one. Tests of kvroute's ingest use it, and so can the vLLM emulator.
//
// Source of truth: vllm/distributed/kv_events.py (ZmqEventPublisher) at
// upstream main 5ac26849; the frames it must produce are in
// testdata/vllm/vllm_kv_events.json ("zmq").
package vllmzmq

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
)

// endMarkerSeq is the seq of the frame that ends a replay (-1 as signed 8 bytes).
const endMarkerSeq = ^uint64(0)

// Publisher publishes payloads with per-publisher sequence numbers and keeps
// the last bufferSteps of them for replay. It is safe for concurrent use.
type Publisher struct {
	topic       string
	bufferSteps int
	pub         zmq4.Socket
	router      zmq4.Socket
	endpoint    string
	replayEP    string
	ctx         context.Context
	cancel      context.CancelFunc
	done        chan struct{}

	mu     sync.Mutex
	next   uint64
	buf    []entry // oldest first, at most bufferSteps
	legacy bool    // replay replies without the topic frame (vLLM ≤ 0.25)
}

type entry struct {
	seq     uint64
	payload []byte
}

// NewPublisher binds a PUB socket on endpoint (e.g. "tcp://127.0.0.1:0", the
// engine's default mode) and, when replayEndpoint is not empty, a ROUTER on
// it. Endpoint and ReplayEndpoint report the bound addresses.
func NewPublisher(endpoint, replayEndpoint, topic string, bufferSteps int) (*Publisher, error) {
	return newPublisher(endpoint, replayEndpoint, topic, bufferSteps, true)
}

// DialPublisher is NewPublisher for an engine whose PUB socket connects to a
// collector that binds (vLLM connects when its endpoint names a host); the
// ROUTER still binds.
func DialPublisher(endpoint, replayEndpoint, topic string, bufferSteps int) (*Publisher, error) {
	return newPublisher(endpoint, replayEndpoint, topic, bufferSteps, false)
}

func newPublisher(endpoint, replayEndpoint, topic string, bufferSteps int, bind bool) (*Publisher, error) {
	if bufferSteps <= 0 {
		bufferSteps = 10000
	}
	ctx, cancel := context.WithCancel(context.Background())
	quiet := zmq4.WithLogger(log.New(io.Discard, "", 0))
	p := &Publisher{
		topic: topic, bufferSteps: bufferSteps, ctx: ctx, cancel: cancel, done: make(chan struct{}),
		pub:      zmq4.NewPub(ctx, quiet, zmq4.WithDialerRetry(20*time.Millisecond), zmq4.WithDialerMaxRetries(100)),
		endpoint: endpoint,
	}
	var err error
	if bind {
		err = p.pub.Listen(endpoint)
		if err == nil {
			p.endpoint = "tcp://" + p.pub.Addr().String()
		}
	} else {
		err = p.pub.Dial(endpoint)
	}
	if err != nil {
		p.pub.Close()
		cancel()
		return nil, fmt.Errorf("vllmzmq: PUB %s: %w", endpoint, err)
	}
	if replayEndpoint == "" {
		close(p.done)
		return p, nil
	}
	p.router = zmq4.NewRouter(ctx, quiet)
	if err := p.router.Listen(replayEndpoint); err != nil {
		p.pub.Close()
		cancel()
		return nil, fmt.Errorf("vllmzmq: ROUTER %s: %w", replayEndpoint, err)
	}
	p.replayEP = "tcp://" + p.router.Addr().String()
	go p.serveReplay()
	return p, nil
}

// Endpoint is the PUB socket's endpoint (the bound address when it binds).
func (p *Publisher) Endpoint() string { return p.endpoint }

// ReplayEndpoint is the ROUTER's bound endpoint, "" without replay.
func (p *Publisher) ReplayEndpoint() string { return p.replayEP }

// SetLegacyReplay switches replay replies to the layout before vLLM PR
// #45177: [seq, payload] per batch and [ffx8, ""] as end marker, no topic.
func (p *Publisher) SetLegacyReplay(legacy bool) {
	p.mu.Lock()
	p.legacy = legacy
	p.mu.Unlock()
}

// Publish sends payload with the next seq and buffers it for replay.
func (p *Publisher) Publish(payload []byte) (uint64, error) {
	seq := p.record(payload)
	return seq, p.pub.Send(zmq4.NewMsgFrom([]byte(p.topic), seqFrame(seq), payload))
}

// Skip buffers payload under the next seq without sending it live: a
// message lost on the way, which only replay can recover.
func (p *Publisher) Skip(payload []byte) uint64 { return p.record(payload) }

// WaitSubscribed waits until some subscriber has subscribed to a prefix of
// the topic: ZeroMQ drops what a PUB sends before that ("slow joiner").
func (p *Publisher) WaitSubscribed(ctx context.Context) error {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		if len(p.pub.(zmq4.Topics).Topics()) > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("vllmzmq: no subscriber on %s: %w", p.endpoint, ctx.Err())
		case <-t.C:
		}
	}
}

// Close closes both sockets and waits for the replay server to stop.
func (p *Publisher) Close() error {
	p.cancel()
	err := closedIsFine(p.pub.Close())
	if p.router != nil {
		err = errors.Join(err, closedIsFine(p.router.Close()))
	}
	<-p.done
	return err
}

// closedIsFine drops net.ErrClosed: cancelling the sockets' context may have
// closed their connections before Close, which is the shutdown asked for.
func closedIsFine(err error) error {
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// Inject buffers payload under seq for replay without touching the seq of
// the next Publish or Skip: a replay buffer holding an entry out of
// sequence (corrupt, or written by someone else).
func (p *Publisher) Inject(seq uint64, payload []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.buf = append(p.buf, entry{seq, payload})
}

func (p *Publisher) record(payload []byte) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	seq := p.next
	p.next++
	p.buf = append(p.buf, entry{seq, payload})
	if len(p.buf) > p.bufferSteps {
		p.buf = p.buf[len(p.buf)-p.bufferSteps:]
	}
	return seq
}

// serveReplay answers [identity, "", start_seq] requests; other frame
// counts are ignored without a reply, as vLLM does.
func (p *Publisher) serveReplay() {
	defer close(p.done)
	for {
		msg, err := p.router.Recv()
		if err != nil {
			if p.ctx.Err() != nil {
				return
			}
			continue
		}
		if len(msg.Frames) != 3 {
			continue
		}
		id, start := msg.Frames[0], readSeq(msg.Frames[2])
		p.mu.Lock()
		replies := make([]entry, 0, len(p.buf))
		for _, e := range p.buf {
			if e.seq >= start {
				replies = append(replies, e)
			}
		}
		legacy := p.legacy
		p.mu.Unlock()
		for _, e := range replies {
			frames := [][]byte{id, {}, []byte(p.topic), seqFrame(e.seq), e.payload}
			if legacy {
				frames = [][]byte{id, {}, seqFrame(e.seq), e.payload}
			}
			if p.router.Send(zmq4.NewMsgFrom(frames...)) != nil {
				break
			}
		}
		end := [][]byte{id, {}, {}, seqFrame(endMarkerSeq), {}}
		if legacy {
			end = [][]byte{id, {}, seqFrame(endMarkerSeq), {}}
		}
		_ = p.router.Send(zmq4.NewMsgFrom(end...))
	}
}

func seqFrame(seq uint64) []byte {
	return binary.BigEndian.AppendUint64(nil, seq)
}

// readSeq reads any length as big-endian unsigned, as vLLM's int.from_bytes does.
func readSeq(b []byte) uint64 {
	var v uint64
	for _, c := range b {
		v = v<<8 | uint64(c)
	}
	return v
}
