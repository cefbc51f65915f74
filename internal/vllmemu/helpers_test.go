package vllmemu

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvroute/kvroute/internal/poll"
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

// byteTokenizer is a tokenizer with one token per byte (id = byte value):
// the engine needs a tokenizer to build, and the tests that drive its
// scheduler, block pool and events by token ids need no real one.
func byteTokenizer(t testing.TB) *tokenize.Tokenizer {
	t.Helper()
	var b strings.Builder
	b.WriteString(`{"version":"1.0","added_tokens":[],"normalizer":null,"pre_tokenizer":null,"post_processor":null,"decoder":null,` +
		`"model":{"type":"BPE","unk_token":null,"byte_fallback":true,"fuse_unk":false,"merges":[],"vocab":{`)
	for i := range 256 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"<0x%02X>":%d`, i, i)
	}
	b.WriteString(`}}}`)
	tok, err := tokenize.Parse([]byte(b.String()), nil, tokenize.Options{})
	if err != nil {
		t.Fatalf("byte tokenizer: %v", err)
	}
	return tok
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// fastOptions are options for tests: real hashing, tiny step times, the
// byte tokenizer (tests of the HTTP API set the real one).
func fastOptions(t testing.TB) Options {
	seed := "0"
	return Options{
		Model:           "test-model",
		Tokenizer:       byteTokenizer(t),
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

// waitFor polls cond (poll.Until).
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	poll.Until(t, what, cond)
}
