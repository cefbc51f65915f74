package routebench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Sample is what one request through a gateway measured.
type Sample struct {
	TTFT         time.Duration // request sent → first streamed token
	PromptTokens int           // usage.prompt_tokens
	CachedTokens int           // usage.prompt_tokens_details.cached_tokens
	Status       int           // HTTP status (0: no response)
	Err          error
}

// Driver sends a workload's requests to a gateway at their arrival times
// (open loop: a slow fleet does not slow the arrivals down) and measures
// each one.
type Driver struct {
	Client *http.Client
	Model  string
	// Progress, when set, is called after each completed request with its
	// sample (from several goroutines: it must be safe for concurrent use).
	Progress func(done, total int, s Sample)
}

// Run sends reqs to the gateways (e.g. "http://127.0.0.1:8080"), request i
// to gateway i mod len(gatewayURLs) (clients spread evenly), and returns one
// sample per request, in request order, once all have finished or ctx ends.
func (d *Driver) Run(ctx context.Context, gatewayURLs []string, reqs []Request) []Sample {
	out := make([]Sample, len(reqs))
	var wg sync.WaitGroup
	var done atomic.Int64
	start := time.Now()
	for i, r := range reqs {
		if wait := time.Until(start.Add(r.At)); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
			case <-t.C:
			}
		}
		if ctx.Err() != nil {
			for j := i; j < len(reqs); j++ {
				out[j].Err = ctx.Err()
			}
			break
		}
		wg.Go(func() {
			s := d.send(ctx, gatewayURLs[i%len(gatewayURLs)], i, r)
			out[i] = s
			n := done.Add(1)
			if d.Progress != nil {
				d.Progress(int(n), len(reqs), s)
			}
		})
	}
	wg.Wait()
	return out
}

type completionChunk struct {
	Choices []struct {
		Text  string `json:"text"`
		Delta *struct {
			Content string `json:"content"`
		} `json:"delta"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens        int `json:"prompt_tokens"`
		PromptTokensDetails *struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

// RequestBody is the OpenAI body the driver sends for r (model is the base
// model, replaced by r's adapter when it names one) and its path.
func RequestBody(model string, r Request) (path string, body []byte) {
	if r.Model != "" {
		model = r.Model
	}
	m := map[string]any{
		"model": model, "max_tokens": r.MaxTokens, "temperature": 0,
		"stream": true, "stream_options": map[string]any{"include_usage": true},
	}
	if r.CacheSalt != "" {
		m["cache_salt"] = r.CacheSalt
	}
	path = "/v1/completions"
	if r.Messages != nil {
		m["messages"], path = r.Messages, "/v1/chat/completions"
	} else {
		m["prompt"] = r.Prompt
	}
	body, _ = json.Marshal(m)
	return path, body
}

// send posts one streaming request (completions or chat) asking for usage in
// the last chunk, as vLLM's stream_options.include_usage does; id goes in
// the x-bench-id header so the engines' arrival log can be joined with it.
func (d *Driver) send(ctx context.Context, base string, id int, r Request) Sample {
	path, body := RequestBody(d.Model, r)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, bytes.NewReader(body))
	if err != nil {
		return Sample{Err: err}
	}
	req.Header.Set("content-type", "application/json")
	req.Header.Set(headerBenchID, strconv.Itoa(id))
	client := d.Client
	if client == nil {
		client = http.DefaultClient
	}
	sent := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return Sample{Err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return Sample{Status: resp.StatusCode, Err: fmt.Errorf("status %d: %s", resp.StatusCode, strings.TrimSpace(string(msg)))}
	}
	s := Sample{Status: resp.StatusCode}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	gotUsage := false
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var c completionChunk
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			return Sample{Status: resp.StatusCode, Err: fmt.Errorf("bad SSE chunk: %w", err)}
		}
		// The first generated text; a chat stream's first chunk may carry
		// only the role.
		if s.TTFT == 0 && len(c.Choices) > 0 && (c.Choices[0].Text != "" || c.Choices[0].Delta == nil ||
			c.Choices[0].Delta.Content != "") {
			s.TTFT = time.Since(sent)
		}
		if c.Usage != nil {
			gotUsage = true
			s.PromptTokens = c.Usage.PromptTokens
			if c.Usage.PromptTokensDetails != nil {
				s.CachedTokens = c.Usage.PromptTokensDetails.CachedTokens
			}
		}
	}
	if err := sc.Err(); err != nil {
		return Sample{Status: resp.StatusCode, Err: err}
	}
	if s.TTFT == 0 || !gotUsage {
		return Sample{Status: resp.StatusCode, Err: fmt.Errorf("stream ended without a token or usage")}
	}
	return s
}

// Summarize folds samples into a Result (PerReplica and Elapsed are the
// caller's).
func Summarize(policy, workload string, rate float64, samples []Sample) *Result {
	r := &Result{Policy: policy, Workload: workload, Rate: rate, Requests: len(samples)}
	for _, s := range samples {
		if s.Err != nil {
			r.Errors++
			if r.FirstError == "" {
				r.FirstError = s.Err.Error()
			}
			if s.Status == http.StatusServiceUnavailable {
				r.Rejected++
			}
			continue
		}
		r.PromptTokens += int64(s.PromptTokens)
		r.CachedTokens += int64(s.CachedTokens)
		r.TTFT = append(r.TTFT, s.TTFT)
	}
	return r
}

// FirstError returns the first failed sample's error, nil when all succeeded.
func FirstError(samples []Sample) error {
	for _, s := range samples {
		if s.Err != nil {
			return s.Err
		}
	}
	return nil
}
