package vllmemu

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// completionParams are the fields of an OpenAI /v1/completions,
// /v1/chat/completions or /tokenize body the emulator acts on. Unknown
// fields are ignored, as vLLM's pydantic models allow extras.
type completionParams struct {
	Model               string          `json:"model"`
	Prompt              json.RawMessage `json:"prompt"`
	Messages            json.RawMessage `json:"messages"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Stream              bool            `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	CacheSalt        *string `json:"cache_salt"`
	AddSpecialTokens *bool   `json:"add_special_tokens"`

	// Decoded from Prompt: text or token ids.
	promptText string
	promptIDs  []int
	hasIDs     bool
}

var errBadRequest = errors.New("bad request")

// parseCompletionBody decodes a completions-shaped body. The prompt may be a
// string, a list of strings, a list of token ids or a list of lists of ids;
// for a list the emulator serves the first element only.
func parseCompletionBody(body []byte) (*completionParams, error) {
	var p completionParams
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("%w: %v", errBadRequest, err)
	}
	if p.MaxTokens != nil && *p.MaxTokens < 0 || p.MaxCompletionTokens != nil && *p.MaxCompletionTokens < 0 {
		return nil, fmt.Errorf("%w: max_tokens must be at least 0", errBadRequest)
	}
	if len(p.Prompt) == 0 || string(p.Prompt) == "null" {
		return &p, nil
	}
	if err := p.decodePrompt(); err != nil {
		return nil, err
	}
	return &p, nil
}

func (p *completionParams) decodePrompt() error {
	var s string
	if json.Unmarshal(p.Prompt, &s) == nil {
		p.promptText = s
		return nil
	}
	var ids []int
	if json.Unmarshal(p.Prompt, &ids) == nil {
		return p.setIDs(ids)
	}
	var texts []string
	if json.Unmarshal(p.Prompt, &texts) == nil && len(texts) > 0 {
		p.promptText = texts[0]
		return nil
	}
	var lists [][]int
	if json.Unmarshal(p.Prompt, &lists) == nil && len(lists) > 0 {
		return p.setIDs(lists[0])
	}
	return fmt.Errorf("%w: prompt must be a string, a list of strings, a list of token ids or a list of lists of token ids", errBadRequest)
}

func (p *completionParams) setIDs(ids []int) error {
	for _, id := range ids {
		if id < 0 {
			return fmt.Errorf("%w: token id %d out of range", errBadRequest, id)
		}
	}
	p.promptIDs, p.hasIDs = ids, true
	return nil
}

// maxTokens is the requested output length or def.
func (p *completionParams) maxTokens(def int) int {
	switch {
	case p.MaxCompletionTokens != nil:
		return *p.MaxCompletionTokens
	case p.MaxTokens != nil:
		return *p.MaxTokens
	}
	return def
}

// apiError is vLLM's ErrorResponse body (vllm/entrypoints/openai/protocol.py
// ErrorResponse/ErrorInfo, upstream main 5ac26849).
type apiError struct {
	Error apiErrorInfo `json:"error"`
}

type apiErrorInfo struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    int     `json:"code"`
}

type usage struct {
	PromptTokens        int           `json:"prompt_tokens"`
	TotalTokens         int           `json:"total_tokens"`
	CompletionTokens    int           `json:"completion_tokens"`
	PromptTokensDetails *promptDetail `json:"prompt_tokens_details"`
}

type promptDetail struct {
	CachedTokens int `json:"cached_tokens"`
}

type completionChoice struct {
	Index        int     `json:"index"`
	Text         string  `json:"text"`
	Logprobs     any     `json:"logprobs"`
	FinishReason *string `json:"finish_reason"`
	StopReason   any     `json:"stop_reason"`
}

type chatMessage struct {
	Role      string `json:"role,omitempty"`
	Content   string `json:"content"`
	ToolCalls []any  `json:"tool_calls,omitempty"`
}

type chatChoice struct {
	Index        int          `json:"index"`
	Message      *chatMessage `json:"message,omitempty"`
	Delta        *chatMessage `json:"delta,omitempty"`
	Logprobs     any          `json:"logprobs"`
	FinishReason *string      `json:"finish_reason"`
	StopReason   any          `json:"stop_reason"`
}

type completionResponse struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices any    `json:"choices"`
	Usage   *usage `json:"usage,omitempty"`
}

type tokenizeResponse struct {
	Count       int   `json:"count"`
	MaxModelLen int   `json:"max_model_len"`
	Tokens      []int `json:"tokens"`
	TokenStrs   any   `json:"token_strs"`
}

type resetResponse struct {
	Success bool `json:"success"`
}
