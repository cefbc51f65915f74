package chattemplate

import (
	"slices"
	"strings"
	"unicode"

	"golang.org/x/text/cases"
)

// Python str, dict and list methods as templates call them
// (message.content.split('</think>'), tool.get('x')). Methods that mutate
// a list or dict are refused, as jinja2's ImmutableSandboxedEnvironment
// (which transformers renders chat templates in) refuses them.

func (st *state) callMethod(m *boundMethod, args []Value, kw *Dict) (Value, error) {
	if err := st.step(1); err != nil {
		return nil, err
	}
	switch r := m.recv.(type) {
	case string:
		return st.strMethod(r, m.name, args, kw)
	case *Dict:
		return st.dictMethod(r, m.name, args, kw)
	case *List:
		return st.seqMethod(r.Items, m.name, args)
	case Tuple:
		return st.seqMethod(r, m.name, args)
	case *loopObj:
		return r.call(m.name, args)
	case *cycler:
		return r.call(m.name, args)
	case *joiner:
		if r.used {
			return r.sep, nil
		}
		r.used = true
		return "", nil
	}
	return nil, typeErrorf("'%s' object is not callable", typeName(m.recv))
}

func unsafeMutation(obj Value, name string) error {
	return errorf("SecurityError", "access to attribute '%s' of '%s' object is unsafe.", name, typeName(obj))
}

func (st *state) dictMethod(d *Dict, name string, args []Value, kw *Dict) (Value, error) {
	switch name {
	case "get":
		if len(args) == 0 {
			return nil, typeErrorf("get expected at least 1 argument, got 0")
		}
		if v, ok := d.Get(args[0]); ok {
			return v, nil
		}
		if len(args) > 1 {
			return args[1], nil
		}
		return nil, nil
	case "items":
		return &View{kind: "dict_items", items: dictItems(d).Items}, st.step(d.Len())
	case "keys":
		return &View{kind: "dict_keys", items: append([]Value(nil), d.keys...)}, st.step(d.Len())
	case "values":
		return &View{kind: "dict_values", items: append([]Value(nil), d.vals...)}, st.step(d.Len())
	case "copy":
		return d.Copy(), st.step(d.Len())
	}
	return nil, unsafeMutation(d, name)
}

func (st *state) seqMethod(items []Value, name string, args []Value) (Value, error) {
	switch name {
	case "index":
		if len(args) == 0 {
			return nil, typeErrorf("index expected at least 1 argument")
		}
		for i, it := range items {
			if equalValues(it, args[0]) {
				return int64(i), nil
			}
		}
		return nil, errorf("ValueError", "%s is not in list", reprValue(args[0]))
	case "count":
		if len(args) != 1 {
			return nil, typeErrorf("list.count() takes exactly one argument (%d given)", len(args))
		}
		n := int64(0)
		for _, it := range items {
			if equalValues(it, args[0]) {
				n++
			}
		}
		return n, nil
	case "copy":
		return &List{Items: append([]Value(nil), items...)}, nil
	}
	return nil, unsafeMutation(&List{}, name)
}

func strArg(args []Value, i int, method string) (string, error) {
	if i >= len(args) {
		return "", typeErrorf("%s() missing argument", method)
	}
	s, ok := args[i].(string)
	if !ok {
		return "", typeErrorf("%s() argument must be str, not %s", method, typeName(args[i]))
	}
	return s, nil
}

func optInt(args []Value, i int, def int64) (int64, error) {
	if i >= len(args) || args[i] == nil {
		return def, nil
	}
	n, ok := asInt(args[i])
	if !ok {
		return 0, typeErrorf("'%s' object cannot be interpreted as an integer", typeName(args[i]))
	}
	return n, nil
}

// prefixes accepts a str or a tuple of str, as startswith does.
// They are appended to dst (a caller's small array keeps the common single
// prefix off the heap).
func prefixes(dst []string, v Value, method string) ([]string, error) {
	switch x := v.(type) {
	case string:
		return append(dst, x), nil
	case Tuple:
		out := slices.Grow(dst, len(x))
		for _, it := range x {
			s, ok := it.(string)
			if !ok {
				return nil, typeErrorf("tuple for %s must only contain str", method)
			}
			out = append(out, s)
		}
		return out, nil
	}
	return nil, typeErrorf("%s first arg must be str or a tuple of str, not %s", method, typeName(v))
}

