// Package kube is the discovery source of a pool whose engines are
// Kubernetes pods: the Ready pods a label selector picks in a namespace, or
// the pods of a Gateway API Inference Extension InferencePool
// (inference.networking.k8s.io/v1), whose spec.selector it follows as it
// changes and whose spec.targetPorts[0] is the engines' HTTP port.
//
// It watches with client-go informers (list, then watch, relisting after a
// dropped watch), so the set follows the API server without polling.
package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/kvroute/kvroute/discovery"

	"github.com/kvroute/kvroute/internal/engine"
)

// SourceKind is this source's label value in the discovery metrics.
const SourceKind = "kubernetes"

// InferencePoolResource is the Gateway API Inference Extension's
// InferencePool, v1.
var InferencePoolResource = schema.GroupVersionResource{Group: "inference.networking.k8s.io", Version: "v1", Resource: "inferencepools"}

// Pod annotations that override the pool's port template and DP size for
// one pod (an integer each; an invalid one is ignored and counted).
const (
	AnnotationHTTPPort         = "kvroute.io/http-port"
	AnnotationEventsPort       = "kvroute.io/events-port"
	AnnotationReplayPort       = "kvroute.io/replay-port"
	AnnotationMetricsPort      = "kvroute.io/metrics-port"
	AnnotationDataParallelSize = "kvroute.io/data-parallel-size"
)

// MaxTargets bounds the pods one update carries (sorted by name, the rest
// dropped and counted); a pool routes at most engine.MaxRanks ranks anyway.
const MaxTargets = 256

// coalesce gathers a burst of pod changes (a rollout) into one update.
const coalesce = 100 * time.Millisecond

// Options configure a Source.
type Options struct {
	Pool   string // for logs and metrics
	Config *rest.Config
	// Namespace of the pods (and the InferencePool); required.
	Namespace string
	// Exactly one of LabelSelector and InferencePool.
	LabelSelector string
	InferencePool string
	Logger        *slog.Logger // nil → slog.Default()
	Metrics       *discovery.Metrics
	// Resync is the informers' resync period (0: none).
	Resync time.Duration
}

// Source follows a pool's pods.
type Source struct {
	o    Options
	kc   kubernetes.Interface
	dc   dynamic.Interface
	sel  labels.Selector // label-selector mode
	log  *slog.Logger
	met  *discovery.SourceMetrics
	poke chan struct{}

	mu      sync.Mutex
	pods    cache.Store // the current pod informer's store (nil before the first)
	port    int         // the InferencePool's target port (0: none)
	noPool  bool        // the InferencePool does not exist
	badNote map[string]bool
}

// New checks the options and builds the clients; nothing runs before Run.
func New(o Options) (*Source, error) {
	if o.Config == nil {
		return nil, errors.New("kube: no API server config")
	}
	if o.Namespace == "" {
		return nil, errors.New("kube: a namespace is required")
	}
	if (o.LabelSelector == "") == (o.InferencePool == "") {
		return nil, errors.New("kube: exactly one of a label selector and an InferencePool is needed")
	}
	s := &Source{o: o, log: o.Logger, met: o.Metrics.For(o.Pool, SourceKind), poke: make(chan struct{}, 1), badNote: map[string]bool{}}
	if s.log == nil {
		s.log = slog.Default()
	}
	if o.LabelSelector != "" {
		sel, err := labels.Parse(o.LabelSelector)
		if err != nil {
			return nil, fmt.Errorf("kube: label selector: %w", err)
		}
		s.sel = sel
	}
	var err error
	if s.kc, err = kubernetes.NewForConfig(o.Config); err != nil {
		return nil, fmt.Errorf("kube: %w", err)
	}
	if s.dc, err = dynamic.NewForConfig(o.Config); err != nil {
		return nil, fmt.Errorf("kube: %w", err)
	}
	return s, nil
}

