package main

import (
	"bytes"
	"strings"
	"testing"
)

func run(t *testing.T, in string) (string, bool) {
	t.Helper()
	var out bytes.Buffer
	s := &summary{out: &out, buf: map[key][]string{}}
	if err := s.read(strings.NewReader(in)); err != nil {
		t.Fatal(err)
	}
	ok := s.finish()
	return out.String(), ok
}

func TestSkipsAreListedAndFailuresShown(t *testing.T) {
	in := `{"Action":"run","Package":"p","Test":"TestA"}
{"Action":"output","Package":"p","Test":"TestA","Output":"=== RUN   TestA\n"}
{"Action":"output","Package":"p","Test":"TestA","Output":"    a_test.go:9: !!! SKIPPING: data x missing\n"}
{"Action":"output","Package":"p","Test":"TestA","Output":"--- SKIP: TestA (0.00s)\n"}
{"Action":"skip","Package":"p","Test":"TestA"}
{"Action":"output","Package":"p","Test":"TestB","Output":"--- PASS: TestB (0.00s)\n"}
{"Action":"pass","Package":"p","Test":"TestB"}
{"Action":"output","Package":"p","Output":"PASS\n"}
{"Action":"output","Package":"p","Output":"ok  \tp\t0.01s\n"}
{"Action":"pass","Package":"p"}
`
	out, ok := run(t, in)
	if !ok {
		t.Fatalf("a skip is not a failure:\n%s", out)
	}
	for _, want := range []string{"ok  \tp\t0.01s\n", "1 test(s) SKIPPED", "SKIP p TestA: !!! SKIPPING: data x missing\n", "ok: 1 packages, 1 tests and subtests passed, 1 skipped\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "--- PASS") || strings.Contains(out, "PASS\n\n") {
		t.Errorf("passing tests' output printed:\n%s", out)
	}

	in = `{"Action":"output","Package":"p","Test":"TestC","Output":"    c_test.go:3: boom\n"}
{"Action":"fail","Package":"p","Test":"TestC"}
{"Action":"fail","Package":"p"}
`
	out, ok = run(t, in)
	if ok || !strings.Contains(out, "c_test.go:3: boom") || !strings.Contains(out, "FAIL: 1 of 1 tests failed") {
		t.Fatalf("failure not reported (ok=%v):\n%s", ok, out)
	}
}

func TestNoEventsIsAFailure(t *testing.T) {
	out, ok := run(t, "# p\nbuild failed\n")
	if ok || !strings.Contains(out, "build failed") {
		t.Fatalf("ok=%v:\n%s", ok, out)
	}
}

func TestBuildFailureIsAFailure(t *testing.T) {
	out, ok := run(t, `{"ImportPath":"p","Action":"build-output","Output":"p/x.go:1: syntax error\n"}
{"ImportPath":"p","Action":"build-fail"}
{"Action":"fail","Package":"p"}
`)
	if ok || !strings.Contains(out, "syntax error") {
		t.Fatalf("ok=%v:\n%s", ok, out)
	}
}
