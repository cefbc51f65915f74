package config

import (
	"time"
)

// Defaults, applied in one place. docs/CONFIG.md documents each.
const (
	DefaultExtProcListen       = ":9002"
	DefaultAdminListen         = "127.0.0.1:9090"
	DefaultLogLevel            = "info"
	DefaultLogFormat           = "json"
	DefaultIndexTTL            = 10 * time.Minute
	DefaultMaxEntries          = 20_000_000
	DefaultCPUTierWeight       = 0.5
	DefaultSpeculativeTTL      = 2 * time.Second
	DefaultLoadWeight          = 256
	DefaultKVUsageCeiling      = 0.98
	DefaultBodyLimitBytes      = 8 << 20
	DefaultQueueSize           = 1024
	DefaultReconnectMaxBackoff = 30 * time.Second
	DefaultScrapeInterval      = time.Second
	DefaultScrapeTimeout       = 2 * time.Second
	// DefaultMaxMessageBytes: vLLM publishes one batch per scheduler step. A
	// 1M-token prefill at block size 16 stores ≈ 5.9 MB (5-byte token ids,
	// 9-byte hashes) and may evict as many blocks, ≈ 4.2 MB of one-hash
	// BlockRemoved maps: ≈ 10 MB per full-attention group. 32 MiB leaves 3×.
	DefaultMaxMessageBytes = 32 << 20
	// MaxMessageBytesLimit is the largest ingest.max_message_bytes accepted.
	MaxMessageBytesLimit = 1 << 30
	DefaultHashAlgorithm = "sha256"
)

// applyDefaults fills every unset key. It runs after decoding and before
// validation, so validation sees the effective config.
func (c *Config) applyDefaults(set setKeys) {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	defDur := func(d *Duration, v time.Duration) {
		if *d == 0 {
			*d = Duration(v)
		}
	}
	def(&c.Listen.ExtProc, DefaultExtProcListen)
	if !set["listen.admin"] {
		c.Listen.Admin = DefaultAdminListen
	}
	def(&c.Log.Level, DefaultLogLevel)
	def(&c.Log.Format, DefaultLogFormat)
	defDur(&c.Index.TTL, DefaultIndexTTL)
	if c.Index.MaxEntries == 0 {
		c.Index.MaxEntries = DefaultMaxEntries
	}
	if !set["index.cpu_tier_weight"] {
		c.Index.CPUTierWeight = DefaultCPUTierWeight
	}
	defDur(&c.Index.SpeculativeTTL, DefaultSpeculativeTTL)
	if !set["routing.load_weight"] {
		c.Routing.LoadWeight = DefaultLoadWeight
	}
	if c.Routing.KVUsageCeiling == 0 {
		c.Routing.KVUsageCeiling = DefaultKVUsageCeiling
	}
	def(&c.Routing.BodyMode, BodyModeAuto)
	if c.Routing.BodyLimitBytes == 0 {
		c.Routing.BodyLimitBytes = DefaultBodyLimitBytes
	}
	if c.Ingest.QueueSize == 0 {
		c.Ingest.QueueSize = DefaultQueueSize
	}
	defDur(&c.Ingest.ReconnectMaxBackoff, DefaultReconnectMaxBackoff)
	if !set["ingest.scrape_interval"] {
		c.Ingest.ScrapeInterval = Duration(DefaultScrapeInterval)
	}
	defDur(&c.Ingest.ScrapeTimeout, DefaultScrapeTimeout)
	if c.Ingest.MaxMessageBytes == 0 {
		c.Ingest.MaxMessageBytes = DefaultMaxMessageBytes
	}
	for i := range c.Pools {
		p := &c.Pools[i]
		def(&p.Keys, KeysTokens)
		def(&p.Hash.Algorithm, DefaultHashAlgorithm)
		for j := range p.Replicas {
			r := &p.Replicas[j]
			if r.DataParallelSize == 0 {
				r.DataParallelSize = 1
			}
			if r.Metrics == "" && r.Address != "" {
				r.Metrics = "http://" + r.Address + "/metrics"
			}
		}
	}
}
