package chattemplate

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The lexer reproduces Jinja2's (jinja2/lexer.py, 3.1) with trim_blocks and
// lstrip_blocks on, as transformers configures it: "{%-"/"-%}" strip
// whitespace, "+" disables lstrip/trim, one trailing newline is dropped and
// every newline form becomes "\n".

type tokKind uint8

const (
	tEOF tokKind = iota
	tText
	tVarBegin
	tVarEnd
	tBlockBegin
	tBlockEnd
	tName
	tString
	tInt
	tFloat
	tOp
)

type token struct {
	kind tokKind
	val  string
	line int
	ival int64
	fval float64
}

func (t token) String() string {
	switch t.kind {
	case tEOF:
		return "end of template"
	case tVarEnd:
		return "'}}'"
	case tBlockEnd:
		return "'%}'"
	case tString:
		return reprString(t.val)
	default:
		return "'" + t.val + "'"
	}
}

// SyntaxError reports a template that does not lex or parse.
type SyntaxError struct {
	Line int
	Msg  string
}

// Error names the line and the problem.
func (e *SyntaxError) Error() string {
	return fmt.Sprintf("template syntax error: line %d: %s", e.Line, e.Msg)
}

type lexer struct {
	src          string
	pos          int
	line         int
	toks         []token
	lineStarting bool
}

func normalizeNewlines(s string) string {
	if !strings.Contains(s, "\r") {
		return s
	}
	s = strings.ReplaceAll(s, "\r\n", "\n")
	return strings.ReplaceAll(s, "\r", "\n")
}

func lex(src string) ([]token, error) {
	src = normalizeNewlines(src)
	src = strings.TrimSuffix(src, "\n") // keep_trailing_newline=False
	l := &lexer{src: src, line: 1, lineStarting: true}
	if err := l.run(); err != nil {
		return nil, err
	}
	l.toks = append(l.toks, token{kind: tEOF, line: l.line})
	return l.toks, nil
}

func (l *lexer) errorf(format string, args ...any) error {
	return &SyntaxError{Line: l.line, Msg: fmt.Sprintf(format, args...)}
}

func (l *lexer) emit(kind tokKind, val string) {
	l.toks = append(l.toks, token{kind: kind, val: val, line: l.line})
}

// nextTag finds the next "{{", "{%" or "{#" at or after pos.
func (l *lexer) nextTag(pos int) (int, byte) {
	for {
		i := strings.IndexByte(l.src[pos:], '{')
		if i < 0 || pos+i+1 >= len(l.src) {
			return -1, 0
		}
		j := pos + i
		switch c := l.src[j+1]; c {
		case '{', '%', '#':
			return j, c
		}
		pos = j + 1
	}
}

func isSpaceByte(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

// onlySpace is Python's re.fullmatch(r"\s+", s).
func onlySpace(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !unicode.IsSpace(r) {
			return false
		}
	}
	return true
}

// applyLeftStrip handles the text before a tag: "-" strips all trailing
// whitespace; otherwise lstrip_blocks removes the tag line's indentation for
// block and comment tags.
func (l *lexer) applyLeftStrip(text string, sign byte, kind byte) string {
	if sign == '-' {
		return strings.TrimRightFunc(text, unicode.IsSpace)
	}
	if sign != '+' && kind != '{' {
		lpos := strings.LastIndexByte(text, '\n') + 1
		if lpos > 0 || l.lineStarting {
			if onlySpace(text[lpos:]) {
				return text[:lpos]
			}
		}
	}
	return text
}

func (l *lexer) emitText(text string) {
	if text != "" {
		l.emit(tText, text)
		l.line += strings.Count(text, "\n")
	}
}

func (l *lexer) run() error {
	for l.pos < len(l.src) {
		j, kind := l.nextTag(l.pos)
		if j < 0 {
			l.emitText(l.src[l.pos:])
			l.pos = len(l.src)
			return nil
		}
		text := l.src[l.pos:j]
		p := j + 2
		var sign byte
		if p < len(l.src) && (l.src[p] == '-' || l.src[p] == '+') {
			sign = l.src[p]
			p++
		}
		if kind == '%' {
			if end, ok := l.rawBegin(p); ok {
				l.emitText(l.applyLeftStrip(text, sign, kind))
				l.line += strings.Count(l.src[l.pos+len(text):end], "\n")
				l.pos = end
				l.lineStarting = l.src[end-1] == '\n'
				if err := l.raw(); err != nil {
					return err
				}
				continue
			}
		}
		l.emitText(l.applyLeftStrip(text, sign, kind))
		l.line += strings.Count(l.src[l.pos+len(text):j], "\n")
		l.pos = p
		switch kind {
		case '#':
			if err := l.comment(); err != nil {
				return err
			}
		case '{':
			l.emit(tVarBegin, "{{")
			if err := l.inside(false); err != nil {
				return err
			}
		case '%':
			l.emit(tBlockBegin, "{%")
			if err := l.inside(true); err != nil {
				return err
			}
		}
	}
	return nil
}

