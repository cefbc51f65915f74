package chattemplate

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"
)

// Value is one template value. The engine uses these concrete types:
// nil (Python None), bool, int64, float64, string, *List, Tuple, *Dict,
// *Undefined, *Namespace and callables (*Macro, *builtinFunc, *boundMethod).
// Go values handed to Render are converted by FromGo.
type Value = any

// List is a Python list: a mutable, ordered sequence shared by reference.
type List struct {
	Items []Value
}

// smallListRoom is how many items newListOf keeps in the list's own
// allocation.
const smallListRoom = 4

// listWithRoom is a List and the backing array of its first items.
type listWithRoom struct {
	List
	items [smallListRoom]Value
}

// newListOf returns a list of a copy of items: one allocation for up to
// smallListRoom items, two above.
func newListOf(items []Value) *List {
	l := newListLen(len(items))
	copy(l.Items, items)
	return l
}

// newListLen returns a list of n nil items for the caller to set: one
// allocation for up to smallListRoom items, two above.
func newListLen(n int) *List {
	if n > smallListRoom {
		return &List{Items: make([]Value, n)}
	}
	b := &listWithRoom{}
	b.Items = b.items[:n:n]
	return &b.List
}

// Tuple is a Python tuple (what dict.items() yields and `a, b` builds).
type Tuple []Value

// Dict is a Python dict: keys keep their insertion order, as request JSON
// needs (tool schemas are printed back with tojson). Small dicts (most JSON
// objects) are searched linearly; an index map is built past smallDict keys.
type Dict struct {
	keys  []Value
	vals  []Value
	index map[any]int // nil until the dict grows past smallDict
}

const smallDict = 12

// NewDict returns an empty ordered dict.
func NewDict() *Dict { return &Dict{} }

// newDictCap returns an empty dict with room for n entries, keys and values
// in one allocation (with the dict itself when n is at most smallDictRoom).
func newDictCap(n int) *Dict {
	if n == 0 {
		return NewDict()
	}
	if n <= smallDictRoom {
		return newSmallDict()
	}
	kv := make([]Value, 2*n)
	return &Dict{keys: kv[:0:n], vals: kv[n : n : 2*n]}
}

// smallDictRoom is how many entries a dict from newSmallDict holds before
// its keys and values move to slices of their own.
const smallDictRoom = 4

// dictWithRoom is a Dict and the backing array of its first entries, so a
// small dict is one allocation instead of two.
type dictWithRoom struct {
	Dict
	kv [2 * smallDictRoom]Value
}

// newSmallDict returns an empty dict with room for smallDictRoom entries,
// in one allocation: for a dict about to be filled (NewDict stays
// allocation-free until its first Set).
func newSmallDict() *Dict {
	b := &dictWithRoom{}
	b.keys, b.vals = b.kv[:0:smallDictRoom], b.kv[smallDictRoom:smallDictRoom:2*smallDictRoom]
	return &b.Dict
}

// Len returns the number of entries.
func (d *Dict) Len() int { return len(d.keys) }

// Keys returns the keys in insertion order (the slice must not be modified).
func (d *Dict) Keys() []Value { return d.keys }

func (d *Dict) find(k Value) int {
	if d.index != nil {
		if i, ok := d.index[hashKey(k)]; ok {
			return i
		}
		return -1
	}
	if ks, ok := k.(string); ok {
		for i, x := range d.keys {
			if xs, ok := x.(string); ok && xs == ks {
				return i
			}
		}
		return -1
	}
	hk := hashKey(k)
	for i, x := range d.keys {
		if hashKey(x) == hk {
			return i
		}
	}
	return -1
}

