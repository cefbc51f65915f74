package tokenize

import (
	"testing"

	"golang.org/x/text/unicode/norm"
)

// TestIsASCII: isASCII is false exactly when some byte is 0x80 or above,
// wherever it sits in a word of eight or in the tail.
func TestIsASCII(t *testing.T) {
	base := []byte("The quick brown fox jumps")
	if !isASCII(string(base)) || !isASCII("") {
		t.Fatal("ASCII text reported as not ASCII")
	}
	for _, c := range []byte{0x80, 0xC3, 0xFF} {
		for at := range base {
			s := append([]byte(nil), base...)
			s[at] = c
			if isASCII(string(s)) {
				t.Fatalf("byte %#x at %d of %d not seen", c, at, len(s))
			}
		}
	}
}

// TestUnicodeNormASCIIFastPathMatchesForms: the ASCII fast path returns
// what each of the four forms returns, and non-ASCII text still goes
// through the form.
func TestUnicodeNormASCIIFastPathMatchesForms(t *testing.T) {
	for _, f := range []norm.Form{norm.NFC, norm.NFD, norm.NFKC, norm.NFKD} {
		n := newUnicodeNorm(f)
		for _, s := range []string{"plain ASCII text, with \t\n controls\x00 and ~ punctuation", "e\u0301 caf\u00e9 \uFB01 \u2460"} {
			if got, want := n.normalize(s), f.String(s); got != want {
				t.Errorf("form %d: normalize(%q) = %q, want %q", f, s, got, want)
			}
		}
	}
}
