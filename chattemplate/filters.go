package chattemplate

import (
	"errors"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Jinja2's builtin filters (jinja2/filters.py, 3.1) that chat templates use,
// with transformers' tojson (json.dumps, ensure_ascii off, keys unsorted).

type filterFunc func(st *state, v Value, args []Value, kw *Dict) (Value, error)

var filters map[string]filterFunc

// lazy wraps a filter Jinja2 implements as a generator: its failures surface
// only when the result is consumed, so a result never consumed never fails.
func lazy(name string, fn filterFunc) filterFunc {
	return func(st *state, v Value, args []Value, kw *Dict) (Value, error) {
		r, err := fn(st, v, args, kw)
		if err != nil {
			if errors.Is(err, ErrBudgetExceeded) {
				return nil, err
			}
			return &Iterator{kind: "generator", err: err, fn: name}, nil
		}
		if it, ok := r.(*Iterator); ok {
			it.fn = name
		}
		return r, nil
	}
}

func init() {
	filters = map[string]filterFunc{
		"tojson": filterToJSON,
		"trim":   filterTrim,
		"length": filterLength,
		"count":  filterLength,
		"list":   filterList,
		"join":   filterJoin,
		"map":    lazy("sync_do_map", filterMap),
		"select": lazy("select_or_reject", func(st *state, v Value, a []Value, kw *Dict) (Value, error) {
			return selectOrReject(st, v, a, false, false)
		}),
		"reject": lazy("select_or_reject", func(st *state, v Value, a []Value, kw *Dict) (Value, error) {
			return selectOrReject(st, v, a, true, false)
		}),
		"selectattr": lazy("select_or_reject", func(st *state, v Value, a []Value, kw *Dict) (Value, error) {
			return selectOrReject(st, v, a, false, true)
		}),
		"rejectattr": lazy("select_or_reject", func(st *state, v Value, a []Value, kw *Dict) (Value, error) {
			return selectOrReject(st, v, a, true, true)
		}),
		"first":      filterFirst,
		"last":       filterLast,
		"default":    filterDefault,
		"d":          filterDefault,
		"upper":      func(st *state, v Value, a []Value, kw *Dict) (Value, error) { return pyUpper(strValue(v)), nil },
		"lower":      func(st *state, v Value, a []Value, kw *Dict) (Value, error) { return pyLower(strValue(v)), nil },
		"title":      filterTitle,
		"capitalize": func(st *state, v Value, a []Value, kw *Dict) (Value, error) { return pyCapitalize(strValue(v)), nil },
		"replace":    filterReplace,
		"string":     func(st *state, v Value, a []Value, kw *Dict) (Value, error) { return strValue(v), nil },
		"safe":       func(st *state, v Value, a []Value, kw *Dict) (Value, error) { return strValue(v), nil }, // Markup(str(v))
		"e":          filterEscape,
		"escape":     filterEscape,
		"int":        filterInt,
		"float":      filterFloat,
		"abs":        filterAbs,
		"round":      filterRound,
		"items":      lazy("do_items", filterItems),
		"dictsort":   filterDictsort,
		"unique":     lazy("sync_do_unique", filterUnique),
		"indent":     filterIndent,
		"reverse":    filterReverse,
		"sort":       filterSort,
		"sum":        filterSum,
		"min":        func(st *state, v Value, a []Value, kw *Dict) (Value, error) { return filterMinMax(st, v, a, kw, false) },
		"max":        func(st *state, v Value, a []Value, kw *Dict) (Value, error) { return filterMinMax(st, v, a, kw, true) },
		"attr":       filterAttr,
		"format":     filterFormat,
		"center":     filterCenter,
		"wordcount":  filterWordcount,
		"batch":      lazy("do_batch", filterBatch),
		"pprint":     func(st *state, v Value, a []Value, kw *Dict) (Value, error) { return reprValue(v), nil },
		"truncate":   filterTruncate,
	}
}

// arg returns the i-th positional argument or the keyword name, or def.
func arg(args []Value, kw *Dict, i int, name string, def Value) Value {
	if i < len(args) {
		return args[i]
	}
	if kw != nil {
		if v, ok := kw.Get(name); ok {
			return v
		}
	}
	return def
}

func (st *state) applyFilter(f *filterExpr, v Value, sc *scope) (Value, error) {
	if err := st.step(1); err != nil {
		return nil, err
	}
	fn := f.fn
	if fn == nil {
		return nil, errorf("TemplateAssertionError", "no filter named '%s'", f.name)
	}
	args, kw, err := st.evalArgs(f.args, f.kwNames, f.kwVals, nil, nil, sc)
	if err != nil {
		return nil, err
	}
	return fn(st, v, args, kw)
}

// seq lists a filter's input, charging one step per item.
func (st *state) seq(v Value) ([]Value, error) {
	items, err := st.iterate(v)
	if err != nil {
		return nil, err
	}
	return items, st.step(len(items))
}

func filterToJSON(st *state, v Value, args []Value, kw *Dict) (Value, error) {
	// transformers: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
	ensure := arg(args, kw, 0, "ensure_ascii", false)
	indent := arg(args, kw, 1, "indent", nil)
	seps := arg(args, kw, 2, "separators", nil)
	sortKeys := arg(args, kw, 3, "sort_keys", false)
	var o jsonOptions
	switch x := indent.(type) {
	case nil:
		o = defaultJSONOptions(false, "")
	case int64:
		o = defaultJSONOptions(true, strings.Repeat(" ", int(max(0, min(x, 64)))))
	case string:
		o = defaultJSONOptions(true, x)
	default:
		return nil, typeErrorf("tojson: indent must be an int or a string")
	}
	if seps != nil {
		items, err := st.iterate(seps)
		if err != nil || len(items) != 2 {
			return nil, errorf("ValueError", "tojson: separators must be a pair of strings")
		}
		a, ok1 := items[0].(string)
		b, ok2 := items[1].(string)
		if !ok1 || !ok2 {
			return nil, errorf("ValueError", "tojson: separators must be a pair of strings")
		}
		o.itemSep, o.keySep = a, b
	}
	o.ensureASCII = truthy(ensure)
	o.sortKeys = truthy(sortKeys)
	s, err := encodeJSON(v, o)
	if err != nil {
		return nil, typeErrorf("%v", err)
	}
	return s, st.checkSize(len(s))
}

func pyStrip(s string, chars Value, left, right bool) (string, error) {
	switch c := chars.(type) {
	case nil, *Undefined:
		if left {
			s = strings.TrimLeftFunc(s, unicode.IsSpace)
		}
		if right {
			s = strings.TrimRightFunc(s, unicode.IsSpace)
		}
		return s, nil
	case string:
		if left {
			s = strings.TrimLeft(s, c)
		}
		if right {
			s = strings.TrimRight(s, c)
		}
		return s, nil
	}
	return "", typeErrorf("strip arg must be None or str")
}

func filterTrim(st *state, v Value, args []Value, kw *Dict) (Value, error) {
	return pyStrip(strValue(v), arg(args, kw, 0, "chars", nil), true, true)
}

func length(v Value) (int, error) {
	switch x := v.(type) {
	case string:
		return utf8.RuneCountInString(x), nil
	case *List:
		return len(x.Items), nil
	case Tuple:
		return len(x), nil
	case *Dict:
		return x.Len(), nil
	case *Undefined:
		return 0, nil
	case *View:
		return len(x.items), nil
	}
	return 0, typeErrorf("object of type '%s' has no len()", typeName(v))
}

func filterLength(st *state, v Value, args []Value, kw *Dict) (Value, error) {
	n, err := length(v)
	return int64(n), err
}

func filterList(st *state, v Value, args []Value, kw *Dict) (Value, error) {
	items, err := st.seq(v)
	if err != nil {
		return nil, err
	}
	return &List{Items: append([]Value(nil), items...)}, nil
}

// attrPath resolves "a.b.0" as Jinja2's make_attrgetter does.
func attrPath(v Value, path Value) (Value, error) {
	s, ok := path.(string)
	if !ok {
		return getItem(v, path)
	}
	for _, part := range strings.Split(s, ".") {
		var key Value = part
		if n, err := strconv.ParseInt(part, 10, 64); err == nil {
			key = n
		}
		var err error
		if v, err = getItem(v, key); err != nil {
			return nil, err
		}
	}
	return v, nil
}

func filterJoin(st *state, v Value, args []Value, kw *Dict) (Value, error) {
	sep := strValue(arg(args, kw, 0, "d", ""))
	attr := arg(args, kw, 1, "attribute", nil)
	items, err := st.seq(v)
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	for i, it := range items {
		if attr != nil {
			if it, err = attrPath(it, attr); err != nil {
				return nil, err
			}
		}
		if i > 0 {
			b.WriteString(sep)
		}
		b.WriteString(strValue(it))
		if err := st.checkSize(b.Len()); err != nil {
			return nil, err
		}
	}
	return b.String(), nil
}

func filterMap(st *state, v Value, args []Value, kw *Dict) (Value, error) {
	items, err := st.seq(v)
	if err != nil {
		return nil, err
	}
	out := &List{Items: make([]Value, 0, len(items))}
	if attr := arg(nil, kw, 0, "attribute", nil); attr != nil && len(args) == 0 {
		def := arg(nil, kw, 0, "default", nil)
		_, hasDef := kw.Get("default")
		for _, it := range items {
			x, err := attrPath(it, attr)
			if err != nil {
				return nil, err
			}
			if _, undef := x.(*Undefined); undef && hasDef {
				x = def
			}
			out.Items = append(out.Items, x)
		}
		return newGenerator(out.Items), nil
	}
	if len(args) == 0 {
		return nil, errorf("FilterArgumentError", "map requires a filter argument")
	}
	name, ok := args[0].(string)
	fn, found := filters[name]
	if !ok || !found {
		return nil, errorf("TemplateAssertionError", "no filter named %s", strValue(args[0]))
	}
	for _, it := range items {
		x, err := fn(st, it, args[1:], kw)
		if err != nil {
			return nil, err
		}
		out.Items = append(out.Items, x)
	}
	return newGenerator(out.Items), nil
}

func selectOrReject(st *state, v Value, args []Value, reject, byAttr bool) (Value, error) {
	items, err := st.seq(v)
	if err != nil {
		return nil, err
	}
	var attr Value
	if byAttr {
		if len(args) == 0 {
			return nil, errorf("FilterArgumentError", "missing parameter for attribute name")
		}
		attr, args = args[0], args[1:]
	}
	var test testFunc
	if len(args) > 0 {
		name, _ := args[0].(string)
		t, ok := tests[name]
		if !ok {
			return nil, errorf("TemplateAssertionError", "no test named %s", reprValue(args[0]))
		}
		test, args = t, args[1:]
	}
	out := &List{}
	for _, it := range items {
		x := it
		if byAttr {
			if x, err = attrPath(it, attr); err != nil {
				return nil, err
			}
		}
		var ok bool
		if test == nil {
			ok = truthy(x)
		} else if ok, err = test(st, x, args); err != nil {
			return nil, err
		}
		if ok != reject {
			out.Items = append(out.Items, it)
		}
	}
	return newGenerator(out.Items), nil
}

// filterWordcount counts runs of word characters (Python's \w+).
func filterWordcount(st *state, v Value, args []Value, kw *Dict) (Value, error) {
	n, in := int64(0), false
	for _, r := range strValue(v) {
		w := r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r)
		if w && !in {
			n++
		}
		in = w
	}
	return n, nil
}

