package server

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/kvroute/kvroute/config"
	"github.com/kvroute/kvroute/extproc"
	"github.com/kvroute/kvroute/index"
	"github.com/kvroute/kvroute/routing"
)

// poolParts are what a pool needs beyond its config: its tokenizer and chat
// renderer (nil: route by load).
type poolParts struct {
	tokenizer routing.Tokenizer
	chat      routing.ChatRenderer
}

// buildRouter turns the resolved layout into the router's view: one
// endpoint per replica DP rank.
func buildRouter(cfg *config.Config, ix *index.Index, lay layout, parts map[string]poolParts) (*routing.Router, error) {
	var pools []routing.PoolConfig
	for _, pl := range lay {
		p := pl.cfg
		pc := routing.PoolConfig{
			Name: p.Name, ID: pl.id, Models: p.Models, LoRAAdapters: p.LoRAAdapters, Keys: pl.keys,
		}
		pp := parts[p.Name]
		pc.Tokenizer, pc.Chat = pp.tokenizer, pp.chat
		for _, rl := range pl.ranks {
			pc.Endpoints = append(pc.Endpoints, rl.endpoint())
		}
		pools = append(pools, pc)
	}
	return routing.NewRouter(ix, pools, RouterOptions(cfg.Routing))
}

// RouterOptions maps the routing config onto the router's cost model.
func RouterOptions(r config.Routing) routing.RouterOptions {
	return routing.RouterOptions{
		PrefillTokensPerSecond: r.PrefillTokensPerSecond,
		ForeignRequestTokens:   r.ForeignRequestTokens,
		KVUsageCeiling:         r.KVUsageCeiling,
		KVFullPenalty:          r.KVFullPenalty.Std().Seconds(),
		PlacementSlack:         r.PlacementSlack,
		FailOpen:               r.FailOpenEnabled(),
		Limits: routing.Limits{
			MaxPromptBytes:  r.MaxPromptBytes,
			MaxPromptTokens: r.MaxPromptTokens,
			MaxMessages:     r.MaxMessages,
		},
		MaxBytesInFlight: int64(r.MaxDecideBytesInFlight),
		Flow:             flowOptions(r.FlowControl),
	}
}

// extprocOptions maps the routing settings that belong to Envoy's stream
// (not the decision) onto the ext_proc server's options; they change only
// with a restart. Every routing setting reaches RouterOptions or this
// (TestEveryRoutingSettingIsMapped).
func extprocOptions(r config.Routing) extproc.Options {
	return extproc.Options{
		BodyLimitBytes: r.BodyLimitBytes,
		DebugHeaders:   r.DebugHeaders,
		ScoresHeader:   r.ScoresHeader,
		BodyMode:       r.BodyMode,
	}
}

// flowOptions maps routing.flow_control onto the router's.
func flowOptions(f config.FlowControl) routing.FlowOptions {
	o := routing.FlowOptions{
		Enabled:                   f.Enabled,
		SaturationTTFT:            f.SaturationTTFT.Std(),
		LowPrioritySaturationTTFT: f.LowPrioritySaturationTTFT.Std(),
		ReservedReplicas:          f.ReservedReplicas,
		SaturationWaiting:         f.SaturationWaiting,
		MaxQueued:                 f.MaxQueued,
		TTL:                       f.TTL.Std(),
		ShedStatus:                f.ShedStatus,
		RetryAfter:                f.RetryAfter.Std(),
	}
	if len(f.Bands) > 0 {
		o.Bands = make(map[int]time.Duration, len(f.Bands))
		for _, b := range f.Bands {
			o.Bands[b.Priority] = b.TTL.Std()
		}
	}
	if len(f.Objectives) > 0 {
		o.Objectives = make(map[string]int, len(f.Objectives))
		for _, ob := range f.Objectives {
			o.Objectives[ob.Name] = ob.Priority
		}
	}
	return o
}

// serverTLS builds the ext_proc listener's TLS config (nil: plaintext); a
// client CA turns on mutual TLS.
func serverTLS(c config.TLS) (*tls.Config, error) {
	if c.CertFile == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("listen.tls: %w", err)
	}
	tc := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"}}
	if c.ClientCAFile != "" {
		pem, err := os.ReadFile(c.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("listen.tls.client_ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, errors.New("listen.tls.client_ca_file: no PEM certificates")
		}
		tc.ClientCAs, tc.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return tc, nil
}
