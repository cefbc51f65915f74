// Command kvroute is the Envoy ext_proc server that routes OpenAI-style requests
// to the vLLM replica holding the longest cached prefix, plus the operator
// subcommands that check its inputs from outside the Go tests.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/kvroute/kvroute/cmd/kvroute/internal/sighup"
)

// stdio carries a subcommand's standard streams so tests can drive it.
type stdio struct {
	in       io.Reader
	out, err io.Writer
}

// subcommand is one `kvroute NAME ...` entry. run returns errUsage for bad
// flags (exit 2) and any other error for a failure (exit 1).
type subcommand struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, io stdio) error
}

// subcommands is the table `kvroute help` prints, in that order.
var subcommands = []subcommand{
	{"serve", "run the ext_proc server (the default): --config FILE", runServe},
	{"validate-config", "check a YAML config: validate-config FILE", runValidateConfig},
	{"hash", "print vLLM block hashes of token ids on stdin: hash --algo A --seed S --block-size N", runHash},
	{"chat-template", "render a chat template with a JSON context on stdin: chat-template render --template-file F [--now RFC3339]", runChatTemplate},
	{"tokenize", "print the token ids of text on stdin: tokenize --tokenizer DIR [--no-special-tokens] [--jsonl | --chat]", runTokenize},
	{"events", "print an engine's KV events as JSON: events tail --events ADDR [--replay ADDR] [--count N | --for D]; a raw payload on stdin: events decode [--hex] [--pretty]", runEvents},
	{"status", "show every pool and replica of a running kvroute: health, parity checks, prompt-token funnel: status --admin ADDR [--json]", runStatus},
	{"explain", "show the replica a running kvroute would pick for a request, and why: explain --admin ADDR --path P --body FILE [--json]", runExplain},
}

// errUsage marks an error already explained to the user by a flag set.
var errUsage = errors.New("usage")

func main() {
	if name, _ := commandOf(os.Args[1:]); name != "serve" {
		sighup.Release() // only the server reloads on SIGHUP
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], stdio{os.Stdin, os.Stdout, os.Stderr})
	stop()
	os.Exit(code)
}

// commandOf splits the command name (serve when none is given) from its
// flags.
func commandOf(args []string) (name string, rest []string) {
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		return args[0], args[1:]
	}
	return "serve", args
}

func run(ctx context.Context, args []string, io stdio) int {
	var name string
	if len(args) > 0 && (args[0] == "help" || args[0] == "-h" || args[0] == "--help") {
		printHelp(io.out)
		return 0
	}
	name, args = commandOf(args)
	for _, sc := range subcommands {
		if sc.name != name {
			continue
		}
		err := sc.run(ctx, args, io)
		switch {
		case err == nil:
			return 0
		case errors.Is(err, errUsage):
			return 2
		default:
			fmt.Fprintf(io.err, "kvroute %s: %v\n", name, err)
			return 1
		}
	}
	fmt.Fprintf(io.err, "kvroute: unknown command %q\n\n", name)
	printHelp(io.err)
	return 2
}

func printHelp(w io.Writer) {
	fmt.Fprintln(w, "usage: kvroute [COMMAND] [FLAGS]")
	fmt.Fprintln(w, "\ncommands:")
	for _, sc := range subcommands {
		fmt.Fprintf(w, "  %-22s %s\n", sc.name, sc.summary)
	}
}
