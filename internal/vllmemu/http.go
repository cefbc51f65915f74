package vllmemu

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kvroute/kvroute/chattemplate"
)

// Handler is the engine's whole HTTP API: OpenAI completions and chat
// completions (streaming or not), /v1/models, /tokenize, /health,
// /reset_prefix_cache and /metrics.
func (e *Engine) Handler() http.Handler {
	return e.handler(promhttp.HandlerFor(e.reg, promhttp.HandlerOpts{}))
}

func (e *Engine) handler(metricsHandler http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", e.serveCompletions)
	mux.HandleFunc("POST /v1/chat/completions", e.serveChat)
	mux.HandleFunc("GET /v1/models", e.serveModels)
	mux.HandleFunc("POST /tokenize", e.serveTokenize)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("POST /reset_prefix_cache", e.serveReset)
	mux.Handle("GET /metrics", metricsHandler)
	return mux
}

// DPHandler serves several engines (the DP ranks of one vLLM server) on one
// HTTP API: a request goes to the rank named by the X-data-parallel-rank
// header (rank 0 without it), /metrics reports every engine under its
// engine label, and /reset_prefix_cache resets every rank.
func DPHandler(engines []*Engine) http.Handler {
	gs := make(prometheus.Gatherers, len(engines))
	for i, e := range engines {
		gs[i] = e.reg
	}
	metricsH := promhttp.HandlerFor(gs, promhttp.HandlerOpts{})
	hs := make([]http.Handler, len(engines))
	for i, e := range engines {
		hs[i] = e.handler(metricsH)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/reset_prefix_cache" && r.Method == http.MethodPost {
			running := r.URL.Query().Get("reset_running_requests") == "true"
			ok := true
			for _, e := range engines {
				ok = e.ResetPrefixCache(running) == nil && ok
			}
			writeJSON(w, http.StatusOK, resetResponse{Success: ok})
			return
		}
		rank := 0
		if v := r.Header.Get(HeaderDataParallelRank); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || n >= len(engines) {
				writeError(w, http.StatusBadRequest, "BadRequestError", nil,
					fmt.Sprintf("data_parallel_rank %q is out of range [0, %d)", v, len(engines)))
				return
			}
			rank = n
		}
		hs[rank].ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, typ string, param *string, msg string) {
	writeJSON(w, status, apiError{Error: apiErrorInfo{Message: msg, Type: typ, Param: param, Code: status}})
}

func badRequest(w http.ResponseWriter, err error) {
	writeError(w, http.StatusBadRequest, "BadRequestError", nil, err.Error())
}

func readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		badRequest(w, fmt.Errorf("read body: %w", err))
		return nil, false
	}
	return body, true
}

// resolveModel maps the request's model to (lora name, lora id); ok=false
// after answering 404 as vLLM does for an unknown model.
func (e *Engine) resolveModel(w http.ResponseWriter, model string) (string, *int64, bool) {
	if model == "" || model == e.opts.Model || slices.Contains(e.opts.ModelAliases, model) {
		return "", nil, true
	}
	if id, ok := e.loraIDs[model]; ok {
		return model, &id, true
	}
	param := "model"
	writeError(w, http.StatusNotFound, "NotFoundError", &param, fmt.Sprintf("The model `%s` does not exist.", model))
	return "", nil, false
}

// request reads and parses a completions-shaped body and resolves its
// model; ok=false after answering the error.
func (e *Engine) request(w http.ResponseWriter, r *http.Request) (body []byte, p *completionParams, m modelRef, ok bool) {
	if body, ok = readBody(w, r); !ok {
		return nil, nil, m, false
	}
	p, err := parseCompletionBody(body)
	if err != nil {
		badRequest(w, err)
		return nil, nil, m, false
	}
	m.lora, m.loraID, ok = e.resolveModel(w, p.Model)
	return body, p, m, ok
}

// modelRef is the LoRA adapter a request's model names ("" and nil: the base model).
type modelRef struct {
	lora   string
	loraID *int64
}

func (e *Engine) serveCompletions(w http.ResponseWriter, r *http.Request) {
	_, p, m, ok := e.request(w, r)
	if !ok {
		return
	}
	if len(p.Prompt) == 0 || string(p.Prompt) == "null" {
		badRequest(w, errors.New("prompt is required"))
		return
	}
	ids := p.promptIDs
	if !p.hasIDs {
		add := p.AddSpecialTokens == nil || *p.AddSpecialTokens
		ids = e.opts.Tokenizer.Encode(p.promptText, add)
	}
	e.generate(w, r, p, ids, m.lora, m.loraID, false, defaultCompletionMaxTokens)
}

