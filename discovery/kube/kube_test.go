package kube

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/kvroute/kvroute/discovery"
	"github.com/kvroute/kvroute/internal/kubetest"
	"github.com/kvroute/kvroute/internal/testdata"

	"github.com/kvroute/kvroute/internal/engine"
)

const ns = "llm"

// fleet creates pods in a real API server and plays the kubelet's part:
// their status (Running, Ready, an IP).
type fleet struct {
	t  *testing.T
	c  *kubetest.Cluster
	ip int
}

func newFleet(t *testing.T) *fleet {
	c := kubetest.Start(t)
	_, err := c.Client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return &fleet{t: t, c: c, ip: 10}
}

// pod creates a pod with labels and annotations and marks it ready (or not)
// with a fresh IP.
func (f *fleet) pod(name string, labels, annotations map[string]string, ready bool) *corev1.Pod {
	f.t.Helper()
	ctx := context.Background()
	p, err := f.c.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: annotations},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "vllm", Image: "vllm/vllm-openai"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	f.ip++
	return f.setReady(p, ready, "10.0.0."+strconv.Itoa(f.ip))
}

func (f *fleet) setReady(p *corev1.Pod, ready bool, ip string) *corev1.Pod {
	f.t.Helper()
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}}
	p, err := f.c.Client.CoreV1().Pods(ns).UpdateStatus(context.Background(), p, metav1.UpdateOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return p
}

func (f *fleet) delete(name string) {
	f.t.Helper()
	zero := int64(0)
	if err := f.c.Client.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		f.t.Fatal(err)
	}
}

// follow runs a Source and returns its updates.
func follow(t *testing.T, o Options) <-chan []discovery.Target {
	t.Helper()
	o.Pool, o.Namespace = "p", ns
	o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	o.Metrics = discovery.NewMetrics(prometheus.NewRegistry())
	src, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	updates := make(chan []discovery.Target, 100)
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, func(ts []discovery.Target) { updates <- ts }) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Error("Run did not stop")
		}
	})
	return updates
}

// await reads updates until one has exactly the named pods (in order).
func await(t *testing.T, updates <-chan []discovery.Target, names ...string) []discovery.Target {
	t.Helper()
	want := strings.Join(names, ",")
	timeout := time.After(30 * time.Second)
	var last string
	for {
		select {
		case ts := <-updates:
			var got []string
			for _, tg := range ts {
				got = append(got, tg.Name)
			}
			if last = strings.Join(got, ","); last == want {
				return ts
			}
		case <-timeout:
			t.Fatalf("never got pods [%s]; last update [%s]", want, last)
		}
	}
}

// TestLabelSelectorFollowsReadyPods: only Running, Ready pods with an IP
// route; readiness, deletion and re-creation (a new UID) are followed; pod
// annotations override the port template, and invalid ones are ignored.
func TestLabelSelectorFollowsReadyPods(t *testing.T) {
	f := newFleet(t)
	vllm := map[string]string{"app": "vllm"}
	f.pod("vllm-a", vllm, nil, true)
	b := f.pod("vllm-b", vllm, map[string]string{AnnotationEventsPort: "6557", AnnotationDataParallelSize: "2", AnnotationMetricsPort: "nope"}, true)
	f.pod("vllm-c", vllm, nil, false)
	f.pod("other", map[string]string{"app": "web"}, nil, true)

	updates := follow(t, Options{Config: f.c.Config, LabelSelector: "app=vllm"})
	ts := await(t, updates, "vllm-a", "vllm-b")
	if got := ts[1]; got.Ports.Events != 6557 || got.DataParallelSize != 2 || got.Ports.Metrics != 0 || got.UID != string(b.UID) || got.IP.String() != b.Status.PodIP {
		t.Fatalf("vllm-b target %+v", got)
	}
	if ts[0].Ports != (engine.Ports{}) || ts[0].DataParallelSize != 0 {
		t.Fatalf("vllm-a has overrides: %+v", ts[0])
	}

	c, _ := f.c.Client.CoreV1().Pods(ns).Get(context.Background(), "vllm-c", metav1.GetOptions{})
	f.setReady(c, true, c.Status.PodIP)
	await(t, updates, "vllm-a", "vllm-b", "vllm-c")
	f.setReady(b, false, b.Status.PodIP)
	await(t, updates, "vllm-a", "vllm-c")

	f.delete("vllm-a")
	await(t, updates, "vllm-c")
	a2 := f.pod("vllm-a", vllm, nil, true)
	ts = await(t, updates, "vllm-a", "vllm-c")
	if ts[0].UID != string(a2.UID) {
		t.Fatalf("re-created pod reported with UID %s, want the new %s", ts[0].UID, a2.UID)
	}
}

var poolResource = InferencePoolResource

func inferencePool(name string, matchLabels map[string]any, port int64) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{
			"selector":          map[string]any{"matchLabels": matchLabels},
			"targetPorts":       []any{map[string]any{"number": port}},
			"endpointPickerRef": map[string]any{"name": "kvroute", "port": map[string]any{"number": int64(9002)}},
		},
	}}
}

// TestInferencePoolFollowsItsSelector: the pods of an InferencePool (the
// CRD installed from testdata/kubernetes), its target port as the HTTP port;
// a selector change re-points the set; a missing pool is an empty set.
func TestInferencePoolFollowsItsSelector(t *testing.T) {
	f := newFleet(t)
	f.c.Apply(t, testdata.Path(t, "kubernetes/inferencepool-crd.yaml"), "", false)
	dc, err := dynamic.NewForConfig(f.c.Config)
	if err != nil {
		t.Fatal(err)
	}
	f.pod("qwen-0", map[string]string{"model": "qwen", "track": "stable"}, nil, true)
	f.pod("qwen-1", map[string]string{"model": "qwen", "track": "canary"}, nil, true)

	updates := follow(t, Options{Config: f.c.Config, InferencePool: "qwen-pool"})
	await(t, updates) // no pool yet: an empty set

	ctx := context.Background()
	pools := dc.Resource(poolResource).Namespace(ns)
	if _, err := pools.Create(ctx, inferencePool("qwen-pool", map[string]any{"model": "qwen"}, 8000), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ts := await(t, updates, "qwen-0", "qwen-1")
	if ts[0].Ports.HTTP != 8000 {
		t.Fatalf("HTTP port %d, want the pool's target port 8000", ts[0].Ports.HTTP)
	}

	cur, err := pools.Get(ctx, "qwen-pool", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedStringMap(cur.Object, map[string]string{"model": "qwen", "track": "canary"}, "spec", "selector", "matchLabels"); err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedSlice(cur.Object, []any{map[string]any{"number": int64(8001)}}, "spec", "targetPorts"); err != nil {
		t.Fatal(err)
	}
	if _, err := pools.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ts = await(t, updates, "qwen-1")
	if ts[0].Ports.HTTP != 8001 {
		t.Fatalf("HTTP port %d after the update, want 8001", ts[0].Ports.HTTP)
	}

	if err := pools.Delete(ctx, "qwen-pool", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	await(t, updates)
}
