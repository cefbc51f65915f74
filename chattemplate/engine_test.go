package chattemplate

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// errKind names an engine error the way the Python exception is named.
func errKind(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	var u *UndefinedError
	if errors.As(err, &u) {
		return "UndefinedError"
	}
	var s *SyntaxError
	if errors.As(err, &s) {
		return "TemplateSyntaxError"
	}
	return "?"
}

func TestEngineMatchesJinja2(t *testing.T) {
	v, err := DecodeJSON([]byte(engineContext))
	if err != nil {
		t.Fatal(err)
	}
	ctx := map[string]any{}
	d := v.(*Dict)
	for i, k := range d.Keys() {
		ctx[k.(string)] = d.vals[i]
	}
	for _, c := range engineCases {
		tpl, err := Parse(c.src)
		if err != nil {
			t.Errorf("parse %q: %v", c.src, err)
			continue
		}
		got, err := tpl.Render(ctx, RenderOptions{Now: frozenNow})
		switch {
		case c.err != "":
			if err == nil {
				t.Errorf("%q: rendered %q, Jinja2 raised %s", c.src, got, c.err)
			} else if k := errKind(err); k != c.err {
				t.Errorf("%q: raised %s (%v), Jinja2 raised %s", c.src, k, err, c.err)
			}
		case err != nil:
			t.Errorf("%q: %v", c.src, err)
		case got != c.out:
			t.Errorf("%q:\n got %q\nwant %q", c.src, got, c.out)
		}
	}
}

func TestSyntaxErrorsAreReported(t *testing.T) {
	for _, src := range []string{
		"{% if x %}", "{% for %}", "{{ 1 + }}", "{% endif %}", "{{ (1 }}", "{{ 'abc }}",
		"{# open", "{% set %}", "{% macro m(a=1, b) %}{% endmacro %}", "{% include 'x' %}",
		"{{ a is }}", "{% raw %}never closed", "{{ {'a': 1 }}", "{% for x in y %}{% else %}",
	} {
		if _, err := Parse(src); err == nil {
			t.Errorf("%q parsed", src)
		} else if errKind(err) != "TemplateSyntaxError" {
			t.Errorf("%q: %v is not a SyntaxError", src, err)
		}
	}
}

func TestStepBudgetStopsRunawayTemplates(t *testing.T) {
	for _, src := range []string{
		"{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}",
		"{% macro m(n) %}{{ m(n + 1) }}{% endmacro %}{{ m(0) }}",
		"{% set ns = namespace(s='xx') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | length }}",
		"{{ 'x' * 1000000000 }}",
		"{{ [1, 2] * 1000000000 }}",
	} {
		tpl, err := Parse(src)
		if err != nil {
			t.Fatal(err)
		}
		_, err = tpl.Render(nil, RenderOptions{MaxSteps: 100000, MaxOutputSize: 1 << 20})
		if !errors.Is(err, ErrBudgetExceeded) {
			t.Errorf("%q: %v, want a budget error", src, err)
		}
	}
}

func TestRenderIsSafeForConcurrentUse(t *testing.T) {
	tpl, err := Parse("{% for i in range(n) %}{{ i }}{% endfor %}")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan string, 8)
	for i := range 8 {
		go func() {
			out, err := tpl.Render(map[string]any{"n": i}, RenderOptions{})
			if err != nil {
				out = err.Error()
			}
			done <- out
		}()
	}
	seen := map[string]bool{}
	for range 8 {
		seen[<-done] = true
	}
	if !seen["0123456"] || !seen[""] || len(seen) != 8 {
		t.Errorf("renders: %v", seen)
	}
}