// Set stores v under k, keeping k's original position when it exists.
func (d *Dict) Set(k, v Value) {
	if i := d.find(k); i >= 0 {
		d.vals[i] = v
		return
	}
	if cap(d.keys) == 0 {
		// Most dicts are small: room for four entries, one allocation.
		kv := make([]Value, 8)
		d.keys, d.vals = kv[:0:4], kv[4:4:8]
	}
	d.keys = append(d.keys, k)
	d.vals = append(d.vals, v)
	if d.index != nil {
		d.index[hashKey(k)] = len(d.keys) - 1
	} else if len(d.keys) > smallDict {
		d.reindex()
	}
}

func (d *Dict) reindex() {
	d.index = make(map[any]int, len(d.keys))
	for i, k := range d.keys {
		d.index[hashKey(k)] = i
	}
}

// Get returns the value stored under k.
func (d *Dict) Get(k Value) (Value, bool) {
	if d == nil {
		return nil, false
	}
	i := d.find(k)
	if i < 0 {
		return nil, false
	}
	return d.vals[i], true
}

// getStr is Get for a string key, without boxing it for a small dict
// (which has no index).
func (d *Dict) getStr(name string) (Value, bool) {
	if d == nil {
		return nil, false
	}
	if d.index != nil {
		return d.Get(name)
	}
	for i, x := range d.keys {
		if xs, ok := x.(string); ok && xs == name {
			return d.vals[i], true
		}
	}
	return nil, false
}

// Delete removes k, keeping the order of the others.
func (d *Dict) Delete(k Value) {
	i := d.find(k)
	if i < 0 {
		return
	}
	d.keys = append(d.keys[:i:i], d.keys[i+1:]...)
	d.vals = append(d.vals[:i:i], d.vals[i+1:]...)
	if d.index != nil {
		d.reindex()
	}
}

// Copy returns a shallow copy.
func (d *Dict) Copy() *Dict {
	c := &Dict{keys: append([]Value(nil), d.keys...), vals: append([]Value(nil), d.vals...)}
	if d.index != nil {
		c.reindex()
	}
	return c
}

// hashKey normalises a key the way Python hashes it: True == 1 == 1.0.
func hashKey(k Value) any {
	switch x := k.(type) {
	case bool:
		if x {
			return int64(1)
		}
		return int64(0)
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1e18 {
			return int64(x)
		}
		return x
	case Tuple:
		return "\x00tuple" + reprValue(x)
	case *Undefined:
		return "\x00undefined" // Jinja2: every Undefined hashes and compares alike
	case nil, int64, string:
		return x
	default:
		return fmt.Sprintf("\x00%p", x)
	}
}

// Undefined is Jinja2's default Undefined: empty when printed, false when
// tested, empty when iterated, and an error for most other uses.
type Undefined struct {
	hint string
	// For a missing attribute or item the hint is built on demand:
	// "'<objType> object' has no attribute '<attr>'".
	objType string
	attr    Value
	varName string // a missing variable: "'<varName>' is undefined"
}

func (u *Undefined) err() error {
	switch {
	case u.varName != "":
		return &UndefinedError{Msg: fmt.Sprintf("'%s' is undefined", u.varName)}
	case u.objType != "":
		if s, ok := u.attr.(string); ok {
			return &UndefinedError{Msg: fmt.Sprintf("'%s object' has no attribute '%s'", u.objType, s)}
		}
		return &UndefinedError{Msg: fmt.Sprintf("'%s object' has no element %s", u.objType, reprValue(u.attr))}
	case u.hint == "":
		return &UndefinedError{Msg: "value is undefined"}
	}
	return &UndefinedError{Msg: u.hint}
}

func undefinedName(name string) *Undefined {
	return &Undefined{varName: name}
}

func undefinedAttr(obj Value, name Value) *Undefined {
	return &Undefined{objType: typeName(obj), attr: name}
}

// Iterator is a one-shot Python iterator: what Jinja2's lazy filters (map,
// select, selectattr, unique, items, ...) return. It is always true, has no
// length, and iterating it consumes it.
type Iterator struct {
	kind  string // "generator", "list_reverseiterator"
	items []Value
	pos   int
	err   error  // a generator's failure, raised when it is consumed
	fn    string // the generator function's name, for printing
}

