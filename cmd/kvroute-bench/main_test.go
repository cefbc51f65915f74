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

func runCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errw bytes.Buffer
	code := run(context.Background(), args, stdio{out: &out, err: &errw})
	return code, out.String(), errw.String()
}

func TestHelpListsSubcommands(t *testing.T) {
	code, out, _ := runCmd(t, "help")
	if code != 0 || !strings.Contains(out, "demo") || !strings.Contains(out, "run") {
		t.Fatalf("code %d, help %q", code, out)
	}
	if code, _, _ := runCmd(t); code != 2 {
		t.Fatalf("no command: exit %d, want 2", code)
	}
}

func TestUsageErrorsExitTwo(t *testing.T) {
	for _, args := range [][]string{{"nope"}, {"demo", "--no-such-flag"}, {"run", "--replicas", "x"}, {"demo", "extra"}} {
		if code, _, errs := runCmd(t, args...); code != 2 || errs == "" {
			t.Errorf("%v: exit %d, stderr %q", args, code, errs)
		}
	}
}

func TestDemoWithoutBinariesFailsNamingTheFix(t *testing.T) {
	code, _, errs := runCmd(t, "demo", "--bin", t.TempDir())
	if code != 1 || !strings.Contains(errs, "vllm-emu missing (run `make build`)") {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
}

func TestRunRejectsBadListsBeforeStarting(t *testing.T) {
	for _, c := range []struct{ args, want string }{
		{"--rates 5,-1", `--rates: "-1" is not a positive number`},
		{"--workloads shared-prefix,chatty", `unknown workload "chatty"`},
		{"--policies greedy-cache-aware,magic", `unknown policy "magic"`},
		{"--gateways 0", `--gateways must be ≥ 1`},
	} {
		code, _, errs := runCmd(t, append([]string{"run", "--out", t.TempDir()}, strings.Fields(c.args)...)...)
		if code != 1 || !strings.Contains(errs, c.want) {
			t.Errorf("%s: exit %d, stderr %q", c.args, code, errs)
		}
	}
}

// TestRunWritesTableAndChart runs a tiny benchmark end to end through the
// command: two engines, one rate, two policies.
func TestRunWritesTableAndChart(t *testing.T) {
	tok := testdata.TokenizerDir(t, "qwen3")
	dir := t.TempDir()
	code, out, errs := runCmd(t, "run", "--out", dir, "--tokenizer", tok, "--replicas", "2", "--num-blocks", "64",
		"--workloads", "no-sharing", "--unique-words", "60", "--rates", "20", "--phase-duration", "500ms", "--min-requests", "8",
		"--policies", "round-robin,kvroute-tokens", "--prefill-per-token", "10us", "--decode-per-token", "1ms", "--max-tokens", "2")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	md, err := os.ReadFile(filepath.Join(dir, "results.md"))
	if err != nil {
		t.Fatal(err)
	}
	if out != string(md) {
		t.Fatal("stdout is not results.md")
	}
	for _, want := range []string{"| no-sharing | 20 | round-robin |", "| no-sharing | 20 | kvroute-tokens |", "--replicas 2", "2 emulated vLLM replicas × 64 blocks"} {
		if !strings.Contains(out, want) {
			t.Fatalf("results.md lacks %q:\n%s", want, out)
		}
	}
	svg, err := os.ReadFile(filepath.Join(dir, "ttft-p90-no-sharing.svg"))
	if err != nil || !bytes.HasPrefix(svg, []byte("<svg")) {
		t.Fatalf("chart: %v", err)
	}
}

// TestFlagHelpHasNoStrayText: a back-quoted word in a flag's usage becomes
// its argument name in the help ("-bin make build"); each flag line names
// the flag and at most one argument.
func TestFlagHelpHasNoStrayText(t *testing.T) {
	for _, sc := range program.Commands {
		_, _, errs := runCmd(t, sc.Name, "--help")
		for _, line := range strings.Split(errs, "\n") {
			// flag.PrintDefaults' lines ("  -name arg"); a hand-written
			// usage line ("  --quick   text") is not one.
			if strings.HasPrefix(line, "  -") && !strings.HasPrefix(line, "  --") && len(strings.Fields(line)) > 2 {
				t.Errorf("%s --help: %q", sc.Name, line)
			}
		}
	}
}
