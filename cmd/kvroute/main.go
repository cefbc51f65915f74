// Command kvroute is the Envoy ext_proc server that routes OpenAI-style requests
// to the vLLM replica holding the longest cached prefix, plus the operator
// subcommands that check its inputs from outside the Go tests.
package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/kvroute/kvroute/cmd/kvroute/internal/sighup"
	"github.com/kvroute/kvroute/internal/subcmd"
)

// stdio carries a subcommand's standard streams so tests can drive it.
type stdio struct {
	in       io.Reader
	out, err io.Writer
}

// program is kvroute's subcommands, in the order `kvroute help` prints them.
// A command returns errUsage for bad flags (exit 2) and any other error for
// a failure (exit 1).
var program = &subcmd.Program[stdio]{Name: "kvroute", Usage: "usage: kvroute [COMMAND] [FLAGS]\n\ncommands:", NameWidth: 22, Commands: []subcmd.Command[stdio]{
	{Name: "serve", Summary: "run the ext_proc server (the default): --config FILE", Run: runServe},
	{Name: "validate-config", Summary: "check a YAML config: validate-config FILE", Run: runValidateConfig},
	{Name: "hash", Summary: "print vLLM block hashes of token ids on stdin: hash --algo A --seed S --block-size N", Run: runHash},
	{Name: "chat-template", Summary: "render a chat template with a JSON context on stdin: chat-template render --template-file F [--now RFC3339]", Run: runChatTemplate},
	{Name: "tokenize", Summary: "print the token ids of text on stdin: tokenize --tokenizer DIR [--no-special-tokens] [--jsonl | --chat]", Run: runTokenize},
	{Name: "events", Summary: "print an engine's KV events as JSON: events tail --events ADDR [--replay ADDR] [--count N | --for D]; a raw payload on stdin: events decode [--hex] [--pretty]", Run: runEvents},
	{Name: "status", Summary: "show every pool and replica of a running kvroute: health, parity checks, prompt-token funnel: status --admin ADDR [--json]", Run: runStatus},
	{Name: "explain", Summary: "show the replica a running kvroute would pick for a request, and why: explain --admin ADDR --path P --body FILE [--json]", Run: runExplain},
}}

// errUsage marks an error already explained to the user by a flag set.
var errUsage = subcmd.ErrUsage

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
	if len(args) > 0 && (args[0] == "help" || args[0] == "-h" || args[0] == "--help") {
		program.PrintHelp(io.out)
		return subcmd.ExitOK
	}
	name, args := commandOf(args)
	return program.Run(ctx, name, args, io, io.err)
}
