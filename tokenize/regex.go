package tokenize

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

// regex is a tokenizer.json regular expression, run by regexp2 in its
// default (.NET-like) mode: unlike RE2 mode its \s is Unicode White_Space,
// as in Oniguruma, which the tokenizers library uses.
type regex struct {
	source string
	re     *regexp2.Regexp
}

// compileRegex compiles a tokenizer.json pattern for regexp2, widening each
// \p{X} by the code points Unicode 16.0 added to X (see unicode16.go).
func compileRegex(pattern string) (*regex, error) {
	re, err := regexp2.Compile(patchUnicode(pattern), regexp2.None)
	if err != nil {
		return nil, fmt.Errorf("regex %q: %w", pattern, err)
	}
	return &regex{source: pattern, re: re}, nil
}

func rangesLiteral(t *unicode.RangeTable) string {
	var b strings.Builder
	for _, r := range t.R16 {
		fmt.Fprintf(&b, "%c-%c", rune(r.Lo), rune(r.Hi))
	}
	for _, r := range t.R32 {
		fmt.Fprintf(&b, "%c-%c", rune(r.Lo), rune(r.Hi))
	}
	return b.String()
}

// unicode16Extra maps a property escape (\p{L}, \p{Lo}, ...) to the class
// members it gains under Unicode 16.0.
var unicode16Extra = func() map[string]string {
	m := map[string]string{}
	for cat, t := range unicode16Added {
		lit := rangesLiteral(t)
		m[`\p{`+cat+`}`] += lit
		m[`\p{`+cat[:1]+`}`] += lit
	}
	return m
}()

// patchUnicode rewrites the property classes that gained members after
// Unicode 15.0. Inside a character class the extra ranges are appended to
// it; outside, the property becomes a class of its own. Negated properties
// (\P{..}) are left as they are.
func patchUnicode(p string) string {
	var b strings.Builder
	inClass := false
	for i := 0; i < len(p); {
		c := p[i]
		if c == '\\' && i+1 < len(p) {
			if p[i+1] == 'p' {
				if end := strings.IndexByte(p[i:], '}'); end > 0 {
					prop := p[i : i+end+1]
					if add, ok := unicode16Extra[prop]; ok {
						if inClass {
							b.WriteString(prop + add)
						} else {
							b.WriteString("[" + prop + add + "]")
						}
						i += len(prop)
						continue
					}
				}
			}
			_, n := utf8.DecodeRuneInString(p[i+1:])
			b.WriteString(p[i : i+1+n])
			i += 1 + n
			continue
		}
		switch {
		case c == '[' && !inClass:
			inClass = true
			b.WriteByte(c)
			i++
			// A ']' right after '[' or '[^' is a literal member.
			if i < len(p) && p[i] == '^' {
				b.WriteByte('^')
				i++
			}
			if i < len(p) && p[i] == ']' {
				b.WriteByte(']')
				i++
			}
			continue
		case c == ']' && inClass:
			inClass = false
		}
		b.WriteByte(c)
		i++
	}
	return b.String()
}

// findAll calls fn with the byte offsets of each successive non-overlapping
// match in s, leftmost first.
func (r *regex) findAll(s string, fn func(start, end int)) {
	runes := []rune(s)
	// byteAt[i] is the byte offset of rune i; byteAt[len(runes)] == len(s).
	byteAt := make([]int, len(runes)+1)
	off := 0
	for i, rr := range runes {
		byteAt[i] = off
		off += utf8.RuneLen(rr)
	}
	byteAt[len(runes)] = off
	m, err := r.re.FindRunesMatch(runes)
	for err == nil && m != nil {
		fn(byteAt[m.Index], byteAt[m.Index+m.Length])
		m, err = r.re.FindNextMatch(m)
	}
}