func filterFirst(st *state, v Value, args []Value, kw *Dict) (Value, error) {
	if it, ok := v.(*Iterator); ok {
		if it.err != nil {
			return nil, it.err
		}
		if it.pos >= len(it.items) {
			return &Undefined{hint: "No first item, sequence was empty."}, nil
		}
		it.pos++
		return it.items[it.pos-1], nil
	}
	items, err := st.iterate(v)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return &Undefined{hint: "No first item, sequence was empty."}, nil
	}
	return items[0], nil
}

func filterLast(st *state, v Value, args []Value, kw *Dict) (Value, error) {
	switch v.(type) {
	case *Iterator, nil, bool, int64, float64, *Namespace:
		return nil, typeErrorf("'%s' object is not reversible", typeName(v))
	}
	items, err := st.iterate(v)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return &Undefined{hint: "No last item, sequence was empty."}, nil
	}
	return items[len(items)-1], nil
}

func filterDefault(st *state, v Value, args []Value, kw *Dict) (Value, error) {
	def := arg(args, kw, 0, "default_value", "")
	boolean := truthy(arg(args, kw, 1, "boolean", false))
	if _, undef := v.(*Undefined); undef || (boolean && !truthy(v)) {
		return def, nil
	}
	return v, nil
}

// filterTitle is Jinja2's do_title: capitalise each word, where words are
// split at whitespace and the characters -({[<.
func filterTitle(st *state, v Value, args []Value, kw *Dict) (Value, error) {
	s := strValue(v)
	var b strings.Builder
	start := true
	for _, r := range s {
		if unicode.IsSpace(r) || strings.ContainsRune("-({[<", r) {
			b.WriteRune(r)
			start = true
			continue
		}
		if start {
			b.WriteRune(unicode.ToUpper(r))
			start = false
		} else {
			b.WriteRune(unicode.ToLower(r))
		}
	}
	return b.String(), nil
}

