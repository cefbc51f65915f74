package chattemplate

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unsafe"
)

// Specials are the tokenizer's special-token strings from
// tokenizer_config.json; transformers passes the set ones to every chat
// template as bos_token, eos_token, unk_token and pad_token.
type Specials struct {
	BOS, EOS, Unk, Pad string
}

// Content formats of vLLM's --chat-template-content-format auto-detection.
const (
	ContentFormatString = "string" // message content is one string
	ContentFormatOpenAI = "openai" // message content is a list of parts
)

// ErrNoTemplate means neither the pool config nor tokenizer_config.json
// supplies a chat template.
var ErrNoTemplate = errors.New("no chat template")

// SelectTemplate picks the chat template source the way vLLM does: the
// pool's override file wins, then tokenizer_config.json's chat_template,
// which is a string or a list of {name, template} (transformers
// get_chat_template, v4.5x: "tool_use" when the request has a tools field,
// otherwise "default").
func SelectTemplate(override string, chatTemplateJSON json.RawMessage, hasTools bool) (string, error) {
	if override != "" {
		return override, nil
	}
	raw := strings.TrimSpace(string(chatTemplateJSON))
	if raw == "" || raw == "null" {
		return "", ErrNoTemplate
	}
	var s string
	if err := json.Unmarshal(chatTemplateJSON, &s); err == nil {
		if s == "" {
			return "", ErrNoTemplate
		}
		return s, nil
	}
	var named []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(chatTemplateJSON, &named); err != nil {
		return "", fmt.Errorf("chat_template: neither a string nor a list of {name, template}: %w", err)
	}
	byName := map[string]string{}
	for _, t := range named {
		byName[t.Name] = t.Template
	}
	if t, ok := byName["tool_use"]; ok && hasTools {
		return t, nil
	}
	if t, ok := byName["default"]; ok {
		return t, nil
	}
	return "", errors.New("chat_template: several named templates and no 'default'")
}

// renderVar is a template variable and its value.
type renderVar struct {
	name string
	v    Value
}

// Renderer renders chat requests with one model's template exactly as
// vLLM's OpenAI server does before tokenizing. Safe for concurrent use.
type Renderer struct {
	tpl      *Template
	specials []renderVar // the set Specials by template variable, boxed once
	now      func() time.Time
	format   string
}

// NewRenderer parses src and detects its content format. now is the clock
// for strftime_now (nil: time.Now).
func NewRenderer(src string, specials Specials, now func() time.Time) (*Renderer, error) {
	tpl, err := Parse(src)
	if err != nil {
		return nil, err
	}
	if now == nil {
		now = time.Now
	}
	var vars []renderVar
	for _, sv := range []struct{ name, v string }{{"bos_token", specials.BOS}, {"eos_token", specials.EOS}, {"unk_token", specials.Unk}, {"pad_token", specials.Pad}} {
		if sv.v != "" {
			vars = append(vars, renderVar{sv.name, sv.v})
		}
	}
	return &Renderer{tpl: tpl, specials: vars, now: now, format: detectContentFormat(tpl)}, nil
}

// ContentFormat reports the detected content format ("string" or "openai").
func (r *Renderer) ContentFormat() string { return r.format }

// applyChatTemplateParams are apply_chat_template's own parameters: they are
// consumed by transformers and never reach the template as variables.
var applyChatTemplateParams = map[string]bool{
	"conversation": true, "chat_template": true, "tokenize": true, "padding": true,
	"truncation": true, "max_length": true, "return_tensors": true, "return_dict": true,
	"return_assistant_tokens_mask": true, "tokenizer_kwargs": true, "continue_final_message": true,
}

