// Package config holds kvroute's YAML schema, its defaults and its validation.
//
// A config is read strictly: unknown keys, wrong types and invalid values are
// errors that name the key path, e.g.
//
//	pools[0].replicas[1].address: "vllm-0" is not ip:port
//
// Each key is declared once, by its struct field below: the yaml tag names
// it; default, check and reload tags give its default, its bound and whether
// a reload applies it live (settings.go). docs/CONFIG.md documents each, and
// a test holds it to the tags.
package config

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/kvroute/kvroute/internal/engine"
)

// Config is the whole kvroute configuration file.
type Config struct {
	Listen  Listen  `yaml:"listen"`
	Log     Log     `yaml:"log"`
	Index   Index   `yaml:"index"`
	Routing Routing `yaml:"routing"`
	Ingest  Ingest  `yaml:"ingest"`
	Tracing Tracing `yaml:"tracing"`
	Peers   Peers   `yaml:"peers"`
	Parity  Parity  `yaml:"parity"`
	Pools   []Pool  `yaml:"pools"`
}

// Peers joins several kvroute instances in front of one fleet into a mesh:
// each streams every request it routes and ends (endpoint, uncached prompt
// tokens, block keys) to the others and puts the others' on its own books,
// so each prices the prefill work the others just sent. Off while Listen is
// "". The mesh runs over gRPC with mutual TLS (TLS); plaintext only with
// Insecure. docs/CONFIG.md, peers.
type Peers struct {
	// Listen is the gRPC listener the other kvroutes subscribe to,
	// host:port (0.0.0.0:5590).
	Listen string `yaml:"listen"`
	// Addresses are the other kvroutes' listeners (host:port); the list may
	// name this kvroute too (one list for every instance): it does not
	// subscribe to itself.
	Addresses []string `yaml:"addresses"`
	// TLS authenticates and encrypts the mesh; required unless Insecure.
	TLS PeersTLS `yaml:"tls"`
	// Insecure runs the mesh in plaintext: anyone who reaches Listen reads
	// every routed block key and can book work on this kvroute's engines.
	Insecure bool `yaml:"insecure"`
	// HeartbeatInterval is how often a kvroute says it is alive: a heartbeat
	// a second, a peer gone after three missed (PeerTimeout).
	HeartbeatInterval Duration `yaml:"heartbeat_interval" default:"1s"`
	// PeerTimeout: a peer silent this long is gone and its requests come
	// off the books; a subscriber a send has waited on this long is cut.
	PeerTimeout Duration `yaml:"peer_timeout" default:"3s"`
	// RequestTimeout: a peer's request not ended this long after it began
	// comes off the books (its end was lost); ten minutes is longer than any
	// generation the engines allow by default.
	RequestTimeout Duration `yaml:"request_timeout" default:"10m"`
	// MaxRequests bounds the peers' requests on the books, all peers
	// together; each peer gets an equal share (MaxRequests over the number
	// of addresses), beyond which its oldest request comes off.
	MaxRequests int `yaml:"max_requests" default:"262144"`
	// MaxMessageBytes bounds one peer message; a peer sending more is
	// disconnected before anything is allocated. A request of 256k tokens
	// (max_prompt_tokens) at block size 16 has 16,384 keys, 128 KiB; 1 MiB
	// leaves room for smaller blocks.
	MaxMessageBytes int `yaml:"max_message_bytes" default:"1048576"`
}

// PeersTLS are the mesh's mutual-TLS credentials: each kvroute presents
// CertFile when it serves and when it subscribes (read again when it
// changes on disk), and trusts a peer iff the peer's certificate chains to
// CAFile (and names one of AllowedNames, when set).
type PeersTLS struct {
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	CAFile   string `yaml:"ca_file"`
	// AllowedNames, when set, narrows trust to certificates carrying one of
	// these DNS or URI SANs (exact match).
	AllowedNames []string `yaml:"allowed_names"`
	// ServerName, when set, is checked in every peer's server certificate
	// instead of the host of its address.
	ServerName string `yaml:"server_name"`
}

// Tracing protocols for tracing.protocol.
const (
	TracingGRPC = "grpc"
	TracingHTTP = "http"
)

