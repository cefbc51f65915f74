package chattemplate

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// maxJSONDepth bounds nesting so hostile bodies cannot exhaust the stack.
const maxJSONDepth = 512

// MaxJSONValues bounds the values (objects, arrays, strings, numbers,
// literals) one document may decode to. A value costs tens to hundreds of
// bytes decoded against as few as two in the body: an 8 MiB body of empty
// objects allocated 471 MiB before the bound, and 18 MiB with it
// (TestDecodeJSONBoundsHostileBodies). A chat body has a few values a
// message, content part and tool field: 131,072 leaves room for thousands
// of each.
const MaxJSONValues = 1 << 17

// DecodeJSON decodes one JSON document into engine values, keeping object
// key order (Python's json.loads into dict does too). Integers become int64
// (float64 when they do not fit), numbers with a fraction or exponent float64.
func DecodeJSON(data []byte) (Value, error) {
	d := jsonDecoder{s: data}
	return d.decode()
}

// decodeBorrowed is DecodeJSON for a caller done with every decoded value
// before data changes and before it calls releaseArena(arena): a string
// needing no unescaping points into data, any other into arena, a pooled
// buffer the next decode reuses. It saves a copy and an allocation of
// every string (a chat body's message contents are most of its bytes).
func decodeBorrowed(data []byte) (v Value, arena *[]byte, err error) {
	arena = arenaPool.Get().(*[]byte)
	d := jsonDecoder{s: data, borrowed: true, arena: (*arena)[:0]}
	v, err = d.decode()
	*arena = d.arena[:0]
	return v, arena, err
}

// releaseArena hands a decodeBorrowed arena to the next decode; nothing
// decoded with it may be used after.
func releaseArena(arena *[]byte) {
	if cap(*arena) <= maxPooledArena {
		arenaPool.Put(arena)
	}
}

// maxPooledArena bounds the string arenas arenaPool keeps (bytes).
const maxPooledArena = 1 << 20

// arenaPool holds decodeBorrowed's string arenas.
var arenaPool = sync.Pool{New: func() any { return new([]byte) }}

func (d *jsonDecoder) decode() (Value, error) {
	if p, ok := scratchPool.Get().(*[]byte); ok {
		d.buf = (*p)[:0]
		defer func() {
			// Strings are copied out of the scratch buffer: nothing decoded
			// refers to it.
			if cap(d.buf) <= maxScratchHint {
				*p = d.buf[:0]
				scratchPool.Put(p)
			}
		}()
	}
	if p, ok := stackPool.Get().(*[]Value); ok {
		d.stack = (*p)[:0]
		defer func() {
			if cap(d.stack) <= maxPooledStack {
				clear(d.stack) // hold no decoded value (closed objects cleared theirs)
				*p = d.stack[:0]
				stackPool.Put(p)
			}
		}()
	}
	d.skipSpace()
	v, err := d.value(0)
	if err != nil {
		return nil, err
	}
	d.skipSpace()
	if d.i != len(d.s) {
		return nil, d.errorf("trailing data")
	}
	return v, nil
}

// maxPooledStack bounds the decoder stacks stackPool keeps (in values).
const maxPooledStack = 4096

// stackPool holds decoders' stacks of pending object pairs and array items.
var stackPool = sync.Pool{New: func() any { return new([]Value) }}

// maxScratchHint caps the first size of the decoder's string scratch buffer,
// and the size of the buffers scratchPool keeps.
const maxScratchHint = 64 << 10

// scratchPool holds decoders' string scratch buffers across documents.
var scratchPool = sync.Pool{New: func() any { return new([]byte) }}

type jsonDecoder struct {
	s      []byte
	i      int
	values int     // decoded so far (MaxJSONValues)
	buf    []byte  // scratch for strings with escapes or non-ASCII text
	stack  []Value // the pairs and items of the objects and arrays being decoded
	// borrowed: strings are not copied out (decodeBorrowed); those that
	// need unescaping are appended to arena.
	borrowed bool
	arena    []byte
	// dicts: when borrowed, the small objects' dicts are carved from
	// chunks of a few (every decoded value dies with the request).
	dicts []dictWithRoom
}

