package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvroute/kvroute/internal/testdata"
	"github.com/kvroute/kvroute/internal/vllmzmq"
)

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// vectorPayloads are vLLM's own KV-event payloads from the test vectors.
func vectorPayloads(t *testing.T) [][]byte {
	t.Helper()
	var out [][]byte
	for _, sc := range testdata.LoadKVEventVectors(t).Scenarios {
		for _, st := range sc.Steps {
			raw, err := hex.DecodeString(st.PayloadHex)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, raw)
		}
	}
	return out
}

// TestEventsTailPrintsReplayThenLive: an engine's publisher on real ZeroMQ
// sockets holds two batches; `events tail --replay` prints them from the
// replay, then the two published after it subscribed, each once, decoded,
// and stops at --count.
func TestEventsTailPrintsReplayThenLive(t *testing.T) {
	payloads := vectorPayloads(t)
	pub, err := vllmzmq.NewPublisher("tcp://127.0.0.1:0", "tcp://127.0.0.1:0", "kv@test", 16)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	for _, p := range payloads[:2] {
		if _, err := pub.Publish(p); err != nil { // nobody subscribed: replay only
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, errw := &syncBuf{}, &syncBuf{}
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"events", "tail", "--events", pub.Endpoint(), "--replay", pub.ReplayEndpoint(), "--count", "4", "--payload-hex"},
			stdio{strings.NewReader(""), out, errw})
	}()
	if err := pub.WaitSubscribed(ctx); err != nil {
		t.Fatal(err)
	}
	for _, p := range payloads[2:4] {
		if _, err := pub.Publish(p); err != nil {
			t.Fatal(err)
		}
	}
	if code := <-done; code != 0 {
		t.Fatalf("exit %d: %s", code, errw.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d lines, want 4:\n%s", len(lines), out.String())
	}
	for i, l := range lines {
		var got struct {
			Seq        uint64
			Topic      string
			Source     string
			PayloadHex string `json:"payload_hex"`
			Batch      struct {
				Events []struct{ Type string }
			}
		}
		if err := json.Unmarshal([]byte(l), &got); err != nil {
			t.Fatal(err)
		}
		// The batches published after the subscription may come back in
		// the replay too (printed once, from whichever came first).
		if i < 2 && got.Source != "replay" || i >= 2 && got.Source != "replay" && got.Source != "live" {
			t.Errorf("line %d: source %q", i, got.Source)
		}
		if got.Seq != uint64(i) || got.Topic != "kv@test" || len(got.Batch.Events) == 0 || got.Batch.Events[0].Type == "" ||
			got.PayloadHex != hex.EncodeToString(payloads[i]) {
			t.Errorf("line %d: %s", i, l)
		}
		// The hex is what events decode reads.
		if code, dec, errs := runCLI(t, got.PayloadHex, "events", "decode", "--hex"); code != 0 || !strings.Contains(dec, `"events":[`) {
			t.Errorf("line %d: events decode: exit %d %s %s", i, code, dec, errs)
		}
	}
}

// TestEventsTailBoundsFramesAndTime: a message above --max-message-bytes is
// refused before it is read and ends the tail with the lengths (never the
// content); --for ends a tail when nothing arrives.
func TestEventsTailBoundsFramesAndTime(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var pub *vllmzmq.Publisher
	// tail runs the command against a new publisher (a subscription of an
	// earlier tail is not taken for this one's).
	tail := func(args ...string) (chan int, *syncBuf, *syncBuf) {
		var err error
		if pub, err = vllmzmq.NewPublisher("tcp://127.0.0.1:0", "", "", 4); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pub.Close() })
		out, errw := &syncBuf{}, &syncBuf{}
		done := make(chan int, 1)
		argv := append([]string{"events", "tail", "--events", pub.Endpoint()}, args...)
		go func() { done <- run(ctx, argv, stdio{strings.NewReader(""), out, errw}) }()
		return done, out, errw
	}

	done, out, errw := tail("--max-message-bytes", "1024")
	if err := pub.WaitSubscribed(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := pub.Publish(bytes.Repeat([]byte{0x90}, 4096)); err != nil {
		t.Fatal(err)
	}
	if code := <-done; code != 1 || out.String() != "" || !strings.Contains(errw.String(), "frame of 4096 bytes") || !strings.Contains(errw.String(), "limit 1024") {
		t.Fatalf("oversize: exit %d, stdout %q, stderr %q", code, out.String(), errw.String())
	}

	// Live batches, nothing buffered for replay: printed as they come.
	done, out, errw = tail("--count", "2")
	if err := pub.WaitSubscribed(ctx); err != nil {
		t.Fatal(err)
	}
	payloads := vectorPayloads(t)
	for _, p := range payloads[:2] {
		if _, err := pub.Publish(p); err != nil {
			t.Fatal(err)
		}
	}
	if code := <-done; code != 0 || strings.Count(out.String(), `"source":"live","batch":{`) != 2 {
		t.Fatalf("live: exit %d, stdout %q, stderr %q", code, out.String(), errw.String())
	}

	start := time.Now()
	done, out, errw = tail("--for", "1s")
	if code := <-done; code != 0 || out.String() != "" {
		t.Fatalf("--for: exit %d, stdout %q, stderr %q", code, out.String(), errw.String())
	}
	if el := time.Since(start); el < time.Second || el > 10*time.Second {
		t.Errorf("--for 1s ran %v", el)
	}
}

func TestEventsTailUsage(t *testing.T) {
	code, _, errs := runCLI(t, "", "events", "tail")
	if code != 2 || !strings.Contains(errs, "contains prompt token ids") {
		t.Fatalf("no --events: exit %d, %q", code, errs)
	}
	code, _, errs = runCLI(t, "", "events", "decode", "--help")
	if code != 2 || !strings.Contains(errs, "kvroute events tail --events tcp://HOST:5557 --count 1 --payload-hex") {
		t.Fatalf("decode --help: exit %d, %q", code, errs)
	}
}
