package modelchat

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/kvroute/kvroute/chattemplate"
	"github.com/kvroute/kvroute/tokenize"
)

// TestLoadPrecedence checks the template order: --chat-template file
// > chat_template.jinja beside the tokenizer > tokenizer_config.json.
func TestLoadPrecedence(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	write("tokenizer.json", `{"model":{"type":"BPE","vocab":{"a":0},"merges":[]}}`)
	load := func() *tokenize.Tokenizer {
		t.Helper()
		tok, err := tokenize.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	render := func(tok *tokenize.Tokenizer, path, file string) string {
		t.Helper()
		ct, err := Load(tok, path, file, nil)
		if err != nil {
			t.Fatal(err)
		}
		req, err := chattemplate.ParseChatRequest([]byte(`{"messages":[{"role":"user","content":"x"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		out, err := ct.RenderRequest(req)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}

	if _, err := Load(load(), dir, "", nil); !errors.Is(err, chattemplate.ErrNoTemplate) {
		t.Fatalf("no template anywhere: err %v, want chattemplate.ErrNoTemplate", err)
	}
	write("tokenizer_config.json", `{"chat_template":"config {{ bos_token }}","bos_token":"<B>"}`)
	tok := load()
	if got := render(tok, dir, ""); got != "config <B>" {
		t.Errorf("config template: got %q", got)
	}
	write(chattemplate.ChatTemplateFile, "jinja {{ messages[0].content }}")
	if got := render(tok, filepath.Join(dir, "tokenizer.json"), ""); got != "jinja x" {
		t.Errorf("chat_template.jinja beside tokenizer.json: got %q", got)
	}
	file := write("override.jinja", "file")
	if got := render(tok, dir, file); got != "file" {
		t.Errorf("template file: got %q", got)
	}
	if _, err := Load(tok, dir, filepath.Join(dir, "missing.jinja"), nil); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing template file: err %v", err)
	}
}
