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
}
