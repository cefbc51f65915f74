// Package loopback picks free 127.0.0.1 ports for tests and tools that must
// name a server's address before it starts (a kube-apiserver's flags, the
// peer mesh's address lists).
package loopback

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// FreePorts returns n distinct ports free on 127.0.0.1 now. They are held
// until all n are chosen, then released for the caller to bind; another
// process may take one in between, which the caller's bind then reports.
func FreePorts(n int) ([]int, error) {
	var out []int
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("free loopback port: %w", err)
		}
		lns = append(lns, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}

// BindConsecutive finds n consecutive ports P..P+n-1 on 127.0.0.1 that bind
// can take, for servers that must sit at a base port and the ports after it
// (vLLM's data-parallel ranks publish on their base port + rank). bind binds
// all n itself, undoing what it bound when one is taken; BindConsecutive
// then tries another base. Bases lie below the kernel's ephemeral range, so
// the kernel never hands those ports to outgoing connections or to
// listeners on port 0: only another explicit bind can collide. It returns P.
func BindConsecutive(n int, bind func(base int) error) (int, error) {
	lo, hi := 10_000, ephemeralLow()-n
	if hi <= lo {
		return 0, fmt.Errorf("no room for %d consecutive ports below the ephemeral range", n)
	}
	var err error
	for range 100 {
		base := lo + rand.IntN(hi-lo)
		if err = bind(base); err == nil {
			return base, nil
		}
	}
	return 0, fmt.Errorf("%d consecutive loopback ports: 100 bases taken, last: %w", n, err)
}

// ephemeralLow is the first port of Linux's ephemeral range
// (net.ipv4.ip_local_port_range), 32768 when it cannot be read.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil || lo < 1024 {
		return 32768
	}
	return lo
}