func TestJSONRoundTripKeepsOrderAndPythonFormatting(t *testing.T) {
	in := `{"z": 1, "a": [1.0, 2.5e-07, 1e+16, -0.0, 123456789012345678901234], "m": {"é": "\u00e9\ud83d\ude00\n"}, "t": true, "n": null}`
	v, err := DecodeJSON([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	got, err := encodeJSON(v, defaultJSONOptions(false, ""))
	if err != nil {
		t.Fatal(err)
	}
	// What Python prints for json.dumps(json.loads(in), ensure_ascii=False),
	// except the big integer, which Python keeps exact.
	want := `{"z": 1, "a": [1.0, 2.5e-07, 1e+16, -0.0, 1.2345678901234569e+23], "m": {"é": "é😀\n"}, "t": true, "n": null}`
	if got != want {
		t.Errorf("\n got %s\nwant %s", got, want)
	}
	for _, bad := range []string{`{"a":}`, `[1,]`, `"\x"`, `{"a" 1}`, `01x`, `[` + strings.Repeat("[", 600) + `]`} {
		if _, err := DecodeJSON([]byte(bad)); err == nil {
			t.Errorf("%s decoded", bad)
		}
	}
}

func TestRenderAcceptsPlainGoValues(t *testing.T) {
	tpl, err := Parse("{% for m in messages %}{{ m.role }}={{ m.content }};{% endfor %}{{ n + 1 }}{{ flags.b }}{{ names | join(',') }}")
	if err != nil {
		t.Fatal(err)
	}
	got, err := tpl.Render(map[string]any{
		"messages": []any{map[string]any{"role": "user", "content": "hi"}},
		"n":        41,
		"flags":    map[string]any{"b": true},
		"names":    []string{"x", "y"},
	}, RenderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := "user=hi;42Truex,y"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestRaiseExceptionIsATemplateError(t *testing.T) {
	tpl, err := Parse("{{ raise_exception('Conversation roles must alternate') }}")
	if err != nil {
		t.Fatal(err)
	}
	_, err = tpl.Render(nil, RenderOptions{})
	if !IsRaised(err) || err.Error() != "TemplateError: Conversation roles must alternate" {
		t.Errorf("err %v, IsRaised %v", err, IsRaised(err))
	}
	tpl, _ = Parse("{{ 1 + 'a' }}")
	if _, err := tpl.Render(nil, RenderOptions{}); err == nil || IsRaised(err) {
		t.Errorf("type error reported as %v", err)
	}
}

// TestOutputSumMatchesEval checks that {{ a + b + ... }}, written piecewise
// by writeSum, renders and fails exactly as the same sum evaluated first.
func TestOutputSumMatchesEval(t *testing.T) {
	ctx := map[string]any{"s": "str", "n": 2, "l": []any{1}, "big": strings.Repeat("x", 40)}
	exprs := []string{
		`"a" + s + "b"`, `s + s + s + s + s + s + s + s + s + s + s + s + s + s + s + s + s + s + s`,
		`n + n + 1`, `l + l + [2]`, `"a" + n`, `n + "a"`, `"a" + s + n + "b"`, `l + "a"`,
		`"a" + missing + "b"`, `"a" + missing.x + "b"`, `big + big`, `big + "y" + big`, `"" + ""`,
		`s + (s + s) + s`, `1.5 + n + 0.5`,
	}
	for _, e := range exprs {
		for _, limit := range []int{0, 60, 85} {
			render := func(src string) string {
				tpl, err := Parse(src)
				if err != nil {
					t.Fatalf("%s: %v", src, err)
				}
				out, err := tpl.Render(ctx, RenderOptions{MaxOutputSize: limit})
				return fmt.Sprintf("%q %v", out, err)
			}
			direct := render(`[{{ ` + e + ` }}]`)
			viaSet := render(`{% set v = ` + e + ` %}[{{ v }}]`)
			if direct != viaSet {
				t.Errorf("{{ %s }} limit %d: written %s, evaluated %s", e, limit, direct, viaSet)
			}
		}
	}
}

// TestAppendRenderBudgetCountsItsOwnOutput: the output budget bounds what
// one render appends, not the bytes already in the caller's buffer, and a
// render over it fails the same with or without them.
func TestAppendRenderBudgetCountsItsOwnOutput(t *testing.T) {
	tpl, err := Parse(`{% for i in range(10) %}{{ "0123456789" }}{% endfor %}`)
	if err != nil {
		t.Fatal(err)
	}
	prefix := []byte(strings.Repeat("p", 1000))
	for _, c := range []struct {
		limit int
		ok    bool
	}{{100, true}, {99, false}} {
		alone, errAlone := tpl.AppendRender(nil, nil, RenderOptions{MaxOutputSize: c.limit})
		after, errAfter := tpl.AppendRender(append([]byte(nil), prefix...), nil, RenderOptions{MaxOutputSize: c.limit})
		if (errAlone == nil) != c.ok || (errAfter == nil) != c.ok {
			t.Fatalf("limit %d: errors %v / %v, want ok=%v", c.limit, errAlone, errAfter, c.ok)
		}
		if c.ok && (string(after[:len(prefix)]) != string(prefix) || string(after[len(prefix):]) != string(alone) || len(alone) != 100) {
			t.Fatalf("limit %d: appended %q after the prefix, alone %q", c.limit, after[len(prefix):], alone)
		}
	}
}

// A document decodes to at most MaxJSONValues values: one more is an
// error (naming no content), exactly as many is not.
func TestDecodeJSONBoundsItsValues(t *testing.T) {
	doc := func(items int) []byte {
		// The array is one value and each {} another.
		return []byte("[" + strings.TrimSuffix(strings.Repeat("{},", items), ",") + "]")
	}
	if _, err := DecodeJSON(doc(MaxJSONValues - 1)); err != nil {
		t.Fatalf("%d values: %v", MaxJSONValues, err)
	}
	_, err := DecodeJSON(doc(MaxJSONValues))
	if err == nil || !strings.Contains(err.Error(), "more than 131072 values") {
		t.Fatalf("%d values: err = %v, want the bound", MaxJSONValues+1, err)
	}
	v, arena, err := decodeBorrowed(doc(MaxJSONValues))
	releaseArena(arena)
	if err == nil {
		t.Fatalf("borrowed decode of %d values gave %T, want the bound", MaxJSONValues+1, v)
	}
}

// An 8 MiB body of the cheapest values to write and the dearest to hold
// allocates a bounded amount while decoding, borrowed or not (before
// MaxJSONValues, the empty objects took 471 MiB).
func TestDecodeJSONBoundsHostileBodies(t *testing.T) {
	const limit = 64 << 20
	for _, unit := range []string{"{},", "[],", `{"":0},`, "[0],", `"",`, "0,"} {
		body := []byte(`{"messages":[` + strings.Repeat(unit, (8<<20)/len(unit)) + `0]}`)
		for _, borrowed := range []bool{false, true} {
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			var err error
			if borrowed {
				var arena *[]byte
				_, arena, err = decodeBorrowed(body)
				releaseArena(arena)
			} else {
				_, err = DecodeJSON(body)
			}
			runtime.ReadMemStats(&after)
			if err == nil {
				t.Errorf("%q × %d (borrowed %v): decoded, want the values bound", unit, (8<<20)/len(unit), borrowed)
			}
			if got := after.TotalAlloc - before.TotalAlloc; got > limit {
				t.Errorf("%q × %d (borrowed %v): allocated %d MiB decoding, want at most %d", unit, (8<<20)/len(unit), borrowed, got>>20, limit>>20)
			}
		}
	}
}
