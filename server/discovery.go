package server

import (
	"context"
	"fmt"
	"os"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kvroute/kvroute/config"
	"github.com/kvroute/kvroute/discovery"
	"github.com/kvroute/kvroute/discovery/dns"
	"github.com/kvroute/kvroute/discovery/kube"

	"github.com/kvroute/kvroute/internal/engine"
)

// poolSource is a discovered pool and the source that follows its engines.
type poolSource struct {
	pool *config.Pool
	src  discovery.Source
	met  *discovery.SourceMetrics
}

// panicDiscovery is kvroute_panics_total's component for discovery sources.
const panicDiscovery = "discovery"

// buildSources creates the discovery source of every pool that has one.
func (s *Server) buildSources(met *discovery.Metrics) ([]poolSource, error) {
	var out []poolSource
	for i := range s.cfg.Pools {
		p := &s.cfg.Pools[i]
		d := &p.Discovery
		switch d.Kind {
		case config.DiscoveryStatic:
			continue
		case config.DiscoveryDNS:
			out = append(out, poolSource{pool: p, met: met.For(p.Name, dns.SourceKind), src: dns.New(dns.Options{
				Pool: p.Name, Name: d.DNS.Name, Interval: d.DNS.Interval.Std(), Server: d.DNS.Server, EmptyGrace: d.DNS.EmptyGrace.Std(),
				NXDomainGrace: d.DNS.NXDomainGrace.Std(),
				Logger:        s.log, Metrics: met,
			})})
		case config.DiscoveryKubernetes:
			k := &d.Kubernetes
			rc, ns, err := kubeClientConfig(k, s.baseDir)
			if err != nil {
				return nil, fmt.Errorf("pools[%d] (%s).discovery.kubernetes: %w", i, p.Name, err)
			}
			src, err := kube.New(kube.Options{Pool: p.Name, Config: rc, Namespace: ns, LabelSelector: k.LabelSelector,
				InferencePool: k.InferencePool, Logger: s.log, Metrics: met})
			if err != nil {
				return nil, fmt.Errorf("pools[%d] (%s).discovery.kubernetes: %w", i, p.Name, err)
			}
			out = append(out, poolSource{pool: p, met: met.For(p.Name, kube.SourceKind), src: src})
		default:
			return nil, fmt.Errorf("pools[%d] (%s): unknown discovery kind %q", i, p.Name, d.Kind)
		}
		s.log.Info("pool replicas come from discovery", "pool", p.Name, "kind", d.Kind)
	}
	return out, nil
}

// inClusterNamespace holds the namespace of a pod's service account.
const inClusterNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// kubeClientConfig is how a kubernetes source reaches its API server — the
// kubeconfig file when one is named (relative to the config file), else the
// pod's service account — and the namespace it watches: the configured one,
// else kvroute's own (in cluster), else "default".
func kubeClientConfig(k *config.KubernetesDiscovery, baseDir string) (*rest.Config, string, error) {
	var rc *rest.Config
	var err error
	if k.Kubeconfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", resolve(baseDir, k.Kubeconfig))
	} else {
		rc, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, "", err
	}
	ns := k.Namespace
	if ns == "" {
		ns = "default"
		if b, err := os.ReadFile(inClusterNamespace); err == nil && k.Kubeconfig == "" {
			if s := strings.TrimSpace(string(b)); s != "" && len(s) <= 253 {
				ns = s
			}
		}
	}
	return rc, ns, nil
}

// runSource follows one pool's source until ctx ends: every set it reports
// becomes the pool's replicas (SetReplicas).
func (s *Server) runSource(ctx context.Context, ps poolSource) {
	err := ps.src.Run(ctx, func(ts []discovery.Target) {
		reps := s.replicasOf(ps, ts)
		if err := s.SetReplicas(ps.pool.Name, reps); err != nil {
			ps.met.Refreshed(discovery.ResultError)
			s.log.Error("discovery: the pool's new replica set was refused; the previous one stays", "pool", ps.pool.Name, "targets", len(ts), "err", err)
		}
	})
	if err != nil && ctx.Err() == nil {
		s.log.Error("discovery stopped; the pool keeps its last replica set", "pool", ps.pool.Name, "err", err)
	}
}

// replicasOf turns a source's engines into the pool's replicas with its port
// template. Engines that would break the set (a duplicate address, more
// ranks than a pool holds) are left out, counted and logged: one bad pod
// must not freeze the whole pool.
func (s *Server) replicasOf(ps poolSource, ts []discovery.Target) []Replica {
	d := &ps.pool.Discovery
	bind := s.bind
	var reps []Replica
	var cfgs []config.Replica
	ranks, overLimit, invalid := 0, 0, 0
	for _, t := range ts {
		r := d.Replica(t.Name, t.IP, t.Ports, t.DataParallelSize)
		if ranks+r.DataParallelSize > engine.MaxRanks {
			overLimit++
			continue
		}
		if config.ValidateReplicas(ps.pool, append(cfgs, r), bind) != nil {
			invalid++
			continue
		}
		cfgs = append(cfgs, r)
		reps = append(reps, Replica{Config: r, UID: t.UID})
		ranks += r.DataParallelSize
	}
	if overLimit > 0 {
		ps.met.Dropped("over_limit", overLimit)
		s.log.Warn("discovery: more engines than a pool routes; some left out", "pool", ps.pool.Name,
			"targets", len(ts), "left_out", overLimit, "max_ranks", engine.MaxRanks)
	}
	if invalid > 0 {
		ps.met.Dropped("invalid", invalid)
		s.log.Warn("discovery: engines left out for an invalid or duplicate address", "pool", ps.pool.Name, "left_out", invalid)
	}
	return reps
}
