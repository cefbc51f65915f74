package server

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/kvroute/kvroute/config"
	"github.com/kvroute/kvroute/extproc"
	"github.com/kvroute/kvroute/internal/fakeenvoy"
	"github.com/kvroute/kvroute/internal/loopback"
	"github.com/kvroute/kvroute/internal/testdata"
	"github.com/kvroute/kvroute/internal/testpki"
)

// TestPeersBookEachOthersRoutedRequests is two kvroute servers in front of
// the same two engines, joined by peers: a request routed over a real
// ext_proc stream by one is booked by the other over the real mesh (gRPC
// with mutual TLS; its endpoint known there, its layout the same), and
// taken off the books when its stream ends.
func TestPeersBookEachOthersRoutedRequests(t *testing.T) {
	reps := []*replica{newReplica(t), newReplica(t)}
	free, err := loopback.FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	var ports []string
	for _, p := range free {
		ports = append(ports, fmt.Sprintf("127.0.0.1:%d", p)) // the servers bind them next; a clash fails loudly
	}
	ca := testpki.New(t)
	tokDir := testdata.TokenizerDir(t, "qwen3")
	var servers []*Server
	var clients []extprocv3.ExternalProcessorClient
	for i := range 2 {
		var b strings.Builder
		fmt.Fprintf(&b, "listen: {extproc: \"127.0.0.1:0\", admin: \"127.0.0.1:0\"}\nrouting: {debug_headers: true}\n")
		cert := ca.Issue(t, fmt.Sprintf("kvroute-%d", i))
		fmt.Fprintf(&b, "peers: {listen: %q, addresses: [%q, %q], heartbeat_interval: 50ms, peer_timeout: 1s,\n", ports[i], ports[0], ports[1])
		fmt.Fprintf(&b, "  tls: {cert_file: %q, key_file: %q, ca_file: %q}}\n", cert.Cert, cert.Key, ca.File)
		fmt.Fprintf(&b, "ingest: {scrape_interval: 100ms, stall_timeout: 2s}\npools:\n  - name: qwen\n    models: [qwen]\n    tokenizer: %q\n    block_size: %d\n    replicas:\n", tokDir, blockSize)
		for j, r := range reps {
			fmt.Fprintf(&b, "      - {name: r%d, address: %q, events: %q}\n", j, r.http.Listener.Addr().String(), r.pub.Endpoint())
		}
		cfg, err := config.Parse([]byte(b.String()))
		if err != nil {
			t.Fatalf("config: %v\n%s", err, b.String())
		}
		s, c := runServer(t, cfg)
		if got := s.MeshAddr(); got != ports[i] {
			t.Fatalf("mesh bound %s, configured %s", got, ports[i])
		}
		servers = append(servers, s)
		clients = append(clients, c)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if metricValue(t, servers[0], "kvroute_peers") == 1 && metricValue(t, servers[1], "kvroute_peers") == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the two kvroutes never heard each other")
		}
	}
	body := fmt.Sprintf(`{"model":"qwen","prompt":%q,"max_tokens":1}`, prose(40))
	res, err := fakeenvoy.Do(context.Background(), clients[0], fakeenvoy.Config{Mode: fakeenvoy.Buffered, SendProtocolConfig: true},
		fakeenvoy.Request{Method: "POST", Path: "/v1/completions", Body: []byte(body)})
	if err != nil || res.Headers[extproc.HeaderDebugReplica] == "" {
		t.Fatalf("not routed: %v %v", err, res.Headers)
	}
	peer := servers[1]
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if metricValue(t, peer, "kvroute_peer_messages_received_total", `kind="begin"`) == 1 &&
			metricValue(t, peer, "kvroute_peer_messages_received_total", `kind="end"`) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the peer never received the request's begin and end")
		}
	}
	if n := metricValue(t, peer, "kvroute_peer_messages_dropped_total"); n != 0 {
		t.Fatalf("the peer dropped %g messages (unknown endpoint or layout?)", n)
	}
	if n := metricValue(t, peer, "kvroute_peer_requests_booked"); n != 0 {
		t.Fatalf("%g requests still booked after the stream ended", n)
	}
}

// TestMeshCertificatesMustLoad: certificate files that are missing or no
// PEM stop the start with an error naming the key; a listener on the mesh
// port is not left behind.
func TestMeshCertificatesMustLoad(t *testing.T) {
	ca := testpki.New(t)
	good := ca.Issue(t, "kvroute-0")
	junk := filepath.Join(t.TempDir(), "junk.pem")
	if err := os.WriteFile(junk, []byte("not PEM"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, cert, key, ca, want string }{
		{"missing certificate", filepath.Join(t.TempDir(), "nope.pem"), good.Key, ca.File, "peers.tls.cert_file"},
		{"CA not PEM", good.Cert, good.Key, junk, "peers.tls.ca_file: no PEM certificates"},
	} {
		doc := fmt.Sprintf(`listen: {extproc: "127.0.0.1:0", admin: ""}
peers: {listen: "127.0.0.1:0", addresses: ["127.0.0.1:1"], tls: {cert_file: %q, key_file: %q, ca_file: %q}}
pools:
  - name: qwen
    models: [qwen]
    replicas: [{name: r0, address: "127.0.0.1:1"}]
`, c.cert, c.key, c.ca)
		cfg, err := config.Parse([]byte(doc))
		if err != nil {
			t.Fatalf("%s: config: %v", c.name, err)
		}
		if _, err := New(Options{Config: cfg, Logger: quietLogger()}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: New: %v, want an error naming %q", c.name, err, c.want)
		}
	}
}
