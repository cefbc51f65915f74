package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kvroute/kvroute/internal/testdata"
)

func idsJSON(ids []int) string {
	b, _ := json.Marshal(ids)
	return string(b) + "\n"
}

// TestTokenizeCommandMatchesGoldens runs `kvroute tokenize` on the golden
// texts of a tokenizer no transformers class rule changes (llama3_1: its
// tokenizer.json adds BOS itself, so the raw goldens are vLLM's ids too), in
// text and --jsonl modes, with and without special tokens.
func TestTokenizeCommandMatchesGoldens(t *testing.T) {
	dir := testdata.TokenizerDir(t, "llama3_1")
	cases := testdata.TokenizerGolden(t, "llama3_1")
	// Text mode, one process per text: the first case with special
	// tokens, the second without.
	if _, out, errs := runCLI(t, cases[0].Text, "tokenize", "--tokenizer", dir); out != idsJSON(cases[0].WithSpecial) {
		t.Errorf("text mode: got %q (stderr %q), want %q", out, errs, idsJSON(cases[0].WithSpecial))
	}
	if _, out, _ := runCLI(t, cases[1].Text, "tokenize", "--tokenizer", dir, "--no-special-tokens"); out != idsJSON(cases[1].NoSpecial) {
		t.Errorf("text mode, no special tokens: got %q, want %q", out, idsJSON(cases[1].NoSpecial))
	}
	// --jsonl: every case in one process, both ways.
	var in, with, without strings.Builder
	for _, c := range cases {
		b, _ := json.Marshal(c.Text)
		in.Write(b)
		in.WriteByte('\n')
		with.WriteString(idsJSON(c.WithSpecial))
		without.WriteString(idsJSON(c.NoSpecial))
	}
	code, out, errs := runCLI(t, in.String(), "tokenize", "--tokenizer", filepath.Join(dir, "tokenizer.json"), "--jsonl")
	if code != 0 || out != with.String() {
		t.Errorf("--jsonl: exit %d, stderr %q; output differs from the goldens", code, errs)
	}
	code, out, errs = runCLI(t, in.String(), "tokenize", "--tokenizer", dir, "--jsonl", "--no-special-tokens")
	if code != 0 || out != without.String() {
		t.Errorf("--jsonl --no-special-tokens: exit %d, stderr %q; output differs from the goldens", code, errs)
	}
}

// TestTokenizeChatMatchesChatGoldens sends chat_golden.json's conversations
// as /v1/chat/completions bodies through `kvroute tokenize --chat` (the
// model's own template, add_special_tokens false) and compares the ids.
func TestTokenizeChatMatchesChatGoldens(t *testing.T) {
	golden := testdata.ChatGoldens(t)
	var convs map[string]json.RawMessage
	if err := json.Unmarshal(testdata.Conversations(t), &convs); err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, g := range golden {
		// Both tools conversations, and qwen3's multi-turn one: each
		// call loads the tokenizer, which is slow under -race.
		if !(g.Conv == "c3_tools" && (g.Model == "qwen3" || g.Model == "llama3_1")) && !(g.Conv == "c2_multiturn" && g.Model == "qwen3") {
			continue
		}
		want := g.IDs
		body := strings.TrimSuffix(strings.TrimSpace(string(convs[g.Conv])), "}") + `, "model": "m"}`
		code, out, errs := runCLI(t, body, "tokenize", "--tokenizer", testdata.TokenizerDir(t, g.Model), "--chat", "--now", "2026-01-15T09:30:00Z")
		var got struct {
			Prompt *string `json:"prompt"`
			IDs    []int   `json:"ids"`
		}
		if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil {
			t.Fatalf("%s/%s: exit %d, stderr %q, stdout %q (%v)", g.Model, g.Conv, code, errs, out, err)
		}
		if got.Prompt == nil || g.Text == nil || *got.Prompt != *g.Text {
			t.Errorf("%s/%s: prompt %q, want %q", g.Model, g.Conv, deref(got.Prompt), deref(g.Text))
		}
		if !slices.Equal(got.IDs, want) {
			t.Errorf("%s/%s:\n got %v\nwant %v", g.Model, g.Conv, got.IDs, want)
		}
		checked++
	}
	if checked != 3 {
		t.Fatalf("checked %d chat goldens, want 3", checked)
	}
}

func TestTokenizeCommandErrors(t *testing.T) {
	dir := testdata.TokenizerDir(t, "qwen3")
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

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}