func pyCapitalize(s string) string {
	if s == "" {
		return s
	}
	rs := []rune(s)
	out := string(unicode.ToTitle(rs[0]))
	return out + strings.ToLower(string(rs[1:]))
}

func filterReplace(st *state, v Value, args []Value, kw *Dict) (Value, error) {
	s := strValue(v)
	old := strValue(arg(args, kw, 0, "old", ""))
	nw := strValue(arg(args, kw, 1, "new", ""))
	n := -1
	if c, ok := asInt(arg(args, kw, 2, "count", nil)); ok {
		n = int(c)
	}
	return st.replace(s, old, nw, n)
}

func (st *state) replace(s, old, nw string, n int) (Value, error) {
	cnt := strings.Count(s, old)
	if n >= 0 && n < cnt {
		cnt = n
	}
	if err := st.checkSize(len(s) + cnt*(len(nw)-len(old))); err != nil {
		return nil, err
	}
	return strings.Replace(s, old, nw, n), nil
}

func filterEscape(st *state, v Value, args []Value, kw *Dict) (Value, error) {
	r := strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&#34;", "'", "&#39;")
	return r.Replace(strValue(v)), nil
}

func filterInt(st *state, v Value, args []Value, kw *Dict) (Value, error) {
	def := arg(args, kw, 0, "default", int64(0))
	base := int64(10)
	if b, ok := asInt(arg(args, kw, 1, "base", int64(10))); ok {
		base = b
	}
	switch x := v.(type) {
	case *Undefined:
		return nil, x.err()
	case int64:
		return x, nil
	case bool:
		n, _ := asInt(x)
		return n, nil
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return def, nil
		}
		return int64(x), nil
	case string:
		t := strings.ReplaceAll(strings.TrimSpace(x), "_", "")
		if base < 2 || base > 36 {
			return def, nil
		}
		if n, err := strconv.ParseInt(t, int(base), 64); err == nil {
			return n, nil
		}
		if f, err := strconv.ParseFloat(t, 64); err == nil && base == 10 && !math.IsNaN(f) && !math.IsInf(f, 0) {
			return int64(f), nil
		}
	}
	return def, nil
}

