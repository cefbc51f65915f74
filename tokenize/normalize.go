package tokenize

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"

	"golang.org/x/text/unicode/norm"
)

// normalizer rewrites a text segment before pre-tokenization. Offsets are
// not tracked: routing needs ids only.
type normalizer interface {
	normalize(s string) string
}

type normalizerSeq []normalizer

func (n normalizerSeq) normalize(s string) string {
	for _, m := range n {
		s = m.normalize(s)
	}
	return s
}

// prependNorm adds its text before a non-empty segment (tokenizers' Prepend).
type prependNorm string

func (p prependNorm) normalize(s string) string {
	if s == "" {
		return s
	}
	return string(p) + s
}

type replaceStringNorm struct{ old, new string }

func (r replaceStringNorm) normalize(s string) string {
	return strings.ReplaceAll(s, r.old, r.new)
}

type replaceRegexNorm struct {
	re  *regex
	new string
}

func (r replaceRegexNorm) normalize(s string) string {
	var b strings.Builder
	last := 0
	r.re.findAll(s, func(start, end int) {
		b.WriteString(s[last:start])
		b.WriteString(r.new)
		last = end
	})
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

type lowercaseNorm struct{}

// normalize lowercases as Rust's str::to_lowercase: U+0130 becomes "i̇"
// (Go's simple mapping would give "i").
func (lowercaseNorm) normalize(s string) string {
	s = strings.ReplaceAll(s, "\u0130", "i\u0307")
	return strings.ToLower(s)
}

type stripNorm struct{ left, right bool }

func (n stripNorm) normalize(s string) string {
	if n.left {
		s = strings.TrimLeftFunc(s, unicode.IsSpace)
	}
	if n.right {
		s = strings.TrimRightFunc(s, unicode.IsSpace)
	}
	return s
}

func buildNormalizer(b json.RawMessage) (normalizer, error) {
	c, err := decodeComponent("normalizer", b)
	if err != nil {
		return nil, err
	}
	switch c.Type {
	case "Sequence":
		var seq normalizerSeq
		for i, nb := range c.Normalizers {
			n, err := buildNormalizer(nb)
			if err != nil {
				return nil, fmt.Errorf("normalizer Sequence[%d]: %w", i, err)
			}
			if n == nil {
				continue
			}
			if inner, ok := n.(normalizerSeq); ok {
				seq = append(seq, inner...)
			} else {
				seq = append(seq, n)
			}
		}
		if len(seq) == 0 {
			return nil, nil
		}
		if len(seq) == 1 {
			return seq[0], nil
		}
		return seq, nil
	case "NFC":
		return newUnicodeNorm(norm.NFC), nil
	case "NFD":
		return newUnicodeNorm(norm.NFD), nil
	case "NFKC":
		return newUnicodeNorm(norm.NFKC), nil
	case "NFKD":
		return newUnicodeNorm(norm.NFKD), nil
	case "Prepend":
		if c.Prepend == nil {
			return nil, fmt.Errorf("normalizer Prepend: missing \"prepend\"")
		}
		return prependNorm(*c.Prepend), nil
	case "Replace":
		if c.Pattern == nil || c.Content == nil {
			return nil, fmt.Errorf("normalizer Replace: missing \"pattern\" or \"content\"")
		}
		switch {
		case c.Pattern.String != nil:
			if *c.Pattern.String == "" {
				return nil, fmt.Errorf("%w: normalizer Replace with an empty string pattern", ErrUnsupported)
			}
			return replaceStringNorm{*c.Pattern.String, *c.Content}, nil
		case c.Pattern.Regex != nil:
			re, err := compileRegex(*c.Pattern.Regex)
			if err != nil {
				return nil, fmt.Errorf("normalizer Replace: %w", err)
			}
			return replaceRegexNorm{re, *c.Content}, nil
		}
		return nil, fmt.Errorf("normalizer Replace: pattern needs \"String\" or \"Regex\"")
	case "Lowercase":
		return lowercaseNorm{}, nil
	case "Strip":
		return stripNorm{c.StripLeft, c.StripRight}, nil
	}
	return nil, fmt.Errorf("%w: normalizer type %q", ErrUnsupported, c.Type)
}

// normalizeAt normalizes s and reports whether the result's first character
// still comes from the segment's first original character. tokenizers tracks
// original offsets through normalization, and Metaspace's prepend_scheme
// "first" prepends only to a split whose original offset is 0 — so a Strip
// (or a Replace by "") that removes leading characters also removes the
// prepended "▁" (tokenizers v0.22 pre_tokenizers/metaspace.rs). Prepend,
// Lowercase, the Unicode forms and non-empty replacements keep the offset:
// their new characters are aligned with the first original one.
func normalizeAt(n normalizer, s string, atStart bool) (string, bool) {
	switch n := n.(type) {
	case normalizerSeq:
		for _, m := range n {
			s, atStart = normalizeAt(m, s, atStart)
		}
		return s, atStart
	case stripNorm:
		if n.left {
			if t := strings.TrimLeftFunc(s, unicode.IsSpace); len(t) < len(s) {
				s, atStart = t, false
			}
		}
		if n.right {
			s = strings.TrimRightFunc(s, unicode.IsSpace)
		}
		return s, atStart
	case replaceStringNorm:
		if n.new == "" && strings.HasPrefix(s, n.old) {
			atStart = false
		}
	case replaceRegexNorm:
		if n.new == "" {
			first := -1
			n.re.findAll(s, func(start, _ int) {
				if first < 0 {
					first = start
				}
			})
			if first == 0 {
				atStart = false
			}
		}
	}
	return n.normalize(s), atStart
}
