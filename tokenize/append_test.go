package tokenize

import (
	"slices"
	"testing"
)

// TestAppendEncodeAppendsEncode checks that AppendEncode leaves dst's
// contents alone and appends exactly Encode's ids, also into a reused
// buffer holding an earlier request's ids.
func TestAppendEncodeAppendsEncode(t *testing.T) {
	tok := loadTokenizer(t, "qwen3", false)
	texts := []string{"<|im_start|>user\nHello, world! 123<|im_end|>\n", "", "naïve café \xff tail", "again, shorter"}
	buf := make([]int, 0, 4)
	for _, text := range texts {
		for _, add := range []bool{false, true} {
			want := tok.Encode(text, add)
			got := tok.AppendEncode([]int{-7}, text, add)
			if got[0] != -7 || !slices.Equal(got[1:], want) {
				t.Fatalf("AppendEncode(%q, %v) = %v, Encode %v", text, add, got, want)
			}
			buf = tok.AppendEncode(buf[:0], text, add)
			if !slices.Equal(buf, want) {
				t.Fatalf("AppendEncode into a reused buffer (%q, %v) = %v, Encode %v", text, add, buf, want)
			}
		}
	}
}