func filterFloat(st *state, v Value, args []Value, kw *Dict) (Value, error) {
	def := arg(args, kw, 0, "default", 0.0)
	switch x := v.(type) {
	case *Undefined:
		return nil, x.err()
	case int64:
		return float64(x), nil
	case bool:
		n, _ := asInt(x)
		return float64(n), nil
	case float64:
		return x, nil
	case string:
		if f, err := strconv.ParseFloat(strings.TrimSpace(x), 64); err == nil {
			return f, nil
		}
	}
	return def, nil
}

func filterAbs(st *state, v Value, args []Value, kw *Dict) (Value, error) {
	i, f, isF, ok := number(v)
	if !ok {
		return nil, typeErrorf("bad operand type for abs(): '%s'", typeName(v))
	}
	if isF {
		return math.Abs(f), nil
	}
	if i < 0 {
		return -i, nil
	}
	return i, nil
}

func filterRound(st *state, v Value, args []Value, kw *Dict) (Value, error) {
	prec, _ := asInt(arg(args, kw, 0, "precision", int64(0)))
	method := strValue(arg(args, kw, 1, "method", "common"))
	i, f, isF, ok := number(v)
	if !ok {
		return nil, typeErrorf("type %s doesn't define __round__ method", typeName(v))
	}
	if !isF {
		if method == "common" {
			return i, nil // Python's round(int, n) keeps the int
		}
		f = float64(i)
	}
	p := math.Pow(10, float64(prec))
	switch method {
	case "ceil":
		return math.Ceil(f*p) / p, nil
	case "floor":
		return math.Floor(f*p) / p, nil
	case "common":
		return math.RoundToEven(f*p) / p, nil
	}
	return nil, errorf("FilterArgumentError", "method must be common, ceil or floor")
}

