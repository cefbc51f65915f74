package tokenize

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// piece is a substring on its way to the model. atStart is true when it
// begins at offset 0 of the encoded text (Metaspace's prepend_scheme
// "first" reads it).
type piece struct {
	s       string
	atStart bool
}

// span is a [start, end) byte range of a match.
type span struct{ start, end int }

// preTokenizer splits a piece into words, appending them to dst.
type preTokenizer interface {
	split(dst []piece, p piece, st *scratch) []piece
}

// finder appends the successive non-overlapping matches of a Split
// pattern in s to dst.
type finder interface {
	appendMatches(dst []span, s string) []span
}

// splitBehavior is tokenizers' SplitDelimiterBehavior.
type splitBehavior int

const (
	behaviorRemoved splitBehavior = iota
	behaviorIsolated
	behaviorMergedWithPrevious
	behaviorMergedWithNext
	behaviorContiguous
)

func parseBehavior(s string) (splitBehavior, error) {
	switch s {
	case "Removed":
		return behaviorRemoved, nil
	case "Isolated":
		return behaviorIsolated, nil
	case "MergedWithPrevious":
		return behaviorMergedWithPrevious, nil
	case "MergedWithNext":
		return behaviorMergedWithNext, nil
	case "Contiguous":
		return behaviorContiguous, nil
	}
	return 0, fmt.Errorf("%w: Split behavior %q", ErrUnsupported, s)
}

// splitPre is the Split pre-tokenizer (and the splitting step of the
// others): matches of a pattern become pieces per the behavior.
type splitPre struct {
	find     finder
	behavior splitBehavior
	invert   bool
}

// splitPart is a range of the text split, a match or the text between.
type splitPart struct {
	start, end int
	match      bool
}

// splitPieces applies a behavior to the matches of p; the text between
// matches forms pieces of its own. Empty pieces are dropped, as the
// tokenizers library drops them. Semantics: tokenizers normalizer.rs
// NormalizedString::split (v0.22).
func splitPieces(dst []piece, p piece, matches []span, behavior splitBehavior, invert bool) []piece {
	s := p.s
	// Walk (range, isMatch) pairs in order, including gaps.
	var parts []splitPart
	var buf [64]splitPart
	parts = buf[:0]
	prev := 0
	for _, m := range matches {
		if m.start > prev {
			parts = append(parts, splitPart{prev, m.start, invert})
		}
		parts = append(parts, splitPart{m.start, m.end, !invert})
		prev = m.end
	}
	if prev < len(s) {
		parts = append(parts, splitPart{prev, len(s), invert})
	}
	emit := func(start, end int) {
		if end > start {
			dst = append(dst, piece{s[start:end], p.atStart && start == 0})
		}
	}
	switch behavior {
	case behaviorRemoved:
		for _, x := range parts {
			if !x.match {
				emit(x.start, x.end)
			}
		}
	case behaviorIsolated:
		for _, x := range parts {
			emit(x.start, x.end)
		}
	case behaviorMergedWithPrevious:
		for _, x := range mergeForward(parts, false) {
			emit(x.start, x.end)
		}
	case behaviorMergedWithNext:
		var out []splitPart
		prevMatch := false
		for i := len(parts) - 1; i >= 0; i-- {
			x := parts[i]
			if x.match && !prevMatch && len(out) > 0 {
				out[len(out)-1].start = x.start
			} else {
				out = append(out, x)
			}
			prevMatch = x.match
		}
		for i := len(out) - 1; i >= 0; i-- {
			emit(out[i].start, out[i].end)
		}
	case behaviorContiguous:
		for _, x := range mergeForward(parts, true) {
			emit(x.start, x.end)
		}
	}
	return dst
}

