package chattemplate

import (
	"errors"
	"fmt"
)

// Request is the part of an OpenAI /v1/chat/completions body that decides
// the prompt vLLM renders. JSON objects keep their key order.
type Request struct {
	Model               string
	Messages            *List // as sent: each message a *Dict
	Tools               *List // nil when absent or null
	Documents           Value // nil when absent
	ChatTemplateKwargs  *Dict // nil when absent
	AddGenerationPrompt bool  // default true, as in vLLM
	// ContinueFinalMessage leaves the last (assistant) message open.
	ContinueFinalMessage bool
	// AddSpecialTokens asks the tokenizer to add BOS/EOS on top of the
	// template's (vLLM default false for chat).
	AddSpecialTokens bool
	CacheSalt        string
}

// ErrMultimodal is returned for content parts other than text: the prompt
// tokens then depend on media processing that kvroute does not do.
var ErrMultimodal = errors.New("multimodal content parts are not supported")

// ParseChatRequest decodes a chat completions request body.
func ParseChatRequest(body []byte) (*Request, error) {
	v, err := DecodeJSON(body)
	if err != nil {
		return nil, fmt.Errorf("chat request: %w", err)
	}
	return chatRequest(v)
}

// AppendChat appends to dst the prompt of an OpenAI chat completions body:
// ParseChatRequest then AppendRequest, without copying the body's strings
// (they are read in place, or unescaped into a reused buffer, and dropped
// before AppendChat returns). body must not change during the call.
func (c *ChatTemplates) AppendChat(dst, body []byte) ([]byte, error) {
	v, arena, err := decodeBorrowed(body)
	if err == nil {
		var req Request
		if err = req.readFrom(v); err == nil {
			var out []byte
			if out, err = c.AppendRequest(dst, &req); err == nil {
				releaseArena(arena)
				return out, nil
			}
		}
	}
	releaseArena(arena)
	// The error may quote the body's strings: decode it again with strings
	// of their own, so that the error can outlive the call.
	req, err := ParseChatRequest(body)
	if err != nil {
		return dst, err
	}
	return c.AppendRequest(dst, req)
}

// chatRequest reads a chat completions request from its decoded body.
func chatRequest(v Value) (*Request, error) {
	r := new(Request)
	if err := r.readFrom(v); err != nil {
		return nil, err
	}
	return r, nil
}

// readFrom fills r from a decoded body (chatRequest, into a caller's
// Request).
func (r *Request) readFrom(v Value) error {
	d, ok := v.(*Dict)
	if !ok {
		return errors.New("chat request: body is not a JSON object")
	}
	*r = Request{AddGenerationPrompt: true}
	var err error
	str := func(key string) (string, error) {
		x, ok := d.getStr(key)
		if !ok || x == nil {
			return "", nil
		}
		s, ok := x.(string)
		if !ok {
			return "", fmt.Errorf("chat request: %s must be a string", key)
		}
		return s, nil
	}
	boolean := func(key string, def bool) (bool, error) {
		x, ok := d.getStr(key)
		if !ok || x == nil {
			return def, nil
		}
		b, ok := x.(bool)
		if !ok {
			return false, fmt.Errorf("chat request: %s must be a boolean", key)
		}
		return b, nil
	}
	if r.Model, err = str("model"); err != nil {
		return err
	}
	if r.CacheSalt, err = str("cache_salt"); err != nil {
		return err
	}
	if r.AddGenerationPrompt, err = boolean("add_generation_prompt", true); err != nil {
		return err
	}
	if r.ContinueFinalMessage, err = boolean("continue_final_message", false); err != nil {
		return err
	}
	if r.AddSpecialTokens, err = boolean("add_special_tokens", false); err != nil {
		return err
	}
	if r.ContinueFinalMessage && r.AddGenerationPrompt {
		// vLLM's request validator refuses the combination.
		return errors.New("chat request: continue_final_message and add_generation_prompt cannot both be true")
	}
	msgs, _ := d.Get("messages")
	ml, ok := msgs.(*List)
	if !ok {
		return errors.New("chat request: messages must be an array")
	}
	for i, m := range ml.Items {
		md, ok := m.(*Dict)
		if !ok {
			return fmt.Errorf("chat request: messages[%d] is not an object", i)
		}
		role, _ := md.Get("role")
		if _, ok := role.(string); !ok {
			return fmt.Errorf("chat request: messages[%d].role must be a string", i)
		}
	}
	r.Messages = ml
	if t, ok := d.Get("tools"); ok && t != nil {
		tl, ok := t.(*List)
		if !ok {
			return errors.New("chat request: tools must be an array")
		}
		r.Tools = tl
	}
	if docs, ok := d.Get("documents"); ok {
		r.Documents = docs
	}
	if k, ok := d.Get("chat_template_kwargs"); ok && k != nil {
		kd, ok := k.(*Dict)
		if !ok {
			return errors.New("chat request: chat_template_kwargs must be an object")
		}
		r.ChatTemplateKwargs = kd
	}
	return nil
}
