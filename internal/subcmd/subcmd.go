// Package subcmd runs the subcommands of kvroute's programs (kvroute,
// kvroute-bench): a table of names, one-line summaries and functions, the
// help that lists them, and the exit codes they share.
package subcmd

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// ErrUsage marks an error a command's flag set has already explained to
// the user (exit 2).
var ErrUsage = errors.New("usage")

// Exit codes of Run.
const (
	ExitOK          = 0
	ExitFailed      = 1
	ExitUsage       = 2
	ExitInterrupted = 130
)

// Command is one `PROGRAM NAME ...` entry; IO carries its standard streams.
type Command[IO any] struct {
	Name    string
	Summary string
	Run     func(ctx context.Context, args []string, io IO) error
}

// Program is a program's subcommands.
type Program[IO any] struct {
	Name     string
	Commands []Command[IO]
	// Usage is the help's first line(s), before the command table.
	Usage string
	// NameWidth pads the names in the help's table.
	NameWidth int
	// Interrupted, when set, is printed (after "PROGRAM NAME: ") for a
	// command that fails once ctx has ended, which then exits
	// ExitInterrupted; unset, such a failure is printed as any other.
	Interrupted string
}

// Run runs the command called name with args and returns the exit code:
// ExitOK when it returns nil, ExitUsage for ErrUsage or an unknown name
// (the help then goes to stderr), else ExitFailed (or ExitInterrupted, see
// Program.Interrupted) with "PROGRAM NAME: error" on stderr.
func (p *Program[IO]) Run(ctx context.Context, name string, args []string, io IO, stderr io.Writer) int {
	for _, c := range p.Commands {
		if c.Name != name {
			continue
		}
		err := c.Run(ctx, args, io)
		switch {
		case err == nil:
			return ExitOK
		case errors.Is(err, ErrUsage):
			return ExitUsage
		case p.Interrupted != "" && ctx.Err() != nil:
			fmt.Fprintf(stderr, "%s %s: %s\n", p.Name, name, p.Interrupted)
			return ExitInterrupted
		default:
			fmt.Fprintf(stderr, "%s %s: %v\n", p.Name, name, err)
			return ExitFailed
		}
	}
	fmt.Fprintf(stderr, "%s: unknown command %q\n\n", p.Name, name)
	p.PrintHelp(stderr)
	return ExitUsage
}

// PrintHelp writes the usage and one line per command.
func (p *Program[IO]) PrintHelp(w io.Writer) {
	fmt.Fprintln(w, p.Usage)
	for _, c := range p.Commands {
		fmt.Fprintf(w, "  %-*s %s\n", p.NameWidth, c.Name, c.Summary)
	}
}
