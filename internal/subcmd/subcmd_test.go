package subcmd

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
)

// TestRunExitCodes: each way a command ends has its exit code and, where
// it fails, its line on stderr.
func TestRunExitCodes(t *testing.T) {
	fail := errors.New("boom")
	ret := func(err error) func(context.Context, []string, struct{}) error {
		return func(context.Context, []string, struct{}) error { return err }
	}
	p := &Program[struct{}]{Name: "prog", Usage: "usage: prog COMMAND", NameWidth: 4, Commands: []Command[struct{}]{
		{Name: "ok", Summary: "succeeds", Run: ret(nil)},
		{Name: "bad", Summary: "bad flags", Run: ret(ErrUsage)},
		{Name: "fail", Summary: "fails", Run: ret(fail)},
	}}
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, c := range []struct {
		name        string
		ctx         context.Context
		interrupted string
		code        int
		stderr      string
	}{
		{"ok", context.Background(), "", ExitOK, ""},
		{"bad", context.Background(), "", ExitUsage, ""},
		{"fail", context.Background(), "", ExitFailed, "prog fail: boom\n"},
		{"fail", canceled, "", ExitFailed, "prog fail: boom\n"},
		{"fail", canceled, "stopped", ExitInterrupted, "prog fail: stopped\n"},
		{"nope", context.Background(), "", ExitUsage, "prog: unknown command \"nope\"\n\nusage: prog COMMAND\n  ok   succeeds\n  bad  bad flags\n  fail fails\n"},
	} {
		p.Interrupted = c.interrupted
		var errw bytes.Buffer
		if code := p.Run(c.ctx, c.name, nil, struct{}{}, &errw); code != c.code || errw.String() != c.stderr {
			t.Errorf("%s (interrupted %q): exit %d, stderr %q; want %d, %q", c.name, c.interrupted, code, errw.String(), c.code, c.stderr)
		}
	}
	var help strings.Builder
	p.PrintHelp(&help)
	if !strings.HasPrefix(help.String(), "usage: prog COMMAND\n  ok   succeeds\n") {
		t.Errorf("help %q", help.String())
	}
}
