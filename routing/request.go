package routing

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Kind is the OpenAI endpoint a request targets.
type Kind uint8

// The request kinds kvroute routes on the body.
const (
	KindOther Kind = iota
	KindCompletion
	KindChat
)

// Request is what the decision needs from an OpenAI-style body. Prompt text
// is never logged.
type Request struct {
	Kind  Kind
	Model string
	// Prompt is a completion's text prompt; PromptIDs its token-id prompt.
	Prompt    string
	PromptIDs []int
	// Body is the raw body, for the chat renderer (key order matters there).
	Body []byte
	// CacheSalt enters block 0's hash, as in vLLM.
	CacheSalt string
	// AddSpecialTokens is the request's add_special_tokens, or vLLM's default
	// for the endpoint (true for completions, false for chat).
	AddSpecialTokens bool
}

var (
	errBadJSON     = errors.New("request body is not a JSON object")
	errUnsupported = errors.New("unsupported prompt")
	// errPromptTooLarge and errTooManyMessages mark a request over Limits:
	// it is routed by load without tokenizing.
	errPromptTooLarge  = errors.New("prompt over the routing limits")
	errTooManyMessages = errors.New("more chat messages than routing.max_messages")
)

// Limits bound the work one request's decision may take (config.Routing's
// max_prompt_bytes, max_prompt_tokens, max_messages). Zero fields are
// unlimited. A request over a limit is routed by load, not rejected: vLLM
// decides what it accepts.
type Limits struct {
	// MaxPromptBytes bounds a completion's prompt field (text or token-id
	// list, as sent), a chat request's body (the chat renderer reads all of
	// it) and the rendered chat prompt that would be tokenized.
	MaxPromptBytes int
	// MaxPromptTokens bounds the prompt's token ids (a token-id prompt, or
	// the tokenizer's output) that are hashed and looked up.
	MaxPromptTokens int
	// MaxMessages bounds a chat request's messages, counted without decoding.
	MaxMessages int
}

// maxTokenID is the largest token id kvroute hashes: vLLM's vocabularies and
// its block hashes use 32-bit ids.
const maxTokenID = 1<<32 - 1

func (l Limits) promptTooLarge(n int) bool { return l.MaxPromptBytes > 0 && n > l.MaxPromptBytes }

// openAIBody holds the fields of /v1/completions and /v1/chat/completions the
// router reads; everything else is the engine's business.
type openAIBody struct {
	Model            string
	Prompt           json.RawMessage
	Messages         json.RawMessage
	CacheSalt        string // null is "", as absent
	SaltGiven        bool   // the last cache_salt was a string, not null
	AddSpecialTokens *bool
}

// requestAndBody is a Request and the raw fields ParseRequest scans it from.
type requestAndBody struct {
	Request
	fields openAIBody
}

