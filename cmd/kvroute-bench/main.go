// Command kvroute-bench runs kvroute against a fleet of emulated vLLM
// replicas: `demo` is the short side-by-side behind `make demo`, `run` the
// routing-quality benchmark recorded in docs/BENCHMARKS.md.
package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/kvroute/kvroute/internal/routebench"
	"github.com/kvroute/kvroute/internal/subcmd"
)

// stdio carries a subcommand's standard streams so tests can drive it.
type stdio struct {
	out, err io.Writer
	errTTY   bool // err is an interactive terminal
}

// program is kvroute-bench's subcommands, in the order its help prints them.
var program = &subcmd.Program[stdio]{Name: "kvroute-bench", Usage: "usage: kvroute-bench COMMAND [FLAGS]", NameWidth: 7,
	Interrupted: "interrupted; everything it started is stopped", Commands: []subcmd.Command[stdio]{
		{Name: "demo", Summary: "start emulated vLLM replicas and kvroute, compare kvroute with round-robin: demo [--bin DIR]", Run: runDemo},
		{Name: "run", Summary: "the routing-quality benchmark on an in-process fleet: run [--out DIR] [flags]", Run: runBench},
		{Name: "gateway", Summary: "a loopback stand-in for Envoy in front of kvroute, for development and tests: gateway --listen ADDR --extproc ADDR [--debug-headers]", Run: runGateway},
		{Name: "sim", Summary: "replay a Mooncake trace on a simulated fleet in virtual time: sim --trace FILE [--engines N] [--out DIR] [--policies LIST] [--kv-blocks N]", Run: runSim},
		{Name: "soak", Summary: "three kvroutes on a mesh under N ext_proc streams, one frozen, strangers on the mesh, the index at its cap: soak [--duration D] [--streams N]", Run: runSoak},
		{Name: "suite", Summary: "the routing suite: traces and workload families × gateways × seeds × loads, goals met or missed: suite [--quick] [--out DIR]", Run: runSuite},
	}}

// errUsage marks an error already explained to the user by a flag set.
var errUsage = subcmd.ErrUsage

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], stdio{os.Stdout, os.Stderr, routebench.IsTerminal(os.Stderr)})
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, io stdio) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		program.PrintHelp(io.out)
		if len(args) == 0 {
			return subcmd.ExitUsage
		}
		return subcmd.ExitOK
	}
	return program.Run(ctx, args[0], args[1:], io, io.err)
}
