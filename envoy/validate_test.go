// Package envoy holds Envoy bootstrap configs for kvroute; this test checks
// every YAML here against Envoy's own protos (go-control-plane) plus the rules
// Envoy enforces only in C++, since no Envoy binary can run here.
package envoy

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/stream/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	headermutationv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/header_mutation/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"gopkg.in/yaml.v3"

	"github.com/kvroute/kvroute/config"
	"github.com/kvroute/kvroute/extproc"
)

const destinationHeader = "x-gateway-destination-endpoint"

// validate decodes an Envoy bootstrap YAML strictly and returns every problem.
func validate(src []byte) []error {
	var doc any
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return []error{fmt.Errorf("yaml: %w", err)}
	}
	js, err := json.Marshal(doc)
	if err != nil {
		return []error{fmt.Errorf("yaml → json: %w", err)}
	}
	bs := &bootstrapv3.Bootstrap{}
	// Unknown fields (also inside typed_config Anys) are errors.
	if err := (protojson.UnmarshalOptions{}).Unmarshal(js, bs); err != nil {
		return []error{fmt.Errorf("decode: %w", err)}
	}
	var errs []error
	if err := bs.ValidateAll(); err != nil {
		errs = append(errs, fmt.Errorf("bootstrap: %w", err))
	}
	// The generated validators do not descend into Any: unpack each one.
	var typed []proto.Message
	walkAnys(bs.ProtoReflect(), func(a *anypb.Any) {
		m, err := a.UnmarshalNew()
		if err != nil {
			errs = append(errs, fmt.Errorf("typed_config %s: %w", a.GetTypeUrl(), err))
			return
		}
		if v, ok := m.(interface{ ValidateAll() error }); ok {
			if err := v.ValidateAll(); err != nil {
				errs = append(errs, fmt.Errorf("typed_config %s: %w", a.GetTypeUrl(), err))
			}
		}
		typed = append(typed, m)
	})
	return append(errs, cppRules(bs, typed)...)
}

// walkAnys calls fn for every Any in m, depth first, including Anys nested in
// unpacked Anys.
func walkAnys(m protoreflect.Message, fn func(*anypb.Any)) {
	if a, ok := m.Interface().(*anypb.Any); ok {
		fn(a)
		if inner, err := a.UnmarshalNew(); err == nil {
			walkAnys(inner.ProtoReflect(), fn)
		}
		return
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Message() != nil:
			for i := 0; i < v.List().Len(); i++ {
				walkAnys(v.List().Get(i).Message(), fn)
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				walkAnys(mv.Message(), fn)
				return true
			})
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			walkAnys(v.Message(), fn)
		}
		return true
	})
}