// ParseRequest reads an OpenAI body. path picks chat vs completion; a body
// with "messages" and no "prompt" is treated as chat whatever the path. A
// prompt over lim is not decoded: the error wraps errPromptTooLarge or
// errTooManyMessages and the Request still names the model.
func ParseRequest(path string, body []byte, lim Limits) (*Request, error) {
	// The fields the scan's callback fills and the Request, one allocation
	// (the callback makes whatever it writes escape).
	rb := &requestAndBody{}
	b := &rb.fields
	err := scanObject(body, func(key, value []byte) error {
		switch string(key) {
		case "model":
			return decodeString(value, &b.Model)
		case "prompt":
			b.Prompt = value
		case "messages":
			b.Messages = value
		case "cache_salt":
			if string(value) == "null" {
				b.CacheSalt, b.SaltGiven = "", false // a later null clears an earlier salt, as json.loads keeps the last
				return nil
			}
			b.SaltGiven = true
			return decodeString(value, &b.CacheSalt)
		case "add_special_tokens":
			return json.Unmarshal(value, &b.AddSpecialTokens)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errBadJSON, jsonErrorWithoutInput(err))
	}
	r := &rb.Request
	r.Model, r.Body, r.CacheSalt = b.Model, body, b.CacheSalt
	if b.SaltGiven && b.CacheSalt == "" {
		// vLLM's request models reject it ("must be a non-empty string if
		// provided"): the engine answers 400 wherever it is routed.
		return r, fmt.Errorf("%w: cache_salt is an empty string, which vLLM rejects", errUnsupported)
	}
	isChat := strings.HasSuffix(pathOnly(path), "/chat/completions") || (len(b.Messages) > 0 && len(b.Prompt) == 0)
	switch {
	case isChat:
		r.Kind = KindChat
		r.AddSpecialTokens = false
		if len(b.Messages) == 0 || string(b.Messages) == "null" {
			return r, fmt.Errorf("%w: chat request without messages", errUnsupported)
		}
		if lim.promptTooLarge(len(body)) {
			return r, fmt.Errorf("%w: chat body of %d bytes", errPromptTooLarge, len(body))
		}
		if lim.MaxMessages > 0 {
			n, err := countElements(b.Messages, lim.MaxMessages+1)
			if err != nil {
				return r, fmt.Errorf("%w: messages: %v", errUnsupported, err)
			}
			if n > lim.MaxMessages {
				return r, fmt.Errorf("%w: more than %d", errTooManyMessages, lim.MaxMessages)
			}
		}
	case len(b.Prompt) > 0:
		r.Kind = KindCompletion
		r.AddSpecialTokens = true
		if lim.promptTooLarge(len(b.Prompt)) {
			return r, fmt.Errorf("%w: prompt of %d bytes", errPromptTooLarge, len(b.Prompt))
		}
		if err := r.parsePrompt(b.Prompt); err != nil {
			return r, err
		}
		if lim.MaxPromptTokens > 0 && len(r.PromptIDs) > lim.MaxPromptTokens {
			return r, fmt.Errorf("%w: %d token ids", errPromptTooLarge, len(r.PromptIDs))
		}
	default:
		r.Kind = KindOther
	}
	if b.AddSpecialTokens != nil {
		r.AddSpecialTokens = *b.AddSpecialTokens
	}
	return r, nil
}

// parsePrompt accepts vLLM's prompt forms: a string, a list of token ids, or a
// batch (list of strings / list of id lists), of which the first is routed.
func (r *Request) parsePrompt(raw json.RawMessage) error {
	switch firstByte(raw) {
	case '"':
		return json.Unmarshal(raw, &r.Prompt)
	case '[':
	default:
		return fmt.Errorf("%w: prompt is neither a string nor a list", errUnsupported)
	}
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return fmt.Errorf("%w: %v", errBadJSON, jsonErrorWithoutInput(err))
	}
	if len(list) == 0 {
		return nil
	}
	switch firstByte(list[0]) {
	case '"':
		return json.Unmarshal(list[0], &r.Prompt)
	case '[':
		return r.parseIDs(list[0])
	default:
		return r.parseIDs(raw)
	}
}

func (r *Request) parseIDs(raw json.RawMessage) error {
	if err := json.Unmarshal(raw, &r.PromptIDs); err != nil {
		return fmt.Errorf("%w: token-id prompt: %v", errUnsupported, jsonErrorWithoutInput(err))
	}
	for i, id := range r.PromptIDs {
		if id < 0 || uint64(id) > maxTokenID {
			return fmt.Errorf("%w: token id at index %d outside [0, 2^32)", errUnsupported, i)
		}
	}
	return nil
}

// decodeString is json.Unmarshal into a string, without reflection for a
// string of printable ASCII and no escapes (a model name, as sent).
func decodeString(value []byte, dst *string) error {
	if n := len(value); n >= 2 && value[0] == '"' && value[n-1] == '"' {
		plain := true
		for _, c := range value[1 : n-1] {
			if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
				plain = false
				break
			}
		}
		if plain {
			*dst = string(value[1 : n-1])
			return nil
		}
	}
	return json.Unmarshal(value, dst)
}

func firstByte(raw []byte) byte {
	for _, c := range raw {
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		}
		return c
	}
	return 0
}

func pathOnly(p string) string {
	if i := strings.IndexAny(p, "?#"); i >= 0 {
		return p[:i]
	}
	return p
}

// jsonErrorWithoutInput keeps a JSON error's position but never the user's
// text (json.UnmarshalTypeError and SyntaxError do not quote input values).
func jsonErrorWithoutInput(err error) string {
	var own syntaxError
	if errors.As(err, &own) || errors.Is(err, errNotObject) {
		return err.Error()
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("syntax error at offset %d", se.Offset)
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		// te.Value quotes a number literal ("number 1e99"): keep its kind only.
		kind, _, _ := strings.Cut(te.Value, " ")
		return fmt.Sprintf("field %q: %s where %s expected", te.Field, kind, te.Type)
	}
	return "invalid JSON"
}
