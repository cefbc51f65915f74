package routing

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/kvroute/kvroute/index"
)

// Why an endpoint was not a candidate (ExplainCandidate.Ineligible).
const (
	IneligibleSubset    = "outside_subset_hint"
	IneligibleUnknown   = "unknown_replica"
	IneligibleUnhealthy = "unhealthy"
)

// Explanation is a routing decision made without routing (Explain): what the
// router saw and weighed. It carries counts only, never prompt text or ids.
type Explanation struct {
	Pool string `json:"pool"`
	// PromptTokens and PromptBlocks are the prompt's token count and its
	// full blocks at BlockSize (0 when the decision never tokenized it).
	PromptTokens int `json:"prompt_tokens"`
	PromptBlocks int `json:"prompt_blocks"`
	BlockSize    int `json:"block_size"`
	// Candidates are the endpoints the decision looked at, in config order:
	// every endpoint of the pool once the decision reached replica choice
	// (none when it was rejected before).
	Candidates []ExplainCandidate `json:"candidates"`
	// Pick is the chosen endpoint's name ("" when rejected).
	Pick          string `json:"pick"`
	PickAddress   string `json:"pick_address"`
	MatchedTokens int    `json:"matched_tokens"`
	Cost          Figure `json:"cost_seconds"`
	// SlackBound is the cost, in seconds, under which a candidate competes
	// on cache turnover: the cheapest cost plus placement_slack × the
	// prompt's own prefill time (0 when the decision had no block keys).
	SlackBound Figure `json:"slack_bound_seconds"`
	Outcome    string `json:"outcome"`
	Reason     string `json:"reason"`
	// Status and Error describe a rejection (its messages carry lengths,
	// never the request's bytes).
	Status int    `json:"status,omitempty"`
	Error  string `json:"error,omitempty"`
	// Flow is the pool's flow control state: with it enabled and the pool
	// saturated for the request's priority (FlowBand), or requests
	// waiting, the request would wait before this decision was made.
	Flow *FlowStatus `json:"flow,omitempty"`
	// FlowBand is the saturation test of the request's priority (its
	// objective's) with flow control on.
	FlowBand *BandTest `json:"flow_band,omitempty"`
}

// ExplainCandidate is one endpoint as the decision saw it.
type ExplainCandidate struct {
	Name    string `json:"name"`
	Address string `json:"address"`
	DPRank  int    `json:"dp_rank"`
	// Healthy is false for an unhealthy or unknown replica (one outside the
	// subset hint is not looked up; Explain passes no hint).
	Healthy  bool `json:"healthy"`
	Eligible bool `json:"eligible"`
	// Ineligible says why an endpoint was not weighed (Ineligible*).
	Ineligible string `json:"ineligible,omitempty"`
	// Weighed: the cost below was computed (an eligible endpoint).
	Weighed bool `json:"weighed"`
	// MatchedBlocks is the contiguous prefix the replica holds in any tier,
	// GPUBlocks those on GPU (speculative counts as GPU), CPUBlocks the rest;
	// WeightedBlocks what the cost credits (CPU blocks at cpu_tier_weight).
	MatchedBlocks  int    `json:"matched_blocks"`
	GPUBlocks      int    `json:"gpu_blocks"`
	CPUBlocks      int    `json:"cpu_blocks"`
	WeightedBlocks Figure `json:"weighted_blocks"`
	// InFlight is this router's requests on the replica; QueuedTokens the
	// prefill tokens predicted ahead of the request and QueueSeconds their
	// time at PrefillRate (tokens/s).
	InFlight       int64  `json:"in_flight"`
	QueuedTokens   Figure `json:"queued_tokens"`
	QueueSeconds   Figure `json:"queue_seconds"`
	PrefillRate    Figure `json:"prefill_tokens_per_second"`
	KVUsage        Figure `json:"kv_usage"`
	UncachedTokens Figure `json:"uncached_tokens"`
	// RecentUncachedTokens is the uncached prompt tokens begun on the
	// replica lately (index.ReplicaState.RecentTokens); TurnoverTokens adds
	// this request's UncachedTokens. Among the candidates WithinSlack (cost
	// at most the explanation's SlackBound) the least turnover is picked.
	RecentUncachedTokens Figure `json:"recent_uncached_tokens"`
	TurnoverTokens       Figure `json:"turnover_tokens"`
	WithinSlack          bool   `json:"within_slack"`
	// FleetSeconds is the prefill time of UncachedTokens at PrefillRate.
	// Cost is what the decision minimised: the predicted seconds to first
	// token plus FleetSeconds.
	FleetSeconds Figure `json:"fleet_seconds"`
	Cost         Figure `json:"cost_seconds"`
	Picked       bool   `json:"picked"`

	ep *Endpoint
}

