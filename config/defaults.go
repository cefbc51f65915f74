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
	DefaultPrefillTokensPerSec = 10000
	DefaultForeignRequestToks  = 1024
	DefaultDecodeInterference  = 25 * time.Millisecond
	DefaultKVUsageCeiling      = 0.98
	DefaultKVFullPenalty       = 500 * time.Millisecond
	DefaultPlacementSlack      = 0.0
	DefaultBodyLimitBytes      = 8 << 20
	DefaultQueueSize           = 1024
	DefaultReconnectMaxBackoff = 30 * time.Second
	DefaultScrapeInterval      = time.Second
	DefaultScrapeTimeout       = 2 * time.Second
	DefaultHashAlgorithm       = "sha256"
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
	if c.Routing.PrefillTokensPerSecond == 0 {
		c.Routing.PrefillTokensPerSecond = DefaultPrefillTokensPerSec
	}
	if c.Routing.ForeignRequestTokens == 0 {
		c.Routing.ForeignRequestTokens = DefaultForeignRequestToks
	}
	if !set["routing.decode_interference"] {
		c.Routing.DecodeInterference = Duration(DefaultDecodeInterference)
	}
	if !set["routing.kv_full_penalty"] {
		c.Routing.KVFullPenalty = Duration(DefaultKVFullPenalty)
	}
	if !set["routing.placement_slack"] {
		c.Routing.PlacementSlack = DefaultPlacementSlack
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
