package ingest

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"time"
)

// maxProbeBodyBytes is as much of a /health answer as is read (vLLM's is
// empty); the rest is left unread and the connection closed.
const maxProbeBodyBytes = 4 << 10

// prober checks one vLLM server's liveness through GET /health, far more
// often than /metrics is scraped: a scrape parses tens of kilobytes, a
// probe reads an empty answer. vLLM answers 200 while its engine core is
// alive and 5xx once it is dead (vllm/entrypoints/openai/api_server.py,
// /health); a stopped (SIGSTOPped) process accepts the connection and never
// answers. Any answer below 500 (a 404 from a server without /health
// included) counts as alive: the process is scheduling.
type prober struct {
	m     *Manager
	url   string
	ranks []*rankState // the server's DP ranks, which share its fate
}

// newProber is the prober of the server sc scrapes (its /health sits at the
// same scheme and host); nil when the URL has no host.
func (m *Manager) newProber(sc *scraper) *prober {
	u, err := url.Parse(sc.url)
	if err != nil || u.Host == "" {
		return nil
	}
	u.Path, u.RawQuery, u.Fragment = "/health", "", ""
	return &prober{m: m, url: u.String(), ranks: sc.ranks}
}

func (p *prober) loop(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		p.probe(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// probe runs one check and records its verdict on every rank of the server.
func (p *prober) probe(ctx context.Context) {
	pctx, cancel := context.WithTimeout(ctx, p.m.stallAfter())
	defer cancel()
	down, reason := false, ""
	req, err := http.NewRequestWithContext(pctx, http.MethodGet, p.url, nil)
	if err == nil {
		var resp *http.Response
		resp, err = p.m.httpc.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxProbeBodyBytes))
			resp.Body.Close()
			if resp.StatusCode >= 500 {
				down, reason = true, downProbeFailed
			}
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		down, reason = true, downProbeFailed
		if errors.Is(pctx.Err(), context.DeadlineExceeded) {
			down, reason = true, downProbeStall
		}
	}
	for _, rs := range p.ranks {
		switch reason {
		case downProbeFailed:
			rs.met.probeFailed.Inc()
		case downProbeStall:
			rs.met.probeStalled.Inc()
		}
		rs.setProbe(down, reason)
	}
}
