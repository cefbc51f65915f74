package tokenize

import (
	"math/bits"
	"unicode"
	"unicode/utf8"
)

// Hand-written scanners for the Split regexes of the common model families.
// Each returns the end of the match the regex (leftmost alternative first,
// with backtracking) finds at byte offset i of s, or -1 when it finds none
// there. scan_test.go proves each equal to regexp2 running the pattern.

// Patterns as they appear in tokenizer.json.
const (
	patternLlama3  = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patternQwen2   = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patternO200K   = `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patternDigits3 = `\p{N}{1,3}`
	patternDSKana  = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"
	patternDSWords = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"
)

// scanners maps a pattern to its scanner.
var scanners = map[string]scanFinder{
	patternLlama3:  {"llama3", func(s string, i int) int { return scanCL100K(s, i, 3) }, true},
	patternQwen2:   {"qwen2", func(s string, i int) int { return scanCL100K(s, i, 1) }, true},
	patternO200K:   {name: "o200k", scan: scanO200K},
	patternDigits3: {name: "digits3", scan: scanDigits3},
	patternDSKana:  {name: "deepseek-cjk", scan: scanDSCJK},
	patternDSWords: {name: "deepseek-words", scan: scanDSWords},
}

func scannerFor(pattern string) (scanFinder, bool) {
	s, ok := scanners[pattern]
	return s, ok
}

// Character class bits.
const (
	cL     uint16 = 1 << iota // \p{L} (with the Unicode 15.1 additions)
	cN                        // \p{N}
	cSpace                    // \s
	cCRLF                     // \r or \n
	cM                        // \p{M}
	cUpper                    // [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]
	cLower                    // [\p{Ll}\p{Lm}\p{Lo}\p{M}]
	cP                        // \p{P}
	cS                        // \p{S}
)

var asciiClass = func() (t [utf8.RuneSelf]uint16) {
	for r := rune(0); r < utf8.RuneSelf; r++ {
		t[r] = classOfSlow(r)
	}
	return
}()

func classOfSlow(r rune) uint16 {
	var k uint16
	switch {
	case unicode.IsLetter(r):
		k |= cL
		switch {
		case unicode.Is(unicode.Lu, r) || unicode.Is(unicode.Lt, r):
			k |= cUpper
		case unicode.Is(unicode.Ll, r):
			k |= cLower
		default: // Lm, Lo
			k |= cUpper | cLower
		}
	case unicode.IsMark(r):
		k |= cM | cUpper | cLower
	case unicode.IsNumber(r):
		k |= cN
	case unicode.IsSpace(r):
		k |= cSpace
		if r == '\r' || r == '\n' {
			k |= cCRLF
		}
	case unicode.IsPunct(r):
		k |= cP
	case unicode.IsSymbol(r):
		k |= cS
	case r >= 0x0800 && !unicode.In(r, unicode.Cc, unicode.Cf, unicode.Co, unicode.Cs):
		k = class16(r)
	}
	return k
}

// class16 classifies a code point Go's tables leave unassigned by the
// categories Unicode 16.0 gives it (0 when still unassigned).
func class16(r rune) uint16 {
	for cat, t := range unicode16Added {
		if !unicode.Is(t, r) {
			continue
		}
		switch cat {
		case "Lu", "Lt":
			return cL | cUpper
		case "Ll":
			return cL | cLower
		case "Lm", "Lo":
			return cL | cUpper | cLower
		}
		switch cat[0] {
		case 'M':
			return cM | cUpper | cLower
		case 'N':
			return cN
		case 'P':
			return cP
		case 'S':
			return cS
		}
	}
	return 0
}

// runeAt decodes the character at i with its class.
func runeAt(s string, i int) (rune, int, uint16) {
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1, asciiClass[c]
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	return r, n, classOfSlow(r)
}

// classAt is runeAt without the rune.
func classAt(s string, i int) (uint16, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return asciiClass[c], 1
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	return classOfSlow(r), n
}

// runOf returns the end of the run of characters having any bit of mask
// starting at i.
func runOf(s string, i int, mask uint16) int {
	for i < len(s) {
		if c := s[i]; c < utf8.RuneSelf {
			if asciiClass[c]&mask == 0 {
				return i
			}
			i++
			continue
		}
		k, n := classAt(s, i)
		if k&mask == 0 {
			return i
		}
		i += n
	}
	return i
}

// letterRun is runOf(s, i, cL), ASCII letters eight at a time: a word's end
// is found by a bit scan instead of a branch on every byte, which the CPU
// mispredicts once a word (words vary in length). It goes on byte by byte
// (runOf) from the first non-ASCII byte.
func letterRun(s string, i int) int {
	for i+8 <= len(s) {
		x := uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
			uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
		if end := asciiLetters(x); end < 8 {
			i += end
			if s[i] < utf8.RuneSelf {
				return i
			}
			return runOf(s, i, cL)
		}
		i += 8
	}
	return runOf(s, i, cL)
}

// asciiLetters returns how many of the eight bytes of x (little-endian),
// from the first, are ASCII letters [A-Za-z]: 8 when all are. A byte b is
// one when b|0x20 is in 'a'..'z' and its top bit is clear; with the top
// bits cleared first, adding 0x80-'a' (or 0x80-'z'-1) sets a byte's top bit
// exactly when it is at least 'a' (or above 'z'), and no sum carries into
// the next byte.
func asciiLetters(x uint64) int {
	const lsb, msb = 0x0101010101010101, 0x8080808080808080
	y := (x | 0x20*lsb) &^ msb
	letter := (y + (0x80-'a')*lsb) &^ (y + (0x80-'z'-1)*lsb)
	return bits.TrailingZeros64((^letter|x)&msb) >> 3
}

// runOfOther returns the end of the run of [^\s\p{L}\p{N}] from i.
func runOfOther(s string, i int) int {
	for i < len(s) {
		if c := s[i]; c < utf8.RuneSelf {
			if asciiClass[c]&(cSpace|cL|cN) != 0 {
				return i
			}
			i++
			continue
		}
		k, n := classAt(s, i)
		if k&(cSpace|cL|cN) != 0 {
			return i
		}
		i += n
	}
	return i
}

// contraction matches (?i:'s|'t|'re|'ve|'m|'ll|'d) at i (ASCII case folding,
// as regexp2 does): the end, or -1.
func contraction(s string, i int) int {
	if i+1 >= len(s) || s[i] != '\'' {
		return -1
	}
	switch s[i+1] | 0x20 {
	case 's', 't', 'm', 'd':
		return i + 2
	case 'r', 'v':
		if i+2 < len(s) && s[i+2]|0x20 == 'e' {
			return i + 3
		}
	case 'l':
		if i+2 < len(s) && s[i+2]|0x20 == 'l' {
			return i + 3
		}
	}
	return -1
}

// scanSpaces matches \s*[\r\n]+|\s+(?!\S)|\s+ at i (i holds whitespace).
func scanSpaces(s string, i int) int {
	j, lastNL, lastStart := i, -1, i
	for j < len(s) {
		k, n := classAt(s, j)
		if k&cSpace == 0 {
			break
		}
		if k&cCRLF != 0 {
			lastNL = j
		}
		lastStart = j
		j += n
	}
	if j == i {
		return -1
	}
	if lastNL >= 0 {
		return lastNL + 1
	}
	if j == len(s) || lastStart == i {
		return j
	}
	return lastStart
}

// scanCL100K is the Llama-3 (maxDigits 3) and Qwen2/3 (maxDigits 1) split.
func scanCL100K(s string, i, maxDigits int) int {
	c := s[i]
	if c == '\'' {
		if e := contraction(s, i); e > 0 {
			return e
		}
	}
	k, n := asciiClass[c&0x7f], 1 // ASCII inline: classAt is not
	if c >= utf8.RuneSelf {
		k, n = classAt(s, i)
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if k&cL != 0 {
		return letterRun(s, i+n)
	}
	if k&(cCRLF|cN) == 0 && i+n < len(s) {
		if c2 := s[i+n]; c2 < utf8.RuneSelf {
			if asciiClass[c2]&cL != 0 {
				return letterRun(s, i+n+1)
			}
		} else if k2, n2 := classAt(s, i+n); k2&cL != 0 {
			return letterRun(s, i+n+n2)
		}
	}
	// \p{N}{1,maxDigits}
	if k&cN != 0 {
		return digitRun(s, i+n, maxDigits)
	}
	//  ?[^\s\p{L}\p{N}]+[\r\n]*
	j := i
	if c == ' ' {
		j = i + 1
	}
	if e := runOfOther(s, j); e > j {
		for e < len(s) && (s[e] == '\r' || s[e] == '\n') {
			e++
		}
		return e
	}
	return scanSpaces(s, i)
}

// o200kLetters matches the first alternative of the o200k pattern, without
// the prefix, from k0: [Upper]*[Lower]+ then an optional contraction.
func o200kAlt1(s string, k0 int) int {
	m, lastLower, lastLowerEnd := k0, -1, -1
	for m < len(s) {
		k, n := classAt(s, m)
		if k&cUpper == 0 {
			break
		}
		if k&cLower != 0 {
			lastLower, lastLowerEnd = m, m+n
		}
		m += n
	}
	end := -1
	if m < len(s) {
		if k, _ := classAt(s, m); k&cLower != 0 {
			end = runOf(s, m, cLower)
		}
	}
	if end < 0 {
		if lastLower < 0 {
			return -1
		}
		end = lastLowerEnd
	}
	if e := contraction(s, end); e > 0 {
		return e
	}
	return end
}

// o200kAlt2 is [Upper]+[Lower]* then an optional contraction, from k0.
func o200kAlt2(s string, k0 int) int {
	m := runOf(s, k0, cUpper)
	if m == k0 {
		return -1
	}
	end := runOf(s, m, cLower)
	if e := contraction(s, end); e > 0 {
		return e
	}
	return end
}

// scanO200K is the o200k (GPT-4o, gpt-oss) split.
func scanO200K(s string, i int) int {
	c := s[i]
	_, n, k := runeAt(s, i)
	prefix := k&(cCRLF|cL|cN) == 0
	if prefix {
		if e := o200kAlt1(s, i+n); e > 0 {
			return e
		}
	}
	if e := o200kAlt1(s, i); e > 0 {
		return e
	}
	if prefix {
		if e := o200kAlt2(s, i+n); e > 0 {
			return e
		}
	}
	if e := o200kAlt2(s, i); e > 0 {
		return e
	}
	if k&cN != 0 {
		return digitRun(s, i+n, 3)
	}
	j := i
	if c == ' ' {
		j = i + 1
	}
	if e := runOfOther(s, j); e > j {
		for e < len(s) && (s[e] == '\r' || s[e] == '\n' || s[e] == '/') {
			e++
		}
		return e
	}
	return scanSpaces(s, i)
}

// scanDigits3 is \p{N}{1,3}.
func scanDigits3(s string, i int) int {
	j := i
	for d := 0; d < 3 && j < len(s); d++ {
		k, n := classAt(s, j)
		if k&cN == 0 {
			break
		}
		j += n
	}
	if j == i {
		return -1
	}
	return j
}

func isDSCJK(r rune) bool {
	return (r >= 0x4e00 && r <= 0x9fa5) || (r >= 0x3040 && r <= 0x309f) || (r >= 0x30a0 && r <= 0x30ff)
}

// scanDSCJK is DeepSeek-V3's [\x{4e00}-\x{9fa5}\x{3040}-\x{309f}\x{30a0}-\x{30ff}]+.
func scanDSCJK(s string, i int) int {
	j := i
	for j < len(s) {
		r, n := utf8.DecodeRuneInString(s[j:])
		if !isDSCJK(r) {
			break
		}
		j += n
	}
	if j == i {
		return -1
	}
	return j
}

func isASCIIPunct(c byte) bool {
	return c < utf8.RuneSelf && asciiClass[c]&(cP|cS) != 0
}

func isASCIILetter(c byte) bool { return (c|0x20) >= 'a' && (c|0x20) <= 'z' }

// scanDSWords is DeepSeek-V3's word split (its third Split).
func scanDSWords(s string, i int) int {
	c := s[i]
	// [ASCII punctuation][A-Za-z]+
	if isASCIIPunct(c) && i+1 < len(s) && isASCIILetter(s[i+1]) {
		j := i + 2
		for j < len(s) && isASCIILetter(s[j]) {
			j++
		}
		return j
	}
	// [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+
	_, n, k := runeAt(s, i)
	if k&(cCRLF|cL|cP|cS) == 0 && i+n < len(s) {
		if k2, n2 := classAt(s, i+n); k2&(cL|cM) != 0 {
			return runOf(s, i+n+n2, cL|cM)
		}
	}
	if k&(cL|cM) != 0 {
		return runOf(s, i+n, cL|cM)
	}
	//  ?[\p{P}\p{S}]+[\r\n]*
	j := i
	if c == ' ' {
		j = i + 1
	}
	if e := runOf(s, j, cP|cS); e > j {
		for e < len(s) && (s[e] == '\r' || s[e] == '\n') {
			e++
		}
		return e
	}
	if k&cSpace != 0 {
		return scanSpaces(s, i)
	}
	return -1
}

// digitRun is the end of \p{N}{1,maxDigits} whose first digit ends at j.
func digitRun(s string, j, maxDigits int) int {
	for d := 1; d < maxDigits && j < len(s); d++ {
		k, n := classAt(s, j)
		if k&cN == 0 {
			break
		}
		j += n
	}
	return j
}
