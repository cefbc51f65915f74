package fleetsim

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/kvroute/kvroute/index"
	"github.com/kvroute/kvroute/ingest"
	"github.com/kvroute/kvroute/internal/routebench"
	"github.com/kvroute/kvroute/internal/vllmemu"
	"github.com/kvroute/kvroute/routing"
	"github.com/kvroute/kvroute/server"
)

func newPicker(policy string, engines int, o Options) (picker, error) {
	if o.Gateways > 1 && policy != policyPooled {
		m := &multiPicker{of: map[int]int{}, inFlight: make([][]int, o.Gateways)}
		var shared *exactIndex // the anchors' instances read one index
		if policy == PolicyLLMDSticky || policy == PolicyDynamoKV {
			x, _, err := newExactIndex(engines, o)
			if err != nil {
				return nil, err
			}
			shared = x
		}
		for g := range o.Gateways {
			og := o
			og.Seed = o.Seed + uint64(g) // each instance its own random choices
			p, err := newPicker1(policy, engines, og, shared, g == 0)
			if err != nil {
				return nil, err
			}
			m.ps = append(m.ps, p)
			m.inFlight[g] = make([]int, engines)
		}
		if o.Peers && policy == PolicyKVRoute {
			joinPeers(m.ps, o.PeerDelay)
		}
		if o.FlowControl && policy == PolicyKVRoute {
			return &multiFlow{m}, nil
		}
		return m, nil
	}
	return newPicker1(policy, engines, o, nil, true)
}

// multiPicker is several independent router instances over one fleet:
// request i is decided by instance i mod len(ps), which counts only its
// own requests in flight; every instance receives every engine's KV events
// and scrapes (each kvroute has its own ingest).
type multiPicker struct {
	ps       []picker
	of       map[int]int // request id → engine, for its instance's in-flight count
	inFlight [][]int
}

func (m *multiPicker) pick(now time.Time, id int, tokens []int, _ []int) (int, error) {
	m.advance(now)
	g := id % len(m.ps)
	e, err := m.ps[g].pick(now, id, tokens, m.inFlight[g])
	if err == nil {
		m.of[id] = e
		m.inFlight[g][e]++
	}
	return e, err
}

func (m *multiPicker) done(now time.Time, id int) {
	m.advance(now)
	g := id % len(m.ps)
	if e, ok := m.of[id]; ok {
		m.inFlight[g][e]--
		delete(m.of, id)
	}
	m.ps[g].done(now, id)
}

func (m *multiPicker) prefilled(now time.Time, id int) {
	m.advance(now)
	if w, ok := m.ps[id%len(m.ps)].(prefillWatcher); ok {
		w.prefilled(now, id)
	}
}

func (m *multiPicker) events(now time.Time, e int, payload []byte) error {
	m.advance(now)
	for _, p := range m.ps {
		if err := p.events(now, e, payload); err != nil {
			return err
		}
	}
	return nil
}

func (m *multiPicker) scrape(now time.Time, stats []vllmemu.Stats) {
	m.advance(now)
	for _, p := range m.ps {
		p.scrape(now, stats)
	}
}

func (m *multiPicker) decisions() map[string]int {
	var out map[string]int
	for _, p := range m.ps {
		for k, v := range p.decisions() {
			if out == nil {
				out = map[string]int{}
			}
			out[k] += v
		}
	}
	return out
}

