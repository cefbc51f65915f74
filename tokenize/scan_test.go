package tokenize

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/kvroute/kvroute/internal/testdata"
)

// scannerPatterns lists every hand-written scanner by its pattern.
var scannerPatterns = []struct{ name, pattern string }{
	{"llama3", patternLlama3},
	{"qwen2", patternQwen2},
	{"o200k", patternO200K},
	{"digits3", patternDigits3},
	{"deepseek-cjk", patternDSKana},
	{"deepseek-words", patternDSWords},
}

// alphabet mixes every character class the scanners branch on: ASCII
// letters, digits and punctuation, contractions, each kind of whitespace,
// marks, case variants (Lu, Ll, Lt, Lm, Lo), other numbers, symbols, CJK and
// kana, emoji, controls, and code points new in Unicode 15.1/16.0.
var alphabet = []string{
	"a", "Z", "q", "s", "S", "t", "T", "l", "L", "d", "D", "m", "r", "R", "e", "E", "v", "V", "'", "'s", "'LL", "'Re", "'ſ",
	"0", "7", "٣", "४", "Ⅻ", "½", "²",
	" ", " ", "  ", "\t", "\n", "\r", "\r\n", "\u00a0", "\u2009", "\u3000", "\u2028", "\u2029", "\u0085", "\v", "\f", "\u200b",
	".", ",", "!", "?", "-", "/", "\\", "\"", "#", "$", "(", ")", "[", "]", "{", "}", "_", "`", "~", "^", "|", "<", ">", "@", "&",
	"é", "ß", "Ω", "ω", "ǅ", "ʰ", "ˆ", "\u0301", "\u0300", "\u064b", "\u0903", "\u20dd",
	"中", "文", "你", "ひ", "カ", "ー", "한", "ｆ", "™", "©", "∑", "≤", "😀", "👍🏽", "\u200d",
	"\x00", "\x1b", "\U0002EBF0", "\U0002EE5D", "\u2ffc", "\u31ef", "\U00010D50", "\U00010D70", "\U0001E5D0", "\u0897", "\U00011B00",
	"€", "¥", "«", "»", "‘", "’", "—",
}

func randomText(r *rand.Rand, maxParts int) string {
	var b strings.Builder
	n := r.IntN(maxParts) + 1
	for range n {
		s := alphabet[r.IntN(len(alphabet))]
		if r.IntN(20) == 0 {
			s = strings.Repeat(s, r.IntN(12)+2)
		}
		b.WriteString(s)
	}
	return b.String()
}

func matchesOf(f finder, s string) []span { return f.appendMatches(nil, s) }

func checkScannerAgainstRegexp2(t testing.TB, name string, sc scanFinder, re regexFinder, s string) {
	t.Helper()
	got, want := matchesOf(sc, s), matchesOf(re, s)
	if !slices.Equal(got, want) {
		t.Fatalf("%s on %q:\n scanner %v\n regexp2 %v", name, s, spansText(s, got), spansText(s, want))
	}
	// The pieces the pre-tokenizer takes from the scanner in one pass
	// (appendPieces, with its inline path for words) against those isolate
	// builds from regexp2's matches.
	in := piece{s, false}
	if gotP, wantP := sc.appendPieces(nil, in), isolate(nil, in, re, &scratch{}); !slices.Equal(gotP, wantP) {
		t.Fatalf("%s on %q:\n scanner pieces %v\n regexp2 pieces %v", name, s, gotP, wantP)
	}
}

func spansText(s string, sp []span) []string {
	out := make([]string, len(sp))
	for i, x := range sp {
		out[i] = fmt.Sprintf("%q", s[x.start:x.end])
	}
	return out
}

func compiledPair(t testing.TB, name, pattern string) (scanFinder, regexFinder) {
	t.Helper()
	sc, ok := scannerFor(pattern)
	if !ok || sc.name != name {
		t.Fatalf("no scanner %s for its pattern", name)
	}
	re, err := compileRegex(pattern)
	if err != nil {
		t.Fatal(err)
	}
	return sc, regexFinder{re}
}

// scannerTexts is the golden texts and 4,000 random ones of the alphabet.
func scannerTexts(t *testing.T, seed uint64) []string {
	texts := testdata.TokenizerTexts(t)
	r := rand.New(rand.NewPCG(seed, seed+1))
	for range 4000 {
		texts = append(texts, randomText(r, 24))
	}
	return texts
}

func TestScannersEqualRegexp2(t *testing.T) {
	texts := scannerTexts(t, 1)
	for _, p := range scannerPatterns {
		t.Run(p.name, func(t *testing.T) {
			sc, re := compiledPair(t, p.name, p.pattern)
			for _, s := range texts {
				checkScannerAgainstRegexp2(t, p.name, sc, re, s)
			}
		})
	}
}

