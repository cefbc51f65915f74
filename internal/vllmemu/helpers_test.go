package vllmemu

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/kvroute/kvroute/internal/testdata"
	"github.com/kvroute/kvroute/tokenize"
)

var (
	qwenOnce sync.Once
	qwenTok  *tokenize.Tokenizer
	qwenErr  error
)

// qwen3 loads the real Qwen3 tokenizer once for the whole test binary.
func qwen3(t testing.TB) *tokenize.Tokenizer {
	t.Helper()
	dir := testdata.TokenizerDir(t, "qwen3")
	qwenOnce.Do(func() { qwenTok, qwenErr = tokenize.Load(dir) })
	if qwenErr != nil {
		t.Fatalf("load qwen3 tokenizer: %v", qwenErr)
	}
	return qwenTok
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// fastOptions are options for tests: real hashing, tiny step times.
func fastOptions(t testing.TB) Options {
	seed := "0"
	return Options{
		Model:           "test-model",
		Tokenizer:       qwen3(t),
		Seed:            &seed,
		PrefillPerToken: time.Microsecond,
		DecodePerToken:  time.Microsecond,
		Logger:          quietLogger(),
	}
}

// newEngine builds an engine that is not started: tests drive its scheduler
// steps by hand.
func newEngine(t testing.TB, opts Options) *Engine {
	t.Helper()
	e, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return e
}

// startEngine builds and starts an engine, closed at cleanup.
func startEngine(t testing.TB, opts Options) *Engine {
	t.Helper()
	e := newEngine(t, opts)
	if err := e.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return e
}

// queue adds a request to the waiting queue of an engine driven by hand.
func queue(e *Engine, tokens []int, maxTokens int) *request {
	r := &request{tokens: append([]int(nil), tokens...), promptLen: len(tokens), maxTokens: maxTokens,
		out: make(chan output, maxTokens+1), arrival: e.opts.Now()}
	if err := r.hashNewBlocks(e.hasher); err != nil {
		panic(err)
	}
	e.waiting = append(e.waiting, r)
	return r
}

// step runs one scheduler step synchronously and returns its KV events
// (nil when nothing was scheduled).
func step(e *Engine) (plan []scheduled, events []kvEvent) {
	plan = e.schedule()
	if len(plan) > 0 {
		e.finishStep(plan)
	}
	return plan, e.pool.takeEvents()
}

func seq(from, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = from + i
	}
	return out
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