// mergeForward joins parts into the part before them: with contiguous,
// each part whose match equals the previous part's (runs of matches and of
// non-matches); otherwise each match that follows a non-match
// (MergedWithPrevious).
func mergeForward(parts []splitPart, contiguous bool) []splitPart {
	var out []splitPart
	prevMatch := false
	for _, x := range parts {
		joins := x.match && !prevMatch
		if contiguous {
			joins = x.match == prevMatch
		}
		if joins && len(out) > 0 {
			out[len(out)-1].end = x.end
		} else {
			out = append(out, x)
		}
		prevMatch = x.match
	}
	return out
}

func (sp *splitPre) split(dst []piece, p piece, st *scratch) []piece {
	if sp.behavior == behaviorIsolated && !sp.invert {
		return isolate(dst, p, sp.find, st)
	}
	st.spans = sp.find.appendMatches(st.spans[:0], p.s)
	return splitPieces(dst, p, st.spans, sp.behavior, sp.invert)
}

// isolate is the common fast path: every match and every gap is a piece.
func isolate(dst []piece, p piece, f finder, st *scratch) []piece {
	if sf, ok := f.(scanFinder); ok {
		return sf.appendPieces(dst, p)
	}
	st.spans = f.appendMatches(st.spans[:0], p.s)
	s := p.s
	prev := 0
	for _, m := range st.spans {
		if m.start > prev {
			dst = append(dst, piece{s[prev:m.start], p.atStart && prev == 0})
		}
		if m.end > m.start {
			dst = append(dst, piece{s[m.start:m.end], p.atStart && m.start == 0})
		}
		prev = m.end
	}
	if prev < len(s) {
		dst = append(dst, piece{s[prev:], p.atStart && prev == 0})
	}
	return dst
}

// stringFinder matches a literal string.
type stringFinder string

func (f stringFinder) appendMatches(dst []span, s string) []span {
	off := 0
	for {
		i := strings.Index(s[off:], string(f))
		if i < 0 {
			return dst
		}
		dst = append(dst, span{off + i, off + i + len(f)})
		off += i + len(f)
	}
}

// regexFinder runs a regexp2 pattern.
type regexFinder struct{ re *regex }

func (f regexFinder) appendMatches(dst []span, s string) []span {
	f.re.findAll(s, func(start, end int) { dst = append(dst, span{start, end}) })
	return dst
}

// scanFinder runs a hand-written scanner: scan returns the end of the
// match starting at i, or -1 when the pattern does not match at i.
type scanFinder struct {
	name string
	scan func(s string, i int) int
	// asciiWords: at an ASCII letter, or a space and an ASCII letter, the
	// pattern matches the run of letters from there (scanCL100K's
	// [^\r\n\p{L}\p{N}]?\p{L}+, which no earlier alternative can match
	// there): appendPieces takes that match inline, without scan.
	asciiWords bool
}

func (f scanFinder) appendMatches(dst []span, s string) []span {
	for i := 0; ; {
		start, end := f.next(s, i)
		if start < 0 {
			return dst
		}
		dst = append(dst, span{start, end})
		i = end
	}
}

// next returns the first match at or after i, or -1, -1 when there is none:
// where the pattern does not match at a character, the next one is tried.
func (f scanFinder) next(s string, i int) (start, end int) {
	for i < len(s) {
		if e := f.scan(s, i); e > i {
			return i, e
		}
		if s[i] < utf8.RuneSelf {
			i++
		} else {
			_, n := utf8.DecodeRuneInString(s[i:])
			i += n
		}
	}
	return -1, -1
}

// appendPieces is isolate for a scanner in one pass: each match and each
// gap between matches becomes a piece as it is found.
func (f scanFinder) appendPieces(dst []piece, p piece) []piece {
	s, prev := p.s, 0
	for {
		if f.asciiWords && prev < len(s) {
			// Most of prose: a word, or a space and a word.
			j := prev
			if s[j] == ' ' && j+1 < len(s) {
				j++
			}
			if c := s[j]; c < utf8.RuneSelf && asciiClass[c]&cL != 0 {
				end := letterRun(s, j+1)
				dst = append(dst, piece{s[prev:end], p.atStart && prev == 0})
				prev = end
				continue
			}
		}
		start, end := f.next(s, prev)
		if start < 0 {
			break
		}
		if start > prev {
			dst = append(dst, piece{s[prev:start], p.atStart && prev == 0})
		}
		dst = append(dst, piece{s[start:end], p.atStart && start == 0})
		prev = end
	}
	if prev < len(s) {
		dst = append(dst, piece{s[prev:], p.atStart && prev == 0})
	}
	return dst
}

