// Package dns is the discovery source of a pool whose engines are the A and
// AAAA records of one name: a Kubernetes headless Service, a compose
// service, any DNS-registered set. It re-resolves the name on an interval;
// the records carry no identity, so each address is one engine named by its
// IP.
package dns

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/kvroute/kvroute/discovery"
)

// SourceKind is this source's label value in the discovery metrics.
const SourceKind = "dns"

// MaxTargets bounds the engines one resolution yields: beyond it, the
// lowest addresses are kept and the rest counted as dropped. (A pool routes
// at most engine.MaxRanks ranks; a name with more records is a
// misconfiguration.)
const MaxTargets = 256

// lookupTimeout bounds one resolution, retries included.
const lookupTimeout = 5 * time.Second

// minRetry is the first retry delay after a failed resolution; it doubles
// up to the interval.
const minRetry = 100 * time.Millisecond

// Options configure a Source.
type Options struct {
	Pool string // for logs and metrics
	// Name is resolved for A and AAAA records.
	Name string
	// Interval between resolutions.
	Interval time.Duration
	// Server is a DNS server's host:port; "" uses the system resolver.
	Server string
	// EmptyGrace is how long answers without addresses (no records, or a
	// NXDOMAIN without authority) must go on before a set that had engines
	// becomes empty; until then the last set is kept and the name
	// re-queried with backoff. 0: at once.
	EmptyGrace time.Duration
	// NXDomainGrace replaces EmptyGrace while the name's server says with
	// authority that the name does not exist (authoritative NXDOMAIN).
	NXDomainGrace time.Duration
	Logger        *slog.Logger // nil → slog.Default()
	Metrics       *discovery.Metrics
}

// resolvConf is where the system resolver's servers are read, to ask one
// of them directly whether a name that resolved to nothing exists.
var resolvConf = "/etc/resolv.conf"

// Source follows a name's addresses.
type Source struct {
	o   Options
	res *net.Resolver
	log *slog.Logger
	met *discovery.SourceMetrics
}

// New returns the source; nothing is resolved before Run.
func New(o Options) *Source {
	s := &Source{o: o, log: o.Logger, met: o.Metrics.For(o.Pool, SourceKind), res: net.DefaultResolver}
	if s.log == nil {
		s.log = slog.Default()
	}
	if o.Server != "" {
		var d net.Dialer
		s.res = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, o.Server)
		}}
	}
	return s
}

