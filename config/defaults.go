package config

import (
	"time"
)

// Defaults, applied in one place: Default builds the config a file is decoded
// over, so a key the file leaves out keeps its default and a key the file
// sets — zero included — takes the value written. docs/CONFIG.md documents
// each.
const (
	DefaultExtProcListen       = ":9002"
	DefaultAdminListen         = "127.0.0.1:9090"
	DefaultLogLevel            = "info"
	DefaultLogFormat           = "json"
	DefaultIndexTTL            = 10 * time.Minute
	DefaultMaxEntries          = 20_000_000
	DefaultCPUTierWeight       = 0.5
	DefaultSpeculativeTTL      = 2 * time.Second
	DefaultPrefillTokensPerSec = 10000
	DefaultForeignRequestToks  = 1024
	DefaultDecodeInterference  = 0 * time.Millisecond
	DefaultForeignRunningShare = 0.0
	DefaultKVUsageCeiling      = 0.98
	DefaultKVFullPenalty       = 500 * time.Millisecond
	DefaultPlacementSlack      = 0.2
	DefaultBodyLimitBytes      = 8 << 20
	DefaultBodyMode            = BodyModeBuffered // what envoy/envoy.yaml configures
	DefaultMaxPromptBytes      = 1 << 20
	DefaultMaxPromptTokens     = 256 << 10
	DefaultMaxMessages         = 4096
	DefaultMaxDecideInFlight   = 8 << 20
	DefaultQueueSize           = 1024
	DefaultReconnectMaxBackoff = 30 * time.Second
	DefaultScrapeInterval      = time.Second
	DefaultScrapeTimeout       = 2 * time.Second
	// DefaultHealthInterval: a frozen engine is unroutable within one
	// interval plus the 300 ms an unanswered probe is given, inside the 0.5 s
	// a frozen engine may stay routable.
	DefaultHealthInterval = 100 * time.Millisecond
	DefaultHashAlgorithm  = "sha256"
	DefaultDiscoveryKind  = DiscoveryStatic
	DefaultDNSInterval    = 10 * time.Second
	// DefaultDNSEmptyGrace outlasts a resolver's negative cache entry and
	// a rolling restart's moment without ready pods.
	DefaultDNSEmptyGrace = 30 * time.Second

	DefaultTracingProtocol    = TracingGRPC
	DefaultTracingSampleRatio = 1.0
	DefaultTracingServiceName = "kvroute"
	DefaultDataParallelSize   = 1
	// DefaultMaxMessageBytes: vLLM publishes one batch per scheduler step. A
	// 1M-token prefill at block size 16 stores ≈ 5.9 MB (5-byte token ids,
	// 9-byte hashes) and may evict as many blocks, ≈ 4.2 MB of one-hash
	// BlockRemoved maps: ≈ 10 MB per full-attention group. 32 MiB leaves 3×.
	DefaultMaxMessageBytes = 32 << 20
	// Peer mesh (peers): a heartbeat a second, a peer gone after three
	// missed; a request's end lost is forgiven after ten minutes (longer
	// than any generation the engines allow by default).
	DefaultPeerHeartbeat      = time.Second
	DefaultPeerTimeout        = 3 * time.Second
	DefaultPeerRequestTimeout = 10 * time.Minute
	DefaultPeerMaxRequests    = 1 << 18
	// DefaultPeerMaxMessageBytes: a request of 256k tokens (max_prompt_tokens)
	// at block size 16 has 16,384 keys, 128 KiB; 1 MiB leaves room for
	// smaller blocks.
	DefaultPeerMaxMessageBytes = 1 << 20
	// MinPeerMessageBytes fits a message with the longest names and no keys.
	MinPeerMessageBytes = 1 << 10
	// MaxPeers bounds peers.addresses.
	MaxPeers = 64
	// MaxMessageBytesLimit is the largest ingest.max_message_bytes accepted.
	MaxMessageBytesLimit = 1 << 30
)

// Default returns the configuration with every default filled in and no
// pools.
func Default() Config {
	return Config{
		Listen: Listen{ExtProc: DefaultExtProcListen, Admin: DefaultAdminListen},
		Log:    Log{Level: DefaultLogLevel, Format: DefaultLogFormat},
		Tracing: Tracing{Protocol: DefaultTracingProtocol, SampleRatio: DefaultTracingSampleRatio,
			ServiceName: DefaultTracingServiceName},
		Index: Index{
			TTL:            Duration(DefaultIndexTTL),
			MaxEntries:     DefaultMaxEntries,
			CPUTierWeight:  DefaultCPUTierWeight,
			SpeculativeTTL: Duration(DefaultSpeculativeTTL),
		},
		Routing: Routing{
			PrefillTokensPerSecond: DefaultPrefillTokensPerSec,
			ForeignRequestTokens:   DefaultForeignRequestToks,
			DecodeInterference:     Duration(DefaultDecodeInterference),
			ForeignRunningShare:    DefaultForeignRunningShare,
			KVFullPenalty:          Duration(DefaultKVFullPenalty),
			PlacementSlack:         DefaultPlacementSlack,
			KVUsageCeiling:         DefaultKVUsageCeiling,
			BodyLimitBytes:         DefaultBodyLimitBytes,
			BodyMode:               DefaultBodyMode,
			MaxPromptBytes:         DefaultMaxPromptBytes,
			MaxPromptTokens:        DefaultMaxPromptTokens,
			MaxMessages:            DefaultMaxMessages,
			MaxDecideBytesInFlight: DefaultMaxDecideInFlight,
		},
		Ingest: Ingest{
			QueueSize:           DefaultQueueSize,
			ReconnectMaxBackoff: Duration(DefaultReconnectMaxBackoff),
			ScrapeInterval:      Duration(DefaultScrapeInterval),
			ScrapeTimeout:       Duration(DefaultScrapeTimeout),
			HealthInterval:      Duration(DefaultHealthInterval),
			MaxMessageBytes:     DefaultMaxMessageBytes,
		},
		Parity: defaultParity(),
		Peers: Peers{
			HeartbeatInterval: Duration(DefaultPeerHeartbeat),
			PeerTimeout:       Duration(DefaultPeerTimeout),
			RequestTimeout:    Duration(DefaultPeerRequestTimeout),
			MaxRequests:       DefaultPeerMaxRequests,
			MaxMessageBytes:   DefaultPeerMaxMessageBytes,
		},
	}
}

// defaultPool is what each element of pools is decoded over.
func defaultPool() Pool {
	return Pool{
		Keys: KeysTokens, Hash: Hash{Algorithm: DefaultHashAlgorithm},
		Discovery: Discovery{
			Kind:             DefaultDiscoveryKind,
			DNS:              DNSDiscovery{Interval: Duration(DefaultDNSInterval), EmptyGrace: Duration(DefaultDNSEmptyGrace)},
			DataParallelSize: DefaultDataParallelSize,
		},
	}
}

// defaultReplica is what each element of a pool's replicas is decoded over.
func defaultReplica() Replica {
	return Replica{DataParallelSize: DefaultDataParallelSize}
}

// listDefaults gives the decoder the value each new list element starts from.
func listDefaults(elem any) {
	switch e := elem.(type) {
	case *Pool:
		*e = defaultPool()
	case *Replica:
		*e = defaultReplica()
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
