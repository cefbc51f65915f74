package server

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvroute/kvroute/config"
	"github.com/kvroute/kvroute/ingest"
	"github.com/kvroute/kvroute/routing"
)

// Parity checks: the check label of kvroute_parity_mismatch and
// kvroute_parity_checks_total.
const (
	// checkTokens: kvroute's tokenizer and chat template against the
	// engine's POST /tokenize on the canary prompts.
	checkTokens = "tokens"
	// checkHashes: the engine's block hashes in BlockStored runs from block
	// 0 against the pool's hash.algorithm and hash.seed (ingest's sampled
	// self-check).
	checkHashes = "hashes"
	// checkBlockSize: the block_size of the engine's events and its
	// vllm:cache_config_info against the pool's (configured or learned).
	checkBlockSize = "block_size"
	// checkHashAlgorithm: vllm:cache_config_info's prefix_caching_hash_algo
	// against the pool's hash.algorithm.
	checkHashAlgorithm = "hash_algorithm"
	// checkCachedTokens: the cached prompt tokens kvroute predicted for the
	// requests it routed to a replica against the engine's cached prompt
	// tokens counter over the same window (parity_engine.go).
	checkCachedTokens = "cached_tokens"
)

// parityChecks is every check, in the order they are shown.
var parityChecks = [...]string{checkTokens, checkHashes, checkBlockSize, checkHashAlgorithm, checkCachedTokens}

// Check states (and kvroute_parity_checks_total's result label).
const (
	parityMatch    = "match"
	parityMismatch = "mismatch"
	parityUnknown  = "unknown"
)

// Bounds of the canary requests.
const (
	// maxTokenizeBytes bounds one /tokenize answer read: the canaries are a
	// few hundred tokens, a few KiB as JSON.
	maxTokenizeBytes = 64 << 10
	// parityPoll is how often what ingest learned (events, self-checks,
	// cache_config_info, restarts) is turned into check states.
	parityPoll = time.Second
	// panicParity is the kvroute_panics_total component of the parity
	// goroutines.
	panicParity = "parity"
)

// Canary prompts: fixed built-in texts (never client data), mixing what
// tokenizers and chat templates treat differently: spaces and newlines,
// digits, punctuation, accents, CJK and an emoji, a system turn.
const (
	canaryText = "kvroute parity canary.\nThe quick brown fox jumps over the lazy dog: 0123456789, 3.14159; " +
		"naïve café déjà vu — «Grüße» 東京 日本語 🙂  two  spaces\tand a tab."
	canarySystem = "You are a terse assistant. Answer in one line."
	canaryUser   = "kvroute parity canary: what is 12 × 34? Reply with digits only, then «fin» 🙂."
)

// canary is one request the tokens check sends to both tokenizers.
type canary struct {
	name string // completion or chat
	path string // kvroute's path for the same body
	body []byte
}

func canaries(model string) []canary {
	comp, _ := json.Marshal(map[string]any{"model": model, "prompt": canaryText})
	chat, _ := json.Marshal(map[string]any{"model": model, "add_generation_prompt": true, "messages": []map[string]string{
		{"role": "system", "content": canarySystem}, {"role": "user", "content": canaryUser}}})
	return []canary{{"completion", "/v1/completions", comp}, {"chat", "/v1/chat/completions", chat}}
}

// ParityState is one check of one replica as /debug/replicas shows it.
type ParityState struct {
	State string `json:"state"`
	// Evidence says what was compared: counts, sizes and reasons, never
	// text or token ids.
	Evidence string `json:"evidence,omitempty"`
	// Since is when the state last changed; CheckedAt when it was last
	// evaluated with evidence.
	Since     time.Time  `json:"since"`
	CheckedAt *time.Time `json:"checked_at,omitempty"`
}