func newGenerator(items []Value) *Iterator { return &Iterator{kind: "generator", items: items} }

// rest consumes and returns what the iterator has left.
func (it *Iterator) rest() []Value {
	r := it.items[it.pos:]
	it.pos = len(it.items)
	return r
}

// View is a dict view (dict.items(), .keys(), .values()).
type View struct {
	kind  string // "dict_items", "dict_keys", "dict_values"
	items []Value
}

// Namespace is the object namespace() returns: attributes can be assigned
// from inside loops with {% set ns.x = ... %}.
type Namespace struct {
	attrs *Dict
}

// namespaceWithRoom is a Namespace with its attribute dict and that dict's
// first entries in the same allocation.
type namespaceWithRoom struct {
	Namespace
	attrs dictWithRoom
}

// newNamespace returns an empty namespace, one allocation.
func newNamespace() *Namespace {
	b := &namespaceWithRoom{}
	d := &b.attrs
	d.keys, d.vals = d.kv[:0:smallDictRoom], d.kv[smallDictRoom:smallDictRoom:2*smallDictRoom]
	b.Namespace.attrs = &d.Dict
	return &b.Namespace
}

// typeName is Python's type(x).__name__.
func typeName(v Value) string {
	switch x := v.(type) {
	case nil:
		return "NoneType"
	case bool:
		return "bool"
	case int64:
		return "int"
	case float64:
		return "float"
	case string:
		return "str"
	case *List:
		return "list"
	case Tuple:
		return "tuple"
	case *Dict:
		return "dict"
	case *Undefined:
		return "Undefined"
	case *Namespace:
		return "Namespace"
	case *Iterator:
		return x.kind
	case *View:
		return x.kind
	case *loopObj:
		return "LoopContext"
	case *joiner:
		return "Joiner"
	case *cycler:
		return "Cycler"
	case *Macro:
		return "Macro"
	case *boundMethod:
		return "builtin_function_or_method"
	case *builtinFunc:
		return "function"
	default:
		return fmt.Sprintf("%T", v)
	}
}

// truthy is Python's bool(x).
func truthy(v Value) bool {
	switch x := v.(type) {
	case nil:
		return false
	case bool:
		return x
	case int64:
		return x != 0
	case float64:
		return x != 0
	case string:
		return x != ""
	case *List:
		return len(x.Items) > 0
	case Tuple:
		return len(x) > 0
	case *Dict:
		return x.Len() > 0
	case *Undefined:
		return false
	case *View:
		return len(x.items) > 0
	default:
		return true
	}
}

// strValue is Python's str(x) as Jinja2 prints it.
func strValue(v Value) string {
	switch x := v.(type) {
	case string:
		return x
	case *Undefined:
		return ""
	case nil:
		return "None"
	case bool:
		if x {
			return "True"
		}
		return "False"
	case int64:
		return strconv.FormatInt(x, 10)
	case float64:
		return formatFloat(x)
	case *Macro:
		return "<Macro '" + x.name + "'>"
	default:
		return reprValue(v)
	}
}

// reprValue is Python's repr(x).
func reprValue(v Value) string {
	var b strings.Builder
	writeRepr(&b, v, 0)
	return b.String()
}

// reprLimit stops printing values past this many bytes; the render's size
// budget (smaller by default) then fails the render.
const reprLimit = 64 << 20

// writeReprItems writes a list's or tuple's items, comma-separated.
func writeReprItems(b *strings.Builder, items []Value, depth int) {
	for i, it := range items {
		if i > 0 {
			b.WriteString(", ")
		}
		writeRepr(b, it, depth+1)
	}
}