// numericFinder matches each numeric character (Rust's char::is_numeric:
// general category N), one match per character.
type numericFinder struct{}

func (numericFinder) appendMatches(dst []span, s string) []span {
	for i, r := range s {
		if unicode.IsNumber(r) {
			dst = append(dst, span{i, i + utf8.RuneLen(r)})
		}
	}
	return dst
}

// byteLevelPre is the ByteLevel pre-tokenizer. The byte-to-unicode mapping
// itself is folded into the model's vocabulary at load, so words stay raw
// bytes here. tokenizers pre_tokenizers/byte_level.rs (v0.22).
type byteLevelPre struct {
	addPrefixSpace bool
	split_         *splitPre // the GPT-2 regex when use_regex
}

func (b *byteLevelPre) split(dst []piece, p piece, st *scratch) []piece {
	if b.addPrefixSpace && !strings.HasPrefix(p.s, " ") {
		p.s = " " + p.s
	}
	if b.split_ == nil {
		return append(dst, p)
	}
	return b.split_.split(dst, p, st)
}

// metaspacePre is the Metaspace pre-tokenizer: spaces become the
// replacement character, which may be prepended and split on.
// tokenizers pre_tokenizers/metaspace.rs (v0.22).
type metaspacePre struct {
	replacement   string
	prependScheme string // always, first, never
	splitOn       bool
}

func (m *metaspacePre) split(dst []piece, p piece, st *scratch) []piece {
	s := strings.ReplaceAll(p.s, " ", m.replacement)
	if !strings.HasPrefix(s, m.replacement) {
		if m.prependScheme == "always" || (m.prependScheme == "first" && p.atStart) {
			s = m.replacement + s
		}
	}
	q := piece{s, p.atStart}
	if !m.splitOn {
		return append(dst, q)
	}
	st.spans = stringFinder(m.replacement).appendMatches(st.spans[:0], s)
	return splitPieces(dst, q, st.spans, behaviorMergedWithNext, false)
}

// seqPre applies its stages in order, each to every piece of the previous.
type seqPre []preTokenizer

func (s seqPre) split(dst []piece, p piece, st *scratch) []piece {
	cur := append(st.seqA[:0], p)
	next := st.seqB[:0]
	for _, stage := range s {
		next = next[:0]
		for _, q := range cur {
			next = stage.split(next, q, st)
		}
		cur, next = next, cur
	}
	dst = append(dst, cur...)
	st.seqA, st.seqB = cur[:0], next[:0]
	return dst
}

// gpt2Pattern is the split regex of ByteLevel's use_regex (GPT-2).
const gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

