// Command kvroute-bench runs kvroute against a fleet of emulated vLLM
// replicas: `demo` is the short side-by-side behind `make demo`, `run` the
// routing-quality benchmark recorded in docs/BENCHMARKS.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/kvroute/kvroute/internal/routebench"
)

// stdio carries a subcommand's standard streams so tests can drive it.
type stdio struct {
	out, err io.Writer
	errTTY   bool // err is an interactive terminal
}

type subcommand struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, io stdio) error
}

var subcommands = []subcommand{
	{"demo", "start emulated vLLM replicas and kvroute, compare kvroute with round-robin: demo [--bin DIR]", runDemo},
	{"run", "the routing-quality benchmark on an in-process fleet: run [--out DIR] [flags]", runBench},
	{"gateway", "a loopback stand-in for Envoy in front of kvroute, for development and tests: gateway --listen ADDR --extproc ADDR [--debug-headers]", runGateway},
	{"sim", "replay a Mooncake trace on a simulated fleet in virtual time: sim --trace FILE [--engines N] [--out DIR] [--policies LIST] [--kv-blocks N]", runSim},
	{"soak", "three kvroutes on a mesh under N ext_proc streams, one frozen, strangers on the mesh, the index at its cap: soak [--duration D] [--streams N]", runSoak},
	{"suite", "the routing suite: traces and workload families × gateways × seeds × loads, goals met or missed: suite [--quick] [--out DIR]", runSuite},
}

// errUsage marks an error already explained to the user by a flag set.
var errUsage = errors.New("usage")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], stdio{os.Stdout, os.Stderr, routebench.IsTerminal(os.Stderr)})
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, io stdio) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		printHelp(io.out)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, sc := range subcommands {
		if sc.name != args[0] {
			continue
		}
		err := sc.run(ctx, args[1:], io)
		switch {
		case err == nil:
			return 0
		case errors.Is(err, errUsage):
			return 2
		case ctx.Err() != nil:
			fmt.Fprintf(io.err, "kvroute-bench %s: interrupted; everything it started is stopped\n", sc.name)
			return 130
		default:
			fmt.Fprintf(io.err, "kvroute-bench %s: %v\n", sc.name, err)
			return 1
		}
	}
	fmt.Fprintf(io.err, "kvroute-bench: unknown command %q\n\n", args[0])
	printHelp(io.err)
	return 2
}

func printHelp(w io.Writer) {
	fmt.Fprintln(w, "usage: kvroute-bench COMMAND [FLAGS]")
	for _, sc := range subcommands {
		fmt.Fprintf(w, "  %-7s %s\n", sc.name, sc.summary)
	}
}
