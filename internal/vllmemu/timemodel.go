package vllmemu

import "time"

// TimeModel is the emulator's latency model, the one thing it emulates: a
// scheduler step that schedules P prompt (or recomputed) tokens lasts
// StepOverhead + P × PrefillPerToken, plus DecodePerToken when any sequence
// decodes in it; a step schedules at most MaxNumBatchedTokens tokens.
// Engines time their steps with it and benchmarks derive time-to-first-token
// floors from it, so the two cannot drift apart.
type TimeModel struct {
	PrefillPerToken     time.Duration
	DecodePerToken      time.Duration
	StepOverhead        time.Duration
	MaxNumBatchedTokens int
}

// TimeModel is the time model of an engine built from o (New's defaults
// applied).
func (o Options) TimeModel() TimeModel {
	o = o.withDefaults()
	return TimeModel{PrefillPerToken: o.PrefillPerToken, DecodePerToken: o.DecodePerToken,
		StepOverhead: o.StepOverhead, MaxNumBatchedTokens: o.MaxNumBatchedTokens}
}

// Step is the duration of a step that schedules prefillTokens prompt tokens,
// with or without sequences decoding.
func (m TimeModel) Step(prefillTokens int, decoding bool) time.Duration {
	d := m.StepOverhead + time.Duration(prefillTokens)*m.PrefillPerToken
	if decoding {
		d += m.DecodePerToken
	}
	return d
}

// FirstTokenFloor is the least time from a request's arrival to its first
// token when uncached of its prompt tokens are not in the prefix cache: the
// prefill steps alone, with nothing queued ahead, nothing decoding beside
// it and the whole token budget of every step its own (ceil(uncached /
// MaxNumBatchedTokens) steps). Everything else the engine charges —
// queueing, waiting for a sequence slot or blocks, a decode sharing the
// step, preemption — only adds to it. vLLM always computes the last prompt
// token, so uncached is at least 1 for a real request.
func (m TimeModel) FirstTokenFloor(uncached int) time.Duration {
	if uncached <= 0 {
		return 0
	}
	budget := max(m.MaxNumBatchedTokens, 1)
	full, rest := uncached/budget, uncached%budget
	d := time.Duration(full) * m.Step(budget, false)
	if rest > 0 {
		d += m.Step(rest, false)
	}
	return d
}