func (e *Engine) serveChat(w http.ResponseWriter, r *http.Request) {
	body, p, m, ok := e.request(w, r)
	if !ok {
		return
	}
	ids, err := e.chatTokens(body)
	if err != nil {
		badRequest(w, err)
		return
	}
	e.generate(w, r, p, ids, m.lora, m.loraID, true, defaultChatMaxTokens)
}

// chatTokens renders a chat body with the model's template and tokenizes it
// without special tokens unless the body asks for them, as vLLM does.
func (e *Engine) chatTokens(body []byte) ([]int, error) {
	if e.opts.Chat == nil {
		return nil, errors.New("this emulated model has no chat template")
	}
	req, err := chattemplate.ParseChatRequest(body)
	if err != nil {
		return nil, err
	}
	text, err := e.opts.Chat.RenderRequest(req)
	if err != nil {
		return nil, err
	}
	return e.opts.Tokenizer.Encode(text, req.AddSpecialTokens), nil
}

func newID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// generate runs one request through the scheduler and writes the response,
// streamed as SSE when asked.
func (e *Engine) generate(w http.ResponseWriter, hr *http.Request, p *completionParams, ids []int, lora string, loraID *int64, chat bool, defMax int) {
	maxTokens := p.maxTokens(defMax)
	switch {
	case len(ids) == 0:
		badRequest(w, errors.New("the prompt cannot be empty"))
		return
	case maxTokens < 1:
		badRequest(w, errors.New("max_tokens must be at least 1"))
		return
	case len(ids)+maxTokens > e.opts.MaxModelLen:
		badRequest(w, fmt.Errorf("this model's maximum context length is %d tokens; however, you requested %d tokens (%d in the messages, %d in the completion)",
			e.opts.MaxModelLen, len(ids)+maxTokens, len(ids), maxTokens))
		return
	}
	salt := ""
	if p.CacheSalt != nil {
		salt = *p.CacheSalt
	}
	req := &request{
		tokens: slices.Clone(ids), promptLen: len(ids), maxTokens: maxTokens,
		lora: lora, loraID: loraID, salt: salt, arrival: e.opts.Now(),
		out: make(chan output, maxTokens+1),
	}
	if err := req.hashNewBlocks(e.hasher); err != nil {
		badRequest(w, err)
		return
	}
	kind, prefix := "text_completion", "cmpl-"
	if chat {
		kind, prefix = "chat.completion", "chatcmpl-"
	}
	req.id = newID(prefix)
	if err := e.submit(req); err != nil {
		writeError(w, http.StatusServiceUnavailable, "ServiceUnavailableError", nil, err.Error())
		return
	}
	abort := func() {
		req.aborted.Store(true)
		select {
		case e.wake <- struct{}{}:
		default:
		}
	}
	// next waits for the request's next output; false when the client went
	// away first (the request is aborted).
	next := func() (output, bool) {
		select {
		case <-hr.Context().Done():
			abort()
			return output{}, false
		case o := <-req.out:
			return o, true
		}
	}
	created := req.arrival.Unix()
	model := p.Model
	if lora == "" {
		model = e.opts.Model
	}
	finish := finishedReasonLength
	mkUsage := func(n, cached int) *usage {
		return &usage{PromptTokens: len(ids), CompletionTokens: n, TotalTokens: len(ids) + n,
			PromptTokensDetails: &promptDetail{CachedTokens: cached}}
	}
	if !p.Stream {
		var text strings.Builder
		n, cached := 0, 0
		for {
			o, ok := next()
			if !ok {
				return
			}
			if o.err != nil {
				writeError(w, http.StatusServiceUnavailable, "ServiceUnavailableError", nil, o.err.Error())
				return
			}
			text.WriteString(o.text)
			n++
			cached = o.cachedTokens
			if !o.done {
				continue
			}
			resp := completionResponse{ID: req.id, Object: kind, Created: created, Model: model, Usage: mkUsage(n, cached)}
			if chat {
				resp.Choices = []chatChoice{{Message: &chatMessage{Role: "assistant", Content: text.String()}, FinishReason: &finish}}
			} else {
				resp.Choices = []completionChoice{{Text: text.String(), FinishReason: &finish}}
			}
			writeJSON(w, http.StatusOK, resp)
			return
		}
	}
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	send := func(v any) bool {
		b, _ := json.Marshal(v)
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return false
		}
		if flusher != nil {
			flusher.Flush()
		}
		return true
	}
	chunkKind := kind
	if chat {
		chunkKind = "chat.completion.chunk"
		if !send(completionResponse{ID: req.id, Object: chunkKind, Created: created, Model: model,
			Choices: []chatChoice{{Delta: &chatMessage{Role: "assistant", Content: ""}}}}) {
			abort()
			return
		}
	}
	n := 0
	for {
		o, ok := next()
		if !ok {
			return
		}
		if o.err != nil {
			send(apiError{Error: apiErrorInfo{Message: o.err.Error(), Type: "ServiceUnavailableError", Code: http.StatusServiceUnavailable}})
			return
		}
		n++
		var fr *string
		if o.done {
			fr = &finish
		}
		chunk := completionResponse{ID: req.id, Object: chunkKind, Created: created, Model: model}
		if chat {
			chunk.Choices = []chatChoice{{Delta: &chatMessage{Content: o.text}, FinishReason: fr}}
		} else {
			chunk.Choices = []completionChoice{{Text: o.text, FinishReason: fr}}
		}
		if !send(chunk) {
			abort()
			return
		}
		if !o.done {
			continue
		}
		if p.StreamOptions != nil && p.StreamOptions.IncludeUsage {
			send(completionResponse{ID: req.id, Object: chunkKind, Created: created, Model: model,
				Choices: []any{}, Usage: mkUsage(n, o.cachedTokens)})
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
		if flusher != nil {
			flusher.Flush()
		}
		return
	}
}

