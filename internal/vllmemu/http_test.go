package vllmemu

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/kvroute/kvroute/blockhash"
	"github.com/kvroute/kvroute/internal/testdata"
)

// serve starts an engine with the qwen3 tokenizer and chat template behind
// a real loopback HTTP server.
func serve(t *testing.T, mod func(*Options)) (*Engine, string) {
	t.Helper()
	opts := fastOptions(t)
	opts.Tokenizer = qwen3(t)
	ct, err := LoadChatTemplates(opts.Tokenizer, testdata.TokenizerDir(t, "qwen3"), "")
	if err != nil || ct == nil {
		t.Fatalf("qwen3 chat template: %v (nil=%v)", err, ct == nil)
	}
	opts.Chat = ct
	opts.LoRAAdapters = []string{"sql-lora"}
	if mod != nil {
		mod(&opts)
	}
	e := startEngine(t, opts)
	srv := httptest.NewServer(e.Handler())
	t.Cleanup(srv.Close)
	return e, srv.URL
}

type completionResp struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Model   string `json:"model"`
	Choices []struct {
		Index        int     `json:"index"`
		Text         string  `json:"text"`
		FinishReason *string `json:"finish_reason"`
		Message      *struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"message"`
		Delta *struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"delta"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		TotalTokens         int `json:"total_tokens"`
		PromptTokensDetails *struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

type errorResp struct {
	Error struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    int    `json:"code"`
	} `json:"error"`
}

func decodeJSON[T any](t *testing.T, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return v
}

func TestCompletionsPromptForms(t *testing.T) {
	e, url := serve(t, nil)
	tok := e.opts.Tokenizer
	text := "The capital of France is"
	ids := tok.Encode(text, true)
	tests := []struct {
		name, prompt string
		wantPrompt   int
	}{
		{"string", `"` + text + `"`, len(ids)},
		{"token ids", ints(ids), len(ids)},
		{"list of strings", `["` + text + `"]`, len(ids)},
		{"list of token id lists", `[` + ints(seq(100, 7)) + `]`, 7},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, body := postJSON(t, url+"/v1/completions", `{"model":"test-model","prompt":`+tc.prompt+`,"max_tokens":5}`)
			if code != http.StatusOK {
				t.Fatalf("status %d: %s", code, body)
			}
			r := decodeJSON[completionResp](t, body)
			if r.Object != "text_completion" || !strings.HasPrefix(r.ID, "cmpl-") || r.Model != "test-model" || len(r.Choices) != 1 {
				t.Fatalf("response %s", body)
			}
			c := r.Choices[0]
			if c.Text == "" || c.FinishReason == nil || *c.FinishReason != "length" {
				t.Fatalf("choice %s", body)
			}
			u := r.Usage
			if u == nil || u.PromptTokens != tc.wantPrompt || u.CompletionTokens != 5 || u.TotalTokens != tc.wantPrompt+5 || u.PromptTokensDetails == nil {
				t.Fatalf("usage %s, want %d prompt tokens", body, tc.wantPrompt)
			}
		})
	}
}

func TestCompletionsReportCachedTokens(t *testing.T) {
	_, url := serve(t, nil) // block size 16
	prompt := ints(seq(1000, 100))
	var cached []int
	for range 2 {
		code, body := postJSON(t, url+"/v1/completions", `{"prompt":`+prompt+`,"max_tokens":1}`)
		if code != http.StatusOK {
			t.Fatalf("status %d: %s", code, body)
		}
		cached = append(cached, decodeJSON[completionResp](t, body).Usage.PromptTokensDetails.CachedTokens)
	}
	if cached[0] != 0 || cached[1] != 96 {
		t.Fatalf("cached tokens %v, want [0 96] (6 full blocks of 16)", cached)
	}
}

// readSSE reads a text/event-stream body into its data payloads, checking
// the "data: ...\n\n" framing.
func readSSE(t *testing.T, r io.Reader) []string {
	t.Helper()
	br := bufio.NewReader(r)
	var out []string
	for {
		line, err := br.ReadString('\n')
		if err == io.EOF && line == "" {
			return out
		}
		if err != nil {
			t.Fatalf("read stream: %v", err)
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("stream line %q is not a data line", line)
		}
		if blank, _ := br.ReadString('\n'); blank != "\n" {
			t.Fatalf("event not followed by a blank line: %q", blank)
		}
		out = append(out, strings.TrimSuffix(data, "\n"))
	}
}

func postStream(t *testing.T, url, body string) []string {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d type %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	return readSSE(t, resp.Body)
}

func TestCompletionsStreaming(t *testing.T) {
	_, url := serve(t, nil)
	events := postStream(t, url+"/v1/completions",
		`{"prompt":"Hello there","max_tokens":4,"stream":true,"stream_options":{"include_usage":true}}`)
	if len(events) != 6 || events[5] != "[DONE]" {
		t.Fatalf("events %q: want 4 token chunks, a usage chunk and [DONE]", events)
	}
	var text strings.Builder
	for i, ev := range events[:4] {
		c := decodeJSON[completionResp](t, []byte(ev))
		if c.Object != "text_completion" || len(c.Choices) != 1 || c.Usage != nil {
			t.Fatalf("chunk %d: %s", i, ev)
		}
		text.WriteString(c.Choices[0].Text)
		if last := i == 3; last != (c.Choices[0].FinishReason != nil) {
			t.Fatalf("chunk %d finish_reason: %s", i, ev)
		}
	}
	if text.Len() == 0 {
		t.Fatal("streamed no text")
	}
	u := decodeJSON[completionResp](t, []byte(events[4]))
	if len(u.Choices) != 0 || u.Usage == nil || u.Usage.CompletionTokens != 4 {
		t.Fatalf("usage chunk %s", events[4])
	}
	// Without include_usage there is no usage chunk.
	events = postStream(t, url+"/v1/completions", `{"prompt":"Hello there","max_tokens":2,"stream":true}`)
	if len(events) != 3 || events[2] != "[DONE]" {
		t.Fatalf("events %q", events)
	}
}

func TestChatCompletionsUseTheChatTemplate(t *testing.T) {
	e, url := serve(t, nil)
	body := `{"model":"test-model","messages":[{"role":"user","content":"Hello"}],"max_tokens":3}`
	code, b := postJSON(t, url+"/v1/chat/completions", body)
	if code != http.StatusOK {
		t.Fatalf("status %d: %s", code, b)
	}
	r := decodeJSON[completionResp](t, b)
	if r.Object != "chat.completion" || len(r.Choices) != 1 || r.Choices[0].Message == nil ||
		r.Choices[0].Message.Role != "assistant" || r.Choices[0].Message.Content == "" {
		t.Fatalf("response %s", b)
	}
	// Qwen3's template renders one user turn and opens the assistant turn.
	want := len(e.opts.Tokenizer.Encode("<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n", false))
	if r.Usage.PromptTokens != want {
		t.Fatalf("prompt tokens %d, want %d", r.Usage.PromptTokens, want)
	}
	// /tokenize with messages gives the same tokens.
	code, b = postJSON(t, url+"/tokenize", body)
	tr := decodeJSON[struct {
		Count       int    `json:"count"`
		MaxModelLen int    `json:"max_model_len"`
		Tokens      []int  `json:"tokens"`
		TokenStrs   *[]any `json:"token_strs"`
	}](t, b)
	if code != http.StatusOK || tr.Count != want || len(tr.Tokens) != want {
		t.Fatalf("tokenize %d: %s", code, b)
	}

	events := postStream(t, url+"/v1/chat/completions",
		`{"messages":[{"role":"user","content":"Hello"}],"max_tokens":2,"stream":true}`)
	if len(events) != 4 || events[3] != "[DONE]" {
		t.Fatalf("chat stream %q: want role chunk, 2 content chunks, [DONE]", events)
	}
	first := decodeJSON[completionResp](t, []byte(events[0]))
	if first.Object != "chat.completion.chunk" || first.Choices[0].Delta == nil || first.Choices[0].Delta.Role != "assistant" {
		t.Fatalf("first chunk %s", events[0])
	}
}

func TestChatWithoutTemplateIs400(t *testing.T) {
	_, url := serve(t, func(o *Options) { o.Chat = nil })
	code, b := postJSON(t, url+"/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}]}`)
	if code != http.StatusBadRequest || decodeJSON[errorResp](t, b).Error.Code != 400 {
		t.Fatalf("status %d: %s", code, b)
	}
}