// Figure is a number in an Explanation; one that is not finite (an infinite
// cost) reads as JSON null, which decodes back as +Inf.
type Figure float64

// MarshalJSON writes null for NaN and ±Inf, which JSON cannot carry.
func (f Figure) MarshalJSON() ([]byte, error) {
	v := float64(f)
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return []byte("null"), nil
	}
	return json.Marshal(v)
}

// UnmarshalJSON reads null as +Inf.
func (f *Figure) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*f = Figure(math.Inf(1))
		return nil
	}
	var v float64
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*f = Figure(v)
	return nil
}

// Steps of a decision, as Recorder.Steps names them (a step that did not
// run is not reported).
const (
	stepParse = iota
	stepTemplate
	stepTokenize
	stepKeys
	stepLookup
	stepPick
	numSteps
)

var stepNames = [numSteps]string{"parse", "template", "tokenize", "keys", "lookup", "pick"}

// Recorder collects what one decision weighed (explain: the candidates)
// and when each of its steps ended (trace); every method is a no-op on a nil
// Recorder (Decide's path).
type Recorder struct {
	explain      bool
	cands        []ExplainCandidate
	promptTokens int
	blockSize    int
	slackBound   float64

	trace bool
	start time.Time
	marks [numSteps]time.Time // zero: the step did not run
}

// NewRecorder returns a Recorder for DecideRecorded: with explain it
// collects every weighed endpoint's cost (Scores), with trace when each step
// of the decision ended (Steps), timed from now.
func NewRecorder(explain, trace bool) *Recorder {
	rec := &Recorder{explain: explain, trace: trace}
	if trace {
		rec.start = time.Now()
	}
	return rec
}

// Start is when NewRecorder began timing (zero without trace).
func (rec *Recorder) Start() time.Time { return rec.start }

// Steps calls f for each step the decision ran, in order, with when it
// began and ended; the last step, pick, ends at end when the decision did
// not reach it (it answered before choosing a replica).
func (rec *Recorder) Steps(end time.Time, f func(step string, from, to time.Time)) {
	if rec.marks[stepPick].IsZero() {
		rec.marks[stepPick] = end
	}
	from := rec.start
	for step, at := range rec.marks {
		if at.IsZero() {
			continue
		}
		f(stepNames[step], from, at)
		from = at
	}
}

func (rec *Recorder) reset() {
	if rec != nil {
		rec.cands = rec.cands[:0]
		rec.slackBound = 0
	}
}

// mark notes that step just ended.
func (rec *Recorder) mark(step int) {
	if rec != nil && rec.trace {
		rec.marks[step] = time.Now()
	}
}

// add records endpoint ep as eligible until told otherwise and returns its slot.
func (rec *Recorder) add(ep *Endpoint) int {
	if rec == nil || !rec.explain {
		return -1
	}
	rec.cands = append(rec.cands, ExplainCandidate{Name: ep.Name, Address: ep.Address, DPRank: ep.DPRank, Healthy: true, Eligible: true, ep: ep})
	return len(rec.cands) - 1
}

// ineligible marks slot's endpoint as not weighed, and why; an endpoint
// outside the subset hint was not looked up, so its health is unknown.
func (rec *Recorder) ineligible(slot int, why string) {
	if rec == nil || !rec.explain {
		return
	}
	c := &rec.cands[slot]
	c.Eligible, c.Ineligible = false, why
	c.Healthy = why == IneligibleSubset
}