// TestCharacterClassesEqualRegexp2 checks, for every code point, the
// classes the scanners use against regexp2 running the same property
// classes (with the Unicode 16.0 additions), so a table gap shows up even
// where the random texts miss it.
func TestCharacterClassesEqualRegexp2(t *testing.T) {
	// Every code point; under -race (where this takes minutes) every
	// ASCII one and every 7th above — the default run covers them all.
	step := rune(1)
	if testdata.RaceEnabled() {
		step = 7
	}
	var all []rune
	for r := rune(0); r <= 0x10FFFF; r++ {
		if (r < 0xD800 || r > 0xDFFF) && (r < 0x80 || r%step == 0) {
			all = append(all, r)
		}
	}
	for _, c := range []struct {
		pattern string
		bit     uint16
	}{
		{`\p{L}`, cL}, {`\p{N}`, cN}, {`\s`, cSpace}, {`[\r\n]`, cCRLF}, {`\p{M}`, cM},
		{`[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]`, cUpper}, {`[\p{Ll}\p{Lm}\p{Lo}\p{M}]`, cLower},
		{`\p{P}`, cP}, {`\p{S}`, cS},
	} {
		re, err := compileRegex(c.pattern)
		if err != nil {
			t.Fatal(err)
		}
		in := make(map[rune]bool)
		m, err := re.re.FindRunesMatch(all)
		for err == nil && m != nil {
			for i := m.Index; i < m.Index+m.Length; i++ {
				in[all[i]] = true
			}
			m, err = re.re.FindNextMatch(m)
		}
		bad := 0
		for _, r := range all {
			var k uint16
			if r < 0x80 {
				k = asciiClass[r]
			} else {
				k = classOfSlow(r)
			}
			if (k&c.bit != 0) != in[r] && bad < 5 {
				bad++
				t.Errorf("%s: U+%04X scanner says %v, regexp2 %v", c.pattern, r, k&c.bit != 0, in[r])
			}
		}
	}
}

func fuzzScanner(f *testing.F, name, pattern string) {
	texts := testdata.TokenizerTexts(f)
	for _, s := range texts {
		f.Add(s)
	}
	sc, re := compiledPair(f, name, pattern)
	f.Fuzz(func(t *testing.T, s string) {
		s = strings.ToValidUTF8(s, "\uFFFD")
		checkScannerAgainstRegexp2(t, name, sc, re, s)
	})
}

func FuzzScanLlama3(f *testing.F)        { fuzzScanner(f, "llama3", patternLlama3) }
func FuzzScanQwen2(f *testing.F)         { fuzzScanner(f, "qwen2", patternQwen2) }
func FuzzScanO200K(f *testing.F)         { fuzzScanner(f, "o200k", patternO200K) }
func FuzzScanDigits3(f *testing.F)       { fuzzScanner(f, "digits3", patternDigits3) }
func FuzzScanDeepSeekCJK(f *testing.F)   { fuzzScanner(f, "deepseek-cjk", patternDSKana) }
func FuzzScanDeepSeekWords(f *testing.F) { fuzzScanner(f, "deepseek-words", patternDSWords) }

// TestASCIILettersCountsLeadingLetters checks asciiLetters against a byte
// at a time, for every byte value at every position among letters (and
// among non-letters), and for random words.
func TestASCIILettersCountsLeadingLetters(t *testing.T) {
	want := func(w [8]byte) int {
		for i, c := range w {
			if !isASCIILetter(c) || c >= 0x80 {
				return i
			}
		}
		return 8
	}
	check := func(w [8]byte) {
		x := uint64(0)
		for i := range w {
			x |= uint64(w[i]) << (8 * i)
		}
		if got, want := asciiLetters(x), want(w); got != want {
			t.Fatalf("asciiLetters(% x) = %d, want %d", w, got, want)
		}
	}
	for _, fill := range []byte{'a', 'Z', ' ', 0xc3} {
		for pos := range 8 {
			for b := range 256 {
				var w [8]byte
				for i := range w {
					w[i] = fill
				}
				w[pos] = byte(b)
				check(w)
			}
		}
	}
	r := rand.New(rand.NewPCG(5, 6))
	for range 100000 {
		var w [8]byte
		for i := range w {
			w[i] = byte(r.Uint32())
			if r.IntN(2) == 0 {
				w[i] = "aZqQ@[`{"[r.IntN(8)]
			}
		}
		check(w)
	}
}

// TestScannerPiecesAreIsolatedMatches: a scanner's one-pass appendPieces
// gives the pieces isolate builds from its matches, at the text's start or
// not.
func TestScannerPiecesAreIsolatedMatches(t *testing.T) {
	texts := scannerTexts(t, 3)
	for _, p := range scannerPatterns {
		sc, _ := compiledPair(t, p.name, p.pattern)
		for _, s := range texts {
			for _, atStart := range []bool{true, false} {
				in := piece{s, atStart}
				got := sc.appendPieces(nil, in)
				want := isolate(nil, in, spanFinder{sc}, &scratch{})
				if !slices.Equal(got, want) {
					t.Fatalf("%s on %q (atStart %v):\n appendPieces %v\n isolate %v", p.name, s, atStart, got, want)
				}
			}
		}
	}
}

// spanFinder hides a scanner behind appendMatches alone, so isolate takes
// its general path.
type spanFinder struct{ sc scanFinder }

func (f spanFinder) appendMatches(dst []span, s string) []span { return f.sc.appendMatches(dst, s) }