// skipSpaces returns the offset of the first byte at or after p in s that
// is not whitespace.
func skipSpaces(s string, p int) int {
	for p < len(s) && isSpaceByte(s[p]) {
		p++
	}
	return p
}

// rawBegin matches `\s*raw\s*(-%}\s*|%})` at p and returns the end offset.
func (l *lexer) rawBegin(p int) (int, bool) {
	s := l.src
	p = skipSpaces(s, p)
	if !strings.HasPrefix(s[p:], "raw") {
		return 0, false
	}
	p += 3
	if p < len(s) && (isIdentByte(s[p])) {
		return 0, false
	}
	p = skipSpaces(s, p)
	switch {
	case strings.HasPrefix(s[p:], "-%}"):
		return skipSpaces(s, p+3), true
	case strings.HasPrefix(s[p:], "%}"):
		return p + 2, true
	}
	return 0, false
}

// raw scans a raw block's body up to {% endraw %}.
func (l *lexer) raw() error {
	s := l.src
	for p := l.pos; ; {
		i := strings.Index(s[p:], "{%")
		if i < 0 {
			return l.errorf("missing end of raw directive")
		}
		j := p + i
		q := j + 2
		var sign byte
		if q < len(s) && (s[q] == '-' || s[q] == '+') {
			sign = s[q]
			q++
		}
		q = skipSpaces(s, q)
		if !strings.HasPrefix(s[q:], "endraw") {
			p = j + 2
			continue
		}
		q += len("endraw")
		q = skipSpaces(s, q)
		end, ok := l.blockEnd(q)
		if !ok {
			p = j + 2
			continue
		}
		l.emitText(l.applyLeftStrip(s[l.pos:j], sign, '%'))
		l.line += strings.Count(s[j:end], "\n")
		l.pos = end
		l.lineStarting = end > 0 && s[end-1] == '\n'
		return nil
	}
}

// blockEnd matches `+%}`, `-%}\s*` or `%}\n?` at p.
func (l *lexer) blockEnd(p int) (int, bool) {
	s := l.src
	switch {
	case strings.HasPrefix(s[p:], "+%}"):
		return p + 3, true
	case strings.HasPrefix(s[p:], "-%}"):
		return skipSpaces(s, p+3), true
	case strings.HasPrefix(s[p:], "%}"):
		p += 2
		if p < len(s) && s[p] == '\n' {
			p++
		}
		return p, true
	}
	return 0, false
}

func (l *lexer) comment() error {
	s := l.src
	for p := l.pos; p < len(s); p++ {
		var end int
		switch {
		case strings.HasPrefix(s[p:], "+#}"):
			end = p + 3
		case strings.HasPrefix(s[p:], "-#}"):
			end = p + 3
			for end < len(s) && isSpaceByte(s[end]) {
				end++
			}
		case strings.HasPrefix(s[p:], "#}"):
			end = p + 2
			if end < len(s) && s[end] == '\n' {
				end++
			}
		default:
			continue
		}
		l.line += strings.Count(s[l.pos:end], "\n")
		l.pos = end
		l.lineStarting = s[end-1] == '\n'
		return nil
	}
	return l.errorf("missing end of comment tag")
}

func isIdentByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

var twoCharOps = []string{"//", "**", "==", "!=", "<=", ">="}