// Tracing exports OpenTelemetry spans of every routing decision over OTLP;
// off while Endpoint is "".
type Tracing struct {
	// Endpoint is the collector's host:port (OTLP/gRPC, usually :4317) or,
	// for protocol http, host:port or a URL (usually :4318).
	Endpoint string `yaml:"endpoint"`
	Protocol string `yaml:"protocol" default:"grpc" check:"oneof=grpc|http"`
	// Insecure sends in plaintext (a collector sidecar on loopback).
	Insecure bool `yaml:"insecure"`
	// SampleRatio of traces started here that are recorded; a request whose
	// incoming traceparent is sampled (or not) follows its parent.
	SampleRatio float64 `yaml:"sample_ratio" default:"1" check:"unit"`
	// ServiceName is the service.name resource attribute.
	ServiceName string `yaml:"service_name" default:"kvroute"`
}

// Listen says where kvroute serves.
type Listen struct {
	// ExtProc is the gRPC ext_proc listener Envoy calls, host:port.
	ExtProc string `yaml:"extproc" default:":9002"`
	// Admin serves /metrics, /healthz, /readyz and /debug/*; "" disables it.
	Admin string `yaml:"admin" default:"127.0.0.1:9090"`
	// TLS, when CertFile is set, serves the ext_proc listener over TLS.
	TLS TLS `yaml:"tls"`
}

// TLS configures the ext_proc listener's certificates.
type TLS struct {
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ClientCAFile, when set, requires and verifies client certificates (mTLS).
	ClientCAFile string `yaml:"client_ca_file"`
}

// Log configures structured logging.
type Log struct {
	Level  string `yaml:"level" default:"info" check:"oneof=debug|info|warn|error"` // debug | info | warn | error
	Format string `yaml:"format" default:"json" check:"oneof=json|text"`            // json | text
}

// Index bounds the CacheIndex.
type Index struct {
	// TTL drops (block, replica) entries not refreshed by an event for this long.
	TTL Duration `yaml:"ttl" default:"10m" check:"positive"`
	// MaxEntries is the hard cap on entries across all pools (block entries,
	// speculative entries, tokens-mode engine hash aliases; see index.Options);
	// the least recently refreshed blocks are evicted first.
	MaxEntries int `yaml:"max_entries" default:"20000000" check:"positive"`
	// CPUTierWeight is what a block held only in CPU offload counts for,
	// relative to a GPU-resident block (0..1).
	CPUTierWeight float64 `yaml:"cpu_tier_weight" default:"0.5" check:"unit"`
	// SpeculativeTTL is how long a routed request's blocks count as held by
	// the chosen replica before the engine's own events confirm them.
	SpeculativeTTL Duration `yaml:"speculative_ttl" default:"2s" check:"nonnegative"`
}

