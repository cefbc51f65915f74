package chattemplate

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// builtinFunc is a global function (range, namespace, raise_exception, ...).
type builtinFunc struct {
	name string
	fn   func(st *state, args []Value, kw *Dict) (Value, error)
}

// joiner is what joiner(sep) returns: "" on the first call, sep after.
type joiner struct {
	sep  string
	used bool
}

// cycler is what cycler(*items) returns (jinja2.utils.Cycler, 3.1.6):
// next() gives the current item and moves on, wrapping; current is the
// item next() gives; reset() goes back to the first.
type cycler struct {
	items Tuple
	pos   int
}

func builtinCycler(st *state, args []Value, kw *Dict) (Value, error) {
	if kw != nil && len(kw.keys) > 0 {
		return nil, typeErrorf("Cycler.__init__() got an unexpected keyword argument '%s'", strValue(kw.keys[0]))
	}
	if len(args) == 0 {
		return nil, errorf("RuntimeError", "at least one item has to be provided")
	}
	return &cycler{items: slices.Clone(Tuple(args))}, nil
}

// attr is a cycler's attribute name: its state or a bound method.
func (c *cycler) attr(name string) Value {
	switch name {
	case "current":
		return c.items[c.pos]
	case "items":
		return c.items
	case "pos":
		return int64(c.pos)
	case "next", "reset":
		return &boundMethod{recv: c, name: name}
	}
	return undefinedAttr(c, name)
}

// call runs a cycler's method name.
func (c *cycler) call(name string, args []Value) (Value, error) {
	if len(args) > 0 {
		return nil, typeErrorf("Cycler.%s() takes 1 positional argument but %d were given", name, len(args)+1)
	}
	if name == "reset" {
		c.pos = 0
		return nil, nil
	}
	v := c.items[c.pos]
	c.pos = (c.pos + 1) % len(c.items)
	return v, nil
}

var globals map[string]Value

func init() {
	globals = map[string]Value{
		"range":           &builtinFunc{"range", builtinRange},
		"namespace":       &builtinFunc{"namespace", builtinNamespace},
		"dict":            &builtinFunc{"dict", builtinDict},
		"raise_exception": &builtinFunc{"raise_exception", builtinRaise},
		"strftime_now":    &builtinFunc{"strftime_now", builtinStrftimeNow},
		"cycler":          &builtinFunc{"cycler", builtinCycler},
		"joiner": &builtinFunc{"joiner", func(st *state, args []Value, kw *Dict) (Value, error) {
			return &boundMethod{recv: &joiner{sep: strValue(arg(args, kw, 0, "sep", ", "))}, name: "__call__"}, nil
		}},
	}
}

func builtinRange(st *state, args []Value, kw *Dict) (Value, error) {
	ints := make([]int64, len(args))
	for i, a := range args {
		n, ok := asInt(a)
		if !ok {
			return nil, typeErrorf("'%s' object cannot be interpreted as an integer", typeName(a))
		}
		ints[i] = n
	}
	var start, stop, step int64 = 0, 0, 1
	switch len(ints) {
	case 1:
		stop = ints[0]
	case 2:
		start, stop = ints[0], ints[1]
	case 3:
		start, stop, step = ints[0], ints[1], ints[2]
	default:
		return nil, typeErrorf("range expected 1 to 3 arguments, got %d", len(args))
	}
	if step == 0 {
		return nil, errorf("ValueError", "range() arg 3 must not be zero")
	}
	// Unsigned arithmetic: stop-start may not fit in int64.
	var n uint64
	if step > 0 && stop > start {
		diff, st := uint64(stop)-uint64(start), uint64(step)
		n = diff / st
		if diff%st != 0 {
			n++
		}
	} else if step < 0 && stop < start {
		diff, st := uint64(start)-uint64(stop), uint64(-step)
		if step == math.MinInt64 {
			st = 1 << 63
		}
		n = diff / st
		if diff%st != 0 {
			n++
		}
	}
	if n > maxRange {
		return nil, errorf("OverflowError", "Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).", maxRange)
	}
	if err := st.step(int(n)); err != nil {
		return nil, err
	}
	out := &List{Items: make([]Value, n)}
	for i := range out.Items {
		out.Items[i] = int64(uint64(start) + uint64(i)*uint64(step))
	}
	return out, nil
}

func builtinNamespace(st *state, args []Value, kw *Dict) (Value, error) {
	if len(args) == 0 && kw != nil {
		// namespace(a=..., b=...): kw is this call's own (evalArgs builds
		// one a call) and already holds the attributes in order.
		return &Namespace{attrs: kw}, nil
	}
	ns := newNamespace()
	for _, a := range args {
		d, ok := a.(*Dict)
		if !ok {
			return nil, typeErrorf("namespace() positional argument must be a mapping")
		}
		for i, k := range d.keys {
			ns.attrs.Set(k, d.vals[i])
		}
	}
	if kw != nil {
		for i, k := range kw.keys {
			ns.attrs.Set(k, kw.vals[i])
		}
	}
	return ns, nil
}

func builtinDict(st *state, args []Value, kw *Dict) (Value, error) {
	d := NewDict()
	for _, a := range args {
		switch x := a.(type) {
		case *Dict:
			for i, k := range x.keys {
				d.Set(k, x.vals[i])
			}
		default:
			items, err := st.seq(a)
			if err != nil {
				return nil, err
			}
			for _, it := range items {
				pair, err := st.iterate(it)
				if err != nil || len(pair) != 2 {
					return nil, errorf("ValueError", "dictionary update sequence element has wrong length")
				}
				d.Set(pair[0], pair[1])
			}
		}
	}
	if kw != nil {
		for i, k := range kw.keys {
			d.Set(k, kw.vals[i])
		}
	}
	return d, nil
}

