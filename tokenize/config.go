package tokenize

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// TokenizerConfig is what tokenizer_config.json says that matters to
// routing: the special token strings a chat template refers to, the chat
// template itself, and the flags transformers' tokenizer classes read.
// Absent or null fields are zero values.
type TokenizerConfig struct {
	// TokenizerClass is "tokenizer_class", e.g. "LlamaTokenizerFast".
	TokenizerClass string
	// BOSToken, EOSToken, UnkToken and PadToken are the special tokens'
	// text; the file may give each as a string or as an AddedToken object
	// {"content": ...}.
	BOSToken, EOSToken, UnkToken, PadToken string
	// AddBOSToken and AddEOSToken are "add_bos_token" / "add_eos_token";
	// nil when the file does not set them (each class has its own default).
	AddBOSToken, AddEOSToken *bool
	// ChatTemplate is "chat_template" as written: a JSON string, or a list
	// of {"name", "template"} objects; nil when absent or null.
	ChatTemplate json.RawMessage
}

// ChatTemplates returns the chat templates by name: a single template is
// named "default". It returns nil when there is none.
func (c TokenizerConfig) ChatTemplates() (map[string]string, error) {
	raw := bytes.TrimSpace(c.ChatTemplate)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("chat_template: %w", err)
		}
		return map[string]string{"default": s}, nil
	}
	var list []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("chat_template: want a string or a list of {name, template}: %w", err)
	}
	m := make(map[string]string, len(list))
	for _, e := range list {
		m[e.Name] = e.Template
	}
	return m, nil
}

// tokenText decodes a special-token field: a string, null, or an AddedToken
// object whose "content" is the text.
type tokenText string

func (t *tokenText) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case bytes.Equal(b, []byte("null")):
		*t = ""
		return nil
	case len(b) > 0 && b[0] == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*t = tokenText(s)
		return nil
	case len(b) > 0 && b[0] == '{':
		var o struct {
			Content string `json:"content"`
		}
		if err := json.Unmarshal(b, &o); err != nil {
			return err
		}
		*t = tokenText(o.Content)
		return nil
	}
	return fmt.Errorf("want a string, null or an AddedToken object, got %.40s", b)
}

func parseConfig(b []byte) (TokenizerConfig, error) {
	var raw struct {
		TokenizerClass *string         `json:"tokenizer_class"`
		BOS            tokenText       `json:"bos_token"`
		EOS            tokenText       `json:"eos_token"`
		Unk            tokenText       `json:"unk_token"`
		Pad            tokenText       `json:"pad_token"`
		AddBOS         *bool           `json:"add_bos_token"`
		AddEOS         *bool           `json:"add_eos_token"`
		ChatTemplate   json.RawMessage `json:"chat_template"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return TokenizerConfig{}, err
	}
	c := TokenizerConfig{
		BOSToken:    string(raw.BOS),
		EOSToken:    string(raw.EOS),
		UnkToken:    string(raw.Unk),
		PadToken:    string(raw.Pad),
		AddBOSToken: raw.AddBOS,
		AddEOSToken: raw.AddEOS,
	}
	if raw.TokenizerClass != nil {
		c.TokenizerClass = *raw.TokenizerClass
	}
	if ct := bytes.TrimSpace(raw.ChatTemplate); len(ct) > 0 && !bytes.Equal(ct, []byte("null")) {
		c.ChatTemplate = append(json.RawMessage(nil), ct...)
	}
	return c, nil
}