// parity runs the checks of every replica: a canary goroutine per replica
// (tokens) and one poll over ingest's status (the other checks). Nothing
// of it is on the decision's path; route_by_load flips a pool's flag the
// router reads once per decision.
type parity struct {
	s       *Server
	cfg     config.Parity
	log     *slog.Logger
	httpc   *http.Client
	gauge   *prometheus.GaugeVec
	checks  *prometheus.CounterVec
	ctx     context.Context // Run's; nil before it
	wg      sync.WaitGroup
	mu      sync.Mutex
	reps    map[parityKey]*parityReplica
	byPool  map[string]bool // pools routing by load for parity
	restart map[parityKey]int64
	// engine is each rank's engineTrack (the poll goroutine's alone).
	engine map[parityKey]*engineTrack
	// pools are the pools' configs at start (block_size and hash change only
	// with a restart).
	pools map[string]config.Pool
}

type parityKey struct{ pool, replica string }

type parityReplica struct {
	key     parityKey
	address string
	model   string
	states  map[string]ParityState // guarded by parity.mu
	kick    chan struct{}
	cancel  context.CancelFunc
}

// NewParityMetrics registers the parity series (New does; the dashboard
// test walks them).
func NewParityMetrics(reg prometheus.Registerer) (mismatch *prometheus.GaugeVec, checks *prometheus.CounterVec) {
	mismatch = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kvroute_parity_mismatch",
		Help: "1 while a replica's engine disagrees with its pool's config on check (tokens, hashes, block_size, hash_algorithm, cached_tokens); 0 on match or unknown."},
		[]string{"pool", "replica", "check"})
	checks = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvroute_parity_checks_total",
		Help: "Parity check evaluations by check and result (match, mismatch, unknown)."}, []string{"pool", "check", "result"})
	reg.MustRegister(mismatch, checks)
	return mismatch, checks
}

func newParity(s *Server, cfg config.Parity, reg prometheus.Registerer) *parity {
	p := &parity{s: s, cfg: cfg, log: s.log, httpc: &http.Client{Timeout: cfg.Timeout.Std()},
		reps: map[parityKey]*parityReplica{}, byPool: map[string]bool{}, restart: map[parityKey]int64{}, pools: map[string]config.Pool{},
		engine: map[parityKey]*engineTrack{}}
	p.gauge, p.checks = NewParityMetrics(reg)
	for i := range s.cfg.Pools {
		p.pools[s.cfg.Pools[i].Name] = s.cfg.Pools[i]
		for _, c := range parityChecks {
			for _, r := range []string{parityMatch, parityMismatch, parityUnknown} {
				p.checks.WithLabelValues(s.cfg.Pools[i].Name, c, r)
			}
		}
	}
	return p
}

// add starts checking a replica that joined (or whose engine was replaced).
func (p *parity) add(pool, name, address string, models []string) {
	pr := &parityReplica{key: parityKey{pool, name}, address: address, states: map[string]ParityState{}, kick: make(chan struct{}, 1)}
	if len(models) > 0 {
		pr.model = models[0]
	}
	now := p.s.ix.Now()
	for _, c := range parityChecks {
		pr.states[c] = ParityState{State: parityUnknown, Since: now}
		p.gauge.WithLabelValues(pool, name, c).Set(0)
	}
	if !p.cfg.Canaries {
		pr.states[checkTokens] = ParityState{State: parityUnknown, Since: now, Evidence: "canaries off (parity.canaries: false)"}
	}
	if p.cfg.CachedTokensWindow == 0 {
		pr.states[checkCachedTokens] = ParityState{State: parityUnknown, Since: now, Evidence: "off (parity.cached_tokens_window: 0)"}
	} else {
		pr.states[checkCachedTokens] = ParityState{State: parityUnknown, Since: now, Evidence: "no window judged yet"}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if old := p.reps[pr.key]; old != nil && old.cancel != nil {
		old.cancel()
	}
	p.reps[pr.key] = pr
	delete(p.restart, pr.key)
	if p.ctx != nil {
		p.start(pr)
	}
}

// remove stops checking a replica that left.
func (p *parity) remove(pool, name string) {
	k := parityKey{pool, name}
	p.mu.Lock()
	pr := p.reps[k]
	delete(p.reps, k)
	delete(p.restart, k)
	p.mu.Unlock()
	if pr == nil {
		return
	}
	if pr.cancel != nil {
		pr.cancel()
	}
	for _, c := range parityChecks {
		p.gauge.DeleteLabelValues(pool, name, c)
	}
	if p.s.funnel != nil {
		p.s.funnel.ForgetRank(pool, name)
	}
	p.applyPolicy(pool)
}

// kickAll runs every replica's canaries now (after a reload).
func (p *parity) kickAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pr := range p.reps {
		pr.poke()
	}
}