// TestTokenizeShape checks vLLM's /tokenize response keys exactly.
func TestTokenizeShape(t *testing.T) {
	e, url := serve(t, nil)
	code, b := postJSON(t, url+"/tokenize", `{"model":"test-model","prompt":"Hello world"}`)
	if code != http.StatusOK {
		t.Fatalf("status %d: %s", code, b)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if len(m) != 4 || string(m["token_strs"]) != "null" || m["count"] == nil || m["max_model_len"] == nil || m["tokens"] == nil {
		t.Fatalf("keys of %s, want count, max_model_len, tokens, token_strs", b)
	}
	var ids []int
	_ = json.Unmarshal(m["tokens"], &ids)
	if want := e.opts.Tokenizer.Encode("Hello world", true); ints(ids) != ints(want) {
		t.Fatalf("tokens %v, want %v", ids, want)
	}
}

func TestModelsHealthAndReset(t *testing.T) {
	_, url := serve(t, nil)
	resp, err := http.Get(url + "/health")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("health: %v %v", err, resp)
	}
	resp.Body.Close()
	resp, err = http.Get(url + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	models := decodeJSON[struct {
		Object string `json:"object"`
		Data   []struct {
			ID          string  `json:"id"`
			Object      string  `json:"object"`
			Parent      *string `json:"parent"`
			MaxModelLen int     `json:"max_model_len"`
		} `json:"data"`
	}](t, b)
	if models.Object != "list" || len(models.Data) != 2 || models.Data[0].ID != "test-model" || models.Data[0].Parent != nil ||
		models.Data[1].ID != "sql-lora" || models.Data[1].Parent == nil || *models.Data[1].Parent != "test-model" {
		t.Fatalf("models %s", b)
	}
	code, b := postJSON(t, url+"/reset_prefix_cache", "")
	if code != http.StatusOK || strings.TrimSpace(string(b)) != `{"success":true}` {
		t.Fatalf("reset %d %s", code, b)
	}
}

func TestHTTPErrors(t *testing.T) {
	_, url := serve(t, func(o *Options) { o.MaxModelLen = 64 })
	tests := []struct {
		name, path, body string
		code             int
		typ              string
	}{
		{"garbage JSON", "/v1/completions", `{"prompt": "x",`, 400, "BadRequestError"},
		{"wrong prompt type", "/v1/completions", `{"prompt": {"a":1}}`, 400, "BadRequestError"},
		{"no prompt", "/v1/completions", `{"model":"test-model"}`, 400, "BadRequestError"},
		{"unknown model", "/v1/completions", `{"model":"nope","prompt":"x"}`, 404, "NotFoundError"},
		{"unknown model chat", "/v1/chat/completions", `{"model":"nope","messages":[{"role":"user","content":"x"}]}`, 404, "NotFoundError"},
		{"over max_model_len", "/v1/completions", `{"prompt":` + ints(seq(1, 60)) + `,"max_tokens":5}`, 400, "BadRequestError"},
		{"negative max_tokens", "/v1/completions", `{"prompt":"x","max_tokens":-1}`, 400, "BadRequestError"},
		{"garbage chat", "/v1/chat/completions", `[1,2`, 400, "BadRequestError"},
		{"garbage tokenize", "/tokenize", `nope`, 400, "BadRequestError"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, b := postJSON(t, url+tc.path, tc.body)
			er := decodeJSON[errorResp](t, b)
			if code != tc.code || er.Error.Code != tc.code || er.Error.Type != tc.typ || er.Error.Message == "" {
				t.Fatalf("status %d body %s; want %d %s", code, b, tc.code, tc.typ)
			}
		})
	}
}

