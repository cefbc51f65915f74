package fleetsim

import (
	"testing"
	"time"

	"github.com/kvroute/kvroute/routing"
)

// TestFunnelAgreesWithGroundTruth runs kvroute over the small trace on a
// fleet that evicts, with honest engines and with engines that evict
// without events, and holds its prompt-token funnel to what the simulator
// knows each engine held: the decision-side outcomes add up to the prompt
// tokens the engines admitted (± 0.1 %), and given_up_for_load and stale
// agree with the ground truth within 2 % of its value when it is a share
// that matters (1 % of the tokens routed or more), and within 0.1 % of the
// tokens routed when it is smaller. The small misses are real: stale
// cannot see a block evicted with its BlockRemoved between a decision and
// the request's admission (the index dropped it before the engine stored it
// again), and given_up_for_load weighs what the index believed, speculative
// holds of requests still prefilling included.
func TestFunnelAgreesWithGroundTruth(t *testing.T) {
	src := smallTrace(t)
	for _, silent := range []bool{false, true} {
		o := smallOptions()
		o.GroundTruth, o.EvictWithoutEvents = true, silent
		r, err := Run(src, PolicyKVRoute, o)
		if err != nil {
			t.Fatal(err)
		}
		f, truth := r.Funnel, r.FunnelTruth
		t.Logf("evict without events %v: hit rate %.1f %%, funnel %v, ground truth %v", silent, 100*r.HitRate(), f, truth)
		routed := f[routing.TokensCachedPredicted] + f[routing.TokensNew] + f[routing.TokensGivenUpForLoad]
		if d := routed - r.PromptTokens; d*1000 > r.PromptTokens || -d*1000 > r.PromptTokens {
			t.Errorf("silent %v: outcomes add up to %d, the engines admitted %d prompt tokens", silent, routed, r.PromptTokens)
		}
		for _, o := range []string{truthGivenUp, truthStale} {
			got, want := f[o], truth[o]
			d := max(got-want, want-got)
			if want*100 >= routed && d*50 > want {
				t.Errorf("silent %v: %s %d, ground truth %d (%.1f %% off, over 2 %%)", silent, o, got, want, 100*float64(d)/float64(want))
			}
			if want*100 < routed && d*1000 > routed {
				t.Errorf("silent %v: %s %d, ground truth %d: %d apart, over 0.1 %% of the %d tokens routed", silent, o, got, want, d, routed)
			}
		}
		if silent && truth[truthStale] == 0 {
			t.Errorf("engines evicting without events left no stale tokens to find")
		}
		// The server's cached_tokens check, run on the simulated engines'
		// counters, judges windows and never flags honest engines. (The
		// silent ones miss about 7 % of the predicted hits here, inside
		// the check's 10 % tolerance: not flagged either.)
		t.Logf("evict without events %v: parity %+v", silent, r.Parity)
		switch p := r.Parity; {
		case p == nil || p.WindowsJudged == 0:
			t.Errorf("silent %v: the cached_tokens check judged no window (%+v)", silent, p)
		case !silent && p.Flags != 0:
			t.Errorf("honest engines flagged %d times in %d windows", p.Flags, p.WindowsJudged)
		}
	}
}

// TestFunnelAgreesWithGroundTruthUnderHeavyLoad replays the small trace at
// 1 ms per prefill token, where requests wait seconds in the engines'
// queues and blocks they were predicted to hit are evicted, with their
// BlockRemoved, before they are admitted. The engine computes those blocks
// again for them: stale must agree with the ground truth within 2 %.
// given_up_for_load is held within 9.1 % (it is 8.7 % under): the funnel
// weighs what the decision's own lookup saw, and the decision counts a
// block another engine holds once that engine's BlockStored arrives, or as
// a speculative entry for index.speculative_ttl (2 s) after kvroute routed
// the request that computes it. Here requests wait longer than 2 s before
// the engine schedules them, and a step (2,048 tokens, 2 s) publishes its
// events when it ends: blocks another engine is computing for such a
// request count as new, as the decision saw them, while the ground truth,
// which reads the engines' caches, counts them as given up. The measured
// gap is in docs/BENCHMARKS.md.
func TestFunnelAgreesWithGroundTruthUnderHeavyLoad(t *testing.T) {
	o := smallOptions()
	o.GroundTruth, o.Prefill = true, time.Millisecond
	r, err := Run(smallTrace(t), PolicyKVRoute, o)
	if err != nil {
		t.Fatal(err)
	}
	f, truth := r.Funnel, r.FunnelTruth
	t.Logf("funnel %v, ground truth %v", f, truth)
	routed := f[routing.TokensCachedPredicted] + f[routing.TokensNew] + f[routing.TokensGivenUpForLoad]
	if d := routed - r.PromptTokens; d*1000 > r.PromptTokens || -d*1000 > r.PromptTokens {
		t.Errorf("outcomes add up to %d, the engines admitted %d prompt tokens", routed, r.PromptTokens)
	}
	for o, tolerance := range map[string]int64{truthStale: 50, truthGivenUp: 11} {
		got, want := f[o], truth[o]
		if want*100 < routed {
			t.Errorf("%s ground truth %d is under 1 %% of the %d tokens routed: the load is not heavy enough to test it", o, want, routed)
		}
		if d := max(got-want, want-got); d*tolerance > want {
			t.Errorf("%s %d, ground truth %d (%.1f %% off, over %.1f %%)", o, got, want, 100*float64(d)/float64(want), 100/float64(tolerance))
		}
	}
}

// TestSimulatorParityLoopFlagsSilentEvictions: the server's cached_tokens
// check, run by the simulated kvroute on its engines' counters, flags
// engines that evict without events once its windows are short and its
// tolerance tight enough to see their 7 % of missed hits on the small trace
// (5 s, 2 %), and never honest ones.
func TestSimulatorParityLoopFlagsSilentEvictions(t *testing.T) {
	src := smallTrace(t)
	for _, silent := range []bool{false, true} {
		o := smallOptions()
		o.EvictWithoutEvents = silent
		o.ParityYAML = "{cached_tokens_window: 5s, cached_tokens_tolerance: 0.02}"
		r, err := Run(src, PolicyKVRoute, o)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("evict without events %v: parity %+v", silent, r.Parity)
		switch p := r.Parity; {
		case p == nil || p.WindowsJudged < 8:
			t.Errorf("silent %v: the check judged too few windows (%+v)", silent, p)
		case silent && p.Flags == 0:
			t.Errorf("engines evicting without events not flagged in %d windows", p.WindowsJudged)
		case !silent && p.Flags != 0:
			t.Errorf("honest engines flagged %d times in %d windows", p.Flags, p.WindowsJudged)
		}
	}
}