func (pr *parityReplica) poke() {
	select {
	case pr.kick <- struct{}{}:
	default:
	}
}

// run starts every replica's checks and polls ingest until ctx ends.
func (p *parity) run(ctx context.Context) {
	p.mu.Lock()
	p.ctx = ctx
	for _, pr := range p.reps {
		p.start(pr)
	}
	p.mu.Unlock()
	t := time.NewTicker(parityPoll)
	defer t.Stop()
	for {
		p.s.supervise(ctx, panicParity, func() { p.poll() })
		select {
		case <-ctx.Done():
			p.wg.Wait()
			return
		case <-t.C:
		}
	}
}

// start runs pr's canary goroutine; p.mu is held and ctx set.
func (p *parity) start(pr *parityReplica) {
	if !p.cfg.Canaries {
		return
	}
	ctx, cancel := context.WithCancel(p.ctx)
	pr.cancel = cancel
	p.wg.Go(func() { p.s.supervise(ctx, panicParity, func() { p.canaryLoop(ctx, pr) }) })
}

func (p *parity) canaryLoop(ctx context.Context, pr *parityReplica) {
	var tick <-chan time.Time
	if iv := p.cfg.Interval.Std(); iv > 0 {
		t := time.NewTicker(iv)
		defer t.Stop()
		tick = t.C
	}
	for {
		routed := p.routedTo(pr.key)
		p.checkTokens(ctx, pr)
		for wait := true; wait; {
			select {
			case <-ctx.Done():
				return
			case <-tick:
				// A periodic round waits for its share of real traffic;
				// the events (a join, a restart, a reload) never do.
				wait = routed >= 0 && p.routedTo(pr.key)-routed < requestsPerCanary*int64(len(canaries(pr.model)))
			case <-pr.kick:
				wait = false
			}
		}
	}
}

// requestsPerCanary is how many requests kvroute must have routed to a
// replica since its last canary round before a periodic round runs: the
// canaries stay at most 1 % of a replica's requests.
const requestsPerCanary = 100

// routedTo is how many requests with block keys kvroute has routed to
// replica k (all its ranks) since start; -1 when it does not count them.
func (p *parity) routedTo(k parityKey) int64 {
	f := p.s.funnel
	if f == nil {
		return -1
	}
	var n int64
	for _, st := range p.s.ingest.Status() {
		if st.Pool == k.pool && replicaOf(&st) == k.replica {
			n += f.RankRequests(st.Pool, st.Replica)
		}
	}
	return n
}

// checkTokens sends the canaries to the engine's /tokenize and compares
// with kvroute's own tokenization of the same bodies.
func (p *parity) checkTokens(ctx context.Context, pr *parityReplica) {
	state, evidence := parityUnknown, ""
	var compared, failed []string
	for _, c := range canaries(pr.model) {
		ours, reason, err := p.s.router.PromptTokens(c.path, c.body)
		if err != nil {
			if reason == routing.ReasonNoTokenizer {
				continue // no tokenizer, or no chat template: nothing to compare
			}
			failed = append(failed, c.name+": kvroute could not tokenize ("+reason+")")
			continue
		}
		theirs, err := p.tokenize(ctx, pr.address, c.body)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			failed = append(failed, c.name+": "+err.Error())
			continue
		}
		if d := firstDiff(ours, theirs); d >= 0 {
			state = parityMismatch
			compared = append(compared, fmt.Sprintf("%s canary: kvroute %d tokens, engine %d, first difference at token %d", c.name, len(ours), len(theirs), d))
			continue
		}
		if state != parityMismatch {
			state = parityMatch
		}
		compared = append(compared, fmt.Sprintf("%s canary: %d tokens equal", c.name, len(ours)))
	}
	switch {
	case len(compared) == 0 && len(failed) == 0:
		evidence = "the pool has no tokenizer"
	default:
		evidence = joinEvidence(append(compared, failed...))
	}
	p.set(pr.key, checkTokens, state, evidence, true)
}