// inside lexes the tokens of a {{ }} or {% %} tag up to its end marker.
func (l *lexer) inside(block bool) error {
	s := l.src
	depth := 0
	for {
		p := l.pos
		if p >= len(s) {
			if block {
				return l.errorf("unexpected end of template, expected '%%}'")
			}
			return l.errorf("unexpected end of template, expected '}}'")
		}
		if depth == 0 {
			if block {
				if end, ok := l.blockEnd(p); ok {
					l.emit(tBlockEnd, "%}")
					l.line += strings.Count(s[p:end], "\n")
					l.pos = end
					l.lineStarting = s[end-1] == '\n'
					return nil
				}
			} else {
				end := -1
				if strings.HasPrefix(s[p:], "-}}") {
					end = p + 3
					for end < len(s) && isSpaceByte(s[end]) {
						end++
					}
				} else if strings.HasPrefix(s[p:], "}}") {
					end = p + 2
				}
				if end >= 0 {
					l.emit(tVarEnd, "}}")
					l.line += strings.Count(s[p:end], "\n")
					l.pos = end
					l.lineStarting = s[end-1] == '\n'
					return nil
				}
			}
		}
		c := s[p]
		switch {
		case isSpaceByte(c):
			if c == '\n' {
				l.line++
			}
			l.pos++
		case c == '\'' || c == '"':
			if err := l.lexString(c); err != nil {
				return err
			}
		case c >= '0' && c <= '9':
			l.lexNumber()
		case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			q := p
			for q < len(s) && isIdentByte(s[q]) {
				q++
			}
			l.emit(tName, s[p:q])
			l.pos = q
		default:
			op := ""
			for _, o := range twoCharOps {
				if strings.HasPrefix(s[p:], o) {
					op = o
					break
				}
			}
			if op == "" {
				if strings.IndexByte("+-/*%~[](){}|.,:=<>;", c) < 0 {
					r, _ := utf8.DecodeRuneInString(s[p:])
					return l.errorf("unexpected char %q", r)
				}
				op = s[p : p+1]
			}
			switch op {
			case "(", "[", "{":
				depth++
			case ")", "]", "}":
				if depth == 0 {
					return l.errorf("unexpected '%s'", op)
				}
				depth--
			}
			l.emit(tOp, op)
			l.pos += len(op)
		}
	}
}

func (l *lexer) lexString(q byte) error {
	s := l.src
	p := l.pos + 1
	for p < len(s) && s[p] != q {
		if s[p] == '\\' {
			p++
		}
		p++
	}
	if p >= len(s) {
		return l.errorf("unterminated string")
	}
	raw := s[l.pos+1 : p]
	l.emit(tString, unescapePython(raw))
	l.line += strings.Count(raw, "\n")
	l.pos = p + 1
	return nil
}

// unescapePython decodes backslash escapes as Python's unicode-escape codec
// does for Jinja string literals; unknown escapes stay as written.
func unescapePython(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' || i+1 >= len(s) {
			b.WriteByte(c)
			continue
		}
		i++
		switch e := s[i]; e {
		case '\n':
		case '\\', '\'', '"':
			b.WriteByte(e)
		case 'a':
			b.WriteByte('\a')
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'v':
			b.WriteByte('\v')
		case 'x', 'u', 'U':
			n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
			if i+n < len(s)+0 && i+1+n <= len(s) {
				if v, err := strconv.ParseUint(s[i+1:i+1+n], 16, 32); err == nil && v <= unicode.MaxRune {
					b.WriteRune(rune(v))
					i += n
					continue
				}
			}
			b.WriteByte('\\')
			b.WriteByte(e)
		case '0', '1', '2', '3', '4', '5', '6', '7':
			v := 0
			k := 0
			for k < 3 && i+k < len(s) && s[i+k] >= '0' && s[i+k] <= '7' {
				v = v*8 + int(s[i+k]-'0')
				k++
			}
			b.WriteRune(rune(v))
			i += k - 1
		default:
			b.WriteByte('\\')
			b.WriteByte(e)
		}
	}
	return b.String()
}

func (l *lexer) lexNumber() {
	s := l.src
	p := l.pos
	digits := func(q int) int {
		start := q
		for q < len(s) && (s[q] >= '0' && s[q] <= '9' || s[q] == '_' && q > start && q+1 < len(s) && s[q+1] >= '0' && s[q+1] <= '9') {
			q++
		}
		return q
	}
	q := digits(p)
	isFloat := false
	afterDot := p > 0 && s[p-1] == '.'
	if !afterDot {
		r := q
		if r+1 < len(s) && s[r] == '.' && s[r+1] >= '0' && s[r+1] <= '9' {
			r = digits(r + 1)
			isFloat = true
		}
		if r < len(s) && (s[r] == 'e' || s[r] == 'E') {
			t := r + 1
			if t < len(s) && (s[t] == '+' || s[t] == '-') {
				t++
			}
			if t < len(s) && s[t] >= '0' && s[t] <= '9' {
				r = digits(t)
				isFloat = true
			}
		}
		if isFloat {
			q = r
		}
	}
	text := strings.ReplaceAll(s[p:q], "_", "")
	if isFloat {
		f, _ := strconv.ParseFloat(text, 64)
		l.toks = append(l.toks, token{kind: tFloat, val: text, fval: f, line: l.line})
	} else {
		n, err := strconv.ParseInt(text, 10, 64)
		if err != nil {
			f, _ := strconv.ParseFloat(text, 64)
			l.toks = append(l.toks, token{kind: tFloat, val: text, fval: f, line: l.line})
		} else {
			l.toks = append(l.toks, token{kind: tInt, val: text, ival: n, line: l.line})
		}
	}
	l.pos = q
}
