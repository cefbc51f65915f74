// Package extproc is kvroute's front door: the Envoy ext_proc stream state
// machine (BUFFERED and FULL_DUPLEX_STREAMED), header and metadata mutation,
// fail-open, the gRPC server and the answer in the Gateway API Inference
// Extension's endpoint-picker protocol. The decision itself is the routing
// package's, called through Decider.
package extproc

// The wire contract with Envoy, in one place. Sources of truth: the GIE
// endpoint-picker protocol (docs/proposals/004-endpoint-picker-protocol,
// pkg/epp/metadata/consts.go) and Envoy's ext_proc filter (ext_proc.cc,
// processor_state.cc, v1.40 protos).
const (
	// HeaderDestination carries the chosen replica's ip:port; an ORIGINAL_DST
	// cluster with use_http_header dials it.
	HeaderDestination = "x-gateway-destination-endpoint"
	// MetadataNamespaceLB is the dynamic-metadata namespace the picker writes
	// the same destination into.
	MetadataNamespaceLB = "envoy.lb"
	// MetadataNamespaceSubsetHint is where the data plane passes the subset of
	// endpoints the picker may choose from.
	MetadataNamespaceSubsetHint = "envoy.lb.subset_hint"
	// MetadataKeySubset is the subset hint's key: a list of "ip:port".
	MetadataKeySubset = "x-gateway-destination-endpoint-subset"

	// HeaderRequestID is Envoy's request id, used in logs (cut to
	// maxRequestIDBytes: a client may have chosen it).
	HeaderRequestID   = "x-request-id"
	maxRequestIDBytes = 64
	headerPath        = ":path"
	headerMethod      = ":method"

	// Debug headers, added when routing.debug_headers is on.
	HeaderDebugReplica       = "x-kvroute-replica"
	HeaderDebugMatchedTokens = "x-kvroute-matched-tokens"
	HeaderDebugPromptTokens  = "x-kvroute-prompt-tokens"
	HeaderDebugReason        = "x-kvroute-reason"
	// HeaderScores, added when routing.scores_header is on: every weighed
	// endpoint's cost in milliseconds, `name=ms` comma-separated in pool
	// order ("inf" for an endpoint that cannot take the request).
	HeaderScores = "x-kvroute-scores"

	// dpRankHeader is vLLM's per-request DP-rank pin, set when the chosen
	// server runs more than one rank.
	dpRankHeader = "x-data-parallel-rank"

	// streamedChunkBytes bounds each streamed_response chunk in full-duplex
	// mode; Envoy recommends ≤ 64 KiB and GIE uses 62,000.
	streamedChunkBytes = 62_000

	// HealthServiceExtProc, HealthLiveness and HealthReadiness are the gRPC
	// health service names Envoy's health check and GIE probe.
	HealthServiceExtProc = "envoy.service.ext_proc.v3.ExternalProcessor"
	HealthLiveness       = "liveness"
	HealthReadiness      = "readiness"
)

// Body-mode signals: kvroute_extproc_body_mode_total{source,mode} counts how
// each stream's mode was settled, kvroute_extproc_body_mode_misfits_total{kind}
// each sign that it was wrong.
const (
	ModeSourceProtocolConfig = "protocol_config" // Envoy ≥ 1.40 said so
	ModeSourceConfigured     = "configured"      // routing.body_mode

	modeLabelBuffered   = "buffered"
	modeLabelFullDuplex = "full_duplex"

	// MisfitConfigContradicted: protocol_config named another mode than
	// routing.body_mode (protocol_config wins).
	MisfitConfigContradicted = "config_contradicted"
	// MisfitBodyAfterDecision: another body chunk came after a buffered
	// decision (the body was streamed, the decision saw part of it).
	MisfitBodyAfterDecision = "body_after_decision"
)
