package chattemplate

import (
	"strings"

	"golang.org/x/text/cases"
	"golang.org/x/text/language"
)

// pyUpper and pyLower are Python's str.upper/str.lower: full Unicode case
// mapping ("ß".upper() == "SS", final sigma), not Go's rune-by-rune mapping.
func pyUpper(s string) string {
	if isASCII(s) {
		return strings.ToUpper(s)
	}
	return cases.Upper(language.Und).String(s) // a Caser is stateful: one per call
}

func pyLower(s string) string {
	if isASCII(s) {
		return strings.ToLower(s)
	}
	return cases.Lower(language.Und).String(s)
}
