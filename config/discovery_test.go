package config

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/kvroute/kvroute/internal/engine"
)

func TestDiscoveredPoolsValidate(t *testing.T) {
	for name, doc := range map[string]string{
		"dns": `
pools:
  - name: p
    models: [m]
    discovery: {kind: dns, dns: {name: vllm.default.svc.cluster.local, interval: 5s, server: "127.0.0.1:53"}, ports: {http: 8000, events: 5557, replay: 5558}}
`,
		"kubernetes label selector": `
pools:
  - name: p
    models: [m]
    discovery: {kind: kubernetes, kubernetes: {namespace: llm, label_selector: "app=vllm"}, ports: {http: 8000, events: 5557}}
`,
		"kubernetes inference pool (port from the pool)": `
pools:
  - name: p
    models: [m]
    discovery: {kind: kubernetes, kubernetes: {inference_pool: qwen-pool}, ports: {events: 5557}}
`,
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := Parse([]byte(doc)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestDiscoveryErrorsNameTheKey(t *testing.T) {
	for _, tc := range []struct{ doc, want string }{
		{`discovery: {kind: consul}`, `pools[0].discovery.kind`},
		{`discovery: {kind: dns, dns: {name: "bad name!"}, ports: {http: 8000}}`, `pools[0].discovery.dns.name`},
		{`discovery: {kind: dns, dns: {name: a.b}}`, `pools[0].discovery.ports.http: is required`},
		{`discovery: {kind: dns, dns: {name: a.b, interval: 1ms}, ports: {http: 8000}}`, `pools[0].discovery.dns.interval`},
		{`discovery: {kind: dns, dns: {name: a.b, server: "127.0.0.1"}, ports: {http: 8000}}`, `pools[0].discovery.dns.server`},
		{`discovery: {kind: dns, dns: {name: a.b}, ports: {http: 70000}}`, `pools[0].discovery.ports.http`},
		{`discovery: {kind: dns, dns: {name: a.b}, ports: {http: 8000, replay: 5558}}`, `pools[0].discovery.ports.replay: needs ports.events`},
		{`discovery: {kind: dns, dns: {name: a.b}, ports: {http: 8000}, data_parallel_size: 0}`, `pools[0].discovery.data_parallel_size`},
		{`discovery: {kind: kubernetes, kubernetes: {label_selector: "a=b", inference_pool: p}, ports: {http: 1}}`, `exactly one of label_selector and inference_pool`},
		{`discovery: {kind: kubernetes, kubernetes: {}}`, `exactly one of label_selector and inference_pool`},
		{`discovery: {kind: kubernetes, kubernetes: {label_selector: "a=b"}}`, `pools[0].discovery.ports.http: is required with label_selector`},
		{`discovery: {kind: kubernetes, kubernetes: {inference_pool: Bad_Name}}`, `pools[0].discovery.kubernetes.inference_pool`},
		{`discovery: {kind: kubernetes, kubernetes: {namespace: "NS", inference_pool: p}}`, `pools[0].discovery.kubernetes.namespace`},
		{`discovery: {kind: static, dns: {name: a.b}}`, `kind static takes no other discovery keys`},
		{"discovery: {kind: dns, dns: {name: a.b}, ports: {http: 8000}}\n    replicas: [{name: r, address: \"10.0.0.1:8000\"}]", `lists no replicas`},
	} {
		doc := "pools:\n  - name: p\n    models: [m]\n    " + tc.doc + "\n"
		_, err := Parse([]byte(doc))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s:\n got %v\nwant an error with %q", tc.doc, err, tc.want)
		}
	}
	// A static pool still needs replicas.
	if _, err := Parse([]byte("pools:\n  - name: p\n    models: [m]\n")); err == nil || !strings.Contains(err.Error(), "at least one replica") {
		t.Errorf("static pool without replicas: %v", err)
	}
	// Discovery and ingest.bind do not mix.
	doc := "ingest: {bind: \"tcp://127.0.0.1:5557\"}\npools:\n  - name: p\n    models: [m]\n    discovery: {kind: dns, dns: {name: a.b}, ports: {http: 8000}}\n"
	if _, err := Parse([]byte(doc)); err == nil || !strings.Contains(err.Error(), "ingest.bind") {
		t.Errorf("discovery with ingest.bind: %v", err)
	}
}

func TestDiscoveredReplicaFollowsThePortTemplate(t *testing.T) {
	d := Discovery{Ports: engine.Ports{HTTP: 8000, Events: 5557, Replay: 5558}, Topic: "kv", DataParallelSize: 1}
	r := d.Replica("pod-a", netip.MustParseAddr("10.1.2.3"), engine.Ports{}, 0)
	want := Replica{Name: "pod-a", Address: "10.1.2.3:8000", Events: "tcp://10.1.2.3:5557", Replay: "tcp://10.1.2.3:5558",
		Topic: "kv", Metrics: "http://10.1.2.3:8000/metrics", DataParallelSize: 1}
	if r != want {
		t.Fatalf("got %+v\nwant %+v", r, want)
	}
	// Overrides (a pod's annotations), a metrics port, DP size and IPv6.
	r = d.Replica("pod-b", netip.MustParseAddr("fd00::7"), engine.Ports{HTTP: 9000, Metrics: 9090}, 2)
	want = Replica{Name: "pod-b", Address: "[fd00::7]:9000", Events: "tcp://[fd00::7]:5557", Replay: "tcp://[fd00::7]:5558",
		Topic: "kv", Metrics: "http://[fd00::7]:9090/metrics", DataParallelSize: 2}
	if r != want {
		t.Fatalf("got %+v\nwant %+v", r, want)
	}
	p := &Pool{Name: "p", Discovery: d}
	if err := ValidateReplicas(p, []Replica{r}, false); err != nil {
		t.Fatalf("a discovered replica does not validate: %v", err)
	}
	dup := []Replica{r, r}
	if err := ValidateReplicas(p, dup, false); err == nil || !strings.Contains(err.Error(), "already the name") {
		t.Fatalf("duplicate replicas: %v", err)
	}
}

func TestDiffNamesTheKeys(t *testing.T) {
	parse := func(doc string) *Config {
		t.Helper()
		c, err := Parse([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	a := parse(minimal)
	if d := Diff(a, parse(minimal)); len(d) != 0 {
		t.Fatalf("equal configs differ at %v", d)
	}
	b := parse(`
routing: {placement_slack: 0.5}
pools:
  - name: qwen3
    models: ["Qwen/Qwen3-8B"]
    hash: {seed: "1"}
    replicas:
      - {name: vllm-0, address: 10.0.0.8:8000, events: "tcp://10.0.0.7:5557"}
`)
	got := strings.Join(Diff(a, b), " ")
	want := "routing.placement_slack pools[0].hash.seed pools[0].replicas[0].address pools[0].replicas[0].metrics"
	if got != want {
		t.Fatalf("Diff = %s\nwant   %s", got, want)
	}
	c := parse(minimal + "      - {name: vllm-1, address: 10.0.0.9:8000}\n")
	if got := strings.Join(Diff(a, c), " "); got != "pools[0].replicas" {
		t.Fatalf("a longer list: %s", got)
	}
}
