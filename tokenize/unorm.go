package tokenize

import (
	"slices"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// unicodeNorm is an NFC/NFD/NFKC/NFKD normalizer. x/text's norm follows the
// Stream-Safe Text Format: after 30 non-starters in a row it inserts U+034F
// and reorders no further. The tokenizers library (unicode-normalization
// crate) reorders the whole run and inserts nothing, so such text takes an
// exact slow path here.
type unicodeNorm struct {
	form       norm.Form
	compose    bool // NFC, NFKC
	compatible bool // NFKC, NFKD
}

func newUnicodeNorm(f norm.Form) unicodeNorm {
	return unicodeNorm{form: f, compose: f == norm.NFC || f == norm.NFKC, compatible: f == norm.NFKC || f == norm.NFKD}
}

func (n unicodeNorm) normalize(s string) string {
	if isASCII(s) {
		return s // no form changes ASCII text
	}
	out := n.form.String(s)
	// U+034F in the output that was not in the input was inserted for
	// stream safety: redo the text exactly.
	if strings.Contains(out, cgj) && strings.Count(out, cgj) > strings.Count(s, cgj) {
		return n.slow(s)
	}
	return out
}

const cgj = "\u034F"

// isASCII reports whether s holds bytes below 0x80 only, eight at a time
// (the compiler reads each group of eight with one load).
func isASCII(s string) bool {
	var acc uint64
	i := 0
	for ; i+8 <= len(s); i += 8 {
		acc |= uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
			uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
	}
	for ; i < len(s); i++ {
		acc |= uint64(s[i])
	}
	return acc&0x8080808080808080 == 0
}

// slow normalizes by UAX #15's algorithm directly: full decomposition one
// character at a time (never more than 18 code points, so x/text inserts
// nothing), canonical ordering of each whole run of non-starters, then
// canonical composition.
func (n unicodeNorm) slow(s string) string {
	dec := norm.NFD
	if n.compatible {
		dec = norm.NFKD
	}
	var rs []rune
	for _, r := range s {
		rs = append(rs, []rune(dec.String(string(r)))...)
	}
	ccc := func(r rune) uint8 { return norm.NFD.PropertiesString(string(r)).CCC() }
	for i := 0; i < len(rs); {
		if ccc(rs[i]) == 0 {
			i++
			continue
		}
		j := i
		for j < len(rs) && ccc(rs[j]) != 0 {
			j++
		}
		slices.SortStableFunc(rs[i:j], func(a, b rune) int { return int(ccc(a)) - int(ccc(b)) })
		i = j
	}
	if !n.compose || len(rs) == 0 {
		return string(rs)
	}
	out := make([]rune, 0, len(rs))
	starter := -1 // index in out of the last starter
	lastClass := 256
	for _, r := range rs {
		cc := int(ccc(r))
		if starter >= 0 && (lastClass < cc || lastClass == 0) {
			if c, ok := composePair(out[starter], r); ok {
				out[starter] = c
				continue
			}
		}
		if cc == 0 {
			starter = len(out)
		}
		lastClass = cc
		out = append(out, r)
	}
	return string(out)
}

// composePair returns the primary composite of a and b, if any.
func composePair(a, b rune) (rune, bool) {
	var buf strings.Builder
	buf.WriteRune(a)
	buf.WriteRune(b)
	c := norm.NFC.String(buf.String())
	r, size := utf8.DecodeRuneInString(c)
	if size == len(c) && r != a {
		return r, true
	}
	return 0, false
}
