package ingest

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/kvroute/kvroute/internal/zmtpcap"
)

// Every socket ingest opens (bind-mode SUB, connect-mode SUB, replay DEALER)
// is capped (internal/zmtpcap): a peer announcing a frame over
// Settings.MaxMessageBytes is disconnected before anything is allocated.

// Sockets whose frames are capped (label values of kvroute_ingest_frames_refused_total).
const (
	sockBind   = "bind"
	sockEvents = "events"
	sockReplay = "replay"
)

// frameLimit returns the limit for ingest's sockets of one kind; refusals
// are counted and logged (lengths and the peer address only, at most once
// a second per kind).
func (m *Manager) frameLimit(kind string) *zmtpcap.Limit {
	var lastLog atomic.Int64
	counter := m.m.framesRefused
	return &zmtpcap.Limit{
		MaxMessageBytes: uint64(m.set.MaxMessageBytes),
		OnRefuse: func(r zmtpcap.Refusal) {
			counter.WithLabelValues(kind, r.Reason).Inc()
			now := time.Now().UnixNano()
			if last := lastLog.Load(); now-last < int64(time.Second) || !lastLog.CompareAndSwap(last, now) {
				return
			}
			m.log.LogAttrs(context.Background(), slog.LevelWarn, "ingest: refused an oversize ZeroMQ frame; closed the connection",
				slog.String("socket", kind), slog.String("reason", r.Reason), slog.String("peer", r.Peer),
				slog.Uint64("frame_bytes", r.FrameBytes), slog.Uint64("message_bytes", r.MessageBytes),
				slog.Uint64("limit_bytes", r.LimitBytes))
		},
	}
}