func dictItems(d *Dict) *List {
	out := &List{Items: make([]Value, len(d.keys))}
	for i, k := range d.keys {
		out.Items[i] = Tuple{k, d.vals[i]}
	}
	return out
}

func filterItems(st *state, v Value, args []Value, kw *Dict) (Value, error) {
	switch x := v.(type) {
	case *Undefined:
		return newGenerator(nil), nil
	case *Dict:
		return newGenerator(dictItems(x).Items), st.step(x.Len())
	}
	return nil, typeErrorf("Can only get item pairs from a mapping.")
}

// sortKey lowers strings unless case-sensitive, as Jinja2's ignore_case.
func sortKey(v Value, caseSensitive bool) Value {
	if s, ok := v.(string); ok && !caseSensitive {
		return strings.ToLower(s)
	}
	return v
}

func sortValues(items []Value, key func(Value) (Value, error), reverse bool) error {
	return sortValuesBy(items, key, reverse, false)
}

// sortValuesBy sorts stably by key; listKeys compares keys as Python compares
// one-element lists (equal keys, even two undefined ones, never reach <), as
// Jinja2's attribute sort does.
func sortValuesBy(items []Value, key func(Value) (Value, error), reverse, listKeys bool) error {
	keys := make([]Value, len(items))
	for i, it := range items {
		k, err := key(it)
		if err != nil {
			return err
		}
		keys[i] = k
	}
	idx := make([]int, len(items))
	for i := range idx {
		idx[i] = i
	}
	var serr error
	sort.SliceStable(idx, func(a, b int) bool {
		ka, kb := keys[idx[a]], keys[idx[b]]
		if reverse {
			ka, kb = kb, ka
		}
		if listKeys && equalValues(ka, kb) {
			return false
		}
		lt, err := lessValues(ka, kb)
		if err != nil && serr == nil {
			serr = err
		}
		return lt
	})
	if serr != nil {
		return serr
	}
	sorted := make([]Value, len(items))
	for i, j := range idx {
		sorted[i] = items[j]
	}
	copy(items, sorted)
	return nil
}

func filterDictsort(st *state, v Value, args []Value, kw *Dict) (Value, error) {
	d, ok := v.(*Dict)
	if !ok {
		return nil, typeErrorf("dictsort: mapping expected")
	}
	cs := truthy(arg(args, kw, 0, "case_sensitive", false))
	by := strValue(arg(args, kw, 1, "by", "key"))
	rev := truthy(arg(args, kw, 2, "reverse", false))
	pos := 0
	if by == "value" {
		pos = 1
	} else if by != "key" {
		return nil, errorf("FilterArgumentError", "You can only sort by either \"key\" or \"value\"")
	}
	items := dictItems(d).Items
	err := sortValues(items, func(x Value) (Value, error) { return sortKey(x.(Tuple)[pos], cs), nil }, rev)
	return &List{Items: items}, err
}

func filterSort(st *state, v Value, args []Value, kw *Dict) (Value, error) {
	rev := truthy(arg(args, kw, 0, "reverse", false))
	cs := truthy(arg(args, kw, 1, "case_sensitive", false))
	attr := arg(args, kw, 2, "attribute", nil)
	items, err := st.seq(v)
	if err != nil {
		return nil, err
	}
	items = append([]Value(nil), items...)
	err = sortValuesBy(items, func(x Value) (Value, error) {
		if attr != nil {
			y, err := attrPath(x, attr)
			return sortKey(y, cs), err
		}
		return sortKey(x, cs), nil
	}, rev, attr != nil)
	return &List{Items: items}, err
}

