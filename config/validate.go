package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/kvroute/kvroute/internal/engine"
)

// Validate checks a defaulted config and returns every problem found, each
// naming its key path and the offending value.
func (c *Config) Validate() error {
	var v validator
	c.validate(&v)
	return errors.Join(v.errs...)
}

func (c *Config) validate(v *validator) {
	v.listen("listen.extproc", c.Listen.ExtProc, false)
	if c.Listen.Admin != "" {
		v.listen("listen.admin", c.Listen.Admin, false)
	}
	if (c.Listen.TLS.CertFile == "") != (c.Listen.TLS.KeyFile == "") {
		v.fail("listen.tls", "cert_file and key_file go together")
	}
	if c.Listen.TLS.ClientCAFile != "" && c.Listen.TLS.CertFile == "" {
		v.fail("listen.tls.client_ca_file", "needs cert_file and key_file")
	}
	v.checkFields(reflect.ValueOf(c).Elem(), "")
	v.peers(&c.Peers)
	v.parity(&c.Parity)
	v.flowControl(&c.Routing.FlowControl)
	if c.Ingest.Bind != "" {
		v.zmq("ingest.bind", c.Ingest.Bind, true)
	}
	if c.Ingest.MaxMessageBytes <= 0 || c.Ingest.MaxMessageBytes > MaxMessageBytesLimit {
		v.fail("ingest.max_message_bytes", "%d must be in (0, %d]", c.Ingest.MaxMessageBytes, MaxMessageBytesLimit)
	}
	if c.Tracing.Endpoint != "" && len(c.Tracing.Endpoint) > maxPathBytes {
		v.fail("tracing.endpoint", "is longer than %d bytes", maxPathBytes)
	}
	if c.Tracing.ServiceName == "" || len(c.Tracing.ServiceName) > 256 {
		v.fail("tracing.service_name", "must hold 1..256 bytes")
	}
	if len(c.Pools) == 0 {
		v.fail("pools", "at least one pool is needed")
	}
	poolNames := map[string]int{}
	modelPool := map[string]string{}
	topics := map[string]string{}
	for i := range c.Pools {
		c.validatePool(v, i, poolNames, modelPool, topics)
	}
}

// name checks the name of element i of list (pools, replicas) at key: given,
// label-safe, and not already in seen (name → index), where it is added.
func (v *validator) name(key, name string, seen map[string]int, i int, list string) {
	switch {
	case name == "":
		v.fail(key, "is required")
	case !isLabelSafe(name):
		v.fail(key, "%q may hold only letters, digits and -_./:", name)
	default:
		if j, dup := seen[name]; dup {
			v.fail(key, "%q is already the name of %s[%d]", name, list, j)
		}
		seen[name] = i
	}
}

func (c *Config) validatePool(v *validator, i int, poolNames map[string]int, modelPool, topics map[string]string) {
	p := &c.Pools[i]
	at := func(key string) string { return fmt.Sprintf("pools[%d].%s", i, key) }
	v.name(at("name"), p.Name, poolNames, i, "pools")
	if len(p.Models) == 0 {
		v.fail(at("models"), "at least one model name is needed")
	}
	names := append(slices.Clone(p.Models), p.LoRAAdapters...)
	for j, m := range names {
		key := at(fmt.Sprintf("models[%d]", j))
		if j >= len(p.Models) {
			key = at(fmt.Sprintf("lora_adapters[%d]", j-len(p.Models)))
		}
		if m == "" {
			v.fail(key, "is empty")
			continue
		}
		if owner, dup := modelPool[m]; dup {
			v.fail(key, "%q is already served by pool %q", m, owner)
			continue
		}
		modelPool[m] = p.Name
	}
	for key, path := range map[string]string{"tokenizer": p.Tokenizer, "chat_template": p.ChatTemplate} {
		if len(path) > maxPathBytes {
			v.fail(at(key), "%q is longer than %d bytes", path, maxPathBytes)
		}
	}
	if p.BlockSize < 0 || p.BlockSize > 1024 {
		v.fail(at("block_size"), "%d is not within 0..1024 (0 learns it from events)", p.BlockSize)
	}
	v.oneOf(at("hash.algorithm"), p.Hash.Algorithm, hashAlgorithms...)
	if p.Keys == KeysEngine && p.Hash.Seed == nil {
		v.fail(at("hash.seed"), "is required for keys: engine (vLLM's PYTHONHASHSEED; without it the engine's hashes are random per process)")
	}
	c.validateDiscovery(v, p, at)
	if p.Discovery.Kind == DiscoveryStatic && len(p.Replicas) == 0 {
		v.fail(at("replicas"), "at least one replica is needed (or a discovery source: discovery.kind kubernetes or dns)")
	}
	v.replicas(p.Replicas, c.Ingest.Bind != "", func(j int, key string) string {
		return at(fmt.Sprintf("replicas[%d].%s", j, key))
	}, at("replicas"), p.Name, topics)
}

