package vllmemu

import (
	"testing"
	"time"
)

// runToIdle steps the engine until nothing is scheduled, checking the
// running set after every step; it returns the number of steps.
func runToIdle(t *testing.T, e *Engine, check func()) int {
	t.Helper()
	for n := 0; ; n++ {
		plan, _ := step(e)
		if len(plan) == 0 {
			return n
		}
		if check != nil {
			check()
		}
		if n > 10000 {
			t.Fatal("engine never went idle")
		}
	}
}

func drain(r *request) (n int, done bool) {
	for {
		select {
		case o := <-r.out:
			n++
			if o.done {
				return n, true
			}
		default:
			return n, false
		}
	}
}

func TestLongestPrefixHitExcludesLastPromptToken(t *testing.T) {
	opts := fastOptions(t)
	opts.BlockSize, opts.NumBlocks = 4, 64
	e := newEngine(t, opts)
	queue(e, seq(1000, 16), 1)
	runToIdle(t, e, nil)
	tests := []struct {
		name   string
		prompt []int
		want   int // hit tokens
	}{
		{"same prompt, last block recomputed", seq(1000, 16), 12},
		{"one token more hits every block", seq(1000, 17), 16},
		{"prefix of 9 tokens hits two blocks", seq(1000, 9), 8},
		{"exactly one block is never a hit", seq(1000, 4), 0},
		{"first block differs: the chain breaks", append([]int{7}, seq(1001, 16)...), 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := e.Stats()
			r := queue(e, tc.prompt, 1)
			plan, _ := step(e)
			if len(plan) != 1 || plan[0].r != r {
				t.Fatalf("plan %+v", plan)
			}
			if r.hitTokens != tc.want || plan[0].tokens != len(tc.prompt)-tc.want {
				t.Fatalf("hit %d tokens, prefilled %d; want hit %d", r.hitTokens, plan[0].tokens, tc.want)
			}
			after := e.Stats()
			if got := after.CachedPromptTokens - before.CachedPromptTokens; got != int64(tc.want) {
				t.Fatalf("Stats.CachedPromptTokens grew by %d, want %d", got, tc.want)
			}
			runToIdle(t, e, nil)
		})
	}
}

// TestPrefixHitReducesPrefillWork: the step time is the modelled compute of
// the uncached tokens only, so a hit shortens time to first token.
func TestPrefixHitReducesPrefillWork(t *testing.T) {
	opts := fastOptions(t)
	opts.BlockSize, opts.NumBlocks = 16, 64
	opts.PrefillPerToken, opts.DecodePerToken = time.Microsecond, time.Millisecond
	e := newEngine(t, opts)
	queue(e, seq(1000, 64), 1)
	plan, _ := step(e)
	if got := e.stepDuration(plan); got != 64*time.Microsecond {
		t.Fatalf("cold prefill step %v, want 64µs", got)
	}
	runToIdle(t, e, nil)
	queue(e, seq(1000, 80), 1) // the same 64 tokens plus 16 new ones
	plan, _ = step(e)
	if plan[0].tokens != 16 {
		t.Fatalf("warm prefill scheduled %d tokens, want 16", plan[0].tokens)
	}
	if got := e.stepDuration(plan); got != 16*time.Microsecond {
		t.Fatalf("warm prefill step %v, want 16µs", got)
	}
	// A decode step costs DecodePerToken once, however many sequences decode.
	queue(e, seq(9000, 3), 3)
	queue(e, seq(9100, 3), 3)
	step(e) // both prefill
	plan, _ = step(e)
	if len(plan) != 2 || plan[0].prefill || plan[1].prefill {
		t.Fatalf("expected two decodes, got %+v", plan)
	}
	if got := e.stepDuration(plan); got != time.Millisecond {
		t.Fatalf("decode step %v, want 1ms", got)
	}
}