// newPicker1 is one router instance; the anchors read shared (nil: their
// own index), applying its KV events when applies.
func newPicker1(policy string, engines int, o Options, shared *exactIndex, applies bool) (picker, error) {
	switch policy {
	case PolicyKVRoute:
		if o.FlowControl {
			return newKVFlow(engines, o)
		}
		return newKVRoute(engines, o)
	case PolicyApproxPrefix:
		// GIE's approximate prefix scorer with its defaults (64-character
		// chunks, 31,250 chunks remembered per server, 4 characters per
		// token) and the benchmark's load term (256 tokens per request in
		// flight). Tokens are spelled as 4 characters each, so one chunk is
		// exactly 16 tokens of the prompt.
		return &gatewayPicker{pol: routebench.NewApproxPrefix(256), text: true}, nil
	case PolicyLLMDSticky:
		p, err := newSticky(engines, o, shared)
		if err == nil && shared != nil {
			p.applies = applies
		}
		return p, err
	case PolicyDynamoKV:
		p, err := newDynamo(engines, o, shared)
		if err == nil && shared != nil {
			p.applies = applies
		}
		return p, err
	case PolicyRoundRobin:
		return &gatewayPicker{pol: &routebench.RoundRobin{}}, nil
	case PolicyLeastLoaded:
		return &gatewayPicker{pol: &routebench.LeastLoaded{}}, nil
	case PolicyRandom:
		return &gatewayPicker{pol: routebench.NewRandom(o.Seed)}, nil
	case policyPooled:
		return &gatewayPicker{pol: &routebench.RoundRobin{}}, nil
	}
	return nil, fmt.Errorf("unknown policy %q (known: %s)", policy, strings.Join(AllPolicies, ", "))
}

// gatewayPicker runs one of the benchmark's gateway-side policies; it sees
// only its own in-flight counts (and, for approx-prefix, the prompt).
type gatewayPicker struct {
	pol  routebench.Policy
	text bool
	buf  []byte
}

func (g *gatewayPicker) pick(_ time.Time, _ int, tokens []int, inFlight []int) (int, error) {
	prompt := ""
	if g.text {
		g.buf = spell(g.buf[:0], tokens)
		prompt = string(g.buf)
	}
	return g.pol.Pick(routebench.Text(prompt), routebench.FleetView{InFlight: inFlight}), nil
}

func (*gatewayPicker) done(time.Time, int)                 {}
func (*gatewayPicker) events(time.Time, int, []byte) error { return nil }
func (*gatewayPicker) scrape(time.Time, []vllmemu.Stats)   {}
func (*gatewayPicker) decisions() map[string]int           { return nil }

// spell writes each token id as 4 base-64 characters.
func spell(dst []byte, tokens []int) []byte {
	const digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	for _, t := range tokens {
		dst = append(dst, digits[t>>18&63], digits[t>>12&63], digits[t>>6&63], digits[t&63])
	}
	return dst
}

// kvPicker is kvroute itself: its config parsed as `kvroute serve` parses
// it, its index on the virtual clock, one ingest Applier per engine fed
// every step's KV events, load "scraped" from the engines' counters, and
// the router's decision on the prompt's token ids (Router.DecideIDs, the
// path Decide takes once a /v1/completions body is parsed).
type kvPicker struct {
	ix       *index.Index
	router   *routing.Router
	eps      []routing.Endpoint
	appliers []*ingest.Applier
	byAddr   map[string]int
	pending  map[int]*routing.Decision
	counts   map[string]int
	now      time.Time
	// matches and blockSize serve the moved-from-holder count;
	// movedTokens sums the cached tokens those decisions gave up.
	matches     []index.Match
	blockSize   int
	movedTokens int64
	// inbox holds peer-mesh messages not yet due (Options.PeerDelay).
	inbox []delivery
	// pool is the fleet's pool name; funnel its prompt-token funnel.
	pool   string
	funnel *simFunnel
}

// simModel and simPool are the simulated deployment's model and pool.
const (
	simModel = "sim"
	simPool  = "fleet"
)

// kvrouteYAML is the simulated deployment's kvroute config: engine keys
// (vLLM's own xxhash hashes, PYTHONHASHSEED 0), the engines' block size.
func kvrouteYAML(engines, blockSize int, routing, parity string, indexTTL time.Duration) string {
	var b strings.Builder
	b.WriteString("listen: {extproc: \"127.0.0.1:0\", admin: \"\"}\n")
	if indexTTL > 0 {
		fmt.Fprintf(&b, "index: {ttl: %s}\n", indexTTL)
	}
	if routing != "" {
		fmt.Fprintf(&b, "routing: %s\n", routing)
	}
	if parity != "" {
		fmt.Fprintf(&b, "parity: %s\n", parity)
	}
	fmt.Fprintf(&b, "pools:\n  - name: %s\n    models: [%q]\n    block_size: %d\n    keys: engine\n    hash: {algorithm: %s, seed: %q}\n    replicas:\n",
		simPool, simModel, blockSize, simAlgo.String(), fleetSeed)
	for i := range engines {
		fmt.Fprintf(&b, "      - {name: vllm-%d, address: \"10.0.%d.%d:8000\"}\n", i, i/250, i%250+1)
	}
	return b.String()
}