// weigh records candidate c's held prefix, uncached tokens and cost.
func (rec *Recorder) weigh(r *Router, c *candidate, held index.Match, uncached, cost float64) {
	if rec == nil || !rec.explain {
		return
	}
	e := &rec.cands[c.slot]
	queued := r.queued(&c.state)
	e.Weighed = true
	e.MatchedBlocks, e.GPUBlocks, e.CPUBlocks = held.Blocks, held.GPUBlocks, held.Blocks-held.GPUBlocks
	e.WeightedBlocks = Figure(held.Weighted)
	e.InFlight = c.state.InFlight
	e.QueuedTokens, e.QueueSeconds = Figure(queued), Figure(queued/c.rate)
	e.PrefillRate, e.KVUsage = Figure(c.rate), Figure(c.state.Load.KVUsage)
	e.UncachedTokens, e.Cost = Figure(max(uncached, 0)), Figure(cost)
	e.FleetSeconds = Figure(fleetSeconds(c, uncached))
}

// slack records the cost bound of the decision's spread.
func (rec *Recorder) slack(bound float64) {
	if rec != nil && rec.explain {
		rec.slackBound = bound
	}
}

// spread records candidate c's cache turnover and whether its cost was
// within the slack bound.
func (rec *Recorder) spread(c *candidate, turnover float64, within bool) {
	if rec == nil || !rec.explain {
		return
	}
	e := &rec.cands[c.slot]
	e.RecentUncachedTokens = Figure(c.state.RecentTokens())
	e.TurnoverTokens, e.WithinSlack = Figure(turnover), within
}

// Scores formats the weighed candidates' costs as `name=ms` pairs,
// comma-separated in pool order ("inf" for an endpoint that cannot take the
// request): the value of extproc's scores header.
func (rec *Recorder) Scores() string {
	var b strings.Builder
	for _, c := range rec.cands {
		if !c.Weighed {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(c.Name)
		b.WriteByte('=')
		if ms := 1000 * float64(c.Cost); math.IsInf(ms, 0) || math.IsNaN(ms) {
			b.WriteString("inf")
		} else {
			b.WriteString(strconv.FormatFloat(ms, 'g', 3, 64))
		}
	}
	return b.String()
}

// Explain runs Decide's decision for a request without routing it: nothing
// is begun (no in-flight count, no queued tokens, no speculative blocks, no
// LRU touch), and it returns what the decision weighed. Ties between equal
// costs are broken at random as in Decide, so a tied pick may differ between
// calls.
//
// objective is the request's x-gateway-inference-objective ("" for none):
// with flow control on, the decision is made as for its priority (a
// priority below the pool's top one leaves the reserved replicas alone)
// and FlowBand gives that priority's saturation test.
func (r *Router) Explain(path string, body []byte, objective string) Explanation {
	rec := &Recorder{explain: true}
	pr := r.prepare(path, body, nil, rec)
	flow := r.flow.Load()
	priority := r.o().Flow.Priority(objective)
	if flow != nil && r.o().Flow.Enabled && body != nil {
		pr.SetPriority(priority)
	}
	pool := pr.Pool()
	d := r.DecidePrepared(&pr, rec)
	x := Explanation{
		Pool: d.Pool, PromptTokens: max(d.PromptTokens, rec.promptTokens), PromptBlocks: len(d.Keys), BlockSize: rec.blockSize,
		Candidates: rec.cands, MatchedTokens: d.MatchedTokens, Outcome: d.Outcome, Reason: d.Reason,
		SlackBound: Figure(rec.slackBound),
	}
	if x.Candidates == nil {
		x.Candidates = []ExplainCandidate{}
	}
	if flow != nil {
		if fs, ok := flow.PoolStatus(pool); ok {
			x.Flow = &fs
			if bt, ok := r.BandTest(pool, priority); ok && fs.Enabled {
				x.FlowBand = &bt
			}
		}
	}
	if d.Endpoint != nil {
		x.Pick, x.PickAddress, x.Cost = d.Endpoint.Name, d.Endpoint.Address, Figure(d.Cost)
		for i := range x.Candidates {
			x.Candidates[i].Picked = x.Candidates[i].ep == d.Endpoint
		}
	} else {
		x.Status, x.Error = d.Rejection()
	}
	return x
}