// RenderRequest returns the prompt text vLLM would tokenize for req
// (vllm/entrypoints/chat_utils.py parse_chat_messages + transformers
// apply_chat_template). It fails with ErrMultimodal for media parts and
// with the template's error when the template raises.
func (r *Renderer) RenderRequest(req *Request) (string, error) {
	b, err := r.AppendRequest(nil, req)
	if err != nil {
		return "", err
	}
	// b is this call's own buffer and is never written again.
	return unsafe.String(unsafe.SliceData(b), len(b)), nil
}

// AppendRequest is RenderRequest appending the prompt to dst, so a caller
// can render every request into one reused buffer. On error the returned
// slice's contents after len(dst) are unspecified.
func (r *Renderer) AppendRequest(dst []byte, req *Request) ([]byte, error) {
	// The conversation is the request's own list while every message is
	// passed on as sent (messageAsSent); a new list from the first that is not.
	conv := req.Messages
	for i, m := range req.Messages.Items {
		md, ok := m.(*Dict)
		if !ok {
			return dst, fmt.Errorf("messages[%d] is not an object", i)
		}
		pm, err := parseMessage(md, r.format)
		if err != nil {
			return dst, fmt.Errorf("messages[%d]: %w", i, err)
		}
		if conv == req.Messages && pm != md {
			conv = &List{Items: make([]Value, i, len(req.Messages.Items))}
			copy(conv.Items, req.Messages.Items[:i])
		}
		if conv != req.Messages {
			conv.Items = append(conv.Items, pm)
		}
	}
	postprocessToolCalls(conv)

	// The template's variables, as apply_chat_template passes them: the
	// specials, then the keyword arguments (a chat_template_kwargs entry
	// overrides an earlier one of the same name) except apply_chat_template's
	// own parameters, then the conversation; converted by FromGo, as
	// AppendRender converts its context (a caller's Request may hold plain
	// Go values).
	st := newState(RenderOptions{Now: r.now})
	for _, sv := range r.specials {
		st.vars.set(sv.name, sv.v)
	}
	st.vars.set("add_generation_prompt", req.AddGenerationPrompt)
	var cfm Value = req.ContinueFinalMessage // continue_final_message is a parameter, not a variable
	var tools Value
	if req.Tools != nil {
		tools = toolDicts(req.Tools)
	}
	st.vars.set("tools", FromGo(tools))
	st.vars.set("documents", FromGo(req.Documents))
	if req.ChatTemplateKwargs != nil {
		for i, k := range req.ChatTemplateKwargs.keys {
			ks, isStr := k.(string)
			if ks == "chat_template" || ks == "tokenize" {
				return dst, fmt.Errorf("unexpected chat template kwarg %q", ks)
			}
			v := req.ChatTemplateKwargs.vals[i]
			if ks == "continue_final_message" {
				cfm = v
			}
			if !isStr || applyChatTemplateParams[ks] {
				continue
			}
			st.vars.set(ks, FromGo(v))
		}
	}
	st.vars.set("messages", conv)
	base := len(dst)
	out, err := st.render(r.tpl, dst, renderSizeHint(conv))
	if err != nil {
		return out, err
	}
	if truthy(cfm) {
		rendered := out[base:]
		// The cut is a prefix of the rendered text: keep that many bytes.
		kept, err := continueFinalMessage(unsafe.String(unsafe.SliceData(rendered), len(rendered)), conv)
		if err != nil {
			return out, err
		}
		return out[:base+len(kept)], nil
	}
	return out, nil
}

