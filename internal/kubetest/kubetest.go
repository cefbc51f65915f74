// Package kubetest runs a real Kubernetes API server for tests: Debian's
// etcd and a kube-apiserver built from the k8s.io/kubernetes module by
// scripts/kube-apiserver.sh, both on 127.0.0.1 with fresh state in the
// test's temporary directory, stopped when the test ends. There is no
// scheduler, kubelet or controller manager: a test creates pods and sets
// their status itself, as a kubelet would.
package kubetest

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"github.com/kvroute/kvroute/internal/loopback"
	"github.com/kvroute/kvroute/internal/testdata"
)

// token is the static bearer token of the test's cluster admin.
const token = "kvroute-kubetest-admin"

// readyTimeout bounds the API server's start (etcd, then /readyz); under
// -race on 2 cores it takes 10–30 s.
const readyTimeout = 120 * time.Second

// Cluster is a running API server.
type Cluster struct {
	// Config reaches the API server as a cluster admin.
	Config *rest.Config
	// Client is a clientset for Config.
	Client kubernetes.Interface
	dir    string
}

// Start runs etcd and kube-apiserver for t. Missing binaries skip the test
// loudly outside CI and fail it under CI=true (`make kube-apiserver` builds
// and installs them).
func Start(t testing.TB) *Cluster {
	t.Helper()
	apiserver := filepath.Join(testdata.Root(), ".cache", "bin", "kube-apiserver")
	if _, err := os.Stat(apiserver); err != nil {
		testdata.Missing(t, "kube-apiserver is not built: run `make kube-apiserver` (scripts/kube-apiserver.sh)")
		return nil
	}
	etcd, err := exec.LookPath("etcd")
	if err != nil {
		testdata.Missing(t, "etcd is not installed: run `make kube-apiserver` (installs Debian's etcd-server)")
		return nil
	}
	dir := t.TempDir()
	ports, err := loopback.FreePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	clientURL := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	start(t, dir, "etcd", etcd,
		"--name=kubetest", "--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+clientURL, "--advertise-client-urls="+clientURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=kubetest="+peerURL, "--log-level=warn")

	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "sa.key"), pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}))
	write(t, filepath.Join(dir, "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}))
	write(t, filepath.Join(dir, "tokens.csv"), []byte(token+",kubetest-admin,kubetest-admin,system:masters\n"))
	start(t, dir, "kube-apiserver", apiserver,
		"--etcd-servers="+clientURL, "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(ports[2]), "--cert-dir="+filepath.Join(dir, "certs"),
		"--service-account-issuer=https://kubernetes.default.svc", "--api-audiences=https://kubernetes.default.svc",
		"--service-account-key-file="+filepath.Join(dir, "sa.pub"),
		"--service-account-signing-key-file="+filepath.Join(dir, "sa.key"),
		"--token-auth-file="+filepath.Join(dir, "tokens.csv"),
		"--authorization-mode=RBAC", "--service-cluster-ip-range=10.96.0.0/24",
		// No controller manager creates the default ServiceAccount.
		"--disable-admission-plugins=ServiceAccount")

	cfg := &rest.Config{Host: fmt.Sprintf("https://127.0.0.1:%d", ports[2]), BearerToken: token,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true}, QPS: 100, Burst: 200}
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	var last error
	for {
		body, err := kc.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err == nil && strings.TrimSpace(string(body)) == "ok" {
			break
		}
		last = err
		select {
		case <-ctx.Done():
			t.Fatalf("kube-apiserver not ready after %v: %v\n%s", readyTimeout, last, tail(filepath.Join(dir, "kube-apiserver.log")))
		case <-time.After(250 * time.Millisecond):
		}
	}
	return &Cluster{Config: cfg, Client: kc, dir: dir}
}

// start runs a server process logging to dir/name.log; it is stopped
// (SIGTERM, then SIGKILL) when the test ends.
func start(t testing.TB, dir, name, path string, args ...string) {
	t.Helper()
	log, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		log.Close()
	})
}

func write(t testing.TB, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// tail is the end of a log file, for a failure message.
func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// Apply creates every object of a multi-document YAML file (dryRun: a
// server-side dry run, which validates each object fully and stores
// nothing), in the namespace given where the object names none, and
// returns them. CRDs it creates are waited for until established.
func (c *Cluster) Apply(t testing.TB, path, namespace string, dryRun bool) []*unstructured.Unstructured {
	t.Helper()
	return c.apply(t, path, namespace, dryRun, nil)
}

// ApplyKinds creates, for real, the objects of the file whose kind is one of
// kinds.
func (c *Cluster) ApplyKinds(t testing.TB, path, namespace string, kinds ...string) []*unstructured.Unstructured {
	t.Helper()
	return c.apply(t, path, namespace, false, kinds)
}

func (c *Cluster) apply(t testing.TB, path, namespace string, dryRun bool, kinds []string) []*unstructured.Unstructured {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dc, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(c.Client.Discovery()))
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	var out []*unstructured.Unstructured
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatalf("%s: %v", path, err)
		}
		if len(obj) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: obj}
		gvk := u.GroupVersionKind()
		if kinds != nil && !slices.Contains(kinds, gvk.Kind) {
			continue
		}
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("%s: %s %s: %v", path, gvk, u.GetName(), err)
		}
		var ri dynamic.ResourceInterface = dc.Resource(m.Resource)
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			ns := u.GetNamespace()
			if ns == "" {
				ns = namespace
			}
			ri = dc.Resource(m.Resource).Namespace(ns)
		}
		opts := metav1.CreateOptions{FieldValidation: "Strict"}
		if dryRun {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		created, err := ri.Create(context.Background(), u, opts)
		if err != nil {
			t.Fatalf("%s: create %s %s: %v", path, gvk.Kind, u.GetName(), err)
		}
		out = append(out, created)
		if gvk.Kind == "CustomResourceDefinition" && !dryRun {
			c.waitEstablished(t, dc, created.GetName())
			mapper.Reset()
		}
	}
	return out
}

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

func (c *Cluster) waitEstablished(t testing.TB, dc dynamic.Interface, name string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		u, err := dc.Resource(crdResource).Get(context.Background(), name, metav1.GetOptions{})
		if err == nil {
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			for _, cd := range conds {
				m, _ := cd.(map[string]any)
				if m["type"] == "Established" && m["status"] == "True" {
					return
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("CRD %s not established", name)
}
