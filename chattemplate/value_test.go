package chattemplate

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

func TestDictKeepsInsertionOrderPastTheIndexThreshold(t *testing.T) {
	d := NewDict()
	const n = 3 * smallDict
	for i := range n {
		d.Set(fmt.Sprintf("k%02d", n-i), int64(i))
	}
	d.Set("k05", "updated")  // existing key keeps its place
	d.Set(int64(7), "seven") // non-string keys
	d.Set(true, "one")       // True == 1, a new key
	d.Set(1.0, "one again")  // 1.0 == True: same key
	d.Delete("k10")
	if v, _ := d.Get("k05"); v != "updated" {
		t.Errorf("k05 = %v", v)
	}
	if v, _ := d.Get(int64(1)); v != "one again" {
		t.Errorf("d[1] = %v", v)
	}
	if _, ok := d.Get("k10"); ok {
		t.Error("deleted key still present")
	}
	keys := d.Keys()
	if len(keys) != n+1 || keys[0] != "k36" || keys[n-2] != "k01" || keys[n-1] != int64(7) || keys[n] != true {
		t.Errorf("keys %v", keys)
	}
	c := d.Copy()
	c.Set("new", 1)
	if d.Len() == c.Len() {
		t.Error("copy shares storage")
	}
	for i, k := range keys {
		v, ok := d.Get(k)
		if !ok || v != d.vals[i] {
			t.Errorf("Get(%v) = %v, %v", k, v, ok)
		}
	}
}

func TestPythonFloatAndStringRepr(t *testing.T) {
	for _, c := range []struct {
		v    Value
		want string
	}{
		{1.0, "1.0"}, {0.1, "0.1"}, {1e16, "1e+16"}, {1.5e-5, "1.5e-05"}, {123456789.0, "123456789.0"},
		{math.Copysign(0, -1), "-0.0"}, {1e-4, "0.0001"}, {2.5e300, "2.5e+300"},
		{"it's", `"it's"`}, {"a\"b'c", `'a"b\'c'`}, {"\x00é\u200b", `'\x00é\u200b'`},
		{Tuple{int64(1)}, "(1,)"}, {&List{Items: []Value{nil, true}}, "[None, True]"},
	} {
		if got := reprValue(c.v); got != c.want {
			t.Errorf("repr(%#v) = %s, want %s", c.v, got, c.want)
		}
	}
}

// TestPrintingAnyEngineValueTerminates: a template that prints a method, a
// global function, the loop or a joiner without calling it (a missing
// "()") renders a Python-style repr; it used to recurse between strValue
// and writeRepr until the stack overflowed, killing the process.
func TestPrintingAnyEngineValueTerminates(t *testing.T) {
	for src, prefix := range map[string]string{
		"{{ d.get }}":                                    "<built-in method get of dict object at 0x7f",
		"{{ 's'.strip }}":                                "<built-in method strip of str object at 0x7f",
		"{{ [1].count }}":                                "<built-in method count of list object at 0x7f",
		"{{ raise_exception }}":                          "<function raise_exception at 0x7f",
		"{% for x in [1] %}{{ loop }}{% endfor %}":       "<LoopContext 1/1>",
		"{% for x in [1] %}{{ loop.cycle }}{% endfor %}": "<bound method LoopContext.cycle of <LoopContext 1/1>>",
		"{{ joiner(',') }}":                              "<",
		"{{ [d.get] }}":                                  "[<built-in method get of dict object at 0x7f",
	} {
		tpl, err := Parse(src)
		if err != nil {
			t.Fatal(err)
		}
		got, err := tpl.Render(map[string]any{"d": map[string]any{"get": 1}}, RenderOptions{})
		if err != nil || !strings.HasPrefix(got, prefix) {
			t.Errorf("%s = %q, %v; want a repr starting %q", src, got, err, prefix)
		}
	}
}

