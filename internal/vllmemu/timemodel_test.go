package vllmemu

import (
	"testing"
	"time"
)

// TestFirstTokenFloorByHand checks the floor against arithmetic: 150
// uncached tokens with a 64-token budget take 3 steps (64 + 64 + 22).
func TestFirstTokenFloorByHand(t *testing.T) {
	m := TimeModel{PrefillPerToken: 100 * time.Microsecond, DecodePerToken: 5 * time.Millisecond, StepOverhead: time.Millisecond, MaxNumBatchedTokens: 64}
	for _, c := range []struct {
		uncached int
		want     time.Duration
	}{
		{0, 0},
		{1, time.Millisecond + 100*time.Microsecond},
		{64, time.Millisecond + 6400*time.Microsecond},
		{65, 2*time.Millisecond + 6500*time.Microsecond},
		{150, 3*time.Millisecond + 15*time.Millisecond},
	} {
		if got := m.FirstTokenFloor(c.uncached); got != c.want {
			t.Errorf("FirstTokenFloor(%d) = %v, want %v", c.uncached, got, c.want)
		}
	}
	if got, want := m.Step(10, true), time.Millisecond+time.Millisecond+5*time.Millisecond; got != want {
		t.Errorf("Step(10, decoding) = %v, want %v", got, want)
	}
	// Options without a time model get New's defaults.
	if d := (Options{}).TimeModel(); d.PrefillPerToken != defaultPrefillPerToken || d.DecodePerToken != defaultDecodePerToken ||
		d.MaxNumBatchedTokens != defaultMaxNumBatchedTokens || d.StepOverhead != 0 {
		t.Errorf("default time model %+v", d)
	}
}

// TestFirstTokenFloorIsWhatAnIdleEngineTakes drives a virtual engine: on an
// idle engine a request's first token comes exactly FirstTokenFloor of its
// uncached tokens after its arrival (chunked over several steps, and with a
// prefix hit); a request arriving while another decodes takes longer.
func TestFirstTokenFloorIsWhatAnIdleEngineTakes(t *testing.T) {
	opts := Options{BlockSize: 16, NumBlocks: 64, MaxNumBatchedTokens: 64, PrefillPerToken: 100 * time.Microsecond,
		DecodePerToken: 5 * time.Millisecond, StepOverhead: time.Millisecond, MaxModelLen: 512}
	t0 := time.Unix(1000, 0)
	v, err := NewVirtual(opts, t0)
	if err != nil {
		t.Fatal(err)
	}
	m := opts.TimeModel()
	prompt := func(n int) []int {
		out := make([]int, n)
		for i := range out {
			out[i] = 1000 + i
		}
		return out
	}
	// run steps until q has its first token; returns the time it came.
	run := func(now time.Time, q *VirtualRequest) time.Time {
		for q.FirstToken().IsZero() {
			if !v.Start(now) {
				t.Fatal("engine idle before the first token")
			}
			_, now = v.Busy()
			v.Finish(nil, nil)
		}
		return now
	}
	drain := func(now time.Time) time.Time {
		for v.Start(now) {
			_, now = v.Busy()
			v.Finish(nil, nil)
		}
		return now
	}
	q, err := v.Submit(t0, 1, prompt(150), 2)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := run(t0, q).Sub(t0), m.FirstTokenFloor(150); got != want || q.HitTokens() != 0 {
		t.Fatalf("cold 150-token prompt: TTFT %v (hit %d), want %v", got, q.HitTokens(), want)
	}
	now := drain(t0.Add(time.Second))
	// 140 tokens sharing the first 128: 8 blocks hit, 12 tokens prefilled.
	q, err = v.Submit(now, 2, prompt(140), 2)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := run(now, q).Sub(now), m.FirstTokenFloor(12); got != want || q.HitTokens() != 128 {
		t.Fatalf("warm prompt: TTFT %v (hit %d), want %v (hit 128)", got, q.HitTokens(), want)
	}
	now = drain(now.Add(time.Second))
	// A long request decoding beside a new one: the new one shares its steps
	// with a decode and pays for it.
	long, err := v.Submit(now, 3, prompt(20), 50)
	if err != nil {
		t.Fatal(err)
	}
	now = run(now, long)
	q, err = v.Submit(now, 4, prompt(140), 2)
	if err != nil {
		t.Fatal(err)
	}
	if got, floor := run(now, q).Sub(now), m.FirstTokenFloor(140-q.HitTokens()); got <= floor {
		t.Fatalf("beside a decode: TTFT %v, not above its floor %v", got, floor)
	}
}