// ValidateReplicas checks a replica set for pool p (its static list or one a
// discovery source produced) by the rules Validate applies to
// pools[].replicas: names, addresses, endpoints, DP sizes and the rank limit.
// bind is ingest.bind != "". Replicas must be derived (Replica.Derive).
func ValidateReplicas(p *Pool, reps []Replica, bind bool) error {
	var v validator
	at := func(j int, key string) string {
		return fmt.Sprintf("pool %s: replica %d (%s).%s", p.Name, j, reps[j].Name, key)
	}
	v.replicas(reps, bind, at, fmt.Sprintf("pool %s: replicas", p.Name), p.Name, map[string]string{})
	return errors.Join(v.errs...)
}

// replicas checks one pool's replicas; at names replica j's key, all the
// list. topics collects bind-mode topics across pools.
func (v *validator) replicas(reps []Replica, bind bool, at func(j int, key string) string, all, pool string, topics map[string]string) {
	replicaNames := map[string]int{}
	addresses := map[string]int{}
	ranks := 0
	for j := range reps {
		r := &reps[j]
		rat := func(key string) string { return at(j, key) }
		v.name(rat("name"), r.Name, replicaNames, j, "replicas")
		if ap, err := netip.ParseAddrPort(r.Address); err != nil || ap.Port() == 0 {
			v.fail(rat("address"), "%q is not ip:port", r.Address)
		} else {
			if k, dup := addresses[r.Address]; dup {
				v.fail(rat("address"), "%q is already the address of replicas[%d]", r.Address, k)
			}
			addresses[r.Address] = j
		}
		if r.Events != "" {
			v.zmq(rat("events"), r.Events, false)
		} else if !bind && r.Replay != "" {
			v.fail(rat("replay"), "needs events")
		}
		if r.Replay != "" {
			v.zmq(rat("replay"), r.Replay, false)
		}
		if bind {
			if owner, dup := topics[r.Topic]; dup {
				v.fail(rat("topic"), "%q is already the topic of %s: with ingest.bind the topic identifies the engine", r.Topic, owner)
			} else {
				topics[r.Topic] = pool + "/" + r.Name
			}
		}
		if r.Metrics != "" {
			if u, err := url.Parse(r.Metrics); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				v.fail(rat("metrics"), "%q is not an http(s) URL", r.Metrics)
			}
		}
		if r.DataParallelSize < 1 || r.DataParallelSize > engine.MaxRanks {
			v.fail(rat("data_parallel_size"), "%d is not within 1..%d", r.DataParallelSize, engine.MaxRanks)
		}
		ranks += max(r.DataParallelSize, 1)
	}
	if ranks > engine.MaxRanks {
		v.fail(all, "%d replica ranks (replicas × data_parallel_size) exceed the limit of %d per pool; split the pool", ranks, engine.MaxRanks)
	}
}

