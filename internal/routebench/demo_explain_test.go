package routebench

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDemoExplainShowsTheAnswerNotAStaleCommand: the demo prints the
// explanation kvroute gave, not a command naming the admin address and body
// file, both gone once the demo ends. The kvroute binary is a stand-in
// script that prints its arguments.
func TestDemoExplainShowsTheAnswerNotAStaleCommand(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "kvroute")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho \"vllm-2 would be picked: 48 of 52 blocks cached\"\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := demoExplain(context.Background(), &out, bin, "127.0.0.1:45678", dir, "qwen3", Request{Prompt: "p", MaxTokens: 1}); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	if !strings.Contains(got, "vllm-2 would be picked: 48 of 52 blocks cached") {
		t.Fatalf("the explanation is missing:\n%s", got)
	}
	if strings.Contains(got, dir) || strings.Contains(got, "127.0.0.1:45678") {
		t.Fatalf("prints a command naming what the demo removes:\n%s", got)
	}
}
