// Command testsummary reads `go test -json` on stdin and prints what a
// plain `go test` run prints — one line per package, and the full output of
// every failing test — then lists every skipped test with its reason and a
// final summary line. `make test` pipes the test run through it so that a
// skip cannot go unnoticed (see testdata/README.md).
//
// Exit status: 1 when any test, package or build failed, or when stdin held
// no test events at all; 0 otherwise. The Makefile also keeps go test's own
// exit status (set -o pipefail).
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action     string
	Package    string
	Test       string
	Output     string
	ImportPath string // build-output, build-fail
}

type key struct{ pkg, test string }

type skip struct {
	key
	reason string
}

type summary struct {
	out                          io.Writer
	buf                          map[key][]string
	skips                        []skip
	pkgs, pkgFails, tests, fails int
	events                       int
	failed                       bool
}

func main() {
	s := &summary{out: os.Stdout, buf: map[key][]string{}}
	if err := s.read(os.Stdin); err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(1)
	}
	if !s.finish() {
		os.Exit(1)
	}
}

func (s *summary) read(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			fmt.Fprintln(s.out, string(line)) // not an event: pass it through
			continue
		}
		s.events++
		s.handle(e)
	}
	return sc.Err()
}

func (s *summary) handle(e event) {
	k := key{e.Package, e.Test}
	switch e.Action {
	case "build-output":
		fmt.Fprint(s.out, e.Output)
	case "build-fail":
		s.failed = true
	case "output":
		if e.Test == "" {
			if e.Output != "PASS\n" {
				fmt.Fprint(s.out, e.Output)
			}
			return
		}
		s.buf[k] = append(s.buf[k], e.Output)
	case "pass":
		if e.Test == "" {
			s.pkgs++
		} else {
			s.tests++
		}
		delete(s.buf, k)
	case "fail":
		s.failed = true
		if e.Test == "" {
			s.pkgs++
			s.pkgFails++
			return
		}
		s.tests++
		s.fails++
		fmt.Fprint(s.out, strings.Join(s.buf[k], ""))
		delete(s.buf, k)
	case "skip":
		if e.Test == "" {
			s.pkgs++ // a package without tests
			return
		}
		s.tests++
		s.skips = append(s.skips, skip{k, reason(s.buf[k])})
		delete(s.buf, k)
	}
}

// reason extracts a skipped test's message from its output, without the
// "=== RUN" / "--- SKIP" framing and the file:line prefix of t.Skip.
func reason(lines []string) string {
	var parts []string
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- SKIP") {
			continue
		}
		if i := strings.Index(t, ": "); i > 0 && strings.Contains(t[:i], ".go:") {
			t = t[i+2:]
		}
		parts = append(parts, t)
	}
	if len(parts) == 0 {
		return "(no reason given)"
	}
	return strings.Join(parts, " / ")
}

// finish prints the skip list and the summary line; it reports success.
func (s *summary) finish() bool {
	if len(s.skips) > 0 {
		fmt.Fprintf(s.out, "\n!!! %d test(s) SKIPPED — they did not run:\n", len(s.skips))
		for _, sk := range s.skips {
			fmt.Fprintf(s.out, "  SKIP %s %s: %s\n", sk.pkg, sk.test, sk.reason)
		}
	}
	switch {
	case s.events == 0:
		fmt.Fprintln(s.out, "\nFAIL: no test events on stdin (did go test run with -json?)")
		return false
	case s.failed:
		fmt.Fprintf(s.out, "\nFAIL: %d of %d tests failed, %d of %d packages failed, %d skipped\n",
			s.fails, s.tests, s.pkgFails, s.pkgs, len(s.skips))
		return false
	}
	fmt.Fprintf(s.out, "\nok: %d packages, %d tests and subtests passed, %d skipped\n",
		s.pkgs, s.tests-len(s.skips), len(s.skips))
	return true
}