// continueFinalMessage cuts the prompt right after the last message's text
// so generation continues it (transformers render_jinja_template).
func continueFinalMessage(rendered string, conv *List) (string, error) {
	if len(conv.Items) == 0 {
		return "", errors.New("continue_final_message: no messages")
	}
	last := conv.Items[len(conv.Items)-1].(*Dict)
	c, _ := last.Get("content")
	final := ""
	switch x := c.(type) {
	case string:
		final = x
	case *List:
		found := false
		for i := len(x.Items) - 1; i >= 0; i-- {
			if d, ok := x.Items[i].(*Dict); ok {
				if t, ok := d.Get("text"); ok {
					final, found = strValue(t), true
					break
				}
			}
		}
		if !found {
			return "", errors.New("continue_final_message is set but we could not find any text to continue in the final message")
		}
	default:
		return "", errors.New("continue_final_message: final message has no text")
	}
	trimmed := strings.TrimFunc(final, unicode.IsSpace)
	loc := strings.LastIndex(rendered, trimmed)
	if loc < 0 {
		return "", errors.New("continue_final_message is set but the final message does not appear in the rendered chat")
	}
	left := strings.TrimLeftFunc(final, unicode.IsSpace)
	if end := loc + len(left); end <= len(rendered) && rendered[loc:end] == final {
		return rendered[:end], nil
	}
	return rendered[:loc+len(trimmed)], nil
}

// textPartTypes are the part types vLLM reads as text, with the key holding it.
var textPartTypes = map[string]string{
	"text": "text", "input_text": "text", "output_text": "text", "refusal": "refusal", "thinking": "thinking",
}

var mediaPartTypes = map[string]bool{
	"image_url": true, "input_image": true, "image_embeds": true, "audio_embeds": true,
	"prompt_embeds": true, "image_pil": true, "audio_url": true, "input_audio": true, "video_url": true,
}

// parseMessage is vLLM's _parse_chat_message_content for text-only content.
func parseMessage(m *Dict, format string) (*Dict, error) {
	if messageAsSent(m, format) {
		return m, nil
	}
	return buildMessage(m, format)
}

// messageAsSent reports whether buildMessage would return a copy of m:
// {"role": <string other than "developer">, "content": <string>} in that
// order, for a string-format template. Such a message is passed on as it
// is (the template cannot change it: the sandbox is immutable).
func messageAsSent(m *Dict, format string) bool {
	if format == ContentFormatOpenAI || len(m.keys) != 2 || m.keys[0] != "role" || m.keys[1] != "content" {
		return false
	}
	role, isStr := m.vals[0].(string)
	if !isStr || role == "developer" {
		return false
	}
	_, isStr = m.vals[1].(string)
	return isStr
}