func filterUnique(st *state, v Value, args []Value, kw *Dict) (Value, error) {
	cs := truthy(arg(args, kw, 0, "case_sensitive", false))
	attr := arg(args, kw, 1, "attribute", nil)
	items, err := st.seq(v)
	if err != nil {
		return nil, err
	}
	out := &List{}
	seen := map[any]bool{}
	for _, it := range items {
		k := it
		if attr != nil {
			if k, err = attrPath(it, attr); err != nil {
				return nil, err
			}
		}
		hk := hashKey(sortKey(k, cs))
		if seen[hk] {
			continue
		}
		seen[hk] = true
		out.Items = append(out.Items, it)
	}
	return newGenerator(out.Items), nil
}

// pySplitlines is Python's str.splitlines() without keepends.
func pySplitlines(s string) []string {
	var out []string
	start := 0
	rs := []rune(s)
	for i := 0; i < len(rs); i++ {
		switch rs[i] {
		case '\n', '\r', '\v', '\f', 0x1c, 0x1d, 0x1e, 0x85, 0x2028, 0x2029:
			out = append(out, string(rs[start:i]))
			if rs[i] == '\r' && i+1 < len(rs) && rs[i+1] == '\n' {
				i++
			}
			start = i + 1
		}
	}
	if start < len(rs) {
		out = append(out, string(rs[start:]))
	}
	return out
}

func filterIndent(st *state, v Value, args []Value, kw *Dict) (Value, error) {
	s, ok := v.(string)
	if !ok {
		if u, isU := v.(*Undefined); isU {
			return nil, u.err()
		}
		return nil, typeErrorf("indent: '%s' is not a string", typeName(v)) // Jinja2 fails on s += "\n"
	}
	width := arg(args, kw, 0, "width", int64(4))
	first := truthy(arg(args, kw, 1, "first", false))
	blank := truthy(arg(args, kw, 2, "blank", false))
	var ind string
	switch w := width.(type) {
	case string:
		ind = w
	default:
		n, ok := asInt(w)
		if !ok {
			return nil, typeErrorf("indent: width must be an int or a string")
		}
		ind = strings.Repeat(" ", int(max(0, min(n, 1024))))
	}
	if err := st.checkSize(len(s) + (strings.Count(s, "\n")+1)*len(ind)); err != nil {
		return nil, err
	}
	s += "\n"
	lines := pySplitlines(s)
	var rv string
	if blank {
		rv = strings.Join(lines, "\n"+ind)
	} else {
		rv = lines[0]
		if len(lines) > 1 {
			parts := make([]string, len(lines)-1)
			for i, l := range lines[1:] {
				if l != "" {
					l = ind + l
				}
				parts[i] = l
			}
			rv += "\n" + strings.Join(parts, "\n")
		}
	}
	if first {
		rv = ind + rv
	}
	return rv, st.checkSize(len(rv))
}

func filterReverse(st *state, v Value, args []Value, kw *Dict) (Value, error) {
	if _, ok := v.(*Undefined); ok {
		return &Iterator{kind: "reversed"}, nil
	}
	if s, ok := v.(string); ok {
		rs := []rune(s)
		for i, j := 0, len(rs)-1; i < j; i, j = i+1, j-1 {
			rs[i], rs[j] = rs[j], rs[i]
		}
		return string(rs), nil
	}
	items, err := st.seq(v)
	if err != nil {
		return nil, err
	}
	rev := make([]Value, len(items))
	for i, it := range items {
		rev[len(items)-1-i] = it
	}
	switch v.(type) {
	case *List:
		return &Iterator{kind: "list_reverseiterator", items: rev}, nil
	case Tuple:
		return &Iterator{kind: "reversed", items: rev}, nil
	case *View:
		return &Iterator{kind: "dict_reverseiterator", items: rev}, nil
	case *Dict:
		return &Iterator{kind: "dict_reversekeyiterator", items: rev}, nil
	}
	return &List{Items: rev}, nil
}

func filterSum(st *state, v Value, args []Value, kw *Dict) (Value, error) {
	attr := arg(args, kw, 0, "attribute", nil)
	var total Value = arg(args, kw, 1, "start", int64(0))
	items, err := st.seq(v)
	if err != nil {
		return nil, err
	}
	for _, it := range items {
		if attr != nil {
			if it, err = attrPath(it, attr); err != nil {
				return nil, err
			}
		}
		if total, err = st.add(total, it); err != nil {
			return nil, err
		}
	}
	return total, nil
}

