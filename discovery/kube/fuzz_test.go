package kube

import (
	"encoding/json"
	"io"
	"log/slog"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kvroute/kvroute/discovery"

	"github.com/kvroute/kvroute/internal/engine"
)

// FuzzPoolSpec: whatever an InferencePool object holds (the API server
// validates against the CRD installed, which kvroute does not control),
// reading it never panics and yields a port within 0..65535.
func FuzzPoolSpec(f *testing.F) {
	f.Add([]byte(`{"spec":{"selector":{"matchLabels":{"app":"vllm"}},"targetPorts":[{"number":8000}]}}`))
	f.Add([]byte(`{"spec":{"selector":{"matchLabels":{"a":1}},"targetPorts":[{"number":-1},{}]}}`))
	f.Add([]byte(`{"spec":{"selector":{"matchLabels":{"bad key!":"x"}},"targetPorts":"x"}}`))
	f.Add([]byte(`{"spec":null}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var obj map[string]any
		if json.Unmarshal(data, &obj) != nil || obj == nil {
			return
		}
		sel, port, err := poolSpec(&unstructured.Unstructured{Object: obj})
		if err == nil && sel == nil {
			t.Fatal("no error and no selector")
		}
		if port < 0 || port > 65535 {
			t.Fatalf("port %d", port)
		}
	})
}

// FuzzAnnotations: a pod's kvroute.io/* annotations are the pod author's;
// any value is either a number in range or ignored.
func FuzzAnnotations(f *testing.F) {
	f.Add("8000", "5557", "2")
	f.Add("-1", "99999999999999999999", "x")
	f.Add("0x10", " 7", "65")
	s := &Source{log: slog.New(slog.NewTextHandler(io.Discard, nil)), met: discovery.NewMetrics(nil).For("p", SourceKind), badNote: map[string]bool{}}
	f.Fuzz(func(t *testing.T, http, events, dp string) {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "u", Annotations: map[string]string{
			AnnotationHTTPPort: http, AnnotationEventsPort: events, AnnotationDataParallelSize: dp,
		}}}
		var tg discovery.Target
		s.annotations(pod, &tg)
		for _, p := range []int{tg.Ports.HTTP, tg.Ports.Events} {
			if p < 0 || p > 65535 {
				t.Fatalf("port %d", p)
			}
		}
		if tg.DataParallelSize < 0 || tg.DataParallelSize > engine.MaxRanks {
			t.Fatalf("data parallel size %d", tg.DataParallelSize)
		}
	})
}
