package ingest

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// offsetEndpoint is the endpoint of data-parallel rank `rank`: tcp ports move
// up by the rank, inproc names gain "_dp<rank>" (offset_endpoint_port in
// vllm/distributed/kv_events.py, upstream main 5ac26849); vLLM rejects other
// transports with DP > 1, and so does kvroute.
func offsetEndpoint(ep string, rank int) (string, error) {
	if rank == 0 {
		return ep, nil
	}
	scheme, rest, ok := strings.Cut(ep, "://")
	if !ok {
		return "", fmt.Errorf("%q is not a ZeroMQ endpoint", ep)
	}
	switch scheme {
	case "inproc":
		return fmt.Sprintf("%s_dp%d", ep, rank), nil
	case "tcp":
		host, port, err := net.SplitHostPort(rest)
		if err != nil {
			return "", fmt.Errorf("%q: %w", ep, err)
		}
		p, err := strconv.Atoi(port)
		if err != nil || p+rank > 65535 {
			return "", fmt.Errorf("%q: no room for data-parallel rank %d's port", ep, rank)
		}
		return "tcp://" + net.JoinHostPort(host, strconv.Itoa(p+rank)), nil
	default:
		return "", fmt.Errorf("%q: data-parallel rank %d needs a tcp endpoint (vLLM offsets the port per rank)", ep, rank)
	}
}

// topicAddress parses the `kv@<ip>:<port>@<model>` topic convention (also
// `kv@<ip>@<model>`) into the address and model parts.
func topicAddress(topic string) (addr, model string, ok bool) {
	rest, found := strings.CutPrefix(topic, "kv@")
	if !found {
		return "", "", false
	}
	addr, model, _ = strings.Cut(rest, "@")
	return addr, model, addr != ""
}

// addressMatches reports whether a replica's ip:port address is the topic's
// address: the same ip:port, or the same ip when the topic has no port.
func addressMatches(replicaAddr, topicAddr string) bool {
	if replicaAddr == topicAddr {
		return true
	}
	ap, err := netip.ParseAddrPort(replicaAddr)
	if err != nil {
		return false
	}
	if ta, err := netip.ParseAddrPort(topicAddr); err == nil {
		return ta == ap
	}
	ip, err := netip.ParseAddr(strings.Trim(topicAddr, "[]"))
	return err == nil && ip == ap.Addr()
}
