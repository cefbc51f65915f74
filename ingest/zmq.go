package ingest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/kvroute/kvroute/internal/zmtpcap"

	"github.com/kvroute/kvroute/internal/engine"
)

// subscribeLoop keeps a SUB socket connected to the rank's PUB endpoint,
// reconnecting with capped exponential backoff and jitter.
func (rs *rankState) subscribeLoop(ctx context.Context) {
	minB, maxB := rs.mgr.tuning.minBackoff, max(rs.mgr.set.ReconnectMaxBackoff, rs.mgr.tuning.minBackoff)
	backoff := minB
	warned := false // one warning per outage; the retries log at debug
	for {
		start := time.Now()
		err := rs.subscribeOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		if time.Since(start) > 10*maxB {
			backoff, warned = minB, false // the connection held for a while: start over
		}
		rs.st.update(func(st *rankStatus) { st.setError(rs.mgr.now(), "events: "+err.Error()) })
		lvl := slog.LevelDebug
		if !warned {
			lvl, warned = slog.LevelWarn, true
		}
		rs.mgr.log.Log(ctx, lvl, "ingest: event stream down; reconnecting", "pool", rs.pool.in.Name, "replica", rs.name, "endpoint", rs.events, "err", err, "backoff", backoff)
		wait := backoff/2 + rand.N(backoff/2+1)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		backoff = min(2*backoff, maxB)
	}
}

// subscribeOnce connects, subscribes to the rank's topic and reads until the
// connection fails or ctx ends. The reader only enqueues.
func (rs *rankState) subscribeOnce(ctx context.Context) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sub := zmq4.NewSub(zmtpcap.Context(sctx, rs.mgr.limits[sockEvents]), zmtpcap.Quiet, zmq4.WithDialerMaxRetries(0), zmq4.WithDialerTimeout(5*time.Second))
	defer sub.Close()
	if err := sub.SetOption(zmq4.OptionSubscribe, rs.in.Topic); err != nil {
		return fmt.Errorf("subscribe: %w", err)
	}
	if err := sub.Dial(zmtpcap.Endpoint(rs.events)); err != nil {
		return err
	}
	rs.setConnected(true)
	rs.setStream(false)
	defer func() {
		rs.setConnected(false)
		if ctx.Err() == nil {
			// The engine closed the stream (it exited or restarted): stop
			// routing to it now and drop what the old process held.
			rs.setStream(true)
			rs.engineGone()
		}
	}()
	rs.resync.Store(true)
	rs.poke()
	for {
		msg, err := sub.Recv()
		if err != nil {
			return err
		}
		if msg.Type == zmq4.CmdMsg {
			continue
		}
		if b, ok := rs.frames(msg.Frames); ok {
			rs.enqueue(b)
		}
	}
}

// frames checks a live message's [topic, seq, payload] framing.
func (rs *rankState) frames(f [][]byte) (liveBatch, bool) {
	if len(f) != 3 || len(f[1]) != seqLen {
		rs.met.decodeErrors.Inc()
		rs.st.update(func(st *rankStatus) {
			st.DecodeErrors++
			st.setError(rs.mgr.now(), fmt.Sprintf("live message of %d frames (want topic, 8-byte seq, payload)", len(f)))
		})
		return liveBatch{}, false
	}
	return liveBatch{topic: string(f[0]), seq: binary.BigEndian.Uint64(f[1]), payload: f[2]}, true
}

func (rs *rankState) setConnected(up bool) {
	rs.connected.Store(up)
	if up {
		rs.met.connected.Set(1)
	} else {
		rs.met.connected.Set(0)
	}
}

// bindSockets binds the bind-mode SUB sockets: one per data-parallel rank,
// on the bind port + rank, since vLLM offsets a connecting engine's port by
// its rank too.
func (m *Manager) bindSockets(ctx context.Context) ([]zmq4.Socket, error) {
	ranks := 1
	for _, rs := range m.allRanks() {
		ranks = max(ranks, rs.rank+1)
	}
	var socks []zmq4.Socket
	bind := loopbackByDefault(m.set.Bind)
	if !isLoopbackEndpoint(bind) {
		m.log.Warn("ingest: KV-event socket bound beyond loopback; anyone who reaches it can publish events (no authentication: zmq4 has no CURVE), so only engines may reach this port",
			"endpoint", bind)
	}
	for r := range ranks {
		ep, err := offsetEndpoint(bind, r)
		if err == nil {
			s := zmq4.NewSub(zmtpcap.Context(ctx, m.limits[sockBind]), zmtpcap.Quiet)
			if err = s.SetOption(zmq4.OptionSubscribe, ""); err == nil {
				err = s.Listen(zmtpcap.Endpoint(ep))
			}
			if err == nil {
				socks = append(socks, s)
				m.log.Info("ingest: bound KV-event socket", "endpoint", ep, "dp_rank", r)
				continue
			}
			s.Close()
		}
		for _, s := range socks {
			s.Close()
		}
		return nil, fmt.Errorf("ingest.bind: rank %d: %w", r, err)
	}
	return socks, nil
}

// readBound reads one bind-mode socket; the topic says which engine sent a
// message and the socket says which DP rank.
func (m *Manager) readBound(ctx context.Context, s zmq4.Socket, rank int) {
	var lastUnknownLog time.Time // at most one log line a second for rejected topics
	for {
		msg, err := s.Recv()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			continue // one engine's connection ended; the others go on
		}
		if msg.Type == zmq4.CmdMsg || len(msg.Frames) == 0 {
			continue
		}
		var rs *rankState
		if len(msg.Frames[0]) <= engine.MaxTopicBytes {
			rs = m.resolveTopic(string(msg.Frames[0]), rank)
		}
		if rs == nil {
			m.m.unknownTopic.Inc()
			if now := time.Now(); now.Sub(lastUnknownLog) >= time.Second {
				lastUnknownLog = now
				m.log.Warn("ingest: rejected a KV-event message whose topic names no configured replica (lengths only)",
					"dp_rank", rank, "topic_bytes", len(msg.Frames[0]), "frames", len(msg.Frames))
			}
			continue
		}
		if b, ok := rs.frames(msg.Frames); ok {
			if !rs.connected.Load() {
				rs.setConnected(true)
			}
			rs.enqueue(b)
		}
	}
}

