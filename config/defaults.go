package config

import (
	"reflect"
)

// Limits of keys whose bounds are not a check tag.
const (
	// MinPeerMessageBytes fits a message with the longest names and no keys.
	MinPeerMessageBytes = 1 << 10
	// MaxPeers bounds peers.addresses.
	MaxPeers = 64
	// MaxMessageBytesLimit is the largest ingest.max_message_bytes accepted.
	MaxMessageBytesLimit = 1 << 30
)

// Default returns the configuration with every default filled in (the
// default tags of config.go's fields) and no pools.
func Default() Config {
	var c Config
	applyDefaults(reflect.ValueOf(&c).Elem())
	return c
}

// listDefaults gives the decoder the value each new list element starts
// from: its fields' default tags.
func listDefaults(elem reflect.Value) {
	if elem.Kind() == reflect.Struct {
		applyDefaults(elem)
	}
}

// derive fills the defaults that depend on other keys (Replica.Derive).
func (c *Config) derive() {
	for i := range c.Pools {
		for j := range c.Pools[i].Replicas {
			c.Pools[i].Replicas[j].Derive()
		}
	}
}

// Derive fills the one default of a replica that depends on another key: its
// metrics URL comes from its address. Config loading and every discovered
// replica go through it.
func (r *Replica) Derive() {
	if r.Metrics == "" && r.Address != "" {
		r.Metrics = "http://" + r.Address + "/metrics"
	}
}