// Run implements discovery.Source.
func (s *Source) Run(ctx context.Context, update func([]discovery.Target)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	if s.sel != nil {
		s.watchPods(ctx, &wg, s.sel)
	} else {
		s.watchPool(ctx, &wg)
	}
	var last []discovery.Target
	known := false
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.poke:
		}
		// Coalesce a burst of changes into one update.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(coalesce):
		}
		select {
		case <-s.poke:
		default:
		}
		ts, ok := s.targets()
		if !ok {
			continue // not synced yet
		}
		if len(ts) == 0 {
			s.met.Refreshed(discovery.ResultEmpty)
		} else {
			s.met.Refreshed(discovery.ResultOK)
		}
		if known && slices.Equal(ts, last) {
			continue
		}
		known, last = true, ts
		s.met.Targets(len(ts))
		s.log.Info("discovery: pods changed", "pool", s.o.Pool, "source", SourceKind, "ready_pods", len(ts))
		update(slices.Clone(ts))
	}
}

// changed asks Run for a new update.
func (s *Source) changed() {
	select {
	case s.poke <- struct{}{}:
	default:
	}
}

// watchPods starts a pod informer for sel in the namespace; it stops when ctx
// ends. The store becomes the source's once synced.
func (s *Source) watchPods(ctx context.Context, wg *sync.WaitGroup, sel labels.Selector) {
	f := informers.NewSharedInformerFactoryWithOptions(s.kc, s.o.Resync, informers.WithNamespace(s.o.Namespace),
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = sel.String() }))
	inf := f.Core().V1().Pods().Informer()
	_ = inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		s.met.Refreshed(discovery.ResultError)
		s.log.Warn("discovery: pod watch failed; the last set stays, client-go retries", "pool", s.o.Pool, "source", SourceKind, "err", err)
	})
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { s.changed() },
		UpdateFunc: func(any, any) { s.changed() },
		DeleteFunc: func(any) { s.changed() },
	})
	wg.Go(func() { inf.RunWithContext(ctx) })
	wg.Go(func() {
		if cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			s.mu.Lock()
			s.pods = inf.GetStore()
			s.mu.Unlock()
			s.changed()
		}
	})
}

// watchPool follows the InferencePool: its selector picks the pods (a new
// selector starts a new pod informer and stops the old one), its first
// target port is the HTTP port.
func (s *Source) watchPool(ctx context.Context, wg *sync.WaitGroup) {
	f := dynamicinformer.NewFilteredDynamicSharedInformerFactory(s.dc, s.o.Resync, s.o.Namespace, func(lo *metav1.ListOptions) {
		lo.FieldSelector = fields.OneTermEqualSelector("metadata.name", s.o.InferencePool).String()
	})
	inf := f.ForResource(InferencePoolResource).Informer()
	_ = inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		s.met.Refreshed(discovery.ResultError)
		s.log.Warn("discovery: InferencePool watch failed; the last set stays, client-go retries", "pool", s.o.Pool,
			"source", SourceKind, "inference_pool", s.o.InferencePool, "err", err)
	})
	var cur string                  // the selector the pod informer runs with
	var stopPods context.CancelFunc // stops it
	apply := func(obj any) {
		sel, port, err := poolSpec(obj)
		if err != nil {
			s.met.Refreshed(discovery.ResultError)
			s.log.Warn("discovery: the InferencePool's spec cannot be used; the last set stays", "pool", s.o.Pool,
				"inference_pool", s.o.InferencePool, "err", err)
			return
		}
		s.mu.Lock()
		s.port, s.noPool = port, false
		s.mu.Unlock()
		if sel.String() != cur {
			if stopPods != nil {
				stopPods()
			}
			cur = sel.String()
			pctx, cancel := context.WithCancel(ctx)
			stopPods = cancel
			s.mu.Lock()
			s.pods = nil
			s.mu.Unlock()
			s.log.Info("discovery: following the InferencePool's selector", "pool", s.o.Pool, "inference_pool", s.o.InferencePool,
				"selector_terms", len(sel.String()))
			s.watchPods(pctx, wg, sel)
		}
		s.changed()
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    apply,
		UpdateFunc: func(_, obj any) { apply(obj) },
		DeleteFunc: func(any) {
			if stopPods != nil {
				stopPods()
				stopPods, cur = nil, ""
			}
			s.mu.Lock()
			s.pods, s.noPool = nil, true
			s.mu.Unlock()
			s.log.Warn("discovery: the InferencePool was deleted; the pool has no engine", "pool", s.o.Pool, "inference_pool", s.o.InferencePool)
			s.changed()
		},
	})
	wg.Go(func() { inf.RunWithContext(ctx) })
	wg.Go(func() {
		if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			return
		}
		if len(inf.GetStore().List()) == 0 {
			s.mu.Lock()
			s.noPool = true
			s.mu.Unlock()
			s.log.Warn("discovery: the InferencePool does not exist (yet); the pool has no engine", "pool", s.o.Pool, "inference_pool", s.o.InferencePool)
			s.changed()
		}
	})
}

