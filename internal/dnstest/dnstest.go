// Package dnstest is a real DNS server on 127.0.0.1 for tests (UDP and TCP
// on one port, miekg/dns): it answers A and AAAA records of one name from a
// set the test changes while a resolver follows it, or a failure code.
package dnstest

import (
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"

	mdns "github.com/miekg/dns"
)

// Response codes a test may answer instead of records.
const (
	ServFail = mdns.RcodeServerFailure
	NXDomain = mdns.RcodeNameError
)

// Zone serves one name.
type Zone struct {
	name  string
	addr  string
	mu    sync.Mutex
	addrs []netip.Addr
	rcode int
	// notAuth clears the authoritative bit of the answers, as a recursive
	// resolver answering from its cache does.
	notAuth bool
}

// Start serves name (fully qualified, with its trailing dot) on a free
// 127.0.0.1 port over UDP and TCP (a truncated UDP answer is retried over
// TCP, as resolvers do) until the test ends.
func Start(t testing.TB, name string) *Zone {
	t.Helper()
	z := &Zone{name: mdns.Fqdn(name)}
	var pc net.PacketConn
	var ln net.Listener
	for range 20 {
		var err error
		if pc, err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		if ln, err = net.Listen("tcp", pc.LocalAddr().String()); err == nil {
			break
		}
		pc.Close()
		pc = nil
	}
	if pc == nil {
		t.Fatal("dnstest: no port free for both UDP and TCP")
	}
	z.addr = pc.LocalAddr().String()
	for _, srv := range []*mdns.Server{{PacketConn: pc, Handler: z}, {Listener: ln, Handler: z}} {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		go func() { _ = srv.ActivateAndServe() }()
		<-started
		t.Cleanup(func() { _ = srv.Shutdown() })
	}
	return z
}

// Addr is the server's host:port.
func (z *Zone) Addr() string { return z.addr }

// Set makes the name resolve to addrs (IPv4 as A, IPv6 as AAAA records).
func (z *Zone) Set(addrs ...string) {
	ips := make([]netip.Addr, len(addrs))
	for i, a := range addrs {
		ips[i] = netip.MustParseAddr(a)
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	z.rcode, z.addrs = 0, ips
}

// Fail makes every query for the name answer rcode (ServFail, NXDomain).
func (z *Zone) Fail(rcode int) {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.rcode = rcode
}

// Authoritative sets whether answers carry the authoritative bit (the
// default), as the name's own server; false answers as a recursive resolver
// relaying them does.
func (z *Zone) Authoritative(aa bool) {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.notAuth = !aa
}

// ServeDNS implements mdns.Handler.
func (z *Zone) ServeDNS(w mdns.ResponseWriter, q *mdns.Msg) {
	z.mu.Lock()
	defer z.mu.Unlock()
	m := new(mdns.Msg)
	m.SetReply(q)
	m.Authoritative = !z.notAuth
	switch {
	case len(q.Question) != 1 || !strings.EqualFold(q.Question[0].Name, z.name):
		m.Rcode = mdns.RcodeNameError
	case z.rcode != 0:
		m.Rcode = z.rcode
	default:
		qt := q.Question[0].Qtype
		for _, ip := range z.addrs {
			hdr := mdns.RR_Header{Name: z.name, Class: mdns.ClassINET, Ttl: 1}
			switch {
			case ip.Is4() && qt == mdns.TypeA:
				hdr.Rrtype = mdns.TypeA
				m.Answer = append(m.Answer, &mdns.A{Hdr: hdr, A: ip.AsSlice()})
			case ip.Is6() && qt == mdns.TypeAAAA:
				hdr.Rrtype = mdns.TypeAAAA
				m.Answer = append(m.Answer, &mdns.AAAA{Hdr: hdr, AAAA: ip.AsSlice()})
			}
		}
	}
	if _, udp := w.RemoteAddr().(*net.UDPAddr); udp {
		size := mdns.MinMsgSize
		if opt := q.IsEdns0(); opt != nil {
			size = int(opt.UDPSize())
		}
		m.Truncate(size)
	}
	_ = w.WriteMsg(m)
}