func newKVRoute(engines int, o Options) (*kvPicker, error) {
	x, cfg, err := newExactIndex(engines, o)
	if err != nil {
		return nil, err
	}
	// routing.flow_control.enabled, whatever RoutingYAML says (it may tune
	// the rest of flow_control).
	cfg.Routing.FlowControl.Enabled = o.FlowControl
	k := &kvPicker{ix: x.ix, appliers: x.appliers, byAddr: map[string]int{}, pending: map[int]*routing.Decision{},
		counts: map[string]int{}, now: epoch, blockSize: x.blockSize}
	x.clock = func() time.Time { return k.now }
	pc := &cfg.Pools[0]
	for i, r := range x.replicas {
		rc := pc.Replicas[i]
		k.eps = append(k.eps, routing.Endpoint{Replica: r, Name: rc.Name, Address: rc.Address, DPSize: 1})
		k.byAddr[rc.Address] = i
	}
	k.router, err = routing.NewRouter(k.ix, []routing.PoolConfig{{
		Name: pc.Name, ID: x.pool, Models: pc.Models, Keys: x.keys, Endpoints: k.eps,
	}}, server.RouterOptions(cfg.Routing))
	if err != nil {
		return nil, err
	}
	k.router.SeedTieBreaks(o.Seed) // a replay is repeatable for its seed
	k.pool = pc.Name
	k.funnel = newSimFunnel(k, cfg.Parity)
	return k, nil
}

func (k *kvPicker) pick(now time.Time, id int, tokens []int, _ []int) (int, error) {
	k.now = now
	// Router.DecideIDs is Decide after the body is parsed: a body of 12k
	// token ids through encoding/json would be most of the simulation's time.
	return k.placed(id, tokens, k.router.DecideIDs(simModel, tokens))
}

// placed counts decision d of request id (prompt tokens) and, when it has an endpoint,
// books it (Router.Begin) and returns its engine.
func (k *kvPicker) placed(id int, tokens []int, d routing.Decision) (int, error) {
	k.counts[d.Outcome+"/"+d.Reason]++
	k.counts[counterExpected] += d.MatchedTokens // what the index promised
	if d.Endpoint == nil {
		return 0, fmt.Errorf("kvroute: %s/%s: %v", d.Outcome, d.Reason, d.Err)
	}
	// Counted, to test whether the load term moves requests off their
	// prefix: the request went to a replica holding less of its prefix than
	// the best holder did.
	if len(d.Keys) > 0 {
		best := 0
		k.matches = k.ix.LookupRoute(k.eps[0].Replica.Pool, d.Keys, k.matches[:0])
		for _, m := range k.matches {
			best = max(best, m.Blocks)
		}
		if best*k.blockSize > d.MatchedTokens {
			k.counts[counterMoved]++
			k.movedTokens += int64(best*k.blockSize - d.MatchedTokens)
		}
	}
	e := k.byAddr[d.Endpoint.Address]
	k.decided(id, &d, e, tokens)
	k.router.Begin(&d)
	k.pending[id] = &d
	return e, nil
}

func (k *kvPicker) done(now time.Time, id int) {
	k.now = now
	if d := k.pending[id]; d != nil {
		k.router.End(d)
		delete(k.pending, id)
	}
}

func (k *kvPicker) events(now time.Time, e int, payload []byte) error {
	k.now = now
	err := k.appliers[e].Apply(payload)
	k.storedAgain(e)
	return err
}