func (e *Engine) serveModels(w http.ResponseWriter, _ *http.Request) {
	type model struct {
		ID          string  `json:"id"`
		Object      string  `json:"object"`
		Created     int64   `json:"created"`
		OwnedBy     string  `json:"owned_by"`
		Root        string  `json:"root"`
		Parent      *string `json:"parent"`
		MaxModelLen int     `json:"max_model_len"`
	}
	now := e.opts.Now().Unix()
	data := []model{{ID: e.opts.Model, Object: "model", Created: now, OwnedBy: "vllm", Root: e.opts.Model, MaxModelLen: e.opts.MaxModelLen}}
	for _, name := range e.opts.LoRAAdapters {
		parent := e.opts.Model
		data = append(data, model{ID: name, Object: "model", Created: now, OwnedBy: "vllm", Root: name, Parent: &parent, MaxModelLen: e.opts.MaxModelLen})
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

// serveTokenize answers vLLM's POST /tokenize: {"model","prompt"} (special
// tokens added by default) or {"model","messages"} (rendered with the chat
// template, no special tokens by default) → {"count","max_model_len","tokens"}
// (vllm/entrypoints/openai/serving_tokenization.py, upstream main 5ac26849).
func (e *Engine) serveTokenize(w http.ResponseWriter, r *http.Request) {
	body, p, _, ok := e.request(w, r)
	if !ok {
		return
	}
	var ids []int
	var err error
	switch {
	case len(p.Messages) > 0 && string(p.Messages) != "null":
		if ids, err = e.chatTokens(body); err != nil {
			badRequest(w, err)
			return
		}
	case p.hasIDs:
		ids = p.promptIDs
	case len(p.Prompt) > 0 && string(p.Prompt) != "null":
		add := p.AddSpecialTokens == nil || *p.AddSpecialTokens
		ids = e.opts.Tokenizer.Encode(p.promptText, add)
	default:
		badRequest(w, errors.New("either prompt or messages is required"))
		return
	}
	if ids == nil {
		ids = []int{}
	}
	writeJSON(w, http.StatusOK, tokenizeResponse{Count: len(ids), MaxModelLen: e.opts.MaxModelLen, Tokens: ids})
}

// serveReset answers POST /reset_prefix_cache as vLLM's dev-mode route
// does: 200 with {"success": bool}, false while blocks are in use
// (vllm/entrypoints/serve/dev/cache/api_router.py, upstream main 5ac26849).
func (e *Engine) serveReset(w http.ResponseWriter, r *http.Request) {
	running := r.URL.Query().Get("reset_running_requests") == "true"
	writeJSON(w, http.StatusOK, resetResponse{Success: e.ResetPrefixCache(running) == nil})
}
