package chattemplate

import (
	"math"
	"strings"
	"unicode/utf8"
)

// Python operator semantics for template values.

// boundMethod is a method looked up on a str, list or dict (msg.get, s.strip).
type boundMethod struct {
	recv Value
	name string
}

var strMethods = map[string]bool{
	"strip": true, "lstrip": true, "rstrip": true, "split": true, "rsplit": true,
	"startswith": true, "endswith": true, "replace": true, "count": true, "find": true,
	"rfind": true, "index": true, "rindex": true, "format": true, "upper": true, "lower": true,
	"title": true, "capitalize": true, "join": true, "isdigit": true, "isalpha": true,
	"isalnum": true, "isspace": true, "isupper": true, "islower": true, "isnumeric": true,
	"isdecimal": true, "istitle": true, "isidentifier": true, "zfill": true, "center": true,
	"ljust": true, "rjust": true, "splitlines": true, "partition": true, "rpartition": true,
	"swapcase": true, "casefold": true, "removeprefix": true, "removesuffix": true,
	"expandtabs": true, "encode": true, "format_map": true,
}

var dictMethods = map[string]bool{
	"get": true, "items": true, "keys": true, "values": true, "copy": true,
	"pop": true, "update": true, "setdefault": true, "clear": true, "popitem": true,
}

var listMethods = map[string]bool{
	"index": true, "count": true, "copy": true,
	"append": true, "extend": true, "insert": true, "pop": true, "remove": true,
	"sort": true, "reverse": true, "clear": true,
}

// getAttr is Jinja2's environment.getattr: the Python attribute first, then
// the item of that name.
func getAttr(obj Value, name string) (Value, error) {
	return getAttrOf(obj, name, methodsNamed(name))
}

// getAttrOf is getAttr with the types having a method called name known
// (methodsNamed(name)).
func getAttrOf(obj Value, name string, methods methodSet) (Value, error) {
	if methods.of(obj) {
		return &boundMethod{recv: obj, name: name}, nil
	}
	switch x := obj.(type) {
	case *Dict:
		if v, ok := x.getStr(name); ok {
			return v, nil
		}
	case *Namespace:
		if v, ok := x.attrs.getStr(name); ok {
			return v, nil
		}
	case *loopObj:
		return x.attr(name), nil
	case *cycler:
		return x.attr(name), nil
	case *Undefined:
		return nil, x.err()
	case float64:
		if name == "real" {
			return x, nil
		}
		if name == "imag" {
			return 0.0, nil
		}
	case int64:
		if name == "real" {
			return x, nil
		}
		if name == "imag" {
			return int64(0), nil
		}
	}
	return undefinedAttr(obj, name), nil
}

// methodSet says which types have a method of a given name: the answer of
// the method tables for one attribute name, looked up once when an
// attribute expression is parsed rather than at every evaluation.
type methodSet uint8

const (
	dictMethod methodSet = 1 << iota
	strMethod
	listMethod
	tupleMethod
)

// methodsNamed returns the types that have a method called name.
func methodsNamed(name string) methodSet {
	var m methodSet
	if dictMethods[name] {
		m |= dictMethod
	}
	if strMethods[name] {
		m |= strMethod
	}
	if listMethods[name] {
		m |= listMethod
	}
	if name == "index" || name == "count" {
		m |= tupleMethod
	}
	return m
}

// of reports whether obj's type is one of m's.
func (m methodSet) of(obj Value) bool {
	if m == 0 {
		return false
	}
	switch obj.(type) {
	case *Dict:
		return m&dictMethod != 0
	case string:
		return m&strMethod != 0
	case *List:
		return m&listMethod != 0
	case Tuple:
		return m&tupleMethod != 0
	}
	return false
}

// getItem is Jinja2's environment.getitem: obj[key], then for a string key
// the attribute of that name; a miss is undefined.
func getItem(obj Value, key Value) (Value, error) {
	switch x := obj.(type) {
	case *Undefined:
		return nil, x.err()
	case *Dict:
		if v, ok := x.Get(key); ok {
			return v, nil
		}
	case *List:
		if i, ok := intIndex(key, len(x.Items)); ok {
			return x.Items[i], nil
		}
	case Tuple:
		if i, ok := intIndex(key, len(x)); ok {
			return x[i], nil
		}
	case string:
		if _, isInt := asInt(key); isInt {
			if isASCII(x) {
				if i, ok := intIndex(key, len(x)); ok {
					return x[i : i+1], nil
				}
			} else if i, ok := intIndex(key, utf8.RuneCountInString(x)); ok {
				for _, r := range x {
					if i == 0 {
						return string(r), nil
					}
					i--
				}
			}
		}
	case *loopObj:
		if s, ok := key.(string); ok {
			return x.attr(s), nil
		}
	}
	if s, ok := key.(string); ok {
		if _, isDict := obj.(*Dict); !isDict {
			return getAttr(obj, s)
		}
		if dictMethods[s] {
			return &boundMethod{recv: obj, name: s}, nil
		}
	}
	return undefinedAttr(obj, key), nil
}