// runeSlice applies optional start/end (in code points) to s.
func runeSlice(s string, args []Value) (string, error) {
	if len(args) == 0 {
		return s, nil
	}
	var end Value
	if len(args) > 1 {
		end = args[1]
	}
	v, err := sliceValue(s, args[0], end, nil)
	if err != nil {
		return "", err
	}
	return v.(string), nil
}

func (st *state) strMethod(s, name string, args []Value, kw *Dict) (Value, error) {
	argOr := func(i int, kwName string) Value { return arg(args, kw, i, kwName, nil) }
	switch name {
	case "strip":
		return pyStrip(s, argOr(0, "chars"), true, true)
	case "lstrip":
		return pyStrip(s, argOr(0, "chars"), true, false)
	case "rstrip":
		return pyStrip(s, argOr(0, "chars"), false, true)
	case "upper":
		return pyUpper(s), nil
	case "lower":
		return pyLower(s), nil
	case "casefold":
		return cases.Fold().String(s), nil
	case "title":
		return pyTitle(s), nil
	case "capitalize":
		return pyCapitalize(s), nil
	case "swapcase":
		return strings.Map(func(r rune) rune {
			if unicode.IsUpper(r) {
				return unicode.ToLower(r)
			}
			return unicode.ToUpper(r)
		}, s), nil
	case "split", "rsplit":
		sep := argOr(0, "sep")
		maxsplit := int64(-1)
		if v := argOr(1, "maxsplit"); v != nil {
			n, ok := asInt(v)
			if !ok {
				return nil, typeErrorf("maxsplit must be an integer")
			}
			maxsplit = n
		}
		parts, err := pySplit(s, sep, int(max(-1, min(maxsplit, 1<<30))), name == "rsplit")
		if err != nil {
			return nil, err
		}
		out := &List{Items: make([]Value, len(parts))}
		for i, p := range parts {
			out.Items[i] = p
		}
		return out, st.step(len(parts))
	case "splitlines":
		parts := pySplitlines(s)
		out := &List{Items: make([]Value, len(parts))}
		for i, p := range parts {
			out.Items[i] = p
		}
		return out, nil
	case "startswith", "endswith":
		if len(args) == 0 {
			return nil, typeErrorf("%s() takes at least 1 argument (0 given)", name)
		}
		var one [1]string
		ps, err := prefixes(one[:0], args[0], name)
		if err != nil {
			return nil, err
		}
		sub, err := runeSlice(s, args[1:])
		if err != nil {
			return nil, err
		}
		for _, p := range ps {
			if name == "startswith" && strings.HasPrefix(sub, p) || name == "endswith" && strings.HasSuffix(sub, p) {
				return true, nil
			}
		}
		return false, nil
	case "replace":
		old, err := strArg(args, 0, name)
		if err != nil {
			return nil, err
		}
		nw, err := strArg(args, 1, name)
		if err != nil {
			return nil, err
		}
		n, err := optInt(args, 2, -1)
		if err != nil {
			return nil, err
		}
		if n < 0 {
			n = -1
		}
		return st.replace(s, old, nw, int(min(n, 1<<30)))
	case "count":
		sub, err := strArg(args, 0, name)
		if err != nil {
			return nil, err
		}
		hay, err := runeSlice(s, args[1:])
		if err != nil {
			return nil, err
		}
		if sub == "" {
			return int64(len([]rune(hay)) + 1), nil
		}
		return int64(strings.Count(hay, sub)), nil
	case "find", "rfind", "index", "rindex":
		sub, err := strArg(args, 0, name)
		if err != nil {
			return nil, err
		}
		start, err := optInt(args, 1, 0)
		if err != nil {
			return nil, err
		}
		rs := []rune(s)
		if start < 0 {
			start = max(0, start+int64(len(rs)))
		}
		end, err := optInt(args, 2, int64(len(rs)))
		if err != nil {
			return nil, err
		}
		if end < 0 {
			end = max(0, end+int64(len(rs)))
		}
		end = min(end, int64(len(rs)))
		pos := int64(-1)
		if start <= end {
			hay := string(rs[start:end])
			var bi int
			if name == "find" || name == "index" {
				bi = strings.Index(hay, sub)
			} else {
				bi = strings.LastIndex(hay, sub)
			}
			if bi >= 0 {
				pos = start + int64(len([]rune(hay[:bi])))
			}
		}
		if pos < 0 && (name == "index" || name == "rindex") {
			return nil, errorf("ValueError", "substring not found")
		}
		return pos, nil
	case "join":
		if len(args) != 1 {
			return nil, typeErrorf("join() takes exactly one argument")
		}
		items, err := st.seq(args[0])
		if err != nil {
			return nil, err
		}
		parts := make([]string, len(items))
		for i, it := range items {
			p, ok := it.(string)
			if !ok {
				return nil, typeErrorf("sequence item %d: expected str instance, %s found", i, typeName(it))
			}
			parts[i] = p
		}
		out := strings.Join(parts, s)
		return out, st.checkSize(len(out))
	case "format":
		return st.strFormat(s, args, kw)
	case "format_map":
		if len(args) != 1 {
			return nil, typeErrorf("format_map() takes exactly one argument")
		}
		d, ok := args[0].(*Dict)
		if !ok {
			return nil, typeErrorf("format_map() argument must be a mapping")
		}
		return st.strFormat(s, nil, d)
	case "isdigit", "isnumeric", "isdecimal":
		return s != "" && allRunes(s, unicode.IsDigit), nil
	case "isalpha":
		return s != "" && allRunes(s, unicode.IsLetter), nil
	case "isalnum":
		return s != "" && allRunes(s, func(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }), nil
	case "isspace":
		return s != "" && allRunes(s, unicode.IsSpace), nil
	case "islower":
		return pyIsLower(s), nil
	case "isupper":
		return pyIsUpper(s), nil
	case "istitle":
		return s != "" && pyTitle(s) == s && strings.ToLower(s) != s, nil
	case "isidentifier":
		if s == "" {
			return false, nil
		}
		for i, r := range s {
			if !(r == '_' || unicode.IsLetter(r) || i > 0 && unicode.IsDigit(r)) {
				return false, nil
			}
		}
		return true, nil
	case "zfill":
		w, err := optInt(args, 0, 0)
		if err != nil {
			return nil, err
		}
		rs := []rune(s)
		if int(w) <= len(rs) {
			return s, nil
		}
		pad := strings.Repeat("0", int(min(w, 4096))-len(rs))
		if len(rs) > 0 && (rs[0] == '-' || rs[0] == '+') {
			return string(rs[0]) + pad + string(rs[1:]), nil
		}
		return pad + s, nil
	case "center", "ljust", "rjust":
		w, err := optInt(args, 0, 0)
		if err != nil {
			return nil, err
		}
		fill := ' '
		if len(args) > 1 {
			f, ok := args[1].(string)
			if !ok || len([]rune(f)) != 1 {
				return nil, typeErrorf("The fill character must be exactly one character long")
			}
			fill = []rune(f)[0]
		}
		align := map[string]rune{"center": '^', "ljust": '<', "rjust": '>'}[name]
		return pyPad(s, int(min(w, 4096)), fill, align), nil
	case "partition", "rpartition":
		sep, err := strArg(args, 0, name)
		if err != nil {
			return nil, err
		}
		if sep == "" {
			return nil, errorf("ValueError", "empty separator")
		}
		var i int
		if name == "partition" {
			i = strings.Index(s, sep)
		} else {
			i = strings.LastIndex(s, sep)
		}
		if i < 0 {
			if name == "partition" {
				return Tuple{s, "", ""}, nil
			}
			return Tuple{"", "", s}, nil
		}
		return Tuple{s[:i], sep, s[i+len(sep):]}, nil
	case "removeprefix":
		p, err := strArg(args, 0, name)
		if err != nil {
			return nil, err
		}
		return strings.TrimPrefix(s, p), nil
	case "removesuffix":
		p, err := strArg(args, 0, name)
		if err != nil {
			return nil, err
		}
		return strings.TrimSuffix(s, p), nil
	case "expandtabs":
		return strings.ReplaceAll(s, "\t", "        "), nil
	case "encode":
		return nil, typeErrorf("bytes are not supported")
	}
	return nil, errorf("UndefinedError", "'str object' has no attribute '%s'", name)
}

