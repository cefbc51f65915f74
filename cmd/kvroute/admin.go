package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// askAdmin sends one request to a running kvroute's admin listener (admin:
// host:port or a URL) and returns its answer, at most limit bytes, or an
// error that names the status and the start of a non-200 answer. A body, when
// given, is sent as JSON.
func askAdmin(ctx context.Context, admin string, timeout time.Duration, method, pathQuery string, body []byte, limit int64) ([]byte, error) {
	base := admin
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(base, "/")+pathQuery, rd)
	if err != nil {
		return nil, fmt.Errorf("--admin: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	answer, err := readAllLimited(resp.Body, limit)
	if err != nil {
		return nil, fmt.Errorf("answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(answer[:min(len(answer), 512)])))
	}
	return answer, nil
}