func writeRepr(b *strings.Builder, v Value, depth int) {
	if depth > 100 || b.Len() > reprLimit {
		b.WriteString("...")
		return
	}
	switch x := v.(type) {
	case string:
		b.WriteString(reprString(x))
	case *List:
		b.WriteByte('[')
		writeReprItems(b, x.Items, depth)
		b.WriteByte(']')
	case Tuple:
		b.WriteByte('(')
		writeReprItems(b, x, depth)
		if len(x) == 1 {
			b.WriteByte(',')
		}
		b.WriteByte(')')
	case *Dict:
		b.WriteByte('{')
		for i, k := range x.keys {
			if i > 0 {
				b.WriteString(", ")
			}
			writeRepr(b, k, depth+1)
			b.WriteString(": ")
			writeRepr(b, x.vals[i], depth+1)
		}
		b.WriteByte('}')
	case *Undefined:
		b.WriteString("Undefined")
	case *Iterator:
		// CPython prints e.g. <generator object sync_do_map at 0x7f...>;
		// the address is arbitrary, its length is kept.
		name := ""
		if x.fn != "" {
			name = " " + x.fn
		}
		fmt.Fprintf(b, "<%s object%s at 0x7f%010x>", x.kind, name, fakeAddr(unsafe.Pointer(x)))
	case *View:
		b.WriteString(x.kind + "(")
		writeRepr(b, &List{Items: x.items}, depth+1)
		b.WriteString(")")
	case *Namespace:
		b.WriteString("<Namespace ")
		writeRepr(b, x.attrs, depth+1)
		b.WriteString(">")
	case nil, bool, int64, float64, *Macro:
		b.WriteString(strValue(v))
	case *loopObj:
		// jinja2.runtime.LoopContext.__repr__ (3.1.6).
		fmt.Fprintf(b, "<LoopContext %d/%d>", x.index0+1, len(x.items))
	case *boundMethod:
		switch r := x.recv.(type) {
		case *loopObj: // a Python method of LoopContext
			fmt.Fprintf(b, "<bound method LoopContext.%s of ", x.name)
			writeRepr(b, r, depth+1)
			b.WriteByte('>')
		case *joiner: // joiner(sep) is a jinja2.utils.Joiner, called as itself
			fmt.Fprintf(b, "<jinja2.utils.Joiner object at 0x7f%010x>", fakeAddr(unsafe.Pointer(r)))
		case *cycler: // a Python method of jinja2.utils.Cycler
			fmt.Fprintf(b, "<bound method Cycler.%s of <jinja2.utils.Cycler object at 0x7f%010x>>", x.name, fakeAddr(unsafe.Pointer(r)))
		default:
			// CPython: <built-in method get of dict object at 0x7f...>; the
			// address is arbitrary, its length is kept.
			fmt.Fprintf(b, "<built-in method %s of %s object at 0x7f%010x>", x.name, typeName(x.recv), fakeAddr(unsafe.Pointer(x)))
		}
	case *builtinFunc:
		// Three of Jinja2's globals are classes, printed without an address.
		switch x.name {
		case "namespace":
			b.WriteString("<class 'jinja2.utils.Namespace'>")
		case "dict":
			b.WriteString("<class 'dict'>")
		case "cycler":
			b.WriteString("<class 'jinja2.utils.Cycler'>")
		default:
			fmt.Fprintf(b, "<function %s at 0x7f%010x>", x.name, fakeAddr(unsafe.Pointer(x)))
		}
	case *cycler:
		fmt.Fprintf(b, "<jinja2.utils.Cycler object at 0x7f%010x>", fakeAddr(unsafe.Pointer(x)))
	default:
		// Any other engine value: printed as an object, never through
		// strValue, whose fallback is this function.
		fmt.Fprintf(b, "<%s object>", typeName(v))
	}
}

