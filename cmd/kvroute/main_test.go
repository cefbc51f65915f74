package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvroute/kvroute/internal/testdata"
)

func runCLI(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, stdio{strings.NewReader(stdin), &out, &errb})
	return code, out.String(), errb.String()
}

func TestValidateConfigAcceptsTheExample(t *testing.T) {
	code, out, errs := runCLI(t, "", "validate-config", filepath.Join("..", "..", "examples", "kvroute.yaml"))
	if code != 0 || !strings.Contains(out, "ok (1 pools, 2 replicas)") {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
}

func TestValidateConfigPrintsEveryError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.yaml")
	bad := `
pools:
  - name: p
    models: [m]
    replicas:
      - {name: a, address: vllm-0, events: "tcp://*:5557"}
`
	if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errs := runCLI(t, "", "validate-config", path)
	if code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	for _, want := range []string{`pools[0].replicas[0].address: "vllm-0" is not ip:port`, `pools[0].replicas[0].events`} {
		if !strings.Contains(errs, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errs)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	if code, _, _ := runCLI(t, "", "validate-config"); code != 2 {
		t.Errorf("validate-config without FILE: exit %d, want 2", code)
	}
	if code, _, errs := runCLI(t, "", "no-such-command"); code != 2 || !strings.Contains(errs, "unknown command") {
		t.Errorf("unknown command: exit %d, %s", code, errs)
	}
	if code, out, _ := runCLI(t, "", "help"); code != 0 || !strings.Contains(out, "validate-config") {
		t.Errorf("help: exit %d, %s", code, out)
	}
}

// unreachableConfig writes a config of one pool whose only replica (two
// data-parallel ranks) nobody serves, with listeners on free ports, and
// returns its path.
func unreachableConfig(t *testing.T) string {
	t.Helper()
	cfg := `
listen: {extproc: "127.0.0.1:0", admin: "127.0.0.1:0"}
pools:
  - name: p
    models: [m]
    replicas:
      - {name: a, address: 127.0.0.1:1, data_parallel_size: 2}
`
	path := filepath.Join(t.TempDir(), "k.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestServeStartsAndStopsWithTheExample(t *testing.T) {
	path := unreachableConfig(t)
	ctx, cancel := context.WithCancel(context.Background())
	var out, errb bytes.Buffer
	done := make(chan int)
	go func() {
		done <- run(ctx, []string{"serve", "--config", path}, stdio{strings.NewReader(""), &out, &errb})
	}()
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
}

// TestValidateConfigLoadsWhatServeLoads: a tokenizer or chat template that
// serve would refuse at start fails validate-config too, the pool named.
func TestValidateConfigLoadsWhatServeLoads(t *testing.T) {
	dir := t.TempDir()
	tok := testdata.TokenizerDir(t, "qwen3")
	for name, pool := range map[string]string{
		"missing tokenizer":     "tokenizer: no-such-dir",
		"missing chat template": "tokenizer: " + tok + "\n    chat_template: no-such.jinja",
	} {
		cfg := "pools:\n  - name: p\n    models: [m]\n    " + pool + "\n    replicas: [{name: a, address: \"127.0.0.1:1\"}]\n"
		path := filepath.Join(dir, "k.yaml")
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		code, out, errs := runCLI(t, "", "validate-config", path)
		if code != 1 || !strings.Contains(errs, "pools[0] (p)") || strings.Contains(out, "ok") {
			t.Errorf("%s: exit %d\nstdout: %s\nstderr: %s", name, code, out, errs)
		}
		code, _, errs = runCLI(t, "", "serve", "--config", path)
		if code != 1 {
			t.Errorf("%s: serve exit %d, want 1 (%s)", name, code, errs)
		}
	}
}