// maxTopicCache bounds the bind-mode topic cache (topics come from the
// network); only topics that name a replica are cached.
const maxTopicCache = 4096

// resolveTopic finds the replica rank a bind-mode topic belongs to: a
// replica whose topic is exactly it, else the `kv@<ip>:<port>@<model>`
// convention matched against replica addresses (and pool models when the
// address is ambiguous).
func (m *Manager) resolveTopic(topic string, rank int) *rankState {
	if len(topic) > engine.MaxTopicBytes {
		return nil
	}
	m.topicMu.Lock()
	ranks, ok := m.topicCache[topic]
	m.topicMu.Unlock()
	if !ok {
		ranks = m.matchTopic(topic)
		m.topicMu.Lock()
		if ranks != nil && len(m.topicCache) < maxTopicCache {
			m.topicCache[topic] = ranks
		}
		m.topicMu.Unlock()
	}
	if rank < len(ranks) {
		return ranks[rank]
	}
	return nil
}

func (m *Manager) matchTopic(topic string) []*rankState {
	ranksOf := func(match func(rs *rankState) bool) []*rankState {
		var out []*rankState
		for _, rs := range m.allRanks() {
			if match(rs) {
				out = append(out, rs)
			}
		}
		return out
	}
	if out := ranksOf(func(rs *rankState) bool { return rs.in.Topic == topic }); out != nil {
		return out
	}
	addr, model, ok := topicAddress(topic)
	if !ok {
		return nil
	}
	out := ranksOf(func(rs *rankState) bool { return addressMatches(rs.in.Address, addr) })
	if len(out) > 0 && out[len(out)-1].replica != out[0].replica {
		out = ranksOf(func(rs *rankState) bool {
			return addressMatches(rs.in.Address, addr) && (slices.Contains(rs.pool.in.Models, model) || slices.Contains(rs.pool.in.LoRAAdapters, model))
		})
		if len(out) > 0 && out[len(out)-1].replica != out[0].replica {
			return nil // still ambiguous: refuse to guess
		}
	}
	return out
}

// fetchReplay asks a ROUTER replay endpoint for every buffered batch from
// start on, with a DEALER (a REQ socket would receive only the first reply),
// and calls fn for each in order until the end marker. Both reply layouts
// are accepted: ["", topic, seq, payload] (vLLM PR #45177 on) and
// ["", seq, payload] (before).
func (m *Manager) fetchReplay(ctx context.Context, endpoint string, start uint64, fn func(seq uint64, payload []byte)) error {
	rctx, cancel := context.WithTimeout(ctx, m.tuning.replayTimeout)
	defer cancel()
	d := zmq4.NewDealer(zmtpcap.Context(rctx, m.limits[sockReplay]), zmtpcap.Quiet, zmq4.WithDialerMaxRetries(2), zmq4.WithDialerRetry(50*time.Millisecond), zmq4.WithDialerTimeout(2*time.Second))
	defer d.Close()
	if err := d.Dial(zmtpcap.Endpoint(endpoint)); err != nil {
		return err
	}
	if err := d.Send(zmq4.NewMsgFrom([]byte{}, binary.BigEndian.AppendUint64(nil, start))); err != nil {
		return fmt.Errorf("send request: %w", err)
	}
	for {
		msg, err := d.Recv()
		if err != nil {
			if rctx.Err() != nil && ctx.Err() == nil {
				return fmt.Errorf("no end marker within %s", m.tuning.replayTimeout)
			}
			return err
		}
		if msg.Type == zmq4.CmdMsg {
			continue
		}
		f := msg.Frames
		if len(f) > 0 && len(f[0]) == 0 {
			f = f[1:] // the empty delimiter
		}
		var seqB, payload []byte
		switch len(f) {
		case 3:
			seqB, payload = f[1], f[2]
		case 2:
			seqB, payload = f[0], f[1]
		default:
			return fmt.Errorf("replay reply of %d frames", len(msg.Frames))
		}
		if len(seqB) != seqLen {
			return errors.New("replay reply without an 8-byte seq")
		}
		seq := binary.BigEndian.Uint64(seqB)
		if seq == replayEndSeq || len(payload) == 0 {
			return nil
		}
		fn(seq, payload)
	}
}

// loopbackByDefault gives a tcp bind endpoint without a host (tcp://*:5557,
// tcp://:5557) the loopback address: listening on every interface must be
// asked for by name (tcp://0.0.0.0:5557), since anyone who reaches the port
// can publish events.
func loopbackByDefault(ep string) string {
	rest, ok := strings.CutPrefix(ep, "tcp://")
	if !ok {
		return ep
	}
	host, port, err := net.SplitHostPort(rest)
	if err != nil || (host != "" && host != "*") {
		return ep
	}
	return "tcp://" + net.JoinHostPort("127.0.0.1", port)
}

// isLoopbackEndpoint: a tcp endpoint on a loopback address, or ipc/inproc.
func isLoopbackEndpoint(ep string) bool {
	rest, ok := strings.CutPrefix(ep, "tcp://")
	if !ok {
		return true
	}
	host, _, err := net.SplitHostPort(rest)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}