// buildMessage is parseMessage's general case: the message as vLLM's
// parse_chat_messages rebuilds it.
func buildMessage(m *Dict, format string) (*Dict, error) {
	roleV, _ := m.Get("role")
	role, _ := roleV.(string)
	content, _ := m.Get("content")
	var parts []Value
	switch c := content.(type) {
	case nil:
	case string:
		if format == ContentFormatOpenAI {
			parts = []Value{c}
		} // else the content is its own one text, set as it is below

	case *List:
		parts = c.Items
	default:
		return nil, fmt.Errorf("content must be a string, an array or null, not %s", typeName(content))
	}
	openai := format == ContentFormatOpenAI
	var texts []string
	var wrapped []Value
	addText := func(s string) {
		if openai {
			d := NewDict()
			d.Set("type", "text")
			d.Set("text", s)
			wrapped = append(wrapped, d)
		} else {
			texts = append(texts, s)
		}
	}
	for _, p := range parts {
		switch x := p.(type) {
		case string:
			addText(x)
			continue
		case *Dict:
			typV, _ := x.Get("type")
			typ, isStr := typV.(string)
			uuid, _ := x.Get("uuid")
			if typV == nil || uuid != nil {
				for k := range mediaPartTypes {
					if _, has := x.Get(k); has {
						return nil, ErrMultimodal
					}
				}
				if name, has := x.Get("tool_reference"); has {
					addToolReference(name, openai, addText, &wrapped, &texts)
					continue
				}
				if typV == nil {
					return nil, errors.New("missing 'type' field in content part")
				}
			}
			if !isStr {
				return nil, errors.New("invalid 'type' field in content part")
			}
			if key, ok := textPartTypes[typ]; ok {
				t, _ := x.Get(key)
				if t == nil {
					continue // vLLM skips text parts without content
				}
				s, ok := t.(string)
				if !ok {
					return nil, fmt.Errorf("content part %s must be a string", key)
				}
				addText(s)
				continue
			}
			if typ == "tool_reference" {
				name, _ := x.Get("name")
				addToolReference(name, openai, addText, &wrapped, &texts)
				continue
			}
			if mediaPartTypes[typ] {
				return nil, ErrMultimodal
			}
			return nil, fmt.Errorf("unsupported chat content part type %q", typ)
		default:
			return nil, fmt.Errorf("content part must be a string or an object, not %s", typeName(p))
		}
	}
	out := newSmallDict()
	out.Set("role", roleV)
	if openai {
		out.Set("content", &List{Items: wrapped})
	} else if _, isStr := content.(string); isStr {
		out.Set("content", content) // what joining its one text would give, boxed already
	} else {
		out.Set("content", strings.Join(texts, "\n"))
	}
	switch role {
	case "assistant":
		if tc, ok := m.Get("tool_calls"); ok && tc != nil {
			if l, isList := tc.(*List); isList {
				tc = &List{Items: append([]Value(nil), l.Items...)}
			}
			out.Set("tool_calls", tc)
		}
		if reasoning, _ := m.Get("reasoning"); reasoning != nil {
			out.Set("reasoning", reasoning)
			out.Set("reasoning_content", reasoning)
		}
	case "tool":
		if id, ok := m.Get("tool_call_id"); ok {
			out.Set("tool_call_id", id)
		}
		if l, ok := func() (*List, bool) { c, _ := out.Get("content"); l, ok := c.(*List); return l, ok }(); ok {
			nonText := false
			var ts []string
			for _, it := range l.Items {
				d, isDict := it.(*Dict)
				if !isDict {
					continue
				}
				typ, _ := d.Get("type")
				if typ != "text" {
					nonText = true
					break
				}
				t, _ := d.Get("text")
				ts = append(ts, strValue(t))
			}
			if !nonText {
				out.Set("content", strings.Join(ts, "\n"))
			}
		}
	}
	if name, ok := m.Get("name"); ok {
		if _, isStr := name.(string); isStr {
			out.Set("name", name)
		}
	}
	if task, ok := m.Get("task"); ok {
		if _, isStr := task.(string); isStr {
			out.Set("task", task)
		}
	}
	if role == "developer" {
		tools, _ := m.Get("tools")
		out.Set("tools", tools)
	}
	return out, nil
}

func addToolReference(name Value, openai bool, addText func(string), wrapped *[]Value, texts *[]string) {
	if openai {
		d := NewDict()
		d.Set("type", "tool_reference")
		d.Set("name", name)
		*wrapped = append(*wrapped, d)
		return
	}
	*texts = append(*texts, strValue(name))
}

// postprocessToolCalls is vLLM's _postprocess_messages: assistant tool-call
// arguments given as JSON strings become dicts (invalid JSON: {}), and an
// empty tool_calls list is dropped.
func postprocessToolCalls(conv *List) {
	for _, m := range conv.Items {
		md := m.(*Dict)
		if role, _ := md.Get("role"); role != "assistant" {
			continue
		}
		tc, ok := md.Get("tool_calls")
		if !ok {
			continue
		}
		l, ok := tc.(*List)
		if !ok {
			continue
		}
		if len(l.Items) == 0 {
			md.Delete("tool_calls")
			continue
		}
		for i, it := range l.Items {
			call, ok := it.(*Dict)
			if !ok {
				continue
			}
			fv, _ := call.Get("function")
			fn, ok := fv.(*Dict)
			if !ok {
				continue
			}
			args, _ := fn.Get("arguments")
			var parsed Value
			switch a := args.(type) {
			case string:
				v, err := DecodeJSON([]byte(a))
				if err != nil {
					v = NewDict()
				}
				parsed = v
			case *Dict, *List:
				continue
			default:
				parsed = NewDict()
			}
			// Copy rather than mutate: the Request may be rendered again.
			fnCopy := fn.Copy()
			fnCopy.Set("arguments", parsed)
			callCopy := call.Copy()
			callCopy.Set("function", fnCopy)
			l.Items[i] = callCopy
		}
	}
}