// TestClientDisconnectFreesRequest: a client that goes away mid-stream has
// its request aborted and its KV blocks freed.
func TestClientDisconnectFreesRequest(t *testing.T) {
	e, url := serve(t, func(o *Options) { o.DecodePerToken = 2 * time.Millisecond })
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/completions",
		strings.NewReader(`{"prompt":"Tell me a long story","max_tokens":5000,"stream":true}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "data: {") {
		t.Fatalf("first chunk %q: %v", line, err)
	}
	if st := e.Stats(); st.Running != 1 || st.KVUsage == 0 {
		t.Fatalf("while streaming: %+v", st)
	}
	cancel()
	resp.Body.Close()
	waitFor(t, "the aborted request to be freed", func() bool {
		st := e.Stats()
		return st.Running == 0 && st.Waiting == 0 && st.KVUsage == 0
	})
	if st := e.Stats(); st.Finished != 0 {
		t.Fatalf("aborted request counted as finished: %+v", st)
	}
}

func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("metrics %d", resp.StatusCode)
	}
	return string(b)
}

func TestMetricsUseVLLMNames(t *testing.T) {
	_, url := serve(t, func(o *Options) { o.HashAlgo = blockhash.SHA256CBOR })
	prompt := ints(seq(1000, 40))
	for range 2 {
		if code, b := postJSON(t, url+"/v1/completions", `{"prompt":`+prompt+`,"max_tokens":2}`); code != 200 {
			t.Fatalf("%d %s", code, b)
		}
	}
	// A response is written before the engine retires its request: wait
	// (bounded) until the gauges show it gone.
	m := scrape(t, url)
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(m, `vllm:num_requests_running{engine="0",model_name="test-model"} 0`) && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
		m = scrape(t, url)
	}
	for _, want := range []string{
		`vllm:num_requests_running{engine="0",model_name="test-model"} 0`,
		`vllm:num_requests_waiting{engine="0",model_name="test-model"} 0`,
		`vllm:kv_cache_usage_perc{engine="0",model_name="test-model"} 0`,
		`vllm:prefix_cache_queries_total{engine="0",model_name="test-model"} 80`,
		`vllm:prefix_cache_hits_total{engine="0",model_name="test-model"} 32`,
		`vllm:time_to_first_token_seconds_count{engine="0",model_name="test-model"} 2`,
		`vllm:request_prefill_time_seconds_count{engine="0",model_name="test-model"} 2`,
		`vllm:request_queue_time_seconds_count{engine="0",model_name="test-model"} 2`,
		`vllm:prompt_tokens_total{engine="0",model_name="test-model"} 80`,
		`vllm:time_to_first_token_seconds_bucket{engine="0",model_name="test-model",le="0.001"}`,
		`block_size="16"`,
		`prefix_caching_hash_algo="sha256_cbor"`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if !strings.Contains(m, "vllm:cache_config_info{") {
		t.Error("/metrics lacks vllm:cache_config_info")
	}
}

func TestDPHandlerRoutesByRankHeader(t *testing.T) {
	var engines []*Engine
	for r := range 2 {
		opts := fastOptions(t)
		opts.DataParallelRank = r
		engines = append(engines, startEngine(t, opts))
	}
	srv := httptest.NewServer(DPHandler(engines))
	t.Cleanup(srv.Close)
	send := func(rank string) int {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/completions", strings.NewReader(`{"prompt":"hi","max_tokens":1}`))
		if rank != "" {
			req.Header.Set(HeaderDataParallelRank, rank)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if send("1") != 200 || send("") != 200 || send("1") != 200 {
		t.Fatal("requests failed")
	}
	if a, b := engines[0].Stats().Requests, engines[1].Stats().Requests; a != 1 || b != 2 {
		t.Fatalf("rank 0 served %d, rank 1 served %d; want 1 and 2", a, b)
	}
	if code := send("2"); code != http.StatusBadRequest {
		t.Fatalf("rank 2 of 2: status %d", code)
	}
	m := scrape(t, srv.URL)
	if !strings.Contains(m, `vllm:prefix_cache_queries_total{engine="1",model_name="test-model"}`) ||
		!strings.Contains(m, `vllm:prefix_cache_queries_total{engine="0",model_name="test-model"}`) {
		t.Fatalf("DP /metrics does not report both engines:\n%s", m)
	}
}

func FuzzParseCompletionBody(f *testing.F) {
	for _, s := range []string{
		`{"model":"Qwen/Qwen3-8B","prompt":"Hello","max_tokens":16,"stream":true,"stream_options":{"include_usage":true}}`,
		`{"prompt":[1,2,3],"max_tokens":1,"cache_salt":"tenant-a"}`,
		`{"prompt":["a","b"]}`,
		`{"prompt":[[1,2],[3]],"max_completion_tokens":4}`,
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"add_special_tokens":true}`,
		`{"prompt":[-1]}`, `{"prompt":null}`, `{"prompt":{}}`, `[]`, `null`, ``, `{"max_tokens":-5}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := parseCompletionBody(body)
		if err != nil {
			return
		}
		_ = p.maxTokens(16)
		for _, id := range p.promptIDs {
			if id < 0 {
				t.Fatalf("negative token id %d accepted", id)
			}
		}
	})
}