func builtinRaise(st *state, args []Value, kw *Dict) (Value, error) {
	msg := ""
	if len(args) > 0 {
		msg = strValue(args[0])
	}
	return nil, &Error{Kind: "TemplateError", Msg: msg}
}

func builtinStrftimeNow(st *state, args []Value, kw *Dict) (Value, error) {
	if len(args) != 1 {
		return nil, typeErrorf("strftime_now() takes exactly one argument")
	}
	f, ok := args[0].(string)
	if !ok {
		return nil, typeErrorf("strftime() argument 1 must be str, not %s", typeName(args[0]))
	}
	return strftime(st.now(), f), nil
}

// strftime formats t like C strftime in the C locale (Python's
// datetime.strftime on Linux), including glibc's "%-d" no-padding flag.
func strftime(t time.Time, f string) string {
	var b strings.Builder
	for i := 0; i < len(f); i++ {
		c := f[i]
		if c != '%' || i+1 >= len(f) {
			b.WriteByte(c)
			continue
		}
		i++
		pad := true
		if f[i] == '-' && i+1 < len(f) {
			pad = false
			i++
		}
		num := func(n, width int) {
			if pad {
				fmt.Fprintf(&b, "%0*d", width, n)
			} else {
				fmt.Fprintf(&b, "%d", n)
			}
		}
		switch f[i] {
		case 'Y':
			fmt.Fprintf(&b, "%d", t.Year())
		case 'y':
			num(t.Year()%100, 2)
		case 'm':
			num(int(t.Month()), 2)
		case 'd':
			num(t.Day(), 2)
		case 'e':
			fmt.Fprintf(&b, "%2d", t.Day())
		case 'H':
			num(t.Hour(), 2)
		case 'I':
			h := t.Hour() % 12
			if h == 0 {
				h = 12
			}
			num(h, 2)
		case 'M':
			num(t.Minute(), 2)
		case 'S':
			num(t.Second(), 2)
		case 'f':
			fmt.Fprintf(&b, "%06d", t.Nanosecond()/1000)
		case 'j':
			num(t.YearDay(), 3)
		case 'p':
			if t.Hour() < 12 {
				b.WriteString("AM")
			} else {
				b.WriteString("PM")
			}
		case 'b', 'h':
			b.WriteString(t.Month().String()[:3])
		case 'B':
			b.WriteString(t.Month().String())
		case 'a':
			b.WriteString(t.Weekday().String()[:3])
		case 'A':
			b.WriteString(t.Weekday().String())
		case 'w':
			fmt.Fprintf(&b, "%d", int(t.Weekday()))
		case 'u':
			wd := int(t.Weekday())
			if wd == 0 {
				wd = 7
			}
			fmt.Fprintf(&b, "%d", wd)
		case 'Z':
			name, _ := t.Zone()
			b.WriteString(name)
		case 'z':
			b.WriteString(t.Format("-0700"))
		case 'F':
			b.WriteString(t.Format("2006-01-02"))
		case 'T':
			b.WriteString(t.Format("15:04:05"))
		case 'D':
			b.WriteString(t.Format("01/02/06"))
		case 'R':
			b.WriteString(t.Format("15:04"))
		case 'c':
			b.WriteString(t.Format("Mon Jan _2 15:04:05 2006"))
		case 'x':
			b.WriteString(t.Format("01/02/06"))
		case 'X':
			b.WriteString(t.Format("15:04:05"))
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			if !pad {
				b.WriteByte('-')
			}
			b.WriteByte(f[i])
		}
	}
	return b.String()
}

// attr returns a loop variable attribute (loop.index, loop.last, ...).
func (l *loopObj) attr(name string) Value {
	n := len(l.items)
	switch name {
	case "index":
		return int64(l.index0 + 1)
	case "index0":
		return int64(l.index0)
	case "revindex":
		return int64(n - l.index0)
	case "revindex0":
		return int64(n - l.index0 - 1)
	case "first":
		return l.index0 == 0
	case "last":
		return l.index0 == n-1
	case "length":
		return int64(n)
	case "depth":
		return int64(l.depth)
	case "depth0":
		return int64(l.depth - 1)
	case "previtem":
		if l.index0 > 0 {
			return l.items[l.index0-1]
		}
		return &Undefined{hint: "there is no previous item"}
	case "nextitem":
		if l.index0 < n-1 {
			return l.items[l.index0+1]
		}
		return &Undefined{hint: "there is no next item"}
	case "cycle", "changed":
		return &boundMethod{recv: l, name: name}
	}
	return undefinedAttr(l, name)
}

func (l *loopObj) call(name string, args []Value) (Value, error) {
	switch name {
	case "cycle":
		if len(args) == 0 {
			return nil, typeErrorf("no items for cycling given")
		}
		return args[l.index0%len(args)], nil
	case "changed":
		v := Tuple(args)
		if l.seen && equalValues(l.last, v) {
			return false, nil
		}
		l.seen, l.last = true, v
		return true, nil
	}
	return nil, typeErrorf("'LoopContext' object is not callable")
}