// validateDiscovery checks pools[].discovery: the kind, the source's keys and
// the port template. A discovered pool lists no replicas itself.
func (c *Config) validateDiscovery(v *validator, p *Pool, at func(string) string) {
	d := &p.Discovery
	dat := func(key string) string { return at("discovery." + key) }
	if d.Kind == DiscoveryStatic {
		if d.Kubernetes != (KubernetesDiscovery{}) || d.DNS.Name != "" || d.DNS.Server != "" || d.Ports != (engine.Ports{}) || d.Topic != "" || d.DataParallelSize > 1 {
			v.fail(at("discovery"), "kind static takes no other discovery keys (set kind: kubernetes or dns)")
		}
		return
	}
	if d.Kind != DiscoveryKubernetes && d.Kind != DiscoveryDNS {
		return
	}
	if len(p.Replicas) > 0 {
		v.fail(at("replicas"), "a pool with discovery.kind %s lists no replicas: the source finds them", d.Kind)
	}
	if c.Ingest.Bind != "" {
		v.fail(dat("kind"), "discovery needs each engine's events port (connect mode); ingest.bind, where engines connect to kvroute and are told apart by topic, is not supported with discovery")
	}
	ports := []struct {
		key string
		v   int
	}{{"http", d.Ports.HTTP}, {"events", d.Ports.Events}, {"replay", d.Ports.Replay}, {"metrics", d.Ports.Metrics}}
	for _, pt := range ports {
		if pt.v < 0 || pt.v > 65535 {
			v.fail(dat("ports."+pt.key), "%d is not within 0..65535", pt.v)
		}
	}
	if d.Ports.Replay != 0 && d.Ports.Events == 0 {
		v.fail(dat("ports.replay"), "needs ports.events")
	}
	if d.DataParallelSize < 1 || d.DataParallelSize > engine.MaxRanks {
		v.fail(dat("data_parallel_size"), "%d is not within 1..%d", d.DataParallelSize, engine.MaxRanks)
	}
	if len(d.Topic) > engine.MaxTopicBytes {
		v.fail(dat("topic"), "is longer than %d bytes", engine.MaxTopicBytes)
	}
	switch d.Kind {
	case DiscoveryDNS:
		if d.Kubernetes != (KubernetesDiscovery{}) {
			v.fail(dat("kubernetes"), "is for kind kubernetes, not dns")
		}
		if d.Ports.HTTP == 0 {
			v.fail(dat("ports.http"), "is required for kind dns (the vLLM API server's port)")
		}
		if !isHostname(d.DNS.Name) {
			v.fail(dat("dns.name"), "%q is not a DNS name", d.DNS.Name)
		}
		if d.DNS.Interval < Duration(minDNSInterval) {
			v.fail(dat("dns.interval"), "%s is below %s", d.DNS.Interval, Duration(minDNSInterval))
		}
		if d.DNS.EmptyGrace < 0 || d.DNS.EmptyGrace > Duration(maxDNSEmptyGrace) {
			v.fail(dat("dns.empty_grace"), "%s is not within 0s..%s", d.DNS.EmptyGrace, Duration(maxDNSEmptyGrace))
		}
		if d.DNS.NXDomainGrace < 0 || d.DNS.NXDomainGrace > Duration(maxDNSEmptyGrace) {
			v.fail(dat("dns.nxdomain_grace"), "%s is not within 0s..%s", d.DNS.NXDomainGrace, Duration(maxDNSEmptyGrace))
		}
		if d.DNS.Server != "" {
			if _, port, err := net.SplitHostPort(d.DNS.Server); err != nil || port == "" {
				v.fail(dat("dns.server"), "%q is not host:port", d.DNS.Server)
			}
		}
	case DiscoveryKubernetes:
		if d.DNS.Name != "" || d.DNS.Server != "" {
			v.fail(dat("dns"), "is for kind dns, not kubernetes")
		}
		k := &d.Kubernetes
		switch {
		case (k.LabelSelector == "") == (k.InferencePool == ""):
			v.fail(dat("kubernetes"), "exactly one of label_selector and inference_pool is needed")
		case k.InferencePool != "" && !isDNSLabelish(k.InferencePool):
			v.fail(dat("kubernetes.inference_pool"), "%q is not a Kubernetes object name", k.InferencePool)
		case len(k.LabelSelector) > maxSelectorBytes:
			v.fail(dat("kubernetes.label_selector"), "is longer than %d bytes", maxSelectorBytes)
		}
		if k.Namespace != "" && !isDNSLabelish(k.Namespace) {
			v.fail(dat("kubernetes.namespace"), "%q is not a Kubernetes namespace name", k.Namespace)
		}
		if k.LabelSelector != "" && d.Ports.HTTP == 0 {
			v.fail(dat("ports.http"), "is required with label_selector (an InferencePool names its target port)")
		}
		if len(k.Kubeconfig) > maxPathBytes {
			v.fail(dat("kubernetes.kubeconfig"), "is longer than %d bytes", maxPathBytes)
		}
	}
}

// Bounds of discovery keys.
const (
	// minDNSInterval: re-resolving faster only loads the resolver.
	minDNSInterval = 100 * time.Millisecond
	// maxDNSEmptyGrace: a name empty for longer is gone, not flapping.
	maxDNSEmptyGrace = time.Hour
	// maxSelectorBytes bounds a label selector (Kubernetes allows 63-byte
	// keys and values; a selector of dozens of terms is already unusual).
	maxSelectorBytes = 4096
)

