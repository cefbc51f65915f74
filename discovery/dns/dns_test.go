package dns

import (
	"context"
	"io"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvroute/kvroute/discovery"
	"github.com/kvroute/kvroute/internal/dnstest"
	"github.com/kvroute/kvroute/internal/poll"
)

const name = "vllm.kvroute.test."

// follow runs a Source against z and returns a channel of its updates.
func follow(t *testing.T, z *dnstest.Zone, reg prometheus.Registerer) <-chan []string {
	t.Helper()
	return followGrace(t, z, reg, 0)
}

// followGrace is follow with an empty-answer grace period (and the same
// for authoritative NXDOMAIN).
func followGrace(t *testing.T, z *dnstest.Zone, reg prometheus.Registerer, grace time.Duration) <-chan []string {
	t.Helper()
	return followGraces(t, z, reg, grace, grace)
}

// followGraces is follow with both grace periods.
func followGraces(t *testing.T, z *dnstest.Zone, reg prometheus.Registerer, grace, nxGrace time.Duration) <-chan []string {
	t.Helper()
	src := New(Options{Pool: "p", Name: name, Interval: 30 * time.Millisecond, Server: z.Addr(), EmptyGrace: grace, NXDomainGrace: nxGrace,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Metrics: discovery.NewMetrics(reg)})
	ctx, cancel := context.WithCancel(context.Background())
	updates := make(chan []string, 100)
	done := make(chan error, 1)
	go func() {
		done <- src.Run(ctx, func(ts []discovery.Target) {
			var names []string
			for _, t := range ts {
				names = append(names, t.Name)
			}
			updates <- names
		})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != context.Canceled {
				t.Errorf("Run returned %v, want context.Canceled", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Run did not stop")
		}
	})
	return updates
}