func asInt(v Value) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case bool:
		if x {
			return 1, true
		}
		return 0, true
	}
	return 0, false
}

func intIndex(key Value, n int) (int, bool) {
	i, ok := asInt(key)
	if !ok {
		return 0, false
	}
	if i < 0 {
		i += int64(n)
	}
	if i < 0 || i >= int64(n) {
		return 0, false
	}
	return int(i), true
}

// sliceIndices is Python's slice.indices(n).
func sliceIndices(start, stop, step Value, n int) (int, int, int, error) {
	st := 1
	if step != nil {
		s, ok := asInt(step)
		if !ok {
			return 0, 0, 0, typeErrorf("slice indices must be integers or None")
		}
		if s == 0 {
			return 0, 0, 0, errorf("ValueError", "slice step cannot be zero")
		}
		st = int(max(min(s, math.MaxInt32), math.MinInt32))
	}
	conv := func(v Value, def int, lo, hi int) (int, error) {
		if v == nil {
			return def, nil
		}
		i, ok := asInt(v)
		if !ok {
			return 0, typeErrorf("slice indices must be integers or None")
		}
		if i < 0 {
			i += int64(n)
			if i < int64(lo) {
				return lo, nil
			}
		}
		if i > int64(hi) {
			return hi, nil
		}
		if i < int64(lo) {
			return lo, nil
		}
		return int(i), nil
	}
	var a, b int
	var err error
	if st > 0 {
		if a, err = conv(start, 0, 0, n); err != nil {
			return 0, 0, 0, err
		}
		if b, err = conv(stop, n, 0, n); err != nil {
			return 0, 0, 0, err
		}
	} else {
		if a, err = conv(start, n-1, -1, n-1); err != nil {
			return 0, 0, 0, err
		}
		if b, err = conv(stop, -1, -1, n-1); err != nil {
			return 0, 0, 0, err
		}
	}
	return a, b, st, nil
}

// sliceLen is how many indices a, a+step, a+2*step, ... lie before b
// (past it, for a negative step): the length of Python's x[a:b:step] once
// sliceIndices has resolved a and b.
func sliceLen(a, b, step int) int {
	if step > 0 {
		if b <= a {
			return 0
		}
		return (b - a + step - 1) / step
	}
	if a <= b {
		return 0
	}
	return (a - b - step - 1) / -step
}