// Routing tunes the decision and the failure policy.
type Routing struct {
	// PrefillTokensPerSecond is a replica's prefill throughput (uncached
	// prompt tokens per second) until it is learned from the engine's
	// vllm:prompt_tokens_total and vllm:request_prefill_time_seconds.
	PrefillTokensPerSecond float64 `yaml:"prefill_tokens_per_second" default:"10000" check:"positive" reload:"live"`
	// ForeignRequestTokens is the uncached prompt, in tokens, assumed for a
	// waiting request this router did not route, until the engine's mean
	// is learned from the same counters.
	ForeignRequestTokens float64 `yaml:"foreign_request_tokens" default:"1024" check:"nonnegative" reload:"live"`
	// KVUsageCeiling: a replica whose KV-cache usage (0..1) is above it
	// costs KVFullPenalty more. It never makes a replica ineligible.
	KVUsageCeiling float64 `yaml:"kv_usage_ceiling" default:"0.98" check:"unitopen" reload:"live"`
	// KVFullPenalty is the extra cost of a replica above KVUsageCeiling.
	KVFullPenalty Duration `yaml:"kv_full_penalty" default:"500ms" check:"nonnegative" reload:"live"`
	// PlacementSlack bounds the sticky (rendezvous) placement of prompts no
	// replica holds: a replica may cost up to this fraction of the
	// request's own prefill time more than the cheapest.
	PlacementSlack float64 `yaml:"placement_slack" default:"0.2" check:"nonnegative" reload:"live"`
	// FailOpen routes by load alone on any internal error (bad JSON, unknown
	// model, tokenizer failure) instead of rejecting the request.
	FailOpen *bool `yaml:"fail_open" default:"true" reload:"live"`
	// BodyLimitBytes is the largest request body kvroute reads; keep it equal
	// to Envoy's per-route buffer limit.
	BodyLimitBytes int `yaml:"body_limit_bytes" default:"8388608" check:"positive"`
	// DebugHeaders adds x-kvroute-* headers (matched tokens, replica, reason).
	DebugHeaders bool `yaml:"debug_headers"`
	// ScoresHeader adds x-kvroute-scores: every weighed endpoint's cost.
	ScoresHeader bool `yaml:"scores_header"`
	// BodyMode is Envoy's ext_proc request_body_mode when Envoy sends no
	// protocol_config (Envoy < 1.40; a protocol_config always wins):
	// "buffered" (envoy/envoy.yaml) or "full_duplex" (FULL_DUPLEX_STREAMED,
	// the GIE endpoint-picker setup).
	BodyMode string `yaml:"body_mode" default:"buffered" check:"oneof=buffered|full_duplex"`
	// MaxPromptBytes bounds what one request may have tokenized: a
	// completion's prompt field, a chat request's body and its rendered
	// prompt. Larger requests route by load (reason prompt_too_large).
	MaxPromptBytes int `yaml:"max_prompt_bytes" default:"1048576" check:"positive" reload:"live"`
	// MaxPromptTokens bounds the prompt tokens hashed and looked up.
	MaxPromptTokens int `yaml:"max_prompt_tokens" default:"262144" check:"positive" reload:"live"`
	// MaxMessages bounds a chat request's messages (too_many_messages).
	MaxMessages int `yaml:"max_messages" default:"4096" check:"positive" reload:"live"`
	// MaxDecideBytesInFlight bounds the body bytes being tokenized and
	// hashed at once across all streams; a request that does not fit routes
	// by load at once (decide_budget_full).
	MaxDecideBytesInFlight int `yaml:"max_decide_bytes_in_flight" default:"8388608" check:"positive" reload:"live"`
	// FlowControl holds requests while their pool is saturated.
	FlowControl FlowControl `yaml:"flow_control"`
}

// FlowControl holds the requests of a saturated pool in a queue, by
// priority and fairly between flows, and decides each when capacity frees;
// a request that cannot wait is answered at once (ShedStatus, Retry-After).
// Its queued bodies count toward Routing.MaxDecideBytesInFlight.
type FlowControl struct {
	// Enabled turns flow control on.
	Enabled bool `yaml:"enabled" reload:"live"`
	// SaturationTTFT: a replica is busy when the cost model predicts a new
	// request's first token more than this from now (0: this test is off).
	SaturationTTFT Duration `yaml:"saturation_ttft" default:"1s" check:"nonnegative" reload:"live"`
	// LowPrioritySaturationTTFT is SaturationTTFT for the requests of a
	// priority below the pool's top one (the highest priority of
	// Objectives, or seen in the pool since start; at least 0): capacity
	// held back so a higher band does not wait behind their prefill (0:
	// SaturationTTFT for every priority).
	LowPrioritySaturationTTFT Duration `yaml:"low_priority_saturation_ttft" default:"50ms" check:"nonnegative" reload:"live"`
	// ReservedReplicas is how many of a pool's least-loaded replicas the
	// requests of a priority below the pool's top one are neither placed
	// on nor count when their saturation is checked (at most all but one;
	// 0: none), so a higher band finds a replica free of their prefill.
	ReservedReplicas int `yaml:"reserved_replicas" default:"0" check:"nonnegative" reload:"live"`
	// SaturationWaiting: a replica is busy when its last scrape reported
	// more waiting requests than this (0: this test is off). A pool is
	// saturated when every eligible replica is busy.
	SaturationWaiting float64 `yaml:"saturation_waiting" default:"5" check:"nonnegative" reload:"live"`
	// MaxQueued bounds each pool's queue, in requests.
	MaxQueued int `yaml:"max_queued" default:"1024" check:"positive" reload:"live"`
	// TTL is how long a request may wait before it is shed (bands may
	// override it by priority).
	TTL Duration `yaml:"ttl" default:"10s" check:"positive" reload:"live"`
	// Bands sets the TTL of some priorities.
	Bands []FlowBand `yaml:"bands"`
	// Objectives maps objective names (the x-gateway-inference-objective
	// header) to priorities, as InferenceObjective's spec.priority does.
	Objectives []FlowObjective `yaml:"objectives"`
	// ShedStatus is the HTTP status of a shed request.
	ShedStatus int `yaml:"shed_status" default:"429" reload:"live"`
	// RetryAfter is the Retry-After a shed request is answered with
	// (whole seconds, rounded up).
	RetryAfter Duration `yaml:"retry_after" default:"1s" check:"positive" reload:"live"`
}