// cppRules are start-up checks Envoy makes in C++ (not in the proto
// validators) and the settings kvroute depends on.
func cppRules(bs *bootstrapv3.Bootstrap, typed []proto.Message) []error {
	var errs []error
	fail := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	clusters := map[string]*clusterv3.Cluster{}
	for _, c := range bs.GetStaticResources().GetClusters() {
		clusters[c.GetName()] = c
		if c.GetType() == clusterv3.Cluster_ORIGINAL_DST {
			if c.GetLbPolicy() != clusterv3.Cluster_CLUSTER_PROVIDED {
				fail("cluster %s: ORIGINAL_DST requires lb_policy CLUSTER_PROVIDED, not %s", c.GetName(), c.GetLbPolicy())
			}
			if c.GetLoadAssignment() != nil {
				fail("cluster %s: ORIGINAL_DST must not have a load_assignment", c.GetName())
			}
			if odc := c.GetOriginalDstLbConfig(); odc.GetHttpHeaderName() != "" && !odc.GetUseHttpHeader() {
				fail("cluster %s: http_header_name requires use_http_header: true", c.GetName())
			}
		}
	}
	var bufferLimits []uint32
	for _, l := range bs.GetStaticResources().GetListeners() {
		bufferLimits = append(bufferLimits, l.GetPerConnectionBufferLimitBytes().GetValue())
	}
	extProcs := 0
	for _, m := range typed {
		switch t := m.(type) {
		case *hcmv3.HttpConnectionManager:
			errs = append(errs, checkHCM(t, clusters)...)
		case *extprocfilterv3.ExternalProcessor:
			extProcs++
			gs := t.GetGrpcService()
			if gs == nil {
				fail("ext_proc: grpc_service is required (Envoy checks this in C++)")
			} else if name := gs.GetEnvoyGrpc().GetClusterName(); name != "" && clusters[name] == nil {
				fail("ext_proc: grpc_service cluster %q does not exist", name)
			}
			// kvroute holds a queued request's message for up to its TTL and
			// asks Envoy for that much more time (override_message_timeout),
			// which Envoy ignores above max_message_timeout.
			if need := maxFlowWait(); t.GetMaxMessageTimeout().AsDuration() < need {
				fail("ext_proc: max_message_timeout %s is below the longest flow control wait kvroute asks for (%s: the largest routing.flow_control TTL + %s)",
					t.GetMaxMessageTimeout().AsDuration(), need, extproc.FlowTimeoutMargin)
			}
			pm := t.GetProcessingMode()
			switch pm.GetRequestBodyMode() {
			case extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED:
				if pm.GetRequestTrailerMode() != extprocfilterv3.ProcessingMode_SEND {
					fail("ext_proc: FULL_DUPLEX_STREAMED requires request_trailer_mode: SEND")
				}
			case extprocfilterv3.ProcessingMode_BUFFERED:
				if d := t.GetMessageTimeout().AsDuration(); d < time.Second {
					fail("ext_proc: message_timeout %s (default 200ms) is too short for tokenizing long prompts; use seconds", d)
				}
				for _, limit := range bufferLimits {
					if limit == 0 || limit > uint32(config.Default().Routing.BodyLimitBytes) {
						fail("listener per_connection_buffer_limit_bytes %d: set it, ≤ kvroute's routing.body_limit_bytes (%d) so BUFFERED bodies fit kvroute's gRPC limit", limit, config.Default().Routing.BodyLimitBytes)
					}
				}
			default:
				fail("ext_proc: request_body_mode %s cannot route on the body (use BUFFERED or FULL_DUPLEX_STREAMED)", pm.GetRequestBodyMode())
			}
			if pm.GetResponseHeaderMode() != extprocfilterv3.ProcessingMode_SKIP {
				fail("ext_proc: response_header_mode must be SKIP (the default SEND adds a round trip kvroute does not need)")
			}
		}
	}
	if extProcs == 0 {
		fail("no ext_proc filter")
	}
	return errs
}

func checkHCM(h *hcmv3.HttpConnectionManager, clusters map[string]*clusterv3.Cluster) []error {
	var errs []error
	fail := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	for _, vh := range h.GetRouteConfig().GetVirtualHosts() {
		for _, r := range vh.GetRoutes() {
			ra := r.GetRoute()
			if ra == nil {
				continue
			}
			if c := ra.GetCluster(); c != "" && clusters[c] == nil {
				fail("route in %s: cluster %q does not exist", vh.GetName(), c)
			}
			if ra.GetTimeout() == nil || ra.GetTimeout().AsDuration() != 0 {
				fail("route in %s: timeout must be 0s (the 15 s default cuts long generations)", vh.GetName())
			}
		}
	}
	stripped, extProcAt := false, -1
	for i, f := range h.GetHttpFilters() {
		m, err := f.GetTypedConfig().UnmarshalNew()
		if err != nil {
			continue
		}
		switch t := m.(type) {
		case *headermutationv3.HeaderMutation:
			for _, rm := range t.GetMutations().GetRequestMutations() {
				if strings.EqualFold(rm.GetRemove(), destinationHeader) && extProcAt < 0 {
					stripped = true
				}
			}
		case *extprocfilterv3.ExternalProcessor:
			extProcAt = i
		}
	}
	if extProcAt >= 0 && !stripped {
		fail("a header_mutation filter must remove %s before ext_proc: clients could otherwise steer Envoy to any address", destinationHeader)
	}
	return errs
}

// maxFlowWait is the longest override_message_timeout kvroute sends with
// the default config and the shipped example: the largest flow control TTL
// plus extproc.FlowTimeoutMargin.
func maxFlowWait() time.Duration {
	m := config.Default().Routing.FlowControl.MaxTTL()
	if c, err := config.Load(filepath.Join("..", "examples", "kvroute.yaml")); err == nil {
		m = max(m, c.Routing.FlowControl.MaxTTL())
	} else {
		panic(err)
	}
	return m + extproc.FlowTimeoutMargin
}