// tokenize asks the engine's POST /tokenize for body's tokens (vLLM's
// TokenizeCompletionRequest or TokenizeChatRequest; the answer is
// {"count","max_model_len","tokens"}).
func (p *parity) tokenize(ctx context.Context, address string, body []byte) ([]int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+address+"/tokenize", bytes.NewReader(body))
	if err != nil {
		return nil, errors.New("bad address")
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := p.httpc.Do(req)
	if err != nil {
		return nil, errors.New("/tokenize unreachable")
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, maxTokenizeBytes))
		return nil, fmt.Errorf("/tokenize answered %d", res.StatusCode)
	}
	raw, err := io.ReadAll(io.LimitReader(res.Body, maxTokenizeBytes+1))
	if err != nil {
		return nil, errors.New("/tokenize answer not read")
	}
	if len(raw) > maxTokenizeBytes {
		return nil, fmt.Errorf("/tokenize answer over %d bytes", maxTokenizeBytes)
	}
	return parseTokenizeAnswer(raw)
}

// parseTokenizeAnswer decodes vLLM's /tokenize answer (at most
// maxTokenizeBytes): its tokens, which its count must agree with.
func parseTokenizeAnswer(raw []byte) ([]int, error) {
	if len(raw) > maxTokenizeBytes {
		return nil, fmt.Errorf("/tokenize answer over %d bytes", maxTokenizeBytes)
	}
	var ans struct {
		Tokens []int `json:"tokens"`
		Count  *int  `json:"count"`
	}
	if err := json.Unmarshal(raw, &ans); err != nil || ans.Tokens == nil {
		return nil, fmt.Errorf("/tokenize answer of %d bytes is not vLLM's", len(raw))
	}
	if ans.Count != nil && *ans.Count != len(ans.Tokens) {
		return nil, fmt.Errorf("/tokenize count %d for %d tokens", *ans.Count, len(ans.Tokens))
	}
	return ans.Tokens, nil
}

// firstDiff is the first position where a and b differ, -1 when equal.
func firstDiff(a, b []int) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

func joinEvidence(parts []string) string {
	var b bytes.Buffer
	for i, s := range parts {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(s)
	}
	return b.String()
}

// poll turns ingest's view of every replica into the hashes, block_size
// and hash_algorithm states, and runs the canaries of a replica whose
// engine restarted.
func (p *parity) poll() {
	type agg struct {
		st       []ingest.ReplicaStatus
		restarts int64
	}
	byRep := map[parityKey]*agg{}
	statuses := p.s.ingest.Status()
	p.engineSide(statuses)
	for _, st := range statuses {
		k := parityKey{st.Pool, replicaOf(&st)}
		a := byRep[k]
		if a == nil {
			a = &agg{}
			byRep[k] = a
		}
		a.st = append(a.st, st)
		a.restarts += st.Restarts
	}
	p.mu.Lock()
	var kick []*parityReplica
	keys := make([]parityKey, 0, len(p.reps))
	for k, pr := range p.reps {
		keys = append(keys, k)
		if a := byRep[k]; a != nil {
			if prev, ok := p.restart[k]; ok && a.restarts > prev {
				kick = append(kick, pr)
			}
			p.restart[k] = a.restarts
		}
	}
	p.mu.Unlock()
	for _, pr := range kick {
		pr.poke()
	}
	for _, k := range keys {
		a := byRep[k]
		if a == nil {
			continue
		}
		pc := p.poolConfig(k.pool)
		if pc == nil {
			continue
		}
		state, ev := hashesState(pc, a.st)
		p.set(k, checkHashes, state, ev, state != parityUnknown)
		state, ev = blockSizeState(pc, a.st)
		p.set(k, checkBlockSize, state, ev, state != parityUnknown)
		state, ev = hashAlgorithmState(pc, a.st)
		p.set(k, checkHashAlgorithm, state, ev, state != parityUnknown)
	}
}

