package testdata

import (
	"math/rand/v2"
	"strings"
)

// madeUpSyllables build MadeUpProse's words.
var madeUpSyllables = strings.Fields(`ka lo mi ne su ta ri vo pe zu ga hi jo ke la mu no pi qu re si to
va we xi yo za bar cel dun fim gor hest jul kran lomp mirt nosk palt quen rusk sarn telp
umb vask wirl yomp zent brel crom dwin flak grum hirl jask klet`)

// MadeUpProse returns prose of n made-up words (2–4 syllables from a space
// of ~9M words, a sentence every 12), the same for the same seed, so that a
// tokenizer's word cache almost never holds them: the never-seen words of
// the cold tokenizer and decision benchmarks.
func MadeUpProse(seed uint64, n int) string {
	rng := rand.New(rand.NewPCG(seed, 11))
	var b strings.Builder
	for i := range n {
		for range 2 + rng.IntN(3) {
			b.WriteString(madeUpSyllables[rng.IntN(len(madeUpSyllables))])
		}
		if i%12 == 11 {
			b.WriteString(". ")
		} else {
			b.WriteByte(' ')
		}
	}
	return b.String()
}