func configs(t *testing.T) map[string][]byte {
	t.Helper()
	files, err := filepath.Glob("*.yaml")
	if err != nil || len(files) < 3 {
		t.Fatalf("want envoy.yaml, envoy-full-duplex.yaml, envoy-compose.yaml; found %v (%v)", files, err)
	}
	out := map[string][]byte{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out[f] = b
	}
	return out
}

func TestEveryConfigIsValid(t *testing.T) {
	for name, src := range configs(t) {
		if errs := validate(src); len(errs) > 0 {
			t.Errorf("%s:\n%v", name, errors.Join(errs...))
		}
	}
}

// TestValidatorCatchesBrokenVariants proves each check can fail.
func TestValidatorCatchesBrokenVariants(t *testing.T) {
	all := configs(t)
	for _, c := range []struct {
		name, file, from, to, want string
	}{
		{"typo inside typed_config", "envoy.yaml", "processing_mode:", "procesing_mode:", "unknown field"},
		{"typo in a top-level field", "envoy.yaml", "static_resources:", "static_resource:", "unknown field"},
		{"bad enum name", "envoy.yaml", "request_body_mode: BUFFERED", "request_body_mode: BUFFERD", "invalid value for enum"},
		{"numeric enum out of range (inside Any)", "envoy.yaml", "response_header_mode: SKIP", "response_header_mode: 7", "defined"},
		{"message_timeout out of range (inside Any)", "envoy.yaml", "message_timeout: 5s", "message_timeout: 7200s", "MessageTimeout"},
		{"default message_timeout", "envoy.yaml", "message_timeout: 5s", "message_timeout: 0.2s", "too short"},
		{"max_message_timeout below the flow TTL", "envoy.yaml", "max_message_timeout: 30s", "max_message_timeout: 10s", "max_message_timeout"},
		{"no max_message_timeout (full duplex)", "envoy-full-duplex.yaml", "max_message_timeout: 30s", "stat_prefix: kvroute_unused", "max_message_timeout"},
		{"typo in @type", "envoy.yaml", "ext_proc.v3.ExternalProcessor", "ext_proc.v3.ExternalProcesor", "unable to resolve"},
		{"listener port out of range", "envoy.yaml", "port_value: 10000", "port_value: 80800", "PortValue"},
		{"ORIGINAL_DST with ROUND_ROBIN", "envoy.yaml", "lb_policy: CLUSTER_PROVIDED", "lb_policy: ROUND_ROBIN", "CLUSTER_PROVIDED"},
		{"ext_proc cluster typo", "envoy.yaml", "cluster_name: kvroute }", "cluster_name: kvrout }", "does not exist"},
		{"ext_proc without grpc_service", "envoy.yaml", "              grpc_service:\n                envoy_grpc: { cluster_name: kvroute }\n", "", "grpc_service is required"},
		{"route cluster typo", "envoy.yaml", "cluster: vllm_original_dst", "cluster: vllm_original", "does not exist"},
		{"route timeout left at 15 s", "envoy.yaml", "timeout: 0s ", "timeout: 15s ", "timeout must be 0s"},
		{"client routing header not stripped", "envoy.yaml", "- remove: x-gateway-destination-endpoint", "- remove: x-unrelated", "header_mutation"},
		{"response headers sent", "envoy.yaml", "response_header_mode: SKIP", "response_header_mode: SEND", "response_header_mode"},
		{"buffer limit above kvroute's", "envoy.yaml", "per_connection_buffer_limit_bytes: 8388608", "per_connection_buffer_limit_bytes: 67108864", "body_limit_bytes"},
		{"full duplex without trailers", "envoy-full-duplex.yaml", "request_trailer_mode: SEND", "request_trailer_mode: SKIP", "request_trailer_mode: SEND"},
	} {
		t.Run(c.name, func(t *testing.T) {
			src := string(all[c.file])
			if !strings.Contains(src, c.from) {
				t.Fatalf("%s does not contain %q", c.file, c.from)
			}
			errs := validate([]byte(strings.Replace(src, c.from, c.to, 1)))
			if len(errs) == 0 {
				t.Fatalf("broken variant passed validation")
			}
			if joined := errors.Join(errs...).Error(); !strings.Contains(joined, c.want) {
				t.Fatalf("errors do not mention %q:\n%s", c.want, joined)
			}
		})
	}
}
