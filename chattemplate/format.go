package chattemplate

import (
	"math"
	"strconv"
	"strings"
)

// Python's printf-style `%` formatting and str.format, for the conversions
// templates use (%s %d %f %r %x, {} {0} {name} {:>8} {:.2f}).

type fmtSpec struct {
	fill      rune
	align     rune // 0, '<', '>', '^', '='
	sign      rune // 0, '+', '-', ' '
	alt       bool
	zero      bool
	width     int
	precision int // -1: none
	typ       byte
	grouping  bool
}

func (st *state) percentFormat(f string, arg Value) (Value, error) {
	var pos []Value
	var mapping *Dict
	// Python treats any non-tuple argument with __getitem__ (dict, list) as
	// a possible mapping: unused, it is no error.
	mappingLike := false
	switch x := arg.(type) {
	case Tuple:
		pos = x
	case *Dict:
		mapping = x
		mappingLike = true
		pos = []Value{x}
	case *List, *Undefined:
		mappingLike = true
		pos = []Value{x}
	default:
		pos = []Value{arg}
	}
	next := 0
	var b strings.Builder
	for i := 0; i < len(f); i++ {
		c := f[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		i++
		if i >= len(f) {
			return nil, errorf("ValueError", "incomplete format")
		}
		var v Value
		haveV := false
		if f[i] == '(' {
			end := strings.IndexByte(f[i:], ')')
			if end < 0 || mapping == nil {
				return nil, typeErrorf("format requires a mapping")
			}
			key := f[i+1 : i+end]
			got, ok := mapping.Get(key)
			if !ok {
				return nil, errorf("KeyError", "%s", reprString(key))
			}
			v, haveV = got, true
			i += end + 1
		}
		spec := fmtSpec{fill: ' ', precision: -1}
		for ; i < len(f); i++ {
			switch f[i] {
			case '-':
				spec.align = '<'
				continue
			case '+':
				spec.sign = '+'
				continue
			case ' ':
				if spec.sign == 0 {
					spec.sign = ' '
				}
				continue
			case '#':
				spec.alt = true
				continue
			case '0':
				spec.zero = true
				continue
			}
			break
		}
		for i < len(f) && f[i] >= '0' && f[i] <= '9' {
			spec.width = spec.width*10 + int(f[i]-'0')
			i++
			if spec.width > 4096 {
				return nil, errorf("ValueError", "format width too big")
			}
		}
		if i < len(f) && f[i] == '.' {
			i++
			spec.precision = 0
			for i < len(f) && f[i] >= '0' && f[i] <= '9' {
				spec.precision = spec.precision*10 + int(f[i]-'0')
				i++
				if spec.precision > 4096 {
					return nil, errorf("ValueError", "format precision too big")
				}
			}
		}
		if i >= len(f) {
			return nil, errorf("ValueError", "incomplete format")
		}
		spec.typ = f[i]
		if spec.typ == '%' {
			b.WriteByte('%')
			continue
		}
		if !haveV {
			if next >= len(pos) {
				return nil, typeErrorf("not enough arguments for format string")
			}
			v = pos[next]
			next++
		}
		if spec.align == '<' {
			spec.zero = false
		} else if spec.zero {
			spec.align = '='
			spec.fill = '0'
		} else {
			spec.align = '>'
		}
		s, err := formatOne(v, spec, true)
		if err != nil {
			return nil, err
		}
		b.WriteString(s)
		if err := st.checkSize(b.Len()); err != nil {
			return nil, err
		}
	}
	if !mappingLike && next < len(pos) {
		return nil, typeErrorf("not all arguments converted during string formatting")
	}
	return b.String(), nil
}

// formatOne renders one value for a conversion type; percent selects
// %-formatting rules (where 's' applies str() to anything).
func formatOne(v Value, spec fmtSpec, percent bool) (string, error) {
	var body string
	numeric := false
	neg := false
	switch spec.typ {
	case 's', 0:
		if spec.typ == 0 {
			if _, _, _, isNum := number(v); isNum {
				if _, isBool := v.(bool); !isBool {
					return formatNumberDefault(v, spec)
				}
			}
		}
		body = strValue(v)
		if spec.precision >= 0 {
			rs := []rune(body)
			if spec.precision < len(rs) {
				body = string(rs[:spec.precision])
			}
		}
	case 'r', 'a':
		body = reprValue(v)
	case 'd', 'i', 'u', 'x', 'X', 'o', 'c', 'b', 'n':
		i, f, isF, ok := number(v)
		if !ok {
			return "", typeErrorf("%%%c format: a real number is required, not %s", spec.typ, typeName(v))
		}
		if isF {
			if !percent && spec.typ != 'c' {
				return "", errorf("ValueError", "Unknown format code '%c' for object of type 'float'", spec.typ)
			}
			i = int64(f)
		}
		numeric = true
		if i < 0 {
			neg = true
			i = -i
		}
		switch spec.typ {
		case 'x':
			body = strconv.FormatInt(i, 16)
			if spec.alt {
				body = "0x" + body
			}
		case 'X':
			body = strings.ToUpper(strconv.FormatInt(i, 16))
			if spec.alt {
				body = "0X" + body
			}
		case 'o':
			body = strconv.FormatInt(i, 8)
			if spec.alt {
				body = "0o" + body
			}
		case 'b':
			body = strconv.FormatInt(i, 2)
		case 'c':
			body = string(rune(i))
			numeric = false
		default:
			body = strconv.FormatInt(i, 10)
			if spec.grouping {
				body = groupThousands(body)
			}
		}
	case 'f', 'F', 'e', 'E', 'g', 'G', '%':
		i, f, isF, ok := number(v)
		if !ok {
			return "", typeErrorf("must be real number, not %s", typeName(v))
		}
		if !isF {
			f = float64(i)
		}
		numeric = true
		if f < 0 || (f == 0 && math.Signbit(f)) {
			neg = true
			f = -f
		}
		prec := spec.precision
		if prec < 0 {
			prec = 6
		}
		switch spec.typ {
		case 'f', 'F':
			body = strconv.FormatFloat(f, 'f', prec, 64)
		case 'e', 'E':
			body = pyExp(strconv.FormatFloat(f, 'e', prec, 64))
		case 'g', 'G':
			if prec == 0 {
				prec = 1
			}
			body = pyExp(strconv.FormatFloat(f, 'g', prec, 64))
			if spec.alt && !strings.Contains(body, ".") {
				body += "."
			}
		case '%':
			body = strconv.FormatFloat(f*100, 'f', prec, 64) + "%"
		}
		if spec.typ == 'E' || spec.typ == 'G' || spec.typ == 'F' {
			body = strings.ToUpper(body)
		}
		if spec.grouping {
			intPart, frac, _ := strings.Cut(body, ".")
			body = groupThousands(intPart)
			if frac != "" {
				body += "." + frac
			}
		}
	default:
		return "", errorf("ValueError", "unsupported format character '%c'", spec.typ)
	}
	sign := ""
	if numeric {
		switch {
		case neg:
			sign = "-"
		case spec.sign == '+':
			sign = "+"
		case spec.sign == ' ':
			sign = " "
		}
	}
	return pad(sign, body, spec, numeric), nil
}

func pyExp(s string) string {
	// Go writes e+07 / e-07 already with two digits; Python does the same.
	return s
}

func groupThousands(digits string) string {
	if len(digits) <= 3 {
		return digits
	}
	var b strings.Builder
	pre := len(digits) % 3
	if pre > 0 {
		b.WriteString(digits[:pre])
	}
	for i := pre; i < len(digits); i += 3 {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(digits[i : i+3])
	}
	return b.String()
}

func pad(sign, body string, spec fmtSpec, numeric bool) string {
	n := len([]rune(sign)) + len([]rune(body))
	if spec.width <= n {
		return sign + body
	}
	fill := strings.Repeat(string(spec.fill), spec.width-n)
	align := spec.align
	if align == 0 {
		if numeric {
			align = '>'
		} else {
			align = '<'
		}
	}
	switch align {
	case '<':
		return sign + body + fill
	case '=':
		return sign + fill + body
	case '^':
		k := spec.width - n
		left := strings.Repeat(string(spec.fill), k/2)
		right := strings.Repeat(string(spec.fill), k-k/2)
		return left + sign + body + right
	default:
		return fill + sign + body
	}
}

func formatNumberDefault(v Value, spec fmtSpec) (string, error) {
	switch x := v.(type) {
	case int64:
		spec.typ = 'd'
		return formatOne(x, spec, false)
	case float64:
		if spec.precision < 0 {
			s := formatFloat(math.Abs(x))
			sign := ""
			if x < 0 || (x == 0 && math.Signbit(x)) {
				sign = "-"
			} else if spec.sign == '+' {
				sign = "+"
			} else if spec.sign == ' ' {
				sign = " "
			}
			return pad(sign, s, spec, true), nil
		}
		spec.typ = 'g'
		return formatOne(x, spec, false)
	}
	return strValue(v), nil
}

// parseFormatSpec reads [[fill]align][sign][#][0][width][,][.precision][type].
func parseFormatSpec(s string) (fmtSpec, error) {
	spec := fmtSpec{fill: ' ', precision: -1}
	rs := []rune(s)
	i := 0
	isAlign := func(r rune) bool { return r == '<' || r == '>' || r == '^' || r == '=' }
	if len(rs) >= 2 && isAlign(rs[1]) {
		spec.fill, spec.align = rs[0], rs[1]
		i = 2
	} else if len(rs) >= 1 && isAlign(rs[0]) {
		spec.align = rs[0]
		i = 1
	}
	if i < len(rs) && (rs[i] == '+' || rs[i] == '-' || rs[i] == ' ') {
		spec.sign = rs[i]
		i++
	}
	if i < len(rs) && rs[i] == '#' {
		spec.alt = true
		i++
	}
	if i < len(rs) && rs[i] == '0' {
		spec.zero = true
		if spec.align == 0 {
			spec.fill, spec.align = '0', '='
		}
		i++
	}
	for i < len(rs) && rs[i] >= '0' && rs[i] <= '9' {
		spec.width = spec.width*10 + int(rs[i]-'0')
		i++
		if spec.width > 4096 {
			return spec, errorf("ValueError", "format width too big")
		}
	}
	if i < len(rs) && (rs[i] == ',' || rs[i] == '_') {
		spec.grouping = true
		i++
	}
	if i < len(rs) && rs[i] == '.' {
		i++
		spec.precision = 0
		start := i
		for i < len(rs) && rs[i] >= '0' && rs[i] <= '9' {
			spec.precision = spec.precision*10 + int(rs[i]-'0')
			i++
			if spec.precision > 4096 {
				return spec, errorf("ValueError", "format precision too big")
			}
		}
		if i == start {
			return spec, errorf("ValueError", "Format specifier missing precision")
		}
	}
	if i < len(rs) {
		if rs[i] > 127 {
			return spec, errorf("ValueError", "Invalid format specifier")
		}
		spec.typ = byte(rs[i])
		i++
	}
	if i != len(rs) {
		return spec, errorf("ValueError", "Invalid format specifier")
	}
	return spec, nil
}

// strFormat is Python's str.format.
func (st *state) strFormat(f string, args []Value, kw *Dict) (Value, error) {
	var b strings.Builder
	auto := 0
	for i := 0; i < len(f); i++ {
		c := f[i]
		if c == '}' {
			if i+1 < len(f) && f[i+1] == '}' {
				b.WriteByte('}')
				i++
				continue
			}
			return nil, errorf("ValueError", "Single '}' encountered in format string")
		}
		if c != '{' {
			b.WriteByte(c)
			continue
		}
		if i+1 < len(f) && f[i+1] == '{' {
			b.WriteByte('{')
			i++
			continue
		}
		end := strings.IndexByte(f[i:], '}')
		if end < 0 {
			return nil, errorf("ValueError", "Single '{' encountered in format string")
		}
		field := f[i+1 : i+end]
		i += end
		spec := ""
		if k := strings.IndexByte(field, ':'); k >= 0 {
			field, spec = field[:k], field[k+1:]
		}
		conv := byte(0)
		if k := strings.IndexByte(field, '!'); k >= 0 {
			if k+1 < len(field) {
				conv = field[k+1]
			}
			field = field[:k]
		}
		// field: name or index, then .attr / [key] parts
		first := field
		rest := ""
		if k := strings.IndexAny(field, ".["); k >= 0 {
			first, rest = field[:k], field[k:]
		}
		var v Value
		switch {
		case first == "":
			if auto >= len(args) {
				return nil, errorf("IndexError", "Replacement index %d out of range for positional args tuple", auto)
			}
			v = args[auto]
			auto++
		case first[0] >= '0' && first[0] <= '9':
			n, err := strconv.Atoi(first)
			if err != nil || n >= len(args) {
				return nil, errorf("IndexError", "Replacement index %s out of range for positional args tuple", first)
			}
			v = args[n]
		default:
			var ok bool
			if kw != nil {
				v, ok = kw.Get(first)
			}
			if !ok {
				return nil, errorf("KeyError", "%s", reprString(first))
			}
		}
		for rest != "" {
			var err error
			if rest[0] == '.' {
				k := strings.IndexAny(rest[1:], ".[")
				name := rest[1:]
				if k >= 0 {
					name, rest = rest[1:1+k], rest[1+k:]
				} else {
					rest = ""
				}
				if v, err = getAttr(v, name); err != nil {
					return nil, err
				}
			} else {
				k := strings.IndexByte(rest, ']')
				if k < 0 {
					return nil, errorf("ValueError", "Missing ']' in format string")
				}
				var key Value = rest[1:k]
				if n, err := strconv.ParseInt(rest[1:k], 10, 64); err == nil {
					key = n
				}
				rest = rest[k+1:]
				if v, err = getItem(v, key); err != nil {
					return nil, err
				}
			}
		}
		switch conv {
		case 'r', 'a':
			v = reprValue(v)
		case 's':
			v = strValue(v)
		}
		fs, err := parseFormatSpec(spec)
		if err != nil {
			return nil, err
		}
		if _, isInt := v.(int64); isInt && fs.precision >= 0 && (fs.typ == 0 || fs.typ == 'd') {
			return nil, errorf("ValueError", "Precision not allowed in integer format specifier")
		}
		if fs.typ == 's' {
			if _, ok := v.(string); !ok {
				return nil, errorf("ValueError", "Unknown format code 's' for object of type '%s'", typeName(v))
			}
		}
		s, err := formatOne(v, fs, false)
		if err != nil {
			return nil, err
		}
		b.WriteString(s)
		if err := st.checkSize(b.Len()); err != nil {
			return nil, err
		}
	}
	return b.String(), nil
}
