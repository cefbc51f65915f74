package server

import (
	"context"
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvroute/kvroute/config"
	"github.com/kvroute/kvroute/internal/dnstest"
	"github.com/kvroute/kvroute/internal/kubetest"
	"github.com/kvroute/kvroute/internal/poll"
	"github.com/kvroute/kvroute/internal/vllmzmq"
	"github.com/kvroute/kvroute/tokenize"

	"github.com/kvroute/kvroute/internal/testdata"
)

// hostReplica is an emulated engine at its own loopback IP on the pool's
// shared ports, as pods behind a headless Service are.
func hostReplica(t *testing.T, ip string, httpPort, eventsPort int) *replica {
	t.Helper()
	pub, err := vllmzmq.NewPublisher(fmt.Sprintf("tcp://%s:%d", ip, eventsPort), "", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(httpPort)))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(newReplica(t).http.Config.Handler)
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return &replica{pub: pub, http: srv}
}

// sharedPorts finds two ports free on every one of ips.
func sharedPorts(t *testing.T, ips ...string) (int, int) {
	t.Helper()
	var ports []int
	for len(ports) < 2 {
		ln, err := net.Listen("tcp", ips[0]+":0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ok := true
		for _, ip := range ips[1:] {
			l, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
			if err != nil {
				ok = false
				break
			}
			l.Close()
		}
		ln.Close()
		if ok && (len(ports) == 0 || ports[0] != port) {
			ports = append(ports, port)
		}
	}
	return ports[0], ports[1]
}

// TestDNSDiscoveredPoolFollowsTheRecords: a pool whose engines are a name's
// A records on a real DNS server. kvroute starts with none, follows the
// records as engines come and go, and routes by prefix to a discovered one.
func TestDNSDiscoveredPoolFollowsTheRecords(t *testing.T) {
	ips := []string{"127.0.0.2", "127.0.0.3"}
	httpPort, eventsPort := sharedPorts(t, ips...)
	hostReplica(t, ips[0], httpPort, eventsPort)
	b := hostReplica(t, ips[1], httpPort, eventsPort)
	z := dnstest.Start(t, "vllm.kvroute.test.")
	z.Set(ips[0])

	tokDir := testdata.TokenizerDir(t, "qwen3")
	cfg := discoveredPool(t, tokDir, fmt.Sprintf("{kind: dns, dns: {name: vllm.kvroute.test., interval: 100ms, server: %q}, ports: {http: %d, events: %d}}",
		z.Addr(), httpPort, eventsPort))
	s, c := runServer(t, cfg)
	waitUntil(t, "one replica discovered", func() bool { return metricValue(t, s, "kvroute_replica_ranks", `pool="qwen"`) == 1 })

	tok, err := tokenize.Load(tokDir)
	if err != nil {
		t.Fatal(err)
	}
	prompt := prose(20)
	body := `{"model":"qwen","prompt":` + strconv.Quote(prompt) + `,"max_tokens":4}`
	z.Set(ips[0], ips[1])
	waitUntil(t, "two replicas discovered", func() bool { return metricValue(t, s, "kvroute_replica_ranks", `pool="qwen"`) == 2 })
	b.storeBlocks(t, tok.Encode(prompt, true))
	route(t, c, "/v1/completions", body, ips[1])

	z.Set(ips[0])
	waitUntil(t, "127.0.0.3 left", func() bool {
		_, ok := blocksOf(s, ips[1])
		return !ok
	})
	if got := metricValue(t, s, "kvroute_replica_changes_total", `change="leave"`); got != 1 {
		t.Errorf("leaves %v", got)
	}
	if got := metricValue(t, s, "kvroute_discovery_targets", `source="dns"`); got != 1 {
		t.Errorf("kvroute_discovery_targets %v", got)
	}
}

// waitUntil polls cond (poll.Until).
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	poll.Until(t, what, cond)
}

// TestKubernetesDiscoveredPoolFollowsPods: a pool whose engines are the
// Ready pods of a label selector in a real API server (kubetest); kvroute
// reaches it through a kubeconfig file, follows pods becoming ready and
// being deleted, and routes by prefix to a discovered pod.
func TestKubernetesDiscoveredPoolFollowsPods(t *testing.T) {
	cluster := kubetest.Start(t)
	ips := []string{"127.0.0.2", "127.0.0.3"}
	httpPort, eventsPort := sharedPorts(t, ips...)
	hostReplica(t, ips[0], httpPort, eventsPort)
	b := hostReplica(t, ips[1], httpPort, eventsPort)

	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: test, cluster: {server: %q, insecure-skip-tls-verify: true}}]
users: [{name: admin, user: {token: %q}}]
contexts: [{name: test, context: {cluster: test, user: admin}}]
current-context: test
`, cluster.Config.Host, cluster.Config.BearerToken)), 0o600); err != nil {
		t.Fatal(err)
	}
	tokDir := testdata.TokenizerDir(t, "qwen3")
	cfg := discoveredPool(t, tokDir, fmt.Sprintf(`{kind: kubernetes, kubernetes: {namespace: default, label_selector: "app=vllm", kubeconfig: kubeconfig}, ports: {http: %d, events: %d}}`,
		httpPort, eventsPort))
	pods := cluster.Client.CoreV1().Pods("default")
	ctx := context.Background()
	readyPod := func(name, ip string) {
		t.Helper()
		p, err := pods.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "vllm"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "vllm", Image: "vllm/vllm-openai"}}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
		if _, err := pods.UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	readyPod("vllm-0", ips[0])

	s, err := New(Options{Config: cfg, BaseDir: dir, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	c := serve(t, s)
	waitUntil(t, "vllm-0 discovered", func() bool { return metricValue(t, s, "kvroute_replica_ranks", `pool="qwen"`) == 1 })

	readyPod("vllm-1", ips[1])
	waitUntil(t, "vllm-1 discovered", func() bool { return metricValue(t, s, "kvroute_replica_ranks", `pool="qwen"`) == 2 })
	tok, err := tokenize.Load(tokDir)
	if err != nil {
		t.Fatal(err)
	}
	prompt := prose(20)
	b.storeBlocks(t, tok.Encode(prompt, true))
	route(t, c, "/v1/completions", `{"model":"qwen","prompt":`+strconv.Quote(prompt)+`,"max_tokens":4}`, "vllm-1")

	zero := int64(0)
	if err := pods.Delete(ctx, "vllm-1", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "vllm-1 left", func() bool {
		_, ok := blocksOf(s, "vllm-1")
		return !ok
	})
	if got := metricValue(t, s, "kvroute_discovery_targets", `source="kubernetes"`); got != 1 {
		t.Errorf("kvroute_discovery_targets %v", got)
	}
}

// discoveredPool is the config of one pool "qwen" (model qwen, the given
// tokenizer, block_size blockSize) whose pools[0].discovery is the YAML
// flow mapping discovery.
func discoveredPool(t *testing.T, tokDir, discovery string) *config.Config {
	t.Helper()
	doc := fmt.Sprintf(`listen: {extproc: "127.0.0.1:0", admin: "127.0.0.1:0"}
routing: {debug_headers: true}
ingest: {scrape_interval: 100ms, stall_timeout: 2s}
pools:
  - name: qwen
    models: [qwen]
    tokenizer: %q
    block_size: %d
    discovery: %s
`, tokDir, blockSize, discovery)
	cfg, err := config.Parse([]byte(doc))
	if err != nil {
		t.Fatalf("%v\n%s", err, doc)
	}
	return cfg
}
