package routing

import (
	"bytes"
	"encoding/json"
	"errors"
)

// scanObject walks the top level of a JSON object without decoding the
// values it is not asked about: visit gets each key and the raw bytes of its
// value. The router reads a handful of small fields from bodies that can be
// megabytes of messages, so skipping is much cheaper than decoding. Skipped
// values are checked for balance and string termination only; a value the
// router reads is decoded (and so validated) by encoding/json.
func scanObject(b []byte, visit func(key, value []byte) error) error {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return errNotObject
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return trailing(b, i+1)
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return errSyntax(i)
		}
		kEnd, escaped, err := skipString(b, i)
		if err != nil {
			return err
		}
		key := b[i+1 : kEnd-1]
		if escaped {
			var k string
			if err := json.Unmarshal(b[i:kEnd], &k); err != nil {
				return errSyntax(i)
			}
			key = []byte(k)
		}
		i = skipSpace(b, kEnd)
		if i >= len(b) || b[i] != ':' {
			return errSyntax(i)
		}
		i = skipSpace(b, i+1)
		vEnd, err := skipValue(b, i)
		if err != nil {
			return err
		}
		if err := visit(key, b[i:vEnd]); err != nil {
			return err
		}
		i = skipSpace(b, vEnd)
		if i >= len(b) {
			return errSyntax(i)
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return trailing(b, i+1)
		default:
			return errSyntax(i)
		}
	}
}

var errNotObject = errors.New("not a JSON object")

type syntaxError int

func (e syntaxError) Error() string { return "syntax error at offset " + itoa(int(e)) }

func errSyntax(at int) error { return syntaxError(at) }

func itoa(n int) string {
	var buf [20]byte
	i := len(buf)
	for {
		i--
		buf[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(buf[i:])
		}
	}
}

func trailing(b []byte, i int) error {
	if i = skipSpace(b, i); i != len(b) {
		return errSyntax(i)
	}
	return nil
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the string starting at b[i] == '"'.
// It looks for the closing quote and for backslashes with bytes.IndexByte
// (vectorised) and remembers the quote it found, so a string costs one pass
// however many escapes it holds.
func skipString(b []byte, i int) (end int, escaped bool, err error) {
	i++
	q := -1 // the next unescaped-looking quote at or after i
	for {
		if q < i {
			j := bytes.IndexByte(b[i:], '"')
			if j < 0 {
				return 0, false, errSyntax(len(b))
			}
			q = i + j
		}
		k := bytes.IndexByte(b[i:q], '\\')
		if k < 0 {
			return q + 1, escaped, nil
		}
		escaped = true
		i += k + 2 // the escape and the escaped byte (\uXXXX needs no special case)
		if i > len(b) {
			return 0, false, errSyntax(len(b))
		}
	}
}

// skipValue returns the index after the JSON value starting at b[i].
func skipValue(b []byte, i int) (int, error) {
	if i >= len(b) {
		return 0, errSyntax(i)
	}
	switch b[i] {
	case '"':
		end, _, err := skipString(b, i)
		return end, err
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				end, _, err := skipString(b, i)
				if err != nil {
					return 0, err
				}
				i = end
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1, nil
				}
			}
			i++
		}
		return 0, errSyntax(len(b))
	default:
		start := i
		for i < len(b) && b[i] != ',' && b[i] != '}' && b[i] != ']' && b[i] != ' ' && b[i] != '\n' && b[i] != '\t' && b[i] != '\r' {
			i++
		}
		if i == start {
			return 0, errSyntax(i)
		}
		return i, nil
	}
}

// countElements counts the elements of the JSON array b without decoding
// them, stopping once it has seen stopAt (so a huge array costs no more than
// the limit it is checked against). Elements are checked as skipValue does.
func countElements(b []byte, stopAt int) (int, error) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '[' {
		return 0, errors.New("not a JSON array")
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return 0, nil
	}
	n := 0
	for {
		end, err := skipValue(b, i)
		if err != nil {
			return n, err
		}
		if n++; n >= stopAt {
			return n, nil
		}
		i = skipSpace(b, end)
		if i >= len(b) {
			return n, errSyntax(i)
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case ']':
			return n, nil
		default:
			return n, errSyntax(i)
		}
	}
}