// isHostname: a DNS name of letters, digits, hyphens and underscores in dot-
// separated labels of 1..63 bytes, at most 253 bytes in all (a trailing dot
// allowed).
func isHostname(s string) bool {
	s = strings.TrimSuffix(s, ".")
	if s == "" || len(s) > 253 {
		return false
	}
	for label := range strings.SplitSeq(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// isDNSLabelish: a Kubernetes object name (RFC 1123 subdomain: lower-case
// letters, digits, '-' and '.', at most 253 bytes).
func isDNSLabelish(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return false
		}
	}
	return s[0] != '-' && s[0] != '.' && s[len(s)-1] != '-' && s[len(s)-1] != '.'
}

// maxPathBytes bounds a file path in the config (Linux's PATH_MAX).
const maxPathBytes = 4096

type validator struct {
	errs []error
	skip map[string]bool // key paths not judged (they failed to decode)
}

func (v *validator) fail(path, format string, args ...any) {
	if v.skip[path] {
		return
	}
	v.errs = append(v.errs, fmt.Errorf("%s: %s", boundedPath(path), fmt.Sprintf(format, boundArgs(format, args)...)))
}

// maxEchoBytes bounds a config value echoed in an error: one scalar of a
// config can be megabytes, and errors go to terminals and logs.
const maxEchoBytes = 64

// quoted prints a string quoted and cut to maxEchoBytes, with its length
// when cut.
type quoted string

func (q quoted) Format(f fmt.State, _ rune) {
	s := string(q)
	if len(s) <= maxEchoBytes {
		fmt.Fprint(f, strconv.Quote(s))
		return
	}
	cut := maxEchoBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	fmt.Fprintf(f, "%s… (%d bytes)", strconv.Quote(s[:cut]), len(s))
}

// boundArgs wraps in quoted every string argument that format prints with
// %q (the values a config file chose); other verbs are left alone.
func boundArgs(format string, args []any) []any {
	out := slices.Clone(args)
	arg := 0
	for i := 0; i < len(format) && arg < len(out); i++ {
		if format[i] != '%' {
			continue
		}
		i++
		for i < len(format) && strings.IndexByte("+-# 0123456789.", format[i]) >= 0 {
			i++
		}
		if i >= len(format) || format[i] == '%' {
			continue
		}
		if s, ok := out[arg].(string); ok && format[i] == 'q' {
			out[arg] = quoted(s)
		}
		arg++
	}
	return out
}

// boundedPath cuts a key path (which holds the file's keys) for an error.
func boundedPath(p string) string {
	if len(p) <= 4*maxEchoBytes {
		return p
	}
	cut := 4 * maxEchoBytes
	for cut > 0 && !utf8.RuneStart(p[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%d-byte key path)", p[:cut], len(p))
}

func (v *validator) oneOf(path, value string, allowed ...string) {
	if !slices.Contains(allowed, value) {
		v.fail(path, "%q is not one of %s", value, strings.Join(allowed, ", "))
	}
}

// listen checks a host:port listen address; the host may be empty (all
// interfaces) or a name.
func (v *validator) listen(path, addr string, _ bool) {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		v.fail(path, "%q is not host:port", addr)
		return
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		v.fail(path, "%q has no valid port", addr)
	}
}

// peers checks the peer mesh; with listen "" (off) the rest is not read.
// maxObjectiveBytes bounds an objective name (a Kubernetes object name is at
// most 253 bytes).
const maxObjectiveBytes = 253

func (v *validator) flowControl(f *FlowControl) {
	const at = "routing.flow_control"
	if f.ShedStatus < 400 || f.ShedStatus > 599 {
		v.fail(at+".shed_status", "%d is not an HTTP error status (400..599)", f.ShedStatus)
	}
	bands := map[int]int{}
	for i, b := range f.Bands {
		if j, ok := bands[b.Priority]; ok {
			v.fail(fmt.Sprintf("%s.bands[%d].priority", at, i), "%d is bands[%d]'s too", b.Priority, j)
		}
		bands[b.Priority] = i
	}
	names := map[string]int{}
	for i, o := range f.Objectives {
		key := fmt.Sprintf("%s.objectives[%d].name", at, i)
		if o.Name == "" || len(o.Name) > maxObjectiveBytes || !utf8.ValidString(o.Name) {
			v.fail(key, "must hold 1..%d bytes of UTF-8", maxObjectiveBytes)
			continue
		}
		if j, ok := names[o.Name]; ok {
			v.fail(key, "%q is objectives[%d]'s too", o.Name, j)
		}
		names[o.Name] = i
	}
}