// poolSpec reads the fields kvroute uses from an InferencePool object:
// spec.selector.matchLabels and spec.targetPorts[0].number.
func poolSpec(obj any) (labels.Selector, int, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, 0, fmt.Errorf("unexpected object %T", obj)
	}
	ml, found, err := unstructured.NestedStringMap(u.Object, "spec", "selector", "matchLabels")
	if err != nil || !found || len(ml) == 0 {
		return nil, 0, errors.New("spec.selector.matchLabels is missing or not a map of strings")
	}
	sel, err := labels.ValidatedSelectorFromSet(ml)
	if err != nil {
		return nil, 0, fmt.Errorf("spec.selector.matchLabels: %w", err)
	}
	port := 0
	tps, found, err := unstructured.NestedSlice(u.Object, "spec", "targetPorts")
	if err == nil && found && len(tps) > 0 {
		if tp, ok := tps[0].(map[string]any); ok {
			if n, ok, _ := unstructured.NestedInt64(tp, "number"); ok && n > 0 && n <= 65535 {
				port = int(n)
			}
		}
	}
	return sel, port, nil
}

// targets is the current set of Ready pods, sorted by name; ok is false
// until the informers have synced.
func (s *Source) targets() ([]discovery.Target, bool) {
	s.mu.Lock()
	store, port, noPool := s.pods, s.port, s.noPool
	s.mu.Unlock()
	if noPool {
		return nil, true
	}
	if store == nil {
		return nil, false
	}
	var out []discovery.Target
	for _, obj := range store.List() {
		pod, ok := obj.(*corev1.Pod)
		if !ok || !routable(pod) {
			continue
		}
		ip, err := netip.ParseAddr(pod.Status.PodIP)
		if err != nil {
			continue
		}
		t := discovery.Target{Name: pod.Name, UID: string(pod.UID), IP: ip.Unmap()}
		t.Ports.HTTP = port
		s.annotations(pod, &t)
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b discovery.Target) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	if len(out) > MaxTargets {
		s.met.Dropped("over_limit", len(out)-MaxTargets)
		out = out[:MaxTargets]
	}
	return out, true
}

// routable: Running, Ready, not being deleted, with an IP.
func routable(pod *corev1.Pod) bool {
	if pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning || pod.Status.PodIP == "" {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// annotations applies the pod's kvroute.io/* overrides; an invalid value is
// ignored, counted and logged once per pod and key (never the value).
func (s *Source) annotations(pod *corev1.Pod, t *discovery.Target) {
	for key, dst := range map[string]*int{
		AnnotationHTTPPort: &t.Ports.HTTP, AnnotationEventsPort: &t.Ports.Events,
		AnnotationReplayPort: &t.Ports.Replay, AnnotationMetricsPort: &t.Ports.Metrics,
		AnnotationDataParallelSize: &t.DataParallelSize,
	} {
		v, ok := pod.Annotations[key]
		if !ok {
			continue
		}
		limit := 65535
		if key == AnnotationDataParallelSize {
			limit = engine.MaxRanks
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > limit {
			note := string(pod.UID) + "/" + key
			s.mu.Lock()
			first := !s.badNote[note]
			if first && len(s.badNote) < 4*MaxTargets {
				s.badNote[note] = true
			}
			s.mu.Unlock()
			if first {
				s.met.Dropped("invalid_annotation", 1)
				s.log.Warn("discovery: a pod annotation is not a valid number; ignored", "pool", s.o.Pool,
					"pod", pod.Name, "annotation", key, "value_bytes", len(v))
			}
			continue
		}
		*dst = n
	}
}
