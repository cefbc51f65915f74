// Package examples_test checks the deploy files that cannot run on the machine
// that tests them (no Docker engine, no cluster): they load with the loaders
// their tools use and their wiring agrees with kvroute's own config.
package examples_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"gopkg.in/yaml.v3"

	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kvroute/kvroute/config"
	"github.com/kvroute/kvroute/internal/kubetest"
	"github.com/kvroute/kvroute/internal/testdata"
)

// loadCompose loads docker-compose.yaml as `docker compose config` would:
// compose-go with schema validation, interpolation and normalization.
func loadCompose(t *testing.T) *types.Project {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, "docker-compose.yaml")
	content, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	details := types.ConfigDetails{
		WorkingDir:  root,
		ConfigFiles: []types.ConfigFile{{Filename: path, Content: content}},
		Environment: types.Mapping{"HOME": "/home/user"},
	}
	p, err := loader.LoadWithContext(context.Background(), details, func(o *loader.Options) {
		o.SetProjectName("kvroute", true)
	})
	if err != nil {
		t.Fatalf("docker-compose.yaml does not load: %v", err)
	}
	return p
}

func TestComposeWiringMatchesKvrouteConfig(t *testing.T) {
	p := loadCompose(t)
	svc := func(name string) types.ServiceConfig {
		s, err := p.GetService(name)
		if err != nil {
			t.Fatalf("service %s: %v", name, err)
		}
		return s
	}
	// Envoy's config file is mounted from the repo and exists there.
	envoy := svc("envoy")
	var envoyCfg string
	for _, v := range envoy.Volumes {
		if v.Target == "/etc/envoy/envoy.yaml" {
			envoyCfg = v.Source
		}
	}
	if envoyCfg == "" {
		t.Fatal("envoy service does not mount /etc/envoy/envoy.yaml")
	}
	if _, err := os.Stat(envoyCfg); err != nil {
		t.Fatalf("envoy config: %v", err)
	}
	envoyYAML, _ := os.ReadFile(envoyCfg)
	if !strings.Contains(string(envoyYAML), "kvroute") || !strings.Contains(string(envoyYAML), "9002") {
		t.Errorf("%s does not point its ext_proc cluster at kvroute:9002", envoyCfg)
	}

	// kvroute's mounted config validates and names the vLLM services' addresses.
	kv := svc("kvroute")
	var kvCfgPath string
	for _, v := range kv.Volumes {
		if v.Target == "/etc/kvroute/kvroute.yaml" {
			kvCfgPath = v.Source
		}
	}
	cfg, err := config.Load(kvCfgPath)
	if err != nil {
		t.Fatalf("kvroute config %s: %v", kvCfgPath, err)
	}
	if !slices.Contains(kv.Command, "/etc/kvroute/kvroute.yaml") {
		t.Errorf("kvroute command %v does not use the mounted config", kv.Command)
	}
	pool := cfg.Pools[0]
	for _, r := range pool.Replicas {
		s := svc(r.Name)
		ip := s.Networks["llm"].Ipv4Address
		addr := netip.MustParseAddrPort(r.Address)
		if addr.Addr().String() != ip || addr.Port() != 8000 {
			t.Errorf("replica %s: address %s, but service %s has IP %s and vLLM listens on 8000", r.Name, r.Address, s.Name, ip)
		}
		if r.Events != "tcp://"+ip+":5557" || r.Replay != "tcp://"+ip+":5558" {
			t.Errorf("replica %s: events %s / replay %s do not reach %s:5557/5558", r.Name, r.Events, r.Replay, ip)
		}
		// The engine publishes where kvroute listens, with the hash scheme kvroute assumes.
		var events struct {
			Enable   bool   `json:"enable_kv_cache_events"`
			Endpoint string `json:"endpoint"`
			Replay   string `json:"replay_endpoint"`
			Topic    string `json:"topic"`
		}
		var algo, model string
		for _, arg := range s.Command {
			switch k, v, _ := strings.Cut(arg, "="); k {
			case "--kv-events-config":
				if err := json.Unmarshal([]byte(v), &events); err != nil {
					t.Fatalf("%s --kv-events-config: %v", s.Name, err)
				}
			case "--prefix-caching-hash-algo":
				algo = v
			case "--model":
				model = v
			}
		}
		if !events.Enable || events.Endpoint != "tcp://*:5557" || events.Replay != "tcp://*:5558" || events.Topic != r.Topic {
			t.Errorf("%s kv-events-config %+v does not match kvroute's replica %+v", s.Name, events, r)
		}
		if algo != pool.Hash.Algorithm {
			t.Errorf("%s hashes with %q, kvroute assumes %q", s.Name, algo, pool.Hash.Algorithm)
		}
		if seed := s.Environment["PYTHONHASHSEED"]; seed == nil || pool.Hash.Seed == nil || *seed != *pool.Hash.Seed {
			t.Errorf("%s PYTHONHASHSEED %v, kvroute assumes %v", s.Name, seed, pool.Hash.Seed)
		}
		if !slices.Contains(pool.Models, model) {
			t.Errorf("%s serves %q, not among the pool's models %v", s.Name, model, pool.Models)
		}
	}
}