// FlowBand is one priority's TTL.
type FlowBand struct {
	Priority int      `yaml:"priority" reload:"live"`
	TTL      Duration `yaml:"ttl" check:"positive" reload:"live"`
}

// FlowObjective is one objective name and its priority.
type FlowObjective struct {
	Name     string `yaml:"name" reload:"live"`
	Priority int    `yaml:"priority" reload:"live"`
}

// MaxTTL is the longest a request may wait in flow control: the largest of
// TTL and the bands' TTLs.
func (f FlowControl) MaxTTL() time.Duration {
	m := f.TTL.Std()
	for _, b := range f.Bands {
		m = max(m, b.TTL.Std())
	}
	return m
}

// Body modes for routing.body_mode.
const (
	BodyModeBuffered   = "buffered"
	BodyModeFullDuplex = "full_duplex"
)

// Ingest tunes the KV-event subscribers and the /metrics scraper.
type Ingest struct {
	// Bind, when set (e.g. tcp://0.0.0.0:5557), makes kvroute bind one SUB
	// socket that engines connect to; replicas are then told apart by topic.
	Bind string `yaml:"bind"`
	// QueueSize bounds each replica's decoded-batch queue; a full queue drops
	// the batch, counts it and treats it as a sequence gap.
	QueueSize int `yaml:"queue_size" default:"1024" check:"positive"`
	// ReconnectMaxBackoff caps the exponential backoff between reconnects.
	ReconnectMaxBackoff Duration `yaml:"reconnect_max_backoff" default:"30s" check:"positive"`
	// ScrapeInterval is how often each replica's /metrics is read; 0 disables.
	ScrapeInterval Duration `yaml:"scrape_interval" default:"1s"`
	// ScrapeTimeout bounds one /metrics request.
	ScrapeTimeout Duration `yaml:"scrape_timeout" default:"2s" check:"positive"`
	// HealthInterval is how often each replica's /health is probed (a
	// liveness check much cheaper than a scrape); 0 disables. At 100 ms a
	// frozen engine is unroutable within one interval plus StallTimeout.
	HealthInterval Duration `yaml:"health_interval" default:"100ms" check:"nonnegative"`
	// StallTimeout is how long a /health probe or /metrics scrape may go
	// unanswered before the replica is unroutable until one answers (a
	// stopped process accepts the connection and never answers). Raise it
	// when engines under load answer these slowly.
	StallTimeout Duration `yaml:"stall_timeout" default:"300ms" check:"positive"`
	// MaxMessageBytes bounds one ZeroMQ message (and so each of its frames)
	// on every ingest socket; a peer announcing more is disconnected before
	// anything is allocated. vLLM publishes one batch per scheduler step: a
	// 1M-token prefill at block size 16 stores ≈ 5.9 MB (5-byte token ids,
	// 9-byte hashes) and may evict as many blocks, ≈ 4.2 MB of one-hash
	// BlockRemoved maps: ≈ 10 MB per full-attention group. 32 MiB leaves 3×.
	MaxMessageBytes int `yaml:"max_message_bytes" default:"33554432"`
}

