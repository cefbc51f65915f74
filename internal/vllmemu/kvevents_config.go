package vllmemu

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// KVEventsConfig is vLLM's --kv-events-config JSON with its defaults
// (vllm/config/kv_events.py, upstream main 5ac26849). Unknown keys are an
// error, as vLLM's pydantic config forbids extra fields.
type KVEventsConfig struct {
	EnableKVCacheEvents bool   `json:"enable_kv_cache_events"`
	Publisher           string `json:"publisher"`       // "zmq" or "null"; default "zmq" when enabled
	Endpoint            string `json:"endpoint"`        // PUB endpoint, default tcp://*:5557
	ReplayEndpoint      string `json:"replay_endpoint"` // ROUTER endpoint, "" = no replay
	BufferSteps         int    `json:"buffer_steps"`    // replay buffer in batches, default 10000
	HWM                 int    `json:"hwm"`             // accepted; the emulator's PUB has no HWM option
	MaxQueueSize        int    `json:"max_queue_size"`  // accepted; the emulator's queue is fixed
	Topic               string `json:"topic"`
}

// Enabled reports whether events are published over ZeroMQ.
func (c KVEventsConfig) Enabled() bool { return c.EnableKVCacheEvents && c.Publisher == "zmq" }

// ParseKVEventsConfig decodes the --kv-events-config value and fills in
// vLLM's defaults.
func ParseKVEventsConfig(s string) (KVEventsConfig, error) {
	c := KVEventsConfig{Endpoint: "tcp://*:5557", BufferSteps: defaultReplayBuffer, HWM: 100_000, MaxQueueSize: 100_000}
	var raw struct {
		KVEventsConfig
		Publisher      *string `json:"publisher"`
		ReplayEndpoint *string `json:"replay_endpoint"`
	}
	raw.KVEventsConfig = c
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return KVEventsConfig{}, fmt.Errorf("kv-events-config: %w", err)
	}
	if dec.More() {
		return KVEventsConfig{}, errors.New("kv-events-config: trailing data after the JSON object")
	}
	c = raw.KVEventsConfig
	if raw.ReplayEndpoint != nil {
		c.ReplayEndpoint = *raw.ReplayEndpoint
	}
	switch {
	case raw.Publisher == nil && c.EnableKVCacheEvents:
		c.Publisher = "zmq"
	case raw.Publisher == nil:
		c.Publisher = "null"
	default:
		c.Publisher = *raw.Publisher
	}
	if c.Publisher != "zmq" && c.Publisher != "null" {
		return KVEventsConfig{}, fmt.Errorf("kv-events-config: publisher %q: want \"zmq\" or \"null\"", c.Publisher)
	}
	if c.BufferSteps < 1 {
		return KVEventsConfig{}, fmt.Errorf("kv-events-config: buffer_steps %d: want at least 1", c.BufferSteps)
	}
	if c.Enabled() {
		if _, err := OffsetEndpoint(c.Endpoint, 1); err != nil {
			return KVEventsConfig{}, fmt.Errorf("kv-events-config: endpoint: %w", err)
		}
		if c.ReplayEndpoint != "" {
			if _, err := OffsetEndpoint(c.ReplayEndpoint, 1); err != nil {
				return KVEventsConfig{}, fmt.Errorf("kv-events-config: replay_endpoint: %w", err)
			}
		}
	}
	return c, nil
}

// OffsetEndpoint is the endpoint data-parallel rank uses: for tcp the port
// plus the rank, for inproc a "_dp<rank>" suffix, rank 0 unchanged
// (ZmqEventPublisher.offset_endpoint_port, vllm/distributed/kv_events.py,
// upstream main 5ac26849). Port 0 stays 0 so each rank picks a free port.
func OffsetEndpoint(endpoint string, rank int) (string, error) {
	if endpoint == "" || rank == 0 {
		return endpoint, nil
	}
	switch {
	case strings.Contains(endpoint, "inproc"):
		return endpoint + "_dp" + strconv.Itoa(rank), nil
	case strings.Contains(endpoint, "tcp"):
		i := strings.LastIndexByte(endpoint, ':')
		if i < 0 {
			return endpoint, nil
		}
		port, err := strconv.Atoi(endpoint[i+1:])
		if err != nil || port < 0 || port > 65535 {
			return "", fmt.Errorf("endpoint %q: bad port", endpoint)
		}
		if port == 0 {
			return endpoint, nil
		}
		if port+rank > 65535 {
			return "", fmt.Errorf("endpoint %q: port %d + rank %d is out of range", endpoint, port, rank)
		}
		return endpoint[:i+1] + strconv.Itoa(port+rank), nil
	}
	return "", fmt.Errorf("endpoint %q: must contain 'inproc' or 'tcp'", endpoint)
}

// listenEndpoint maps vLLM's wildcard host to the address Go listens on:
// tcp://*:5557 binds every interface, as ZeroMQ does.
func listenEndpoint(endpoint string) string {
	if rest, ok := strings.CutPrefix(endpoint, "tcp://*:"); ok {
		return "tcp://0.0.0.0:" + rest
	}
	return endpoint
}