// k8sDocs splits a multi-document Kubernetes YAML file.
func k8sDocs(t *testing.T, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var docs []map[string]any
	for {
		var d map[string]any
		err := dec.Decode(&d)
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if d == nil {
			continue
		}
		for _, key := range []string{"apiVersion", "kind", "metadata"} {
			if d[key] == nil {
				t.Errorf("%s: a document lacks %s", path, key)
			}
		}
		docs = append(docs, d)
	}
}

func TestKubernetesManifestsParse(t *testing.T) {
	kinds := map[string]bool{}
	for _, f := range []string{"kubernetes/kvroute.yaml", "kubernetes/inferencepool.yaml", "kubernetes/httproute.yaml"} {
		for _, d := range k8sDocs(t, f) {
			kinds[d["kind"].(string)] = true
			if d["kind"] == "ConfigMap" {
				data := d["data"].(map[string]any)
				if _, err := config.Parse([]byte(data["kvroute.yaml"].(string))); err != nil {
					t.Errorf("ConfigMap kvroute.yaml: %v", err)
				}
			}
		}
	}
	for _, k := range []string{"ServiceAccount", "Role", "RoleBinding", "ConfigMap", "StatefulSet", "Service", "InferencePool", "HTTPRoute"} {
		if !kinds[k] {
			t.Errorf("no %s in examples/kubernetes", k)
		}
	}
}