// maxDictChunk bounds the dicts a borrowed decode allocates at once; the
// first chunk holds 4, each next one twice the last.
const maxDictChunk = 32

// newDict returns a dict with room for n entries; in a borrowed decode a
// small one comes from the decoder's current chunk.
func (d *jsonDecoder) newDict(n int) *Dict {
	if !d.borrowed || n > smallDictRoom {
		return newDictCap(n)
	}
	if len(d.dicts) == cap(d.dicts) {
		d.dicts = make([]dictWithRoom, 0, min(max(2*cap(d.dicts), 4), maxDictChunk))
	}
	d.dicts = d.dicts[:len(d.dicts)+1]
	b := &d.dicts[len(d.dicts)-1]
	b.keys, b.vals = b.kv[:0:smallDictRoom], b.kv[smallDictRoom:smallDictRoom:2*smallDictRoom]
	return &b.Dict
}

// plain returns the string of s[start:end], which needed no unescaping:
// in place when borrowed, else copied.
func (d *jsonDecoder) plain(start, end int) string {
	if d.borrowed {
		return unsafe.String(unsafe.SliceData(d.s[start:end]), end-start)
	}
	return string(d.s[start:end])
}

// unescaped returns the string of b, d's scratch buffer: copied to the
// arena when borrowed, else to a string of its own.
func (d *jsonDecoder) unescaped(b []byte) string {
	if !d.borrowed || len(b) == 0 {
		return string(b)
	}
	// A full arena is replaced by a larger one: the strings already made
	// keep the old one alive.
	at := len(d.arena)
	d.arena = append(d.arena, b...)
	return unsafe.String(&d.arena[at], len(b))
}

func (d *jsonDecoder) errorf(format string, args ...any) error {
	return fmt.Errorf("json: offset %d: %s", d.i, fmt.Sprintf(format, args...))
}

