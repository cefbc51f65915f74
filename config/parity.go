package config

import "time"

// Parity is how kvroute checks that its view of every engine is right: its
// tokenizer and chat template against the engine's own POST /tokenize on
// built-in canary prompts, and what the engine announces (block size, hash
// algorithm, block hashes) against the pool's config. docs/CONFIG.md, parity.
type Parity struct {
	// Canaries turns the /tokenize canaries on (at start, when a replica
	// joins or its engine restarts, after a reload, and every Interval).
	Canaries bool `yaml:"canaries" default:"true"`
	// Interval is how often the canaries run again on each replica while
	// serving; 0 runs them only at the events above. Two canary requests
	// (a completion and a chat prompt) per replica a minute.
	Interval Duration `yaml:"interval" default:"1m"`
	// Timeout bounds one canary request.
	Timeout Duration `yaml:"timeout" default:"5s"`
	// OnMismatch is what a pool does while one of its replicas mismatches:
	// keep_routing (by prefix, as before) or route_by_load (the whole pool
	// routes by load only until every check is back to match or unknown).
	OnMismatch string `yaml:"on_mismatch" default:"keep_routing"`
	// CachedTokensWindow is the window of the cached_tokens check: the
	// cached prompt tokens kvroute predicted for the requests it routed to a
	// replica in one window against the engine's cached prompt tokens
	// counter over it; 0 turns the check off.
	CachedTokensWindow Duration `yaml:"cached_tokens_window" default:"30s"`
	// CachedTokensTolerance is the share of the predicted cached tokens the
	// engine may report fewer before a window counts as short.
	CachedTokensTolerance float64 `yaml:"cached_tokens_tolerance" default:"0.1" check:"unit"`
	// CachedTokensMinTokens is the predicted cached tokens a window needs
	// to be judged at all; a quieter window leaves the state as it was.
	CachedTokensMinTokens int `yaml:"cached_tokens_min_tokens" default:"4096"`
}

// parity.on_mismatch values.
const (
	ParityKeepRouting = "keep_routing"
	ParityRouteByLoad = "route_by_load"
)

// MinParityInterval keeps the canaries rare next to real traffic.
const MinParityInterval = time.Second

func (v *validator) parity(p *Parity) {
	if p.Interval != 0 && p.Interval.Std() < MinParityInterval {
		v.fail("parity.interval", "%s must be 0 or at least %s", p.Interval, MinParityInterval)
	}
	if p.Timeout <= 0 {
		v.fail("parity.timeout", "%s must be positive", p.Timeout)
	}
	v.oneOf("parity.on_mismatch", p.OnMismatch, ParityKeepRouting, ParityRouteByLoad)
	if p.CachedTokensWindow != 0 && p.CachedTokensWindow.Std() < MinParityInterval {
		v.fail("parity.cached_tokens_window", "%s must be 0 or at least %s", p.CachedTokensWindow, MinParityInterval)
	}
	if p.CachedTokensMinTokens < 1 {
		v.fail("parity.cached_tokens_min_tokens", "%d must be at least 1", p.CachedTokensMinTokens)
	}
}