// TestAdminIsNotExposed: the compose and Kubernetes examples keep the admin
// listener (/metrics, /debug/*) off the wildcard address, and compose does
// not publish it on the host.
func TestAdminIsNotExposed(t *testing.T) {
	wildcard := func(addr string) bool {
		host, _, _ := strings.Cut(addr, ":")
		if strings.HasPrefix(addr, "[") {
			host = addr[1:strings.Index(addr, "]")]
		}
		return host == "" || host == "0.0.0.0" || host == "::"
	}
	composeCfg, err := config.Load(filepath.Join("compose", "kvroute.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	admins := map[string]string{"compose/kvroute.yaml": composeCfg.Listen.Admin}
	for _, d := range k8sDocs(t, "kubernetes/kvroute.yaml") {
		if d["kind"] == "ConfigMap" {
			c, err := config.Parse([]byte(d["data"].(map[string]any)["kvroute.yaml"].(string)))
			if err != nil {
				t.Fatal(err)
			}
			admins["kubernetes/kvroute.yaml"] = c.Listen.Admin
		}
	}
	for file, addr := range admins {
		if addr != "" && wildcard(addr) {
			t.Errorf("%s: listen.admin %q listens on every interface", file, addr)
		}
	}
	_, adminPort, _ := strings.Cut(composeCfg.Listen.Admin, ":")
	svc, err := loadCompose(t).GetService("kvroute")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range svc.Ports {
		if strconv.Itoa(int(p.Target)) == adminPort {
			t.Errorf("docker-compose.yaml publishes kvroute's admin port %d on the host (%s)", p.Target, p.Published)
		}
	}
}

// TestKubernetesManifestsApplyToARealAPIServer creates every object of
// examples/kubernetes (but the HTTPRoute, whose Gateway API CRDs are not
// installed) in a real API server: kvroute.yaml by server-side dry run (every
// field validated, strict), the InferencePool for real after its CRD. Then
// the Role is checked to grant what discovery does, by asking the API server
// as the ServiceAccount would (SubjectAccessReview).
func TestKubernetesManifestsApplyToARealAPIServer(t *testing.T) {
	c := kubetest.Start(t)
	ctx := context.Background()
	const ns = "llm"
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.Apply(t, testdata.Path(t, "kubernetes/inferencepool-crd.yaml"), "", false)
	objs := c.Apply(t, "kubernetes/kvroute.yaml", ns, true)
	if len(objs) != 7 { // RBAC ×3, ConfigMap, StatefulSet, Service, headless Service
		t.Fatalf("%d objects created from kvroute.yaml, want 7", len(objs))
	}
	c.Apply(t, "kubernetes/inferencepool.yaml", ns, false)
	// The RBAC objects for real, to ask the API server what they grant.
	c.ApplyKinds(t, "kubernetes/kvroute.yaml", ns, "ServiceAccount", "Role", "RoleBinding")
	sa := "system:serviceaccount:" + ns + ":kvroute"
	for _, ra := range []authzv1.ResourceAttributes{
		{Namespace: ns, Verb: "watch", Resource: "pods"},
		{Namespace: ns, Verb: "list", Resource: "pods"},
		{Namespace: ns, Verb: "watch", Group: "inference.networking.k8s.io", Resource: "inferencepools"},
		{Namespace: ns, Verb: "list", Group: "inference.networking.k8s.io", Resource: "inferencepools"},
	} {
		r, err := c.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authzv1.SubjectAccessReview{
			Spec: authzv1.SubjectAccessReviewSpec{User: sa, ResourceAttributes: &ra}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !r.Status.Allowed {
			t.Errorf("%s may not %s %s: %s", sa, ra.Verb, ra.Resource, r.Status.Reason)
		}
	}
	// And nothing beyond its namespace.
	r, err := c.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authzv1.SubjectAccessReview{
		Spec: authzv1.SubjectAccessReviewSpec{User: sa, ResourceAttributes: &authzv1.ResourceAttributes{Namespace: "default", Verb: "list", Resource: "pods"}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Status.Allowed {
		t.Error("the kvroute ServiceAccount may list pods outside its namespace")
	}
}

// TestKubernetesPeersNameEveryReplica: the example's kvroute replicas are
// joined in the peer mesh: peers.addresses names every pod of the
// StatefulSet by its stable DNS name under the headless Service, on the
// port peers.listen binds.
func TestKubernetesPeersNameEveryReplica(t *testing.T) {
	var cfg *config.Config
	var replicas int
	var sts, headless, port string
	for _, d := range k8sDocs(t, "kubernetes/kvroute.yaml") {
		meta := d["metadata"].(map[string]any)
		spec, _ := d["spec"].(map[string]any)
		switch d["kind"] {
		case "ConfigMap":
			c, err := config.Parse([]byte(d["data"].(map[string]any)["kvroute.yaml"].(string)))
			if err != nil {
				t.Fatal(err)
			}
			cfg = c
		case "StatefulSet":
			sts, replicas, headless = meta["name"].(string), yamlInt(t, spec["replicas"]), spec["serviceName"].(string)
		case "Service":
			if spec["clusterIP"] == "None" {
				if meta["name"] != headless && headless != "" {
					t.Errorf("headless Service %v is not the StatefulSet's serviceName %s", meta["name"], headless)
				}
				port = strconv.Itoa(yamlInt(t, spec["ports"].([]any)[0].(map[string]any)["port"]))
			}
		}
	}
	if cfg == nil || sts == "" || port == "" {
		t.Fatal("examples/kubernetes/kvroute.yaml lacks the ConfigMap, the StatefulSet or the headless Service")
	}
	if !strings.HasSuffix(cfg.Peers.Listen, ":"+port) {
		t.Errorf("peers.listen %s is not on the headless Service's port %s", cfg.Peers.Listen, port)
	}
	var want []string
	for i := range replicas {
		want = append(want, fmt.Sprintf("%s-%d.%s:%s", sts, i, headless, port))
	}
	if !slices.Equal(cfg.Peers.Addresses, want) {
		t.Errorf("peers.addresses %v, want every replica: %v", cfg.Peers.Addresses, want)
	}
}

// yamlInt is a YAML number decoded as any.
func yamlInt(t *testing.T, v any) int {
	t.Helper()
	switch n := v.(type) {
	case int:
		return n
	case float64:
		return int(n)
	}
	t.Fatalf("%v (%T) is not a number", v, v)
	return 0
}
