// Package loopback picks free 127.0.0.1 ports for tests and tools that must
// name a server's address before it starts (a kube-apiserver's flags, the
// peer mesh's address lists).
package loopback

import (
	"fmt"
	"net"
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