// toolDicts mirrors vLLM's `[tool.model_dump() for tool in request.tools]`:
// declared fields first (type, function{name, description, parameters}),
// missing ones as None, then any extra keys in request order.
func toolDicts(tools *List) *List {
	out := &List{Items: make([]Value, 0, len(tools.Items))}
	for _, t := range tools.Items {
		td, ok := t.(*Dict)
		if !ok {
			out.Items = append(out.Items, t)
			continue
		}
		nt := NewDict()
		typ, ok := td.Get("type")
		if !ok {
			typ = "function"
		}
		nt.Set("type", typ)
		fv, _ := td.Get("function")
		if fd, ok := fv.(*Dict); ok {
			nf := NewDict()
			for _, k := range []string{"name", "description", "parameters"} {
				v, _ := fd.Get(k)
				nf.Set(k, v)
			}
			for i, k := range fd.keys {
				if _, seen := nf.Get(k); !seen {
					nf.Set(k, fd.vals[i])
				}
			}
			nt.Set("function", nf)
		} else {
			nt.Set("function", fv)
		}
		for i, k := range td.keys {
			if _, seen := nt.Get(k); !seen {
				nt.Set(k, td.vals[i])
			}
		}
		out.Items = append(out.Items, nt)
	}
	return out
}

// ChatTemplates holds one model's renderers, so callers pick per request the
// template vLLM would: the "tool_use" template for requests with a tools
// field when tokenizer_config.json names one, the default otherwise.
type ChatTemplates struct {
	plain, tools *Renderer
}

// NewChatTemplates parses the model's templates once (see SelectTemplate for
// the precedence of override and chatTemplateJSON).
func NewChatTemplates(override string, chatTemplateJSON json.RawMessage, specials Specials, now func() time.Time) (*ChatTemplates, error) {
	plainSrc, err := SelectTemplate(override, chatTemplateJSON, false)
	if err != nil {
		return nil, err
	}
	toolsSrc, err := SelectTemplate(override, chatTemplateJSON, true)
	if err != nil {
		return nil, err
	}
	c := &ChatTemplates{}
	if c.plain, err = NewRenderer(plainSrc, specials, now); err != nil {
		return nil, fmt.Errorf("chat template: %w", err)
	}
	c.tools = c.plain
	if toolsSrc != plainSrc {
		if c.tools, err = NewRenderer(toolsSrc, specials, now); err != nil {
			return nil, fmt.Errorf("tool_use chat template: %w", err)
		}
	}
	return c, nil
}

// For returns the renderer vLLM would use for req.
func (c *ChatTemplates) For(req *Request) *Renderer {
	if req.Tools != nil {
		return c.tools
	}
	return c.plain
}

// renderSizeHint estimates a rendered conversation's size: its string
// contents and a few dozen bytes of role markers per message.
func renderSizeHint(conv *List) int {
	n := 256
	for _, m := range conv.Items {
		n += 64
		if md, ok := m.(*Dict); ok {
			if c, ok := md.Get("content"); ok {
				if s, ok := c.(string); ok {
					n += len(s)
				}
			}
		}
	}
	return n
}

// RenderRequest renders req with the template chosen by For.
func (c *ChatTemplates) RenderRequest(req *Request) (string, error) {
	return c.For(req).RenderRequest(req)
}

// AppendRequest appends req's prompt, rendered with the template chosen by
// For, to dst.
func (c *ChatTemplates) AppendRequest(dst []byte, req *Request) ([]byte, error) {
	return c.For(req).AppendRequest(dst, req)
}