func (v *validator) peers(p *Peers) {
	if p.Listen == "" {
		if len(p.Addresses) > 0 {
			v.fail("peers.addresses", "%d addresses but no peers.listen: the mesh needs this kvroute's own endpoint too", len(p.Addresses))
		}
		return
	}
	v.peerAddr("peers.listen", p.Listen)
	if len(p.Addresses) == 0 {
		v.fail("peers.addresses", "empty: name the other kvroutes (host:port)")
	}
	if len(p.Addresses) > MaxPeers {
		v.fail("peers.addresses", "%d addresses; at most %d", len(p.Addresses), MaxPeers)
	}
	seen := map[string]bool{}
	for i, a := range p.Addresses {
		at := fmt.Sprintf("peers.addresses[%d]", i)
		v.peerAddr(at, a)
		if h, _, err := net.SplitHostPort(a); err == nil && (h == "" || h == "0.0.0.0" || h == "::") {
			v.fail(at, "%q: a peer is reached at its host, not a wildcard", a)
		}
		if seen[a] {
			v.fail(at, "%q is listed twice", a)
		}
		seen[a] = true
	}
	t := p.TLS
	set := t.CertFile != "" || t.KeyFile != "" || t.CAFile != "" || len(t.AllowedNames) > 0 || t.ServerName != ""
	switch {
	case p.Insecure && set:
		v.fail("peers.insecure", "true with peers.tls set: choose mutual TLS or plaintext")
	case !p.Insecure:
		for _, f := range []struct{ key, v string }{{"cert_file", t.CertFile}, {"key_file", t.KeyFile}, {"ca_file", t.CAFile}} {
			if f.v == "" {
				v.fail("peers.tls."+f.key, "required: the mesh authenticates and encrypts its peers with mutual TLS (docs/OPERATIONS.md, Security); peers.insecure: true runs it in plaintext")
			}
		}
		for i, n := range t.AllowedNames {
			if n == "" {
				v.fail(fmt.Sprintf("peers.tls.allowed_names[%d]", i), "empty")
			}
		}
	}
	if p.HeartbeatInterval <= 0 {
		v.fail("peers.heartbeat_interval", "%s must be positive", p.HeartbeatInterval)
	}
	if p.PeerTimeout <= p.HeartbeatInterval {
		v.fail("peers.peer_timeout", "%s must be longer than peers.heartbeat_interval (%s)", p.PeerTimeout, p.HeartbeatInterval)
	}
	if p.RequestTimeout <= 0 {
		v.fail("peers.request_timeout", "%s must be positive", p.RequestTimeout)
	}
	if p.MaxRequests <= 0 {
		v.fail("peers.max_requests", "%d must be positive", p.MaxRequests)
	}
	if p.MaxMessageBytes < MinPeerMessageBytes || p.MaxMessageBytes > MaxMessageBytesLimit {
		v.fail("peers.max_message_bytes", "%d must be in [%d, %d]", p.MaxMessageBytes, MinPeerMessageBytes, MaxMessageBytesLimit)
	}
}

// peerAddr checks a peer mesh address: host:port, gRPC's form.
func (v *validator) peerAddr(path, addr string) {
	if strings.Contains(addr, "://") {
		v.fail(path, "%q: the mesh takes host:port (it speaks gRPC)", addr)
		return
	}
	v.listen(path, addr, false)
}

// zmq checks a ZeroMQ endpoint: tcp://host:port or ipc://path. A connecting
// endpoint cannot use the wildcard host that vLLM binds to (tcp://*:5557).
func (v *validator) zmq(path, ep string, bind bool) {
	scheme, rest, ok := strings.Cut(ep, "://")
	if !ok || rest == "" {
		v.fail(path, "%q is not a ZeroMQ endpoint (tcp://host:port or ipc://path)", ep)
		return
	}
	switch scheme {
	case "ipc":
		return
	case "tcp":
		host, port, err := net.SplitHostPort(rest)
		if err != nil {
			v.fail(path, "%q is not tcp://host:port", ep)
			return
		}
		if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
			v.fail(path, "%q has no valid port", ep)
			return
		}
		if !bind && (host == "*" || host == "" || host == "0.0.0.0" || host == "::") {
			v.fail(path, "%q is the engine's bind address; kvroute connects to it, so name the engine's host (tcp://10.0.0.7:5557)", ep)
		}
	default:
		v.fail(path, "%q has scheme %q; want tcp or ipc", ep, scheme)
	}
}

func isLabelSafe(s string) bool {
	for _, r := range s {
		ok := r == '-' || r == '_' || r == '.' || r == '/' || r == ':' ||
			(r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9')
		if !ok {
			return false
		}
	}
	return len(s) <= 128
}
