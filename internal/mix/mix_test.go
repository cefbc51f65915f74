package mix

import "testing"

// splitmix64 seeded with 0 adds the golden gamma and mixes: its first
// outputs are the reference implementation's (splitmix64.c by Vigna).
func TestMix64IsSplitMix64(t *testing.T) {
	const gamma = 0x9E3779B97F4A7C15
	want := []uint64{0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4, 0x06c45d188009454f}
	var state uint64
	for i, w := range want {
		state += gamma
		if got := Mix64(state); got != w {
			t.Fatalf("output %d = %#x, want %#x", i, got, w)
		}
	}
}