// Run implements discovery.Source.
func (s *Source) Run(ctx context.Context, update func([]discovery.Target)) error {
	var last []discovery.Target
	known := false
	retry := minRetry
	failing := false
	var emptySince time.Time // the first empty answer of a run of them; zero: none
	var nxSince time.Time    // the first authoritative NXDOMAIN of a run of them; zero: none
	for {
		ts, nx, err := s.resolve(ctx)
		if !nx {
			nxSince = time.Time{}
		}
		wait := s.o.Interval
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err != nil:
			s.met.Refreshed(discovery.ResultError)
			if !failing {
				s.log.Warn("discovery: DNS resolution failed; keeping the last set", "pool", s.o.Pool, "source", SourceKind,
					"err", err, "known", known, "targets", len(last))
			}
			failing = true
			wait = min(retry, s.o.Interval)
			retry = min(2*retry, s.o.Interval)
		case len(ts) == 0 && len(last) > 0 && s.holdEmpty(&emptySince, &nxSince, nx):
			// A transient empty answer (a resolver cache, pods all
			// restarting at once) must not take every engine away: keep
			// the last set and ask again soon.
			s.met.Refreshed(discovery.ResultEmptyHeld)
			failing = false
			wait = min(retry, s.o.Interval)
			retry = min(2*retry, s.o.Interval)
		default:
			if failing {
				s.log.Info("discovery: DNS resolution works again", "pool", s.o.Pool, "source", SourceKind, "targets", len(ts))
			}
			if !emptySince.IsZero() && len(ts) > 0 {
				s.log.Info("discovery: the name has addresses again", "pool", s.o.Pool, "source", SourceKind,
					"targets", len(ts), "empty_for", time.Since(emptySince))
			}
			if len(ts) > 0 {
				emptySince = time.Time{}
			}
			failing, retry = false, minRetry
			if len(ts) == 0 {
				s.met.Refreshed(discovery.ResultEmpty)
			} else {
				s.met.Refreshed(discovery.ResultOK)
			}
			if !known || !slices.Equal(ts, last) {
				if len(ts) == 0 {
					s.log.Warn("discovery: the name has no addresses; the pool has no engine", "pool", s.o.Pool, "source", SourceKind,
						"grace", s.o.EmptyGrace)
				}
				known, last = true, ts
				s.met.Targets(len(ts))
				update(slices.Clone(ts))
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

// holdEmpty reports whether an empty answer is still within its grace
// period: EmptyGrace from the first of a run of empty answers (*since), or,
// for an authoritative NXDOMAIN (nx), NXDomainGrace from the first of a run
// of those (*nxSince).
func (s *Source) holdEmpty(since, nxSince *time.Time, nx bool) bool {
	if since.IsZero() {
		*since = time.Now()
		if s.o.EmptyGrace > 0 && !nx {
			s.log.Warn("discovery: the name answered no addresses; keeping the last set for the grace period", "pool", s.o.Pool,
				"source", SourceKind, "grace", s.o.EmptyGrace)
		}
	}
	if !nx {
		return time.Since(*since) < s.o.EmptyGrace
	}
	if nxSince.IsZero() {
		*nxSince = time.Now()
		s.log.Warn("discovery: the name's server says with authority that it does not exist (NXDOMAIN)", "pool", s.o.Pool,
			"source", SourceKind, "grace", s.o.NXDomainGrace)
	}
	return time.Since(*nxSince) < s.o.NXDomainGrace
}

// resolve returns the name's addresses as targets, sorted; a name that does
// not exist (NXDOMAIN) or has no address records is an empty set, and nx
// reports an authoritative NXDOMAIN.
func (s *Source) resolve(ctx context.Context) (ts []discovery.Target, nx bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	addrs, err := s.res.LookupNetIP(ctx, "ip", s.o.Name)
	if err != nil {
		var de *net.DNSError
		if errors.As(err, &de) && de.IsNotFound {
			return nil, s.authoritativeNXDomain(ctx), nil
		}
		return nil, false, err
	}
	seen := map[netip.Addr]bool{}
	var out []discovery.Target
	for _, a := range addrs {
		a = a.Unmap()
		if !a.IsValid() || a.IsUnspecified() || a.IsMulticast() || seen[a] {
			continue
		}
		seen[a] = true
		out = append(out, discovery.Target{Name: a.String(), IP: a})
	}
	slices.SortFunc(out, func(x, y discovery.Target) int { return x.IP.Compare(y.IP) })
	if len(out) > MaxTargets {
		s.met.Dropped("over_limit", len(out)-MaxTargets)
		s.log.Warn("discovery: the name has more addresses than a pool takes; keeping the lowest", "pool", s.o.Pool,
			"source", SourceKind, "addresses", len(out), "kept", MaxTargets)
		out = out[:MaxTargets]
	}
	return out, false, nil
}

// authoritativeNXDomain asks the name's server (Options.Server, else the
// first of resolv.conf) directly for the name, as an absolute name, and
// reports whether it answers NXDOMAIN with the authoritative bit: Go's
// resolver reports that and an answer without addresses alike. Anything
// else (no answer, no authority, records after all) is no.
func (s *Source) authoritativeNXDomain(ctx context.Context) bool {
	server := s.o.Server
	if server == "" {
		cc, err := mdns.ClientConfigFromFile(resolvConf)
		if err != nil || len(cc.Servers) == 0 {
			return false
		}
		server = net.JoinHostPort(cc.Servers[0], cc.Port)
	}
	q := new(mdns.Msg)
	q.SetQuestion(mdns.Fqdn(s.o.Name), mdns.TypeA)
	c := &mdns.Client{Timeout: lookupTimeout}
	in, _, err := c.ExchangeContext(ctx, q, server)
	return err == nil && in.Rcode == mdns.RcodeNameError && in.Authoritative
}
