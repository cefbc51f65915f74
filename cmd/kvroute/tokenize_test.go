package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvroute/kvroute/internal/shareddata"
)

// tokenizeGolden is one case of ../shared/tokenizers/golden/<name>.json.
type tokenizeGolden struct {
	Text        string `json:"text"`
	WithSpecial []int  `json:"with_special"`
	NoSpecial   []int  `json:"no_special"`
}

func readTokenizeGolden(t *testing.T, name string) []tokenizeGolden {
	t.Helper()
	var cases []tokenizeGolden
	if err := json.Unmarshal(shareddata.Read(t, "tokenizers/golden/"+name+".json"), &cases); err != nil {
		t.Fatal(err)
	}
	if len(cases) == 0 {
		t.Fatalf("golden %s has no cases", name)
	}
	return cases
}

func idsJSON(ids []int) string {
	b, _ := json.Marshal(ids)
	return string(b) + "\n"
}

// TestTokenizeCommandMatchesGoldens runs `kvroute tokenize` on the golden
// texts of a tokenizer no transformers class rule changes (llama3_1: its
// tokenizer.json adds BOS itself, so the raw goldens are vLLM's ids too), in
// text and --jsonl modes, with and without special tokens.
func TestTokenizeCommandMatchesGoldens(t *testing.T) {
	dir := shareddata.TokenizerDir(t, "llama3_1")
	cases := readTokenizeGolden(t, "llama3_1")
	for i, c := range cases[:min(len(cases), 12)] {
		if _, out, errs := runCLI(t, c.Text, "tokenize", "--tokenizer", dir); out != idsJSON(c.WithSpecial) {
			t.Errorf("case %d: got %q (stderr %q), want %q", i, out, errs, idsJSON(c.WithSpecial))
		}
		if _, out, _ := runCLI(t, c.Text, "tokenize", "--tokenizer", dir, "--no-special-tokens"); out != idsJSON(c.NoSpecial) {
			t.Errorf("case %d no special: got %q, want %q", i, out, idsJSON(c.NoSpecial))
		}
	}
	var in, want strings.Builder
	for _, c := range cases {
		b, _ := json.Marshal(c.Text)
		in.Write(b)
		in.WriteByte('\n')
		want.WriteString(idsJSON(c.NoSpecial))
	}
	code, out, errs := runCLI(t, in.String(), "tokenize", "--tokenizer", filepath.Join(dir, "tokenizer.json"), "--jsonl", "--no-special-tokens")
	if code != 0 || out != want.String() {
		t.Errorf("--jsonl: exit %d, stderr %q; output differs from the goldens", code, errs)
	}
}

// TestTokenizeChatMatchesChatGoldens sends chat_golden.json's conversations
// as /v1/chat/completions bodies through `kvroute tokenize --chat` (the
// model's own template, add_special_tokens false) and compares the ids.
func TestTokenizeChatMatchesChatGoldens(t *testing.T) {
	var golden []struct {
		Model string `json:"model"`
		Conv  string `json:"conv"`
		IDs   []int  `json:"ids"`
	}
	if err := json.Unmarshal(shareddata.Read(t, "tokenizers/chat_golden.json"), &golden); err != nil {
		t.Fatal(err)
	}
	var convs map[string]json.RawMessage
	if err := json.Unmarshal(shareddata.Read(t, "chat_templates/conversations.json"), &convs); err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, g := range golden {
		if g.Model != "qwen3" && g.Model != "llama3_1" {
			continue
		}
		want := g.IDs
		body := strings.TrimSuffix(strings.TrimSpace(string(convs[g.Conv])), "}") + `, "model": "m"}`
		code, out, errs := runCLI(t, body, "tokenize", "--tokenizer", shareddata.TokenizerDir(t, g.Model), "--chat", "--now", "2026-01-15T09:30:00Z")
		if code != 0 || out != idsJSON(want) {
			t.Errorf("%s/%s: exit %d, stderr %q\n got %s\nwant %s", g.Model, g.Conv, code, errs, out, idsJSON(want))
		}
		checked++
	}
	if checked != 6 {
		t.Fatalf("checked %d chat goldens, want 6", checked)
	}
}

func TestTokenizeCommandErrors(t *testing.T) {
	dir := shareddata.TokenizerDir(t, "qwen3")
	bad := filepath.Join(t.TempDir(), "tokenizer.json")
	if err := os.WriteFile(bad, []byte(`{"model":{"type":"Unigram"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		in   string
		code int
		err  string
	}{
		{[]string{"tokenize"}, "", 2, "usage"},
		{[]string{"tokenize", "--tokenizer", dir, "--chat", "--jsonl"}, "", 2, "usage"},
		{[]string{"tokenize", "--tokenizer", dir, "--now", "2026-01-15T09:30:00Z"}, "hi", 2, "usage"},
		{[]string{"tokenize", "--tokenizer", dir, "--chat", "--now", "yesterday"}, "{}", 2, "--now"},
		{[]string{"tokenize", "--tokenizer", dir, "--chat"}, "{not json", 1, "kvroute tokenize:"},
		{[]string{"tokenize", "--tokenizer", dir, "--jsonl"}, "\"ok\"\n[1,2]\n", 1, "line 2"},
		{[]string{"tokenize", "--tokenizer", bad}, "hi", 1, "Unigram"},
		{[]string{"tokenize", "--tokenizer", filepath.Join(dir, "missing")}, "hi", 1, "kvroute tokenize:"},
	} {
		code, _, errs := runCLI(t, c.in, c.args...)
		if code != c.code || !strings.Contains(errs, c.err) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and %q", c.args, code, errs, c.code, c.err)
		}
	}
}