// TestCyclerAsJinja2: cycler(*items), a global of Jinja2's default
// namespace, behaves as jinja2.utils.Cycler in Jinja2 3.1.6's
// ImmutableSandboxedEnvironment (each expected output printed by it).
func TestCyclerAsJinja2(t *testing.T) {
	expectRenders(t, nil, map[string]string{
		"{% set c = cycler('a','b','c') %}{{ c.next() }}{{ c.next() }}{{ c.current }}{{ c.next() }}{{ c.next() }}{% set _ = c.reset() %}{{ c.current }}": "abccaa",
		"{% set c = cycler(1, 2) %}{% for m in [1,2,3] %}{{ c.next() }},{% endfor %}":                                                                    "1,2,1,",
		"{% set c = cycler('a') %}{{ c.items }}|{{ c.pos }}":                                                                                             "('a',)|0",
		"{% set c = cycler('a') %}{{ c.reset() }}|{{ c is defined }}|{{ c.nope }}|":                                                                      "None|True||",
		"{% set c = cycler('a','b') %}{% if c %}t{% endif %}":                                                                                            "t",
		"{{ cycler }}": "<class 'jinja2.utils.Cycler'>",
		"{% set c = cycler({'r':1}, [2]) %}{{ c.next() }}{{ c.next() }}{{ c.next() }}":              "{'r': 1}[2]{'r': 1}",
		"{% set c = cycler('a','b') %}{{ c.next() }}{% set d = c %}{{ d.next() }}{{ c.current }}":   "aba",
		"{% set c = cycler('a','b') %}{% for i in range(3) %}{{ c.next() }}{% endfor %}{{ c.pos }}": "aba1",
		"{% set c = cycler('a', 2) %}{{ [c.current] }}|{{ c.items|length }}":                        "['a']|2",
	})
	expectRenderErrors(t, map[string]string{
		"{% set c = cycler() %}x":                  "at least one item has to be provided",
		"{% set c = cycler(items=1) %}":            "Cycler.__init__() got an unexpected keyword argument 'items'",
		"{% set c = cycler('a') %}{{ c.next(1) }}": "Cycler.next() takes 1 positional argument but 2 were given",
		"{% set c = cycler('a') %}{{ c|length }}":  "object of type 'Cycler' has no len()",
	})
	for src, prefix := range map[string]string{
		"{% set c = cycler('a') %}{{ c }}":          "<jinja2.utils.Cycler object at 0x7f",
		"{% set c = cycler('a','b') %}{{ c.next }}": "<bound method Cycler.next of <jinja2.utils.Cycler object at 0x7f",
	} {
		// Jinja2 prints an address: only the shape can match.
		if got := render(t, src, nil); !strings.HasPrefix(got, prefix) || strings.Count(got, "0x7f") != 1 {
			t.Errorf("%s = %q; want a repr starting %q", src, got, prefix)
		}
	}
}

// TestPrintingEngineObjectsAsJinja2 pins the reprs Jinja2 3.1.6 prints
// without an address (ImmutableSandboxedEnvironment): the loop, its bound
// methods and the classes among the globals; a joiner is named by its
// Python class, never by its Go type.
func TestPrintingEngineObjectsAsJinja2(t *testing.T) {
	expectRenders(t, nil, map[string]string{
		"{% for x in [1,2] %}{{ loop }}|{% endfor %}":                             "<LoopContext 1/2>|<LoopContext 2/2>|",
		"{% for x in [1,2] %}{{ [loop] }}{% endfor %}":                            "[<LoopContext 1/2>][<LoopContext 2/2>]",
		"{% for x in [1,2,3] if x > 1 %}{{ loop }}{% endfor %}":                   "<LoopContext 1/2><LoopContext 2/2>",
		"{% for x in 'ab' %}{% for y in [3] %}{{ loop }}{% endfor %}{% endfor %}": "<LoopContext 1/1><LoopContext 1/1>",
		"{% for x in [1] %}{{ loop|string }}{{ loop ~ '' }}{% endfor %}":          "<LoopContext 1/1><LoopContext 1/1>",
		"{% for x in [1,2] %}{{ loop.cycle }}|{{ loop.changed }}|{% endfor %}": "<bound method LoopContext.cycle of <LoopContext 1/2>>|<bound method LoopContext.changed of <LoopContext 1/2>>|" +
			"<bound method LoopContext.cycle of <LoopContext 2/2>>|<bound method LoopContext.changed of <LoopContext 2/2>>|",
		"{{ namespace }}": "<class 'jinja2.utils.Namespace'>",
		"{{ dict }}":      "<class 'dict'>",
	})
	tpl, err := Parse("{{ joiner(',') }}")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := tpl.Render(nil, RenderOptions{}); err != nil || !strings.HasPrefix(got, "<jinja2.utils.Joiner object at 0x7f") || len(got) != len("<jinja2.utils.Joiner object at 0x7f87331f3310>") {
		t.Errorf("joiner(',') printed %q, %v", got, err)
	}
}