func TestMaxNumSeqsBoundsTheRunningSet(t *testing.T) {
	opts := fastOptions(t)
	opts.BlockSize, opts.NumBlocks, opts.MaxNumSeqs = 4, 64, 2
	e := newEngine(t, opts)
	var reqs []*request
	for i := range 5 {
		reqs = append(reqs, queue(e, seq(1000*(i+1), 6), 3))
	}
	step(e)
	if len(e.running) != 2 || len(e.waiting) != 3 {
		t.Fatalf("after one step running=%d waiting=%d, want 2 and 3", len(e.running), len(e.waiting))
	}
	if e.running[0] != reqs[0] || e.running[1] != reqs[1] {
		t.Fatal("waiting requests were not admitted first come first served")
	}
	runToIdle(t, e, func() {
		if len(e.running) > 2 {
			t.Fatalf("%d running with max_num_seqs 2", len(e.running))
		}
	})
	for i, r := range reqs {
		if n, done := drain(r); !done || n != 3 {
			t.Fatalf("request %d: %d outputs, done=%v", i, n, done)
		}
	}
	if st := e.Stats(); st.Finished != 5 || st.GeneratedTokens != 15 || st.KVUsage != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestTokenBudgetChunksPrefill(t *testing.T) {
	opts := fastOptions(t)
	opts.BlockSize, opts.NumBlocks, opts.MaxNumBatchedTokens = 4, 64, 8
	e := newEngine(t, opts)
	r := queue(e, seq(1000, 20), 1)
	var chunks []int
	for {
		plan, _ := step(e)
		if len(plan) == 0 {
			break
		}
		chunks = append(chunks, plan[0].tokens)
	}
	if len(chunks) != 3 || chunks[0] != 8 || chunks[1] != 8 || chunks[2] != 4 {
		t.Fatalf("prefill chunks %v, want [8 8 4]", chunks)
	}
	if n, done := drain(r); !done || n != 1 {
		t.Fatalf("outputs %d done %v", n, done)
	}
}

// TestPreemptionWhenBlocksRunOut: two decoding requests outgrow a tiny KV
// cache; the most recently admitted one is preempted (its blocks freed),
// recomputed later, and both still finish with every token.
func TestPreemptionWhenBlocksRunOut(t *testing.T) {
	opts := fastOptions(t)
	opts.BlockSize, opts.NumBlocks = 4, 5 // 4 usable blocks
	e := newEngine(t, opts)
	a := queue(e, seq(1000, 7), 8)
	b := queue(e, seq(2000, 7), 8)
	step(e)
	if len(e.running) != 2 || e.pool.numFree != 0 {
		t.Fatalf("both admitted: running=%d free=%d", len(e.running), e.pool.numFree)
	}
	preempted := false
	runToIdle(t, e, func() {
		if len(e.running) == 1 && e.running[0] == a && len(e.waiting) == 1 && e.waiting[0] == b {
			preempted = true
		}
	})
	if !preempted {
		t.Fatal("B was never preempted for A")
	}
	for name, r := range map[string]*request{"A": a, "B": b} {
		if n, done := drain(r); !done || n != 8 {
			t.Fatalf("%s: %d outputs, done=%v", name, n, done)
		}
	}
	st := e.Stats()
	if st.Preemptions < 1 || st.Finished != 2 || st.Requests != 2 {
		t.Fatalf("stats %+v", st)
	}
	// Preempted requests are counted once in the prefix-cache queries.
	if st.PromptTokens != 14 {
		t.Fatalf("PromptTokens %d, want 14 (each request counted at first admission)", st.PromptTokens)
	}
}

func TestAbortedRequestFreesItsBlocks(t *testing.T) {
	opts := fastOptions(t)
	opts.BlockSize, opts.NumBlocks = 4, 16
	e := newEngine(t, opts)
	r := queue(e, seq(1000, 10), 100)
	step(e)
	if e.pool.numFree == 15 {
		t.Fatal("request holds no blocks")
	}
	r.aborted.Store(true)
	if plan, _ := step(e); len(plan) != 0 {
		t.Fatalf("aborted request scheduled: %+v", plan)
	}
	if e.pool.numFree != 15 || len(e.running) != 0 {
		t.Fatalf("free=%d running=%d after abort", e.pool.numFree, len(e.running))
	}
}