// Pool is a model served by a set of replicas sharing tokenizer, block size
// and hash scheme: one keyspace in the index.
type Pool struct {
	Name string `yaml:"name"`
	// Models are the request "model" values this pool serves (vLLM's
	// --served-model-name values).
	Models []string `yaml:"models"`
	// LoRAAdapters are LoRA adapter names (vLLM --lora-modules NAME=path) a
	// request may name as its model; the name enters the block hashes.
	LoRAAdapters []string `yaml:"lora_adapters"`
	// Tokenizer is a directory with tokenizer.json (+ tokenizer_config.json),
	// or a tokenizer.json path. Empty: the pool routes by load only.
	Tokenizer string `yaml:"tokenizer"`
	// ChatTemplate overrides the tokenizer_config.json chat template (a file),
	// like vLLM's --chat-template.
	ChatTemplate string `yaml:"chat_template"`
	// BlockSize is vLLM's --block-size in tokens; 0 learns it from events.
	BlockSize int `yaml:"block_size"`
	// Keys is the index keying mode: "tokens" (our chained keys, default) or
	// "engine" (vLLM's own hashes; needs hash.seed and hash.algorithm to match).
	Keys string `yaml:"keys" default:"tokens" check:"oneof=tokens|engine"`
	// Hash mirrors vLLM's --prefix-caching-hash-algo and PYTHONHASHSEED.
	Hash     Hash      `yaml:"hash"`
	Replicas []Replica `yaml:"replicas"`
	// Discovery says where the pool's replicas come from: the Replicas list
	// (kind static, the default) or a source that follows the fleet
	// (kubernetes, dns). docs/CONFIG.md, pools[].discovery.
	Discovery Discovery `yaml:"discovery"`
}

// Discovery kinds for pools[].discovery.kind.
const (
	DiscoveryStatic     = "static"
	DiscoveryKubernetes = "kubernetes"
	DiscoveryDNS        = "dns"
)

// Discovery chooses and configures a pool's replica source. A discovered
// replica is built from the engine's IP and the Ports template (which a
// Kubernetes pod's annotations may override), exactly as a static replica
// with those endpoints would be.
type Discovery struct {
	// Kind is "static" (pools[].replicas), "kubernetes" or "dns".
	Kind       string              `yaml:"kind" default:"static" check:"oneof=static|kubernetes|dns"`
	Kubernetes KubernetesDiscovery `yaml:"kubernetes"`
	DNS        DNSDiscovery        `yaml:"dns"`
	// Ports are the discovered engines' ports (engine.Ports): http is
	// required, except for an InferencePool, whose first spec.targetPorts
	// entry is used when 0; events 0: no events, the pool routes those
	// replicas by load; replay 0: no replay; metrics 0: the HTTP port.
	Ports engine.Ports `yaml:"ports"`
	// Topic is every discovered engine's KV-event topic (vLLM's default "").
	Topic string `yaml:"topic"`
	// DataParallelSize is the DP ranks behind each discovered server.
	DataParallelSize int `yaml:"data_parallel_size" default:"1"`
}

// Replica is the replica a discovered engine at ip becomes: the port
// template with override's non-zero ports (a pod's annotations) and dpSize
// when positive. name is the source's (a pod's name, the IP for DNS).
func (d *Discovery) Replica(name string, ip netip.Addr, override engine.Ports, dpSize int) Replica {
	ports := d.Ports
	for _, o := range []struct {
		dst *int
		v   int
	}{
		{&ports.HTTP, override.HTTP}, {&ports.Events, override.Events},
		{&ports.Replay, override.Replay}, {&ports.Metrics, override.Metrics},
	} {
		if o.v > 0 {
			*o.dst = o.v
		}
	}
	at := func(port int) string { return netip.AddrPortFrom(ip.Unmap(), uint16(port)).String() }
	r := Replica{Name: name, Address: at(ports.HTTP), Topic: d.Topic, DataParallelSize: d.DataParallelSize}
	if dpSize > 0 {
		r.DataParallelSize = dpSize
	}
	if ports.Events > 0 {
		r.Events = "tcp://" + at(ports.Events)
	}
	if ports.Replay > 0 {
		r.Replay = "tcp://" + at(ports.Replay)
	}
	if ports.Metrics > 0 {
		r.Metrics = "http://" + at(ports.Metrics) + "/metrics"
	}
	r.Derive()
	return r
}