func next(t *testing.T, updates <-chan []string, want string) {
	t.Helper()
	select {
	case got := <-updates:
		if strings.Join(got, ",") != want {
			t.Fatalf("update %v, want [%s]", got, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no update; want [%s]", want)
	}
}

// TestFollowsTheRecords: the set follows the records as they change,
// sorted, A and AAAA alike, one update per change only.
func TestFollowsTheRecords(t *testing.T) {
	z := dnstest.Start(t, name)
	z.Set("10.0.0.2", "10.0.0.1")
	reg := prometheus.NewRegistry()
	updates := follow(t, z, reg)
	next(t, updates, "10.0.0.1,10.0.0.2")

	z.Set("10.0.0.2", "10.0.0.1", "10.0.0.3", "fd00::7")
	next(t, updates, "10.0.0.1,10.0.0.2,10.0.0.3,fd00::7")

	z.Set("10.0.0.3", "fd00::7")
	next(t, updates, "10.0.0.3,fd00::7")

	// Unchanged records: no update for several intervals.
	select {
	case got := <-updates:
		t.Fatalf("update %v without a change", got)
	case <-time.After(200 * time.Millisecond):
	}
	if n := metric(t, reg, "kvroute_discovery_targets", ""); n != 2 {
		t.Errorf("kvroute_discovery_targets %v, want 2", n)
	}
}

// TestFailuresKeepTheLastSet: SERVFAIL keeps the set (counted as errors);
// NXDOMAIN is an empty set; records coming back are followed again.
func TestFailuresKeepTheLastSet(t *testing.T) {
	z := dnstest.Start(t, name)
	z.Set("10.0.0.1")
	reg := prometheus.NewRegistry()
	updates := follow(t, z, reg)
	next(t, updates, "10.0.0.1")

	z.Fail(dnstest.ServFail)
	deadline := time.Now().Add(10 * time.Second)
	for metric(t, reg, "kvroute_discovery_refreshes_total", discovery.ResultError) < 3 {
		if time.Now().After(deadline) {
			t.Fatal("SERVFAIL never counted")
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case got := <-updates:
		t.Fatalf("SERVFAIL changed the set to %v", got)
	default:
	}

	z.Fail(dnstest.NXDomain)
	next(t, updates, "")
	z.Set("10.0.0.9")
	next(t, updates, "10.0.0.9")
}

// waitHeld waits until empty answers held the set n times in all.
func waitHeld(t *testing.T, reg *prometheus.Registry, n float64) {
	t.Helper()
	poll.Until(t, "empty answers counted as held", func() bool {
		return metric(t, reg, "kvroute_discovery_refreshes_total", discovery.ResultEmptyHeld) >= n
	})
}

// TestTransientEmptyAnswersKeepTheSet: answers without addresses, or
// NXDOMAIN, for less than the grace period leave the set as it was
// (counted as empty_held); only when they last the whole grace period does
// the pool lose its engines.
func TestTransientEmptyAnswersKeepTheSet(t *testing.T) {
	const grace = 2 * time.Second
	z := dnstest.Start(t, name)
	z.Set("10.0.0.1", "10.0.0.2")
	reg := prometheus.NewRegistry()
	updates := followGrace(t, z, reg, grace)
	next(t, updates, "10.0.0.1,10.0.0.2")

	for _, empty := range []func(){func() { z.Set() }, func() { z.Fail(dnstest.NXDomain) }} {
		held := metric(t, reg, "kvroute_discovery_refreshes_total", discovery.ResultEmptyHeld)
		empty()
		waitHeld(t, reg, held+2)
		z.Set("10.0.0.1", "10.0.0.2")
		select {
		case got := <-updates:
			t.Fatalf("a transient empty answer changed the set to %v", got)
		case <-time.After(300 * time.Millisecond):
		}
	}

	began := time.Now()
	z.Fail(dnstest.NXDomain)
	next(t, updates, "")
	if took := time.Since(began); took < grace {
		t.Fatalf("the set emptied after %s, before the %s grace period", took, grace)
	}
	z.Set("10.0.0.9")
	next(t, updates, "10.0.0.9")
}

// TestAuthoritativeNXDomainEmptiesAtOnce: the name's own server saying the
// name does not exist (the Service was deleted) empties the set at once, or
// after dns.nxdomain_grace, not after the empty_grace that protects against
// transient empty answers; an answer without addresses, and an NXDOMAIN
// without authority (a recursive resolver's cache), still get that grace.
func TestAuthoritativeNXDomainEmptiesAtOnce(t *testing.T) {
	const grace = time.Minute
	for _, nxGrace := range []time.Duration{0, time.Second} {
		z := dnstest.Start(t, name)
		z.Set("10.0.0.1")
		reg := prometheus.NewRegistry()
		updates := followGraces(t, z, reg, grace, nxGrace)
		next(t, updates, "10.0.0.1")

		for _, empty := range []func(){func() { z.Set() }, func() { z.Authoritative(false); z.Fail(dnstest.NXDomain) }} {
			held := metric(t, reg, "kvroute_discovery_refreshes_total", discovery.ResultEmptyHeld)
			empty()
			waitHeld(t, reg, held+3)
			select {
			case got := <-updates:
				t.Fatalf("nxdomain_grace %v: an empty answer within empty_grace changed the set to %v", nxGrace, got)
			default:
			}
			z.Authoritative(true)
			z.Set("10.0.0.1")
		}

		began := time.Now()
		z.Fail(dnstest.NXDomain)
		next(t, updates, "")
		took := time.Since(began)
		if took < nxGrace || took > nxGrace+5*time.Second {
			t.Fatalf("authoritative NXDOMAIN emptied the set after %v; nxdomain_grace %v, empty_grace %v", took, nxGrace, grace)
		}
		z.Set("10.0.0.9")
		next(t, updates, "10.0.0.9")
	}
}

// TestManyRecordsAreCapped: a name with more addresses than MaxTargets
// yields the lowest MaxTargets (the answer arrives over TCP after a
// truncated UDP one would; here the server answers in full over UDP).
func TestManyRecordsAreCapped(t *testing.T) {
	z := dnstest.Start(t, name)
	var addrs []string
	for i := range MaxTargets + 20 {
		addrs = append(addrs, netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}).String())
	}
	z.Set(addrs...)
	updates := follow(t, z, prometheus.NewRegistry())
	select {
	case got := <-updates:
		if len(got) != MaxTargets || got[0] != "10.1.0.0" {
			t.Fatalf("%d targets (first %v), want %d from 10.1.0.0", len(got), got[:1], MaxTargets)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no update")
	}
}

// metric is the value of the series of name for pool p and source dns whose
// result label is result ("" for a series without one).
func metric(t *testing.T, reg *prometheus.Registry, name, result string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["pool"] != "p" || labels["source"] != SourceKind || labels["result"] != result {
				continue
			}
			if m.GetGauge() != nil {
				return m.GetGauge().GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}