// replicaOf is the replica a rank's status belongs to (the parity checks
// are per replica; with data parallelism a replica has several ranks).
func replicaOf(st *ingest.ReplicaStatus) string {
	if st.ReplicaName != "" {
		return st.ReplicaName
	}
	return st.Replica
}

func (p *parity) poolConfig(name string) *config.Pool {
	if pc, ok := p.pools[name]; ok {
		return &pc
	}
	return nil
}

func hashesState(pc *config.Pool, ranks []ingest.ReplicaStatus) (string, string) {
	var checks, mismatches int64
	last := ""
	for _, st := range ranks {
		checks += st.SelfChecks
		mismatches += st.SchemeMismatches
		if st.LastSelfCheck == parityMismatch || last == "" {
			last = st.LastSelfCheck
		}
	}
	switch {
	case last == parityMismatch:
		return parityMismatch, fmt.Sprintf("%d of %d sampled BlockStored runs did not rehash to the engine's hashes under hash.algorithm %s and hash.seed", mismatches, checks, pc.Hash.Algorithm)
	case last == parityMatch:
		return parityMatch, fmt.Sprintf("%d sampled BlockStored runs rehashed to the engine's hashes (%d mismatched earlier)", checks-mismatches, mismatches)
	case pc.Hash.Seed == nil && !pc.IsEngineKeys():
		return parityUnknown, "needs hash.seed: without it the engine's hashes cannot be recomputed"
	}
	return parityUnknown, "no BlockStored run from block 0 checked yet"
}

func blockSizeState(pc *config.Pool, ranks []ingest.ReplicaStatus) (string, string) {
	if len(ranks) == 0 {
		return parityUnknown, ""
	}
	want, source := pc.BlockSize, "configured"
	if want == 0 {
		want, source = ranks[0].PoolBlockSize, "learned"
	}
	if want == 0 {
		return parityUnknown, "the pool's block size is not known yet"
	}
	var seen []string
	mismatch := false
	for _, st := range ranks {
		for _, a := range []struct {
			from string
			bs   int
		}{{"events", st.EventBlockSize}, {"cache_config_info", st.EngineBlockSize}} {
			if a.bs <= 0 {
				continue
			}
			s := a.from + " " + strconv.Itoa(a.bs)
			if !slices.Contains(seen, s) {
				seen = append(seen, s)
			}
			mismatch = mismatch || a.bs != want
		}
	}
	if len(seen) == 0 {
		return parityUnknown, "the engine has announced no block size yet (no BlockStored event, no vllm:cache_config_info)"
	}
	ev := fmt.Sprintf("engine announces block_size %s; the pool's is %d (%s)", joinEvidence(seen), want, source)
	if mismatch {
		return parityMismatch, ev
	}
	return parityMatch, ev
}

func hashAlgorithmState(pc *config.Pool, ranks []ingest.ReplicaStatus) (string, string) {
	got := ""
	for _, st := range ranks {
		if st.EngineHashAlgorithm != "" {
			got = st.EngineHashAlgorithm
			break
		}
	}
	if got == "" {
		return parityUnknown, "the engine's vllm:cache_config_info has no prefix_caching_hash_algo yet"
	}
	ev := fmt.Sprintf("engine announces prefix_caching_hash_algo %q; the pool's hash.algorithm is %q", got, pc.Hash.Algorithm)
	if got != pc.Hash.Algorithm {
		if pc.Hash.Seed == nil && !pc.IsEngineKeys() {
			return parityUnknown, ev + " (unused: keys tokens without hash.seed)"
		}
		return parityMismatch, ev
	}
	return parityMatch, ev
}