// KubernetesDiscovery selects Ready pods in one namespace, by label selector
// or as the pods of a Gateway API Inference Extension InferencePool
// (inference.networking.k8s.io/v1). Exactly one of LabelSelector and
// InferencePool is set.
type KubernetesDiscovery struct {
	// Namespace of the pods (and the InferencePool); "" is the namespace
	// kvroute runs in (in cluster), else "default".
	Namespace     string `yaml:"namespace"`
	LabelSelector string `yaml:"label_selector"`
	InferencePool string `yaml:"inference_pool"`
	// Kubeconfig is a kubeconfig file; "" uses the in-cluster service account.
	Kubeconfig string `yaml:"kubeconfig"`
}

// DNSDiscovery follows the A/AAAA records of a name (a headless Service, a
// compose service), re-resolved every Interval.
type DNSDiscovery struct {
	Name     string   `yaml:"name"`
	Interval Duration `yaml:"interval" default:"10s"`
	// Server is the DNS server's host:port; "" uses the system resolver
	// (/etc/resolv.conf).
	Server string `yaml:"server"`
	// EmptyGrace is how long answers with no address must go on before a
	// pool that had engines loses them all; 0: at once. 30 s outlasts a
	// resolver's negative cache entry and a rolling restart's moment
	// without ready pods.
	EmptyGrace Duration `yaml:"empty_grace" default:"30s"`
	// NXDomainGrace replaces EmptyGrace when the name's server answers
	// with authority that the name does not exist (authoritative
	// NXDOMAIN: the Service was deleted); 0: at once.
	NXDomainGrace Duration `yaml:"nxdomain_grace" default:"0s"`
}

// Hash is the engine's block-hash configuration.
type Hash struct {
	// Algorithm is vLLM's --prefix-caching-hash-algo.
	Algorithm string `yaml:"algorithm" default:"sha256"`
	// Seed is the engine's PYTHONHASHSEED, as a string; nil when unknown.
	Seed *string `yaml:"seed"`
}

// Replica is one vLLM server (API server + engine).
type Replica struct {
	Name string `yaml:"name"`
	// Address is the ip:port Envoy dials (the header value kvroute returns).
	Address string `yaml:"address"`
	// Events is the ZMQ endpoint of the engine's KV-event PUB socket.
	Events string `yaml:"events"`
	// Replay is the engine's ZMQ ROUTER replay endpoint (optional).
	Replay string `yaml:"replay"`
	// Topic is the engine's KV-event topic (vLLM's default is "").
	Topic string `yaml:"topic"`
	// Metrics is the Prometheus URL scraped for load.
	Metrics string `yaml:"metrics"`
	// DataParallelSize is the number of DP ranks behind this server; rank r
	// publishes on the events (and replay) port + r.
	DataParallelSize int `yaml:"data_parallel_size" default:"1"`
}

// Duration is a time.Duration written as a Go duration string ("10m", "2s").
type Duration time.Duration

// Std returns d as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// String formats d like time.Duration.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalYAML writes d as a duration string.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// FailOpenEnabled reports the effective fail_open setting.
func (r Routing) FailOpenEnabled() bool { return r.FailOpen == nil || *r.FailOpen }

// IsEngineKeys reports whether the pool keys the index with vLLM's own hashes.
func (p Pool) IsEngineKeys() bool { return p.Keys == KeysEngine }

// Key modes.
const (
	KeysTokens = "tokens"
	KeysEngine = "engine"
)

// Hash algorithms vLLM has offered for --prefix-caching-hash-algo
// (sha256_cbor_64bit until v0.10.1).
var hashAlgorithms = []string{"sha256", "sha256_cbor", "xxhash", "xxhash_cbor", "sha256_cbor_64bit"}

// RankName names one data-parallel rank of the replica in the index, logs and
// metrics: the replica's name when it has one rank, else "name/dpN".
func (r Replica) RankName(rank int) string {
	if r.DataParallelSize <= 1 {
		return r.Name
	}
	return fmt.Sprintf("%s/dp%d", r.Name, rank)
}