// buildPreTokenizer returns the pre-tokenizer and whether it ends in
// ByteLevel (the model then works on raw bytes).
func buildPreTokenizer(b json.RawMessage) (preTokenizer, bool, error) {
	c, err := decodeComponent("pre_tokenizer", b)
	if err != nil {
		return nil, false, err
	}
	if c.Type != "Sequence" {
		p, bl, err := buildPreStage(c)
		return p, bl, err
	}
	var stages []*componentJSON
	var flatten func(c *componentJSON) error
	flatten = func(c *componentJSON) error {
		for _, pb := range c.PreTokenizers {
			sc, err := decodeComponent("pre_tokenizer", pb)
			if err != nil {
				return err
			}
			if sc.Type == "Sequence" {
				if err := flatten(sc); err != nil {
					return err
				}
				continue
			}
			stages = append(stages, sc)
		}
		return nil
	}
	if err := flatten(c); err != nil {
		return nil, false, err
	}
	var seq seqPre
	byteLevel := false
	for i, sc := range stages {
		p, bl, err := buildPreStage(sc)
		if err != nil {
			return nil, false, fmt.Errorf("pre_tokenizer Sequence[%d]: %w", i, err)
		}
		if bl && i != len(stages)-1 {
			return nil, false, fmt.Errorf("%w: ByteLevel pre-tokenizer before other pre-tokenizers", ErrUnsupported)
		}
		byteLevel = byteLevel || bl
		seq = append(seq, p)
	}
	switch len(seq) {
	case 0:
		return nil, false, nil
	case 1:
		return seq[0], byteLevel, nil
	}
	// A trailing ByteLevel without prefix space or regex changes nothing
	// on raw bytes: drop the stage.
	if bl, ok := seq[len(seq)-1].(*byteLevelPre); ok && !bl.addPrefixSpace && bl.split_ == nil {
		seq = seq[:len(seq)-1]
		if len(seq) == 1 {
			return seq[0], true, nil
		}
	}
	return seq, byteLevel, nil
}

func buildPreStage(c *componentJSON) (preTokenizer, bool, error) {
	switch c.Type {
	case "Split":
		if c.Pattern == nil {
			return nil, false, fmt.Errorf("pre_tokenizer Split: missing \"pattern\"")
		}
		beh, err := parseBehavior(c.Behavior)
		if err != nil {
			return nil, false, err
		}
		sp := &splitPre{behavior: beh, invert: c.Invert}
		switch {
		case c.Pattern.String != nil:
			if *c.Pattern.String == "" {
				return nil, false, fmt.Errorf("%w: Split with an empty string pattern", ErrUnsupported)
			}
			sp.find = stringFinder(*c.Pattern.String)
		case c.Pattern.Regex != nil:
			if sc, ok := scannerFor(*c.Pattern.Regex); ok {
				sp.find = sc
			} else {
				re, err := compileRegex(*c.Pattern.Regex)
				if err != nil {
					return nil, false, fmt.Errorf("pre_tokenizer Split: %w", err)
				}
				sp.find = regexFinder{re}
			}
		default:
			return nil, false, fmt.Errorf("pre_tokenizer Split: pattern needs \"String\" or \"Regex\"")
		}
		return sp, false, nil
	case "ByteLevel":
		bl := &byteLevelPre{addPrefixSpace: c.AddPrefixSpace == nil || *c.AddPrefixSpace}
		if c.UseRegex == nil || *c.UseRegex {
			re, err := compileRegex(gpt2Pattern)
			if err != nil {
				return nil, false, err
			}
			bl.split_ = &splitPre{find: regexFinder{re}, behavior: behaviorIsolated}
		}
		return bl, true, nil
	case "Metaspace":
		m := &metaspacePre{replacement: "\u2581", prependScheme: "always", splitOn: true}
		if c.Replacement != nil {
			if utf8.RuneCountInString(*c.Replacement) != 1 {
				return nil, false, fmt.Errorf("pre_tokenizer Metaspace: replacement %q is not one character", *c.Replacement)
			}
			m.replacement = *c.Replacement
		}
		switch {
		case c.PrependScheme != nil:
			switch *c.PrependScheme {
			case "always", "first", "never":
				m.prependScheme = *c.PrependScheme
			default:
				return nil, false, fmt.Errorf("%w: Metaspace prepend_scheme %q", ErrUnsupported, *c.PrependScheme)
			}
		case c.AddPrefixSpace != nil && !*c.AddPrefixSpace:
			m.prependScheme = "never"
		}
		if c.Split != nil {
			m.splitOn = *c.Split
		}
		return m, false, nil
	case "Digits":
		beh := behaviorContiguous
		if c.IndividualDigits {
			beh = behaviorIsolated
		}
		return &splitPre{find: numericFinder{}, behavior: beh}, false, nil
	}
	return nil, false, fmt.Errorf("%w: pre_tokenizer type %q", ErrUnsupported, c.Type)
}