// set records a check's state, counts it when evaluated with evidence
// (count), and on a change logs once, moves the gauge and applies
// parity.on_mismatch to the pool.
func (p *parity) set(k parityKey, check, state, evidence string, count bool) {
	now := p.s.ix.Now()
	p.mu.Lock()
	pr := p.reps[k]
	if pr == nil {
		p.mu.Unlock()
		return // left meanwhile
	}
	old := pr.states[check]
	st := ParityState{State: state, Evidence: evidence, Since: old.Since}
	if count {
		st.CheckedAt = &now
	} else {
		st.CheckedAt = old.CheckedAt
	}
	changed := old.State != state
	if changed {
		st.Since = now
	}
	pr.states[check] = st
	p.mu.Unlock()
	if count {
		p.checks.WithLabelValues(k.pool, check, state).Inc()
	}
	if !changed {
		return
	}
	v := 0.0
	if state == parityMismatch {
		v = 1
	}
	p.gauge.WithLabelValues(k.pool, k.replica, check).Set(v)
	args := []any{"pool", k.pool, "replica", k.replica, "check", check, "state", state, "was", old.State, "evidence", evidence}
	if state == parityMismatch {
		p.log.Warn("parity: the engine disagrees with the pool's config", args...)
	} else {
		p.log.Info("parity: check state changed", args...)
	}
	p.applyPolicy(k.pool)
}

// applyPolicy routes pool by load while any of its replicas mismatches,
// when parity.on_mismatch is route_by_load.
func (p *parity) applyPolicy(pool string) {
	if p.cfg.OnMismatch != config.ParityRouteByLoad {
		return
	}
	p.mu.Lock()
	bad := false
	for k, pr := range p.reps {
		if k.pool != pool {
			continue
		}
		for _, st := range pr.states {
			bad = bad || st.State == parityMismatch
		}
	}
	was := p.byPool[pool]
	p.byPool[pool] = bad
	p.mu.Unlock()
	if bad == was {
		return
	}
	if err := p.s.router.SetLoadOnly(pool, bad); err != nil {
		p.log.Error("parity: pool not switched", "pool", pool, "err", err)
		return
	}
	if bad {
		p.log.Warn("parity: pool routes by load only until every replica's checks match again (parity.on_mismatch: route_by_load)", "pool", pool)
	} else {
		p.log.Info("parity: pool routes by prefix again", "pool", pool)
	}
}

// replicaStates is a copy of a replica's check states (nil: not checked).
func (p *parity) replicaStates(pool, replica string) map[string]ParityState {
	p.mu.Lock()
	defer p.mu.Unlock()
	pr := p.reps[parityKey{pool, replica}]
	if pr == nil {
		return nil
	}
	out := make(map[string]ParityState, len(pr.states))
	for c, st := range pr.states {
		out[c] = st
	}
	return out
}

// ParityFinding is one mismatching check (readyz, explain).
type ParityFinding struct {
	Pool     string `json:"pool"`
	Replica  string `json:"replica"`
	Check    string `json:"check"`
	Evidence string `json:"evidence"`
}

// mismatches lists every mismatching check of pool ("" for all pools),
// sorted, and whether each such pool routes by load for it.
func (p *parity) mismatches(pool string) (out []ParityFinding, loadOnly map[string]bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, pr := range p.reps {
		if pool != "" && k.pool != pool {
			continue
		}
		for _, c := range parityChecks {
			if st := pr.states[c]; st.State == parityMismatch {
				out = append(out, ParityFinding{Pool: k.pool, Replica: k.replica, Check: c, Evidence: st.Evidence})
			}
		}
	}
	slices.SortFunc(out, func(a, b ParityFinding) int {
		return cmp.Or(cmp.Compare(a.Pool, b.Pool), cmp.Compare(a.Replica, b.Replica), cmp.Compare(a.Check, b.Check))
	})
	loadOnly = map[string]bool{}
	for k, v := range p.byPool {
		if v {
			loadOnly[k] = true
		}
	}
	return out, loadOnly
}