func allRunes(s string, f func(rune) bool) bool {
	for _, r := range s {
		if !f(r) {
			return false
		}
	}
	return true
}

func pyIsLower(s string) bool {
	cased := false
	for _, r := range s {
		if unicode.IsUpper(r) || unicode.IsTitle(r) {
			return false
		}
		if unicode.IsLower(r) {
			cased = true
		}
	}
	return cased
}

func pyIsUpper(s string) bool {
	cased := false
	for _, r := range s {
		if unicode.IsLower(r) || unicode.IsTitle(r) {
			return false
		}
		if unicode.IsUpper(r) {
			cased = true
		}
	}
	return cased
}

// pyTitle is Python's str.title: a letter after a cased letter is lowered,
// any other letter is title-cased.
func pyTitle(s string) string {
	var b strings.Builder
	prevCased := false
	for _, r := range s {
		isCased := unicode.IsUpper(r) || unicode.IsLower(r) || unicode.IsTitle(r)
		switch {
		case !isCased:
			b.WriteRune(r)
		case prevCased:
			b.WriteRune(unicode.ToLower(r))
		default:
			b.WriteRune(unicode.ToTitle(r))
		}
		prevCased = isCased
	}
	return b.String()
}

// pySplit is Python's str.split / str.rsplit.
func pySplit(s string, sep Value, maxsplit int, fromRight bool) ([]string, error) {
	if sep == nil {
		fields := strings.FieldsFunc(s, unicode.IsSpace)
		if maxsplit < 0 || maxsplit >= len(fields)-1 || len(fields) == 0 {
			return fields, nil
		}
		// Keep the unsplit remainder as Python does, with its inner spacing.
		if !fromRight {
			rest := s
			var out []string
			for range maxsplit {
				rest = strings.TrimLeftFunc(rest, unicode.IsSpace)
				i := strings.IndexFunc(rest, unicode.IsSpace)
				out = append(out, rest[:i])
				rest = rest[i:]
			}
			return append(out, strings.TrimLeftFunc(rest, unicode.IsSpace)), nil
		}
		rest := s
		var out []string
		for range maxsplit {
			rest = strings.TrimRightFunc(rest, unicode.IsSpace)
			i := strings.LastIndexFunc(rest, unicode.IsSpace)
			out = append([]string{rest[i+1:]}, out...)
			rest = rest[:i+1]
		}
		return append([]string{strings.TrimRightFunc(rest, unicode.IsSpace)}, out...), nil
	}
	sp, ok := sep.(string)
	if !ok {
		return nil, typeErrorf("must be str or None, not %s", typeName(sep))
	}
	if sp == "" {
		return nil, errorf("ValueError", "empty separator")
	}
	if maxsplit < 0 {
		return strings.Split(s, sp), nil
	}
	if !fromRight {
		return strings.SplitN(s, sp, maxsplit+1), nil
	}
	var out []string
	rest := s
	for range maxsplit {
		i := strings.LastIndex(rest, sp)
		if i < 0 {
			break
		}
		out = append([]string{rest[i+len(sp):]}, out...)
		rest = rest[:i]
	}
	return append([]string{rest}, out...), nil
}

// pyPad aligns s in a field of width runes ('<', '>' or '^', as format does).
func pyPad(s string, width int, fill rune, align rune) string {
	n := len([]rune(s))
	if width <= n {
		return s
	}
	pad := width - n
	f := string(fill)
	switch align {
	case '<':
		return s + strings.Repeat(f, pad)
	case '>':
		return strings.Repeat(f, pad) + s
	default:
		left := pad / 2
		if pad%2 == 1 && width%2 == 1 {
			left++
		}
		return strings.Repeat(f, left) + s + strings.Repeat(f, pad-left)
	}
}