func sliceValue(obj, start, stop, step Value) (Value, error) {
	switch x := obj.(type) {
	case *Undefined:
		return nil, x.err()
	case *List:
		a, b, s, err := sliceIndices(start, stop, step, len(x.Items))
		if err != nil {
			return nil, err
		}
		out := newListLen(sliceLen(a, b, s))
		for k, i := 0, a; k < len(out.Items); k, i = k+1, i+s {
			out.Items[k] = x.Items[i]
		}
		return out, nil
	case Tuple:
		a, b, s, err := sliceIndices(start, stop, step, len(x))
		if err != nil {
			return nil, err
		}
		out := make(Tuple, sliceLen(a, b, s))
		for k, i := 0, a; k < len(out); k, i = k+1, i+s {
			out[k] = x[i]
		}
		return out, nil
	case string:
		ascii := isASCII(x)
		n := len(x)
		var rs []rune
		if !ascii {
			rs = []rune(x)
			n = len(rs)
		}
		a, b, s, err := sliceIndices(start, stop, step, n)
		if err != nil {
			return nil, err
		}
		if s == 1 {
			if b <= a {
				return "", nil
			}
			if ascii {
				return x[a:b], nil
			}
			return string(rs[a:b]), nil
		}
		var sb strings.Builder
		for k, i, m := 0, a, sliceLen(a, b, s); k < m; k, i = k+1, i+s {
			if ascii {
				sb.WriteByte(x[i])
			} else {
				sb.WriteRune(rs[i])
			}
		}
		return sb.String(), nil
	case *Dict:
		return nil, typeErrorf("unhashable type: 'slice'")
	}
	// Jinja2 compiles slices to a plain Python subscript, not getitem, so a
	// bad slice raises instead of becoming undefined.
	return nil, typeErrorf("'%s' object is not subscriptable", typeName(obj))
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// number returns v as int64 or float64 for arithmetic (bool counts as int).
func number(v Value) (int64, float64, bool, bool) {
	switch x := v.(type) {
	case bool:
		if x {
			return 1, 0, false, true
		}
		return 0, 0, false, true
	case int64:
		return x, 0, false, true
	case float64:
		return 0, x, true, true
	}
	return 0, 0, false, false
}

func opTypeError(op string, l, r Value) error {
	if _, ok := l.(*Undefined); ok {
		return l.(*Undefined).err()
	}
	if _, ok := r.(*Undefined); ok {
		return r.(*Undefined).err()
	}
	if op == "+" {
		if _, ok := l.(string); ok {
			return typeErrorf(`can only concatenate str (not "%s") to str`, typeName(r))
		}
		if _, ok := l.(*List); ok {
			return typeErrorf(`can only concatenate list (not "%s") to list`, typeName(r))
		}
	}
	return typeErrorf("unsupported operand type(s) for %s: '%s' and '%s'", op, typeName(l), typeName(r))
}

func (st *state) add(l, r Value) (Value, error) {
	switch x := l.(type) {
	case string:
		if y, ok := r.(string); ok {
			if err := st.checkSize(len(x) + len(y)); err != nil {
				return nil, err
			}
			return x + y, nil
		}
	case *List:
		if y, ok := r.(*List); ok {
			if err := st.step(len(x.Items) + len(y.Items)); err != nil {
				return nil, err
			}
			items := make([]Value, 0, len(x.Items)+len(y.Items))
			items = append(items, x.Items...)
			return &List{Items: append(items, y.Items...)}, nil
		}
	case Tuple:
		if y, ok := r.(Tuple); ok {
			if err := st.step(len(x) + len(y)); err != nil {
				return nil, err
			}
			out := append(Tuple{}, x...)
			return append(out, y...), nil
		}
	}
	return arith("+", l, r)
}

func (st *state) mul(l, r Value) (Value, error) {
	rep := func(n int64, size int) (int, error) {
		if n <= 0 || size == 0 {
			return 0, nil
		}
		if size > 0 && n > int64(st.maxBytes/size+1) {
			return 0, errorf("LimitError", "repetition result exceeds the %d byte limit", st.maxBytes)
		}
		if err := st.checkSize(int(n) * size); err != nil {
			return 0, err
		}
		return int(n), nil
	}
	if _, isInt := asInt(l); isInt {
		switch r.(type) {
		case string, *List:
			l, r = r, l
		}
	}
	switch x := l.(type) {
	case string:
		if n, ok := asInt(r); ok {
			k, err := rep(n, len(x))
			if err != nil {
				return nil, err
			}
			return strings.Repeat(x, k), nil
		}
	case *List:
		if n, ok := asInt(r); ok {
			k, err := rep(n, 16*len(x.Items))
			if err != nil {
				return nil, err
			}
			if err := st.step(k * len(x.Items)); err != nil {
				return nil, err
			}
			out := &List{}
			for range k {
				out.Items = append(out.Items, x.Items...)
			}
			return out, nil
		}
	}
	return arith("*", l, r)
}

func floorDivInt(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

func arith(op string, l, r Value) (Value, error) {
	li, lf, lFloat, lok := number(l)
	ri, rf, rFloat, rok := number(r)
	if !lok || !rok {
		return nil, opTypeError(op, l, r)
	}
	if !lFloat && !rFloat {
		switch op {
		case "+":
			s := li + ri
			if (s > li) == (ri > 0) {
				return s, nil
			}
			return float64(li) + float64(ri), nil
		case "-":
			s := li - ri
			if (s < li) == (ri > 0) {
				return s, nil
			}
			return float64(li) - float64(ri), nil
		case "*":
			if li == 0 || ri == 0 {
				return int64(0), nil
			}
			p := li * ri
			if p/ri == li && !(li == -1 && ri == math.MinInt64) && !(ri == -1 && li == math.MinInt64) {
				return p, nil
			}
			return float64(li) * float64(ri), nil
		case "/":
			if ri == 0 {
				return nil, errorf("ZeroDivisionError", "division by zero")
			}
			return float64(li) / float64(ri), nil
		case "//":
			if ri == 0 {
				return nil, errorf("ZeroDivisionError", "integer division or modulo by zero")
			}
			if li == math.MinInt64 && ri == -1 {
				return -float64(li), nil
			}
			return floorDivInt(li, ri), nil
		case "%":
			if ri == 0 {
				return nil, errorf("ZeroDivisionError", "integer modulo by zero")
			}
			if ri == -1 {
				return int64(0), nil
			}
			m := li % ri
			if m != 0 && (m < 0) != (ri < 0) {
				m += ri
			}
			return m, nil
		case "**":
			if ri < 0 {
				return math.Pow(float64(li), float64(ri)), nil
			}
			res, base, e := int64(1), li, ri
			for e > 0 {
				var ok bool
				if e&1 == 1 {
					if res, ok = mulInt(res, base); !ok {
						return math.Pow(float64(li), float64(ri)), nil
					}
				}
				e >>= 1
				if e > 0 {
					if base, ok = mulInt(base, base); !ok {
						return math.Pow(float64(li), float64(ri)), nil
					}
				}
			}
			return res, nil
		}
	}
	a, b := lf, rf
	if !lFloat {
		a = float64(li)
	}
	if !rFloat {
		b = float64(ri)
	}
	switch op {
	case "+":
		return a + b, nil
	case "-":
		return a - b, nil
	case "*":
		return a * b, nil
	case "/":
		if b == 0 {
			return nil, errorf("ZeroDivisionError", "float division by zero")
		}
		return a / b, nil
	case "//":
		if b == 0 {
			return nil, errorf("ZeroDivisionError", "float floor division by zero")
		}
		return math.Floor(a / b), nil
	case "%":
		if b == 0 {
			return nil, errorf("ZeroDivisionError", "float modulo")
		}
		m := math.Mod(a, b)
		if m != 0 && (m < 0) != (b < 0) {
			m += b
		}
		return m, nil
	case "**":
		return math.Pow(a, b), nil
	}
	return nil, opTypeError(op, l, r)
}

func mulInt(a, b int64) (int64, bool) {
	if a == 0 || b == 0 {
		return 0, true
	}
	p := a * b
	if p/b != a || (a == -1 && b == math.MinInt64) || (b == -1 && a == math.MinInt64) {
		return 0, false
	}
	return p, true
}

func negate(v Value) (Value, error) {
	i, f, isF, ok := number(v)
	if !ok {
		if u, isU := v.(*Undefined); isU {
			return nil, u.err()
		}
		return nil, typeErrorf("bad operand type for unary -: '%s'", typeName(v))
	}
	if isF {
		return -f, nil
	}
	return -i, nil
}

func positive(v Value) (Value, error) {
	i, f, isF, ok := number(v)
	if !ok {
		if u, isU := v.(*Undefined); isU {
			return nil, u.err()
		}
		return nil, typeErrorf("bad operand type for unary +: '%s'", typeName(v))
	}
	if isF {
		return f, nil
	}
	return i, nil
}

// equalValues is Python's ==. Containers compare by identity first, as
// Python does, and a comparison visits at most a million nodes (values built
// by templates can share sub-values, so a naive walk could be exponential).
func equalValues(a, b Value) bool {
	budget := 1_000_000
	return equalBudget(a, b, &budget)
}

func equalBudget(a, b Value, budget *int) bool {
	*budget--
	if *budget < 0 {
		return false
	}
	if ai, af, aF, ok := number(a); ok {
		bi, bf, bF, ok := number(b)
		if !ok {
			return false
		}
		switch {
		case !aF && !bF:
			return ai == bi
		case aF && bF:
			return af == bf
		case aF:
			return af == float64(bi)
		default:
			return float64(ai) == bf
		}
	}
	switch x := a.(type) {
	case nil:
		return b == nil
	case string:
		y, ok := b.(string)
		return ok && x == y
	case *List:
		y, ok := b.(*List)
		if !ok {
			return false
		}
		return x == y || equalSlices(x.Items, y.Items, budget)
	case Tuple:
		y, ok := b.(Tuple)
		return ok && equalSlices(x, y, budget)
	case *Dict:
		y, ok := b.(*Dict)
		if !ok || x.Len() != y.Len() {
			return false
		}
		if x == y {
			return true
		}
		for i, k := range x.keys {
			v, ok := y.Get(k)
			if !ok || !equalBudget(x.vals[i], v, budget) {
				return false
			}
		}
		return true
	case *Undefined:
		_, ok := b.(*Undefined)
		return ok
	case *View:
		y, ok := b.(*View)
		if !ok || x.kind != y.kind || x.kind == "dict_values" || len(x.items) != len(y.items) {
			return ok && x == y
		}
		for _, it := range x.items {
			found := false
			for _, jt := range y.items {
				if equalBudget(it, jt, budget) {
					found = true
					break
				}
			}
			if !found {
				return false
			}
		}
		return true
	}
	return a == b
}

func equalSlices(a, b []Value, budget *int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !equalBudget(a[i], b[i], budget) {
			return false
		}
	}
	return true
}

// lessValues is Python's <.
func lessValues(a, b Value) (bool, error) {
	if ai, af, aF, ok := number(a); ok {
		if bi, bf, bF, ok := number(b); ok {
			switch {
			case !aF && !bF:
				return ai < bi, nil
			case aF && bF:
				return af < bf, nil
			case aF:
				return af < float64(bi), nil
			default:
				return float64(ai) < bf, nil
			}
		}
	}
	switch x := a.(type) {
	case string:
		if y, ok := b.(string); ok {
			return x < y, nil
		}
	case *List:
		if y, ok := b.(*List); ok {
			return lessSlices(x.Items, y.Items)
		}
	case Tuple:
		if y, ok := b.(Tuple); ok {
			return lessSlices(x, y)
		}
	case *Undefined:
		return false, x.err()
	}
	if u, ok := b.(*Undefined); ok {
		return false, u.err()
	}
	return false, typeErrorf("'<' not supported between instances of '%s' and '%s'", typeName(a), typeName(b))
}

func lessSlices(a, b []Value) (bool, error) {
	for i := 0; i < len(a) && i < len(b); i++ {
		if equalValues(a[i], b[i]) {
			continue
		}
		return lessValues(a[i], b[i])
	}
	return len(a) < len(b), nil
}

// contains is Python's `needle in haystack`.
func contains(haystack, needle Value) (bool, error) {
	switch h := haystack.(type) {
	case string:
		n, ok := needle.(string)
		if !ok {
			if u, isU := needle.(*Undefined); isU {
				return false, u.err()
			}
			return false, typeErrorf("'in <string>' requires string as left operand, not %s", typeName(needle))
		}
		return strings.Contains(h, n), nil
	case *List:
		for _, it := range h.Items {
			if equalValues(it, needle) {
				return true, nil
			}
		}
		return false, nil
	case Tuple:
		for _, it := range h {
			if equalValues(it, needle) {
				return true, nil
			}
		}
		return false, nil
	case *Dict:
		switch needle.(type) {
		case *List, *Dict:
			return false, typeErrorf("unhashable type: '%s'", typeName(needle))
		}
		_, ok := h.Get(needle)
		return ok, nil
	case *Undefined:
		return false, nil
	case *Iterator:
		if h.err != nil {
			return false, h.err
		}
		for h.pos < len(h.items) {
			it := h.items[h.pos]
			h.pos++
			if equalValues(it, needle) {
				return true, nil
			}
		}
		return false, nil
	case *View:
		for _, it := range h.items {
			if equalValues(it, needle) {
				return true, nil
			}
		}
		return false, nil
	}
	return false, typeErrorf("argument of type '%s' is not iterable", typeName(haystack))
}

func compare(op string, l, r Value) (bool, error) {
	switch op {
	case "==":
		return equalValues(l, r), nil
	case "!=":
		return !equalValues(l, r), nil
	case "<":
		return lessValues(l, r)
	case ">":
		return lessValues(r, l)
	case "<=":
		lt, err := lessValues(l, r)
		if err != nil || lt {
			return lt, err
		}
		return equalValues(l, r), nil
	case ">=":
		lt, err := lessValues(r, l)
		if err != nil || lt {
			return lt, err
		}
		return equalValues(l, r), nil
	case "in":
		return contains(r, l)
	case "not in":
		c, err := contains(r, l)
		return !c, err
	}
	return false, errorf("RuntimeError", "unknown comparison %s", op)
}