func (d *jsonDecoder) skipSpace() {
	for d.i < len(d.s) {
		switch d.s[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

func (d *jsonDecoder) value(depth int) (Value, error) {
	if depth > maxJSONDepth {
		return nil, d.errorf("nesting deeper than %d", maxJSONDepth)
	}
	if d.values++; d.values > MaxJSONValues {
		return nil, d.errorf("more than %d values", MaxJSONValues)
	}
	if d.i >= len(d.s) {
		return nil, d.errorf("unexpected end of input")
	}
	switch c := d.s[d.i]; {
	case c == '{':
		d.i++
		d.skipSpace()
		if d.i < len(d.s) && d.s[d.i] == '}' {
			d.i++
			return NewDict(), nil
		}
		// The pairs wait on d.stack until the object ends, so the dict
		// is allocated once at its size.
		base := len(d.stack)
		for {
			d.skipSpace()
			if d.i >= len(d.s) || d.s[d.i] != '"' {
				return nil, d.errorf("expected object key")
			}
			k, err := d.strValue()
			if err != nil {
				return nil, err
			}
			d.skipSpace()
			if d.i >= len(d.s) || d.s[d.i] != ':' {
				return nil, d.errorf("expected ':'")
			}
			d.i++
			d.skipSpace()
			v, err := d.value(depth + 1)
			if err != nil {
				return nil, err
			}
			d.stack = append(d.stack, k, v)
			d.skipSpace()
			if d.i >= len(d.s) {
				return nil, d.errorf("unexpected end of object")
			}
			if d.s[d.i] == ',' {
				d.i++
				continue
			}
			if d.s[d.i] == '}' {
				d.i++
				pairs := d.stack[base:]
				obj := d.newDict(len(pairs) / 2)
				for i := 0; i < len(pairs); i += 2 {
					obj.Set(pairs[i], pairs[i+1]) // a repeated key keeps its place and takes the last value
				}
				clear(pairs)
				d.stack = d.stack[:base]
				return obj, nil
			}
			return nil, d.errorf("expected ',' or '}'")
		}
	case c == '[':
		d.i++
		d.skipSpace()
		if d.i < len(d.s) && d.s[d.i] == ']' {
			d.i++
			return &List{}, nil
		}
		base := len(d.stack)
		for {
			d.skipSpace()
			v, err := d.value(depth + 1)
			if err != nil {
				return nil, err
			}
			d.stack = append(d.stack, v)
			d.skipSpace()
			if d.i >= len(d.s) {
				return nil, d.errorf("unexpected end of array")
			}
			if d.s[d.i] == ',' {
				d.i++
				continue
			}
			if d.s[d.i] == ']' {
				d.i++
				items := d.stack[base:]
				l := newListOf(items)
				clear(items)
				d.stack = d.stack[:base]
				return l, nil
			}
			return nil, d.errorf("expected ',' or ']'")
		}
	case c == '"':
		return d.strValue()
	case c == 't':
		return d.literal("true", true)
	case c == 'f':
		return d.literal("false", false)
	case c == 'n':
		return d.literal("null", nil)
	case c == '-' || (c >= '0' && c <= '9'):
		return d.number()
	default:
		return nil, d.errorf("unexpected character %q", c)
	}
}

func (d *jsonDecoder) literal(word string, v Value) (Value, error) {
	if !strings.HasPrefix(string(d.s[d.i:min(len(d.s), d.i+len(word))]), word) {
		return nil, d.errorf("invalid literal")
	}
	d.i += len(word)
	return v, nil
}

func (d *jsonDecoder) number() (Value, error) {
	start := d.i
	if d.s[d.i] == '-' {
		d.i++
	}
	digits := func() int {
		n := 0
		for d.i < len(d.s) && d.s[d.i] >= '0' && d.s[d.i] <= '9' {
			d.i++
			n++
		}
		return n
	}
	if d.i < len(d.s) && d.s[d.i] == '0' {
		d.i++ // no leading zeros: a 0 stands alone
	} else if digits() == 0 {
		return nil, d.errorf("invalid number")
	}
	isFloat := false
	if d.i < len(d.s) && d.s[d.i] == '.' {
		d.i++
		isFloat = true
		if digits() == 0 {
			return nil, d.errorf("invalid number")
		}
	}
	if d.i < len(d.s) && (d.s[d.i] == 'e' || d.s[d.i] == 'E') {
		d.i++
		isFloat = true
		if d.i < len(d.s) && (d.s[d.i] == '+' || d.s[d.i] == '-') {
			d.i++
		}
		if digits() == 0 {
			return nil, d.errorf("invalid number")
		}
	}
	text := string(d.s[start:d.i])
	if !isFloat {
		if n, err := strconv.ParseInt(text, 10, 64); err == nil {
			return n, nil
		}
	}
	f, err := strconv.ParseFloat(text, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return nil, d.errorf("invalid number %q", text)
	}
	return f, nil
}

// jsonPlain marks the string bytes that need no look: printable ASCII other
// than the quote and the backslash.
var jsonPlain = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// plainRun returns the index of the first byte at or after i in s that ends
// a run of plain string bytes (or len(s)). It looks at sixteen bytes at a
// time where the CPU has vectors (plainRun16), then eight at a time
// (plainWord), then byte by byte from the first word that holds a byte
// that is not plain.
func plainRun(s []byte, i int) int {
	if i >= 0 && i <= len(s) {
		i = plainRun16(s, i)
	}
	for i+8 <= len(s) && plainWord(binary.LittleEndian.Uint64(s[i:])) {
		i += 8
	}
	for i < len(s) && jsonPlain[s[i]] {
		i++
	}
	return i
}

// plainWord reports whether the eight bytes of x are all plain (jsonPlain).
// A byte of 0x80 or more sets its own top bit (the term x). Otherwise the
// lowest byte below 0x20 (or, in q and bs, the lowest byte equal to '"' or
// '\\', zero there) borrows and sets its top bit, and when every byte is
// plain nothing borrows, so no top bit is set.
func plainWord(x uint64) bool {
	const lsb, msb = 0x0101010101010101, 0x8080808080808080
	q, bs := x^'"'*lsb, x^'\\'*lsb
	return ((x-0x20*lsb)&^x|(q-lsb)&^q|(bs-lsb)&^bs|x)&msb == 0
}

// internedStrings are the keys and values every chat body repeats, boxed
// once: a plain string equal to one decodes to it without allocating.
var internedStrings = []string{
	"model", "messages", "role", "content", "name", "type", "text", "tools", "tool_calls",
	"tool_call_id", "function", "arguments", "id", "description", "parameters", "properties",
	"required", "stream", "temperature", "max_tokens", "max_completion_tokens", "top_p",
	"system", "user", "assistant", "tool", "developer", "object", "string", "array",
}

// interned finds internedStrings by a slot computed from a string's length
// and three of its bytes, with a multiplier chosen when the table is built
// so that no two of them share a slot; the full compare makes a hit exact.
// (A map lookup hashed every short string of a body: 5 % of a chat render.)
var interned, maxInternedBytes = newInternTable(internedStrings)

type internTable struct {
	mul   uint32
	slots [internSlots]struct {
		s string
		v Value
	}
}

const internSlots = 128 // a power of two, about four times the strings

func newInternTable(strs []string) (*internTable, int) {
	longest := 0
	for _, s := range strs {
		longest = max(longest, len(s))
	}
	for mul := uint32(0x9E3779B1); ; mul += 2 {
		t := &internTable{mul: mul}
		ok := true
		for _, s := range strs {
			e := &t.slots[t.slot(s)]
			if e.s != "" {
				ok = false
				break
			}
			e.s, e.v = s, s
		}
		if ok {
			return t, longest
		}
	}
}

// slot picks s's slot; s has at least two bytes.
func (t *internTable) slot(s string) uint32 {
	x := uint32(len(s))<<24 | uint32(s[0])<<16 | uint32(s[1])<<8 | uint32(s[len(s)-1])
	return x * t.mul >> 25 // the top 7 bits: internSlots = 128
}

// lookup returns the boxed interned string equal to b.
func (t *internTable) lookup(b []byte) (Value, bool) {
	if len(b) < 2 {
		return nil, false
	}
	e := &t.slots[t.slot(unsafe.String(&b[0], len(b)))]
	if e.s != string(b) {
		return nil, false
	}
	return e.v, true
}

// strValue is str boxed as a Value, interned when it is one of
// internedStrings.
func (d *jsonDecoder) strValue() (Value, error) {
	for j := d.i + 1; j < len(d.s) && j <= d.i+1+maxInternedBytes; j++ {
		if d.s[j] == '"' {
			if v, ok := interned.lookup(d.s[d.i+1 : j]); ok {
				d.i = j + 1
				return v, nil
			}
			break
		}
		if !jsonPlain[d.s[j]] {
			break
		}
	}
	s, err := d.str()
	if err != nil {
		return nil, err
	}
	return s, nil
}

func (d *jsonDecoder) str() (string, error) {
	d.i++ // opening quote
	start := d.i
	d.i = plainRun(d.s, d.i)
	if d.i < len(d.s) && d.s[d.i] == '"' {
		s := d.plain(start, d.i)
		d.i++
		return s, nil
	}
	if want := min(len(d.s)-start, maxScratchHint); cap(d.buf) < want {
		// Sized for a long string at once (chat contents are the bulk of a
		// body) instead of grown by doubling.
		d.buf = make([]byte, 0, want)
	}
	b := append(d.buf[:0], d.s[start:d.i]...)
	defer func() { d.buf = b[:0] }()
	for d.i < len(d.s) {
		c := d.s[d.i]
		switch {
		case c == '"':
			d.i++
			return d.unescaped(b), nil
		case c < 0x20:
			return "", d.errorf("control character in string")
		case c == '\\':
			d.i++
			if d.i >= len(d.s) {
				return "", d.errorf("unterminated escape")
			}
			e := d.s[d.i]
			d.i++
			switch e {
			case '"', '\\', '/':
				b = append(b, e)
			case 'b':
				b = append(b, '\b')
			case 'f':
				b = append(b, '\f')
			case 'n':
				b = append(b, '\n')
			case 'r':
				b = append(b, '\r')
			case 't':
				b = append(b, '\t')
			case 'u':
				r, ok := d.hex4()
				if !ok {
					return "", d.errorf("invalid \\u escape")
				}
				if utf16.IsSurrogate(r) {
					if d.i+1 < len(d.s) && d.s[d.i] == '\\' && d.s[d.i+1] == 'u' {
						save := d.i
						d.i += 2
						r2, ok := d.hex4()
						if ok {
							if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
								b = utf8.AppendRune(b, dec)
								continue
							}
						}
						d.i = save
					}
					b = utf8.AppendRune(b, utf8.RuneError)
					continue
				}
				b = utf8.AppendRune(b, r)
			default:
				return "", d.errorf("invalid escape \\%c", e)
			}
		case c >= 0x80:
			r, size := utf8.DecodeRune(d.s[d.i:])
			if r == utf8.RuneError && size == 1 {
				b = utf8.AppendRune(b, r) // invalid UTF-8 reads as U+FFFD, as Python's decoder
			} else {
				b = append(b, d.s[d.i:d.i+size]...)
			}
			d.i += size
		default:
			// A run of plain ASCII up to the next byte that needs a look.
			j := plainRun(d.s, d.i+1)
			b = append(b, d.s[d.i:j]...)
			d.i = j
		}
	}
	return "", d.errorf("unterminated string")
}

func (d *jsonDecoder) hex4() (rune, bool) {
	if d.i+4 > len(d.s) {
		return 0, false
	}
	n, err := strconv.ParseUint(string(d.s[d.i:d.i+4]), 16, 32)
	if err != nil {
		return 0, false
	}
	d.i += 4
	return rune(n), true
}

// jsonOptions are the arguments of Python's json.dumps that chat templates use.
type jsonOptions struct {
	indent      string // "" with hasIndent false: compact single line
	hasIndent   bool
	itemSep     string
	keySep      string
	ensureASCII bool
	sortKeys    bool
}

// defaultJSONOptions mirrors json.dumps defaults given an indent choice.
func defaultJSONOptions(hasIndent bool, indent string) jsonOptions {
	o := jsonOptions{indent: indent, hasIndent: hasIndent, itemSep: ", ", keySep: ": "}
	if hasIndent {
		o.itemSep = ","
	}
	return o
}

// encodeJSON is Python's json.dumps with the given options.
func encodeJSON(v Value, o jsonOptions) (string, error) {
	var b strings.Builder
	if err := writeJSON(&b, v, o, 0); err != nil {
		return "", err
	}
	return b.String(), nil
}

func writeJSONNewline(b *strings.Builder, o jsonOptions, level int) {
	b.WriteByte('\n')
	for range level {
		b.WriteString(o.indent)
	}
}

func writeJSON(b *strings.Builder, v Value, o jsonOptions, level int) error {
	if level > maxJSONDepth {
		return errors.New("tojson: nesting too deep")
	}
	if b.Len() > reprLimit {
		return errors.New("tojson: output too large")
	}
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		if x {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case int64:
		b.WriteString(strconv.FormatInt(x, 10))
	case float64:
		switch {
		case math.IsNaN(x):
			b.WriteString("NaN")
		case math.IsInf(x, 1):
			b.WriteString("Infinity")
		case math.IsInf(x, -1):
			b.WriteString("-Infinity")
		default:
			b.WriteString(formatFloat(x))
		}
	case string:
		writeJSONString(b, x, o.ensureASCII)
	case *List:
		return writeJSONArray(b, x.Items, o, level)
	case Tuple:
		return writeJSONArray(b, x, o, level)
	case *Dict:
		if x.Len() == 0 {
			b.WriteString("{}")
			return nil
		}
		order := make([]int, x.Len())
		for i := range order {
			order[i] = i
		}
		if o.sortKeys {
			var serr error
			sort.SliceStable(order, func(i, j int) bool {
				lt, err := lessValues(x.keys[order[i]], x.keys[order[j]])
				if err != nil {
					serr = err
				}
				return lt
			})
			if serr != nil {
				return serr
			}
		}
		b.WriteByte('{')
		for n, i := range order {
			if n > 0 {
				b.WriteString(o.itemSep)
			}
			if o.hasIndent {
				writeJSONNewline(b, o, level+1)
			}
			var ks string
			switch k := x.keys[i].(type) {
			case string:
				ks = k
			case nil:
				ks = "null"
			case bool:
				ks = "false"
				if k {
					ks = "true"
				}
			case int64:
				ks = strconv.FormatInt(k, 10)
			case float64:
				ks = formatFloat(k)
			default:
				return fmt.Errorf("keys must be str, int, float, bool or None, not %s", typeName(k))
			}
			writeJSONString(b, ks, o.ensureASCII)
			b.WriteString(o.keySep)
			if err := writeJSON(b, x.vals[i], o, level+1); err != nil {
				return err
			}
		}
		if o.hasIndent {
			writeJSONNewline(b, o, level)
		}
		b.WriteByte('}')
	case *Namespace:
		//lint:ignore ST1005 Python's exact TypeError message: the Jinja2 goldens compare it
		return fmt.Errorf("Object of type Namespace is not JSON serializable")
	case *Undefined:
		//lint:ignore ST1005 Python's exact TypeError message: the Jinja2 goldens compare it
		return fmt.Errorf("Object of type Undefined is not JSON serializable")
	default:
		//lint:ignore ST1005 Python's exact TypeError message: the Jinja2 goldens compare it
		return fmt.Errorf("Object of type %s is not JSON serializable", typeName(v))
	}
	return nil
}

func writeJSONArray(b *strings.Builder, items []Value, o jsonOptions, level int) error {
	if len(items) == 0 {
		b.WriteString("[]")
		return nil
	}
	b.WriteByte('[')
	for i, it := range items {
		if i > 0 {
			b.WriteString(o.itemSep)
		}
		if o.hasIndent {
			writeJSONNewline(b, o, level+1)
		}
		if err := writeJSON(b, it, o, level+1); err != nil {
			return err
		}
	}
	if o.hasIndent {
		writeJSONNewline(b, o, level)
	}
	b.WriteByte(']')
	return nil
}

const hexDigits = "0123456789abcdef"

// writeJSONString escapes like Python's json module: with ensure_ascii off
// only '"', '\\' and control characters are escaped.
func writeJSONString(b *strings.Builder, s string, ensureASCII bool) {
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			switch {
			case r < 0x20:
				b.WriteString(`\u00`)
				b.WriteByte(hexDigits[r>>4])
				b.WriteByte(hexDigits[r&0xf])
			case ensureASCII && r > 0x7e:
				if r >= 0x10000 {
					r1, r2 := utf16.EncodeRune(r)
					fmt.Fprintf(b, `\u%04x\u%04x`, r1, r2)
				} else {
					fmt.Fprintf(b, `\u%04x`, r)
				}
			default:
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
}
