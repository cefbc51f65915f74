package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/kvroute/kvroute/internal/testdata"
)

// TestCommittedFileIsGenerated regenerates unicode16.go from the fetched
// Unicode 16.0.0 data and compares it with the committed file.
func TestCommittedFileIsGenerated(t *testing.T) {
	got, err := generate(testdata.Unicode16Dir(t))
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join("..", "..", "unicode16.go"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("tokenize/unicode16.go is not the generator's output: run `go generate ./tokenize` (after `make testdata`)")
	}
}

func TestDecodeRanges(t *testing.T) {
	// Pairs (gap, length-1) with the gap counted from one past the previous
	// range: "AA" is U+0000 alone; "BB" skips U+0001..U+0002, then 2 code points.
	got, err := decodeRanges("AABB")
	if err != nil {
		t.Fatal(err)
	}
	want := [][2]rune{{0, 0}, {3, 4}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("got %v, want %v", got, want)
	}
	for _, bad := range []string{"A", "A!", "g"} {
		if _, err := decodeRanges(bad); err == nil {
			t.Errorf("%q decoded", bad)
		}
	}
}