// reprString quotes s as Python's repr does: single quotes unless s holds a
// single quote and no double quote; non-printable characters escaped.
func reprString(s string) string {
	q := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		q = '"'
	}
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte(q)
	for _, r := range s {
		switch {
		case r == rune(q) || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r >= 0x80 && !pyPrintable(r):
			switch {
			case r < 0x100:
				fmt.Fprintf(&b, `\x%02x`, r)
			case r < 0x10000:
				fmt.Fprintf(&b, `\u%04x`, r)
			default:
				fmt.Fprintf(&b, `\U%08x`, r)
			}
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte(q)
	return b.String()
}

// pyPrintable approximates Python's str.isprintable for one non-ASCII rune.
func pyPrintable(r rune) bool {
	if r == utf8.RuneError {
		return true
	}
	if r >= 0x80 && r < 0xa0 || r == 0xad {
		return false
	}
	if r == 0x2028 || r == 0x2029 || (r >= 0x200b && r <= 0x200f) || (r >= 0x202a && r <= 0x202e) || (r >= 0x2060 && r <= 0x2064) || r == 0xfeff {
		return false
	}
	if r >= 0xd800 && r <= 0xdfff || r >= 0xe000 && r <= 0xf8ff {
		return false
	}
	if r == 0x00a0 || r == 0x1680 || (r >= 0x2000 && r <= 0x200a) || r == 0x202f || r == 0x205f || r == 0x3000 {
		return false
	}
	return true
}

// formatFloat is Python's repr(float): the shortest round-tripping digits,
// positional between 1e-4 and 1e16, always with a decimal point or exponent.
func formatFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsNaN(f):
		return "nan"
	}
	e := strconv.FormatFloat(f, 'e', -1, 64) // d.ddde±XX
	mant, expStr, _ := strings.Cut(e, "e")
	exp, _ := strconv.Atoi(expStr)
	neg := strings.HasPrefix(mant, "-")
	mant = strings.TrimPrefix(mant, "-")
	digits := strings.Replace(mant, ".", "", 1)
	sign := ""
	if neg {
		sign = "-"
	}
	if exp < -4 || exp >= 16 {
		m := digits[:1]
		if len(digits) > 1 {
			m += "." + digits[1:]
		}
		es := "+"
		if exp < 0 {
			es = "-"
			exp = -exp
		}
		return fmt.Sprintf("%s%se%s%02d", sign, m, es, exp)
	}
	if exp < 0 {
		return sign + "0." + strings.Repeat("0", -exp-1) + digits
	}
	if len(digits) <= exp+1 {
		return sign + digits + strings.Repeat("0", exp+1-len(digits)) + ".0"
	}
	return sign + digits[:exp+1] + "." + digits[exp+1:]
}

// FromGo converts plain Go data (as encoding/json produces, or built by
// hand) into engine values. Maps with string keys are ordered by key, since
// Go maps have no order; use DecodeJSON to keep a document's order.
func FromGo(v any) Value {
	switch x := v.(type) {
	case nil, bool, int64, float64, string, *List, Tuple, *Dict, *Undefined, *Namespace:
		return x
	case int:
		return int64(x)
	case int32:
		return int64(x)
	case uint32:
		return int64(x)
	case uint64:
		return int64(x)
	case float32:
		return float64(x)
	case json.Number:
		if n, err := x.Int64(); err == nil {
			return n
		}
		f, _ := x.Float64()
		return f
	case []any:
		l := &List{Items: make([]Value, len(x))}
		for i, it := range x {
			l.Items[i] = FromGo(it)
		}
		return l
	case []string:
		l := &List{Items: make([]Value, len(x))}
		for i, it := range x {
			l.Items[i] = it
		}
		return l
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		d := NewDict()
		for _, k := range keys {
			d.Set(k, FromGo(x[k]))
		}
		return d
	default:
		return fmt.Sprint(x)
	}
}

// fakeAddr is the low 40 bits of p, printed after 0x7f where CPython prints
// an object's address: the same length, never a prompt anyone can match.
func fakeAddr(p unsafe.Pointer) uint64 { return uint64(uintptr(p)) & 0xffffffffff }