func filterMinMax(st *state, v Value, args []Value, kw *Dict, isMax bool) (Value, error) {
	cs := truthy(arg(args, kw, 0, "case_sensitive", false))
	attr := arg(args, kw, 1, "attribute", nil)
	items, err := st.seq(v)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return &Undefined{hint: "No aggregated item, sequence was empty."}, nil
	}
	best := items[0]
	key := func(x Value) (Value, error) {
		if attr != nil {
			y, err := attrPath(x, attr)
			return sortKey(y, cs), err
		}
		return sortKey(x, cs), nil
	}
	bk, err := key(best)
	if err != nil {
		return nil, err
	}
	for _, it := range items[1:] {
		k, err := key(it)
		if err != nil {
			return nil, err
		}
		var better bool
		if isMax {
			better, err = lessValues(bk, k)
		} else {
			better, err = lessValues(k, bk)
		}
		if err != nil {
			return nil, err
		}
		if better {
			best, bk = it, k
		}
	}
	return best, nil
}

func filterAttr(st *state, v Value, args []Value, kw *Dict) (Value, error) {
	return getAttr(v, strValue(arg(args, kw, 0, "name", "")))
}

func filterFormat(st *state, v Value, args []Value, kw *Dict) (Value, error) {
	if kw != nil && kw.Len() > 0 {
		return st.percentFormat(strValue(v), kw)
	}
	return st.percentFormat(strValue(v), Tuple(args))
}

func filterCenter(st *state, v Value, args []Value, kw *Dict) (Value, error) {
	w, _ := asInt(arg(args, kw, 0, "width", int64(80)))
	return pyPad(strValue(v), int(min(w, 4096)), ' ', '^'), nil
}

func filterBatch(st *state, v Value, args []Value, kw *Dict) (Value, error) {
	n, ok := asInt(arg(args, kw, 0, "linecount", nil))
	if !ok || n <= 0 || n > maxRange {
		return nil, errorf("FilterArgumentError", "batch: linecount must be a positive int up to %d", maxRange)
	}
	fill := arg(args, kw, 1, "fill_with", nil)
	_, hasFill := kwOrArg(args, kw, 1, "fill_with")
	items, err := st.seq(v)
	if err != nil {
		return nil, err
	}
	out := &List{}
	for i := 0; i < len(items); i += int(n) {
		end := min(i+int(n), len(items))
		row := &List{Items: append([]Value(nil), items[i:end]...)}
		for hasFill && len(row.Items) < int(n) {
			row.Items = append(row.Items, fill)
		}
		out.Items = append(out.Items, row)
	}
	return newGenerator(out.Items), nil
}

func kwOrArg(args []Value, kw *Dict, i int, name string) (Value, bool) {
	if i < len(args) {
		return args[i], true
	}
	if kw != nil {
		return kw.Get(name)
	}
	return nil, false
}

func filterTruncate(st *state, v Value, args []Value, kw *Dict) (Value, error) {
	s, isStr := v.(string)
	if !isStr {
		// Jinja2 measures len() of whatever it gets and returns a short
		// enough sequence unchanged.
		l, err := length(v)
		if err != nil {
			return nil, err
		}
		n, _ := asInt(arg(args, kw, 0, "length", int64(255)))
		leeway, _ := asInt(arg(args, kw, 3, "leeway", int64(5)))
		if int64(l) <= n+leeway {
			return v, nil
		}
		return nil, typeErrorf("cannot truncate a %s", typeName(v))
	}
	n, _ := asInt(arg(args, kw, 0, "length", int64(255)))
	killwords := truthy(arg(args, kw, 1, "killwords", false))
	end := strValue(arg(args, kw, 2, "end", "..."))
	leeway, _ := asInt(arg(args, kw, 3, "leeway", int64(5)))
	rs := []rune(s)
	if int64(len(rs)) <= n+leeway {
		return s, nil
	}
	cut := int(max(0, n-int64(len([]rune(end)))))
	if cut > len(rs) {
		cut = len(rs)
	}
	if killwords {
		return string(rs[:cut]) + end, nil
	}
	head := string(rs[:cut])
	if i := strings.LastIndex(head, " "); i >= 0 {
		head = head[:i]
	}
	return head + end, nil
}
