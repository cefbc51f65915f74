// Package engine declares the facts about a vLLM engine that packages which
// may not import each other share (config, discovery, index, ingest): its
// ports, how many ranks one pool holds, how long a KV-event topic may be.
// Each is declared here once.
package engine

// MaxRanks is the most engine ranks (replicas × data-parallel ranks) one
// pool holds: the index keeps a block's holders as a 64-bit set.
const MaxRanks = 64

// MaxTopicBytes bounds a KV-event topic kvroute matches: a longer one names
// no engine (vLLM's are short names, "" by default).
const MaxTopicBytes = 1024

// Ports are an engine's ports: a pool's port template (config
// pools[].discovery.ports) or a discovered engine's overrides of it, 0
// meaning "none" in a template and "the template's" in an override.
type Ports struct {
	// HTTP is the vLLM API server port Envoy dials.
	HTTP int `yaml:"http"`
	// Events is the KV-event PUB port (tcp://IP:events).
	Events int `yaml:"events"`
	// Replay is the replay ROUTER port.
	Replay int `yaml:"replay"`
	// Metrics is the port of http://IP:port/metrics; 0 in a template: the
	// HTTP port.
	Metrics int `yaml:"metrics"`
}