func (k *kvPicker) scrape(now time.Time, stats []vllmemu.Stats) {
	k.now = now
	for i, s := range stats {
		k.ix.SetLoad(k.eps[i].Replica, index.Load{
			Running: float64(s.Running), Waiting: float64(s.Waiting), KVUsage: s.KVUsage,
			PromptTokens: float64(s.PrefilledPromptTokens), CachedTokens: float64(s.PrefilledCachedTokens),
			PrefillSeconds: s.PrefillSeconds, PrefillCount: float64(s.PrefillCount),
		}, now)
	}
	k.scraped(stats)
}

// Counters a kvroute policy keeps beside its outcome/reason counts
// (decisionSummary says them in words).
const (
	counterExpected    = "expected cached tokens"
	counterMoved       = "moved-from-holder"
	counterMovedTokens = "moved-from-holder (cached tokens given up)"
)

func (k *kvPicker) decisions() map[string]int {
	if k.movedTokens > 0 {
		k.counts[counterMovedTokens] = int(k.movedTokens)
	}
	return k.counts
}

// advance brings every kvroute instance to now and applies the mesh
// messages due by then (a message is handled when it arrives, whatever the
// instance is doing).
func (m *multiPicker) advance(now time.Time) {
	for _, p := range m.ps {
		if k := kvOf(p); k != nil {
			k.now = now
			k.receive(now)
		}
	}
}

// kvOf is the kvroute instance p is (nil: another policy).
func kvOf(p picker) *kvPicker {
	switch k := p.(type) {
	case *kvPicker:
		return k
	case *kvFlow:
		return k.kvPicker
	}
	return nil
}

// simMesh is the peer mesh of kvroute instances in one replay: what one
// router begins and ends, every other one puts on and takes off its books
// Options.PeerDelay later (multiPicker.advance hands it over at the first
// event at or after that time).
type simMesh struct {
	self    *kvPicker
	others  []*kvPicker
	delay   time.Duration
	nextID  uint64
	pending map[uint64][]*routing.PeerWork // id → its entry on each other router's books
}

// delivery is a mesh message on its way to one router.
type delivery struct {
	at    time.Time
	apply func()
}

func joinPeers(ps []picker, delay time.Duration) {
	var ks []*kvPicker
	for _, p := range ps {
		ks = append(ks, kvOf(p))
	}
	for i, k := range ks {
		m := &simMesh{self: k, delay: delay, pending: map[uint64][]*routing.PeerWork{}}
		for j, o := range ks {
			if j != i {
				m.others = append(m.others, o)
			}
		}
		k.router.SetSharer(m)
	}
}

func (m *simMesh) Began(w routing.SharedWork) uint64 {
	m.nextID++
	w.Keys = slices.Clone(w.Keys)
	var ws []*routing.PeerWork
	for _, o := range m.others {
		pw := new(routing.PeerWork)
		ws = append(ws, pw)
		o.deliver(m.self.now.Add(m.delay), func() {
			var err error
			if *pw, err = o.router.BeginPeer(w); err != nil {
				panic(fmt.Sprintf("fleetsim: peer refused shared work: %v", err)) // the same config everywhere: a bug
			}
		})
	}
	m.pending[m.nextID] = ws
	return m.nextID
}

func (m *simMesh) Ended(id uint64) {
	for i, pw := range m.pending[id] {
		o := m.others[i]
		o.deliver(m.self.now.Add(m.delay), func() { o.router.EndPeer(*pw) })
	}
	delete(m.pending, id)
}

// deliver queues a mesh message for this router (in order: one delay).
func (k *kvPicker) deliver(at time.Time, apply func()) {
	if !at.After(k.now) {
		apply()
		return
	}
	k.inbox = append(k.inbox, delivery{at, apply})
}

// receive applies the mesh messages due by now.
func (k *kvPicker) receive(now time.Time) {
	n := 0
	for n < len(k.inbox) && !k.inbox[n].at.After(now) {
		k.inbox[n].apply()
		n++
	}
	k.inbox = k.inbox[n:]
}
