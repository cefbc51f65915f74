package fleetsim

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kvroute/kvroute/routing"
)

// TestGoalFamilies checks the flow-control goals' workloads: repeatable
// per seed, every request naming its tenant, and the flows in the stated
// proportions (priority-flood a tenth interactive at priority 1;
// tenant-pair 10:1).
func TestGoalFamilies(t *testing.T) {
	for _, f := range GoalFamilies() {
		a, err := f.Generate(1)
		if err != nil {
			t.Fatal(err)
		}
		if b, _ := f.Generate(1); !reflect.DeepEqual(a, b) {
			t.Fatalf("%s: two generations at seed 1 differ", f.Name)
		}
		if len(a) != f.Requests {
			t.Fatalf("%s: %d records, want %d", f.Name, len(a), f.Requests)
		}
		n := map[string]int{}
		prio := map[string]int{}
		for i, r := range a {
			if err := r.check(); err != nil {
				t.Fatalf("%s: record %d: %v", f.Name, i, err)
			}
			if i > 0 && r.Timestamp < a[i-1].Timestamp {
				t.Fatalf("%s: record %d arrives before %d", f.Name, i, i-1)
			}
			n[r.Tenant]++
			prio[r.Tenant] = r.Priority
		}
		span := float64(a[len(a)-1].Timestamp) / 1000
		if rate := float64(len(a)) / span; rate < 0.9*f.Rate || rate > 1.1*f.Rate {
			t.Errorf("%s: %.0f req/s, want %g", f.Name, rate, f.Rate)
		}
		switch f.Name {
		case FamilyPriorityFlood:
			share := float64(n[TenantInteractive]) / float64(len(a))
			if len(n) != 2 || share < 0.08 || share > 0.12 || prio[TenantInteractive] != 1 || prio[TenantBatch] != 0 {
				t.Errorf("%s: tenants %v, priorities %v", f.Name, n, prio)
			}
		case FamilyTenantPair:
			ratio := float64(n[TenantHeavy]) / float64(n[TenantLight])
			if len(n) != 2 || ratio < 9 || ratio > 11 || prio[TenantHeavy] != 0 || prio[TenantLight] != 0 {
				t.Errorf("%s: tenants %v (heavy/light %.1f), priorities %v", f.Name, n, ratio, prio)
			}
		default:
			t.Errorf("unexpected goal family %s", f.Name)
		}
		if got := KeepTenants(a, []string{TenantInteractive, TenantLight}); len(got) != n[TenantInteractive]+n[TenantLight] {
			t.Errorf("%s: KeepTenants kept %d", f.Name, len(got))
		}
	}
}

// TestResultsCountShedAndTenants writes a report with a flow-controlled
// policy and a plain one: results.json gives every policy a shed count
// (0 without flow control), the reasons and the tenants' figures, and the
// markdown says what flow control did in words.
func TestResultsCountShedAndTenants(t *testing.T) {
	fc := &Result{Name: PolicyKVRoute, Requests: 5, TTFT: []time.Duration{time.Second, 2 * time.Second}, Errors: 1,
		FlowControl: true, Shed: map[string]int{"ttl": 2}, ShedAfter: []time.Duration{time.Second, 3 * time.Second}, Held: 4, Wait: []time.Duration{time.Second},
		LastArrival: 10 * time.Second}
	fc.tenant(Class{Tenant: "a", Priority: 2}).Requests = 5
	fc.Tenants["a"].prefills = []prefillMark{{at: time.Second, tokens: 100}, {at: 11 * time.Second, tokens: 50}}
	fc.Tenants["a"].PromptTokens = 150
	rr := &Result{Name: PolicyRoundRobin, Requests: 5, TTFT: make([]time.Duration, 5)}
	rep := &Report{Results: []*Result{rr, fc}}
	var js bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var out struct {
		Policies []map[string]any `json:"policies"`
	}
	if err := json.Unmarshal(js.Bytes(), &out); err != nil {
		t.Fatal(err)
	}
	if s, ok := out.Policies[0]["shed"]; !ok || s != 0.0 {
		t.Errorf("round-robin: shed %v (present %v), want 0", s, ok)
	}
	p := out.Policies[1]
	if p["shed"] != 2.0 || p["flow_control"] != true || !reflect.DeepEqual(p["shed_by_reason"], map[string]any{"ttl": 2.0}) {
		t.Errorf("kvroute: %s", js.String())
	}
	ten := p["tenants"].([]any)[0].(map[string]any)
	if ten["tenant"] != "a" || ten["priority"] != 2.0 || ten["prefilled_tokens"] != 150.0 || ten["prefilled_until_last_arrival"] != 100.0 {
		t.Errorf("tenant: %v", ten)
	}
	var md bytes.Buffer
	rep.WriteMarkdown(&md)
	for _, want := range []string{"| kvroute (flow control) |", "of 5 requests 2 were served, 2 shed and 1 errors; 4 waited in its queue, 1 of them decided after a wait of p50 1000 ms", "shed by reason: ttl 2, each answered at most 3000 ms after", "| kvroute (flow control) | a | 2 | 5 |"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, md.String())
		}
	}
}

// saturatedPair is a small tenant-pair run that saturates two engines
// (about 16 requests/s of prefill) at 60 requests/s for 5 s.
func saturatedPair(t *testing.T) (Source, Options) {
	t.Helper()
	f, _ := GoalFamily(FamilyTenantPair)
	f.Requests, f.Rate = 300, 60
	recs, err := f.Generate(3)
	if err != nil {
		t.Fatal(err)
	}
	o := DefaultOptions()
	o.Engines, o.Seed = 2, 3
	o.RoutingYAML = "{flow_control: {ttl: 2s, max_queued: 64}}"
	return &TraceSource{Records: recs, Speedup: 1}, o
}

// TestFlowControlServesOrShedsEveryRequest saturates a small fleet with
// flow control on, behind one gateway and behind two kvroute instances in a
// peer mesh (each its own queue): every request is served, shed or an
// error (none here), some wait and some are shed (by the queue's bound and
// by its TTL), no shed request waits past the TTL, and the tenants' counts
// add up. Without flow control the same run sheds nothing.
func TestFlowControlServesOrShedsEveryRequest(t *testing.T) {
	src, o := saturatedPair(t)
	for _, c := range []struct {
		on       bool
		gateways int
	}{{false, 1}, {true, 1}, {true, 2}} {
		o.FlowControl, o.Gateways, o.Peers = c.on, c.gateways, c.gateways > 1
		r, err := Run(src, PolicyKVRoute, o)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("flow control %v, %d gateways: %d served, shed %v, %d errors, %d held, TTFT p99 %v", c.on, c.gateways, r.Served(), r.Shed, r.Errors, r.Held, r.Percentile(0.99))
		if r.Requests != src.Len() || r.Served()+r.ShedTotal()+r.Errors != r.Requests || r.Errors != 0 {
			t.Fatalf("%+v: %d requests: %d served + %d shed + %d errors", c, r.Requests, r.Served(), r.ShedTotal(), r.Errors)
		}
		if !c.on {
			if r.FlowControl || r.ShedTotal() != 0 || r.Held != 0 {
				t.Fatalf("without flow control: shed %v, held %d", r.Shed, r.Held)
			}
			continue
		}
		if r.Held == 0 || r.Shed[routing.ShedTTL] == 0 || r.Shed[routing.ShedQueueFull] == 0 || len(r.Wait) == 0 {
			t.Fatalf("%+v, saturated: held %d, shed %v, %d decided after waiting", c, r.Held, r.Shed, len(r.Wait))
		}
		for _, d := range r.ShedAfter {
			if d > 2*time.Second {
				t.Fatalf("%+v: a request was shed %v after it arrived (TTL 2s)", c, d)
			}
		}
		served, shed := 0, 0
		for _, tr := range r.Tenants {
			served += len(tr.TTFT)
			shed += tr.Shed
		}
		if served != r.Served() || shed != r.ShedTotal() {
			t.Fatalf("%+v: tenants: %d served, %d shed; run: %d, %d", c, served, shed, r.Served(), r.ShedTotal())
		}
	}
}

// TestFlowControlIsDeterministic runs a saturating priority flood on four
// engines twice at one seed with flow control: the same results, request
// for request (equal costs are frequent there: kvroute's tie-breaks are
// drawn from the seed).
func TestFlowControlIsDeterministic(t *testing.T) {
	f, _ := GoalFamily(FamilyPriorityFlood)
	f.Requests, f.Rate = 400, 80
	recs, err := f.Generate(4)
	if err != nil {
		t.Fatal(err)
	}
	src := &TraceSource{Records: recs, Speedup: 1}
	o := DefaultOptions()
	o.Engines, o.Seed, o.FlowControl = 4, 5, true
	o.RoutingYAML = "{flow_control: {ttl: 2s}}"
	var runs [2]*Result
	for i := range runs {
		r, err := Run(src, PolicyKVRoute, o)
		if err != nil {
			t.Fatal(err)
		}
		r.Wall = 0
		runs[i] = r
	}
	if !reflect.DeepEqual(runs[0], runs[1]) {
		t.Fatalf("two runs at seed %d differ: served %d/%d, shed %v/%v", o.Seed, runs[0].Served(), runs[1].Served(), runs[0].Shed, runs[1].Shed)
	}
}

// TestFlowControlPutsPriorityFirst floods two engines with batch requests
// and a tenth interactive ones at priority 1: with flow control the
// interactive requests' TTFT p99 is far below theirs without, and none of
// them is shed.
func TestFlowControlPutsPriorityFirst(t *testing.T) {
	f, _ := GoalFamily(FamilyPriorityFlood)
	f.Requests, f.Rate = 400, 40
	recs, err := f.Generate(2)
	if err != nil {
		t.Fatal(err)
	}
	src := &TraceSource{Records: recs, Speedup: 1}
	o := DefaultOptions()
	o.Engines = 2
	var p99 [2]time.Duration
	for i, on := range []bool{false, true} {
		o.FlowControl = on
		r, err := Run(src, PolicyKVRoute, o)
		if err != nil {
			t.Fatal(err)
		}
		it := r.Tenants[TenantInteractive]
		p99[i] = it.Percentile(0.99)
		t.Logf("flow control %v: interactive p99 %v (%d served, %d shed), batch p99 %v, shed %v", on, p99[i], len(it.TTFT), it.Shed,
			r.Tenants[TenantBatch].Percentile(0.99), r.Shed)
		if it.Shed != 0 || len(it.TTFT) != it.Requests {
			t.Fatalf("flow control %v: %d of %d interactive requests served", on, len(it.TTFT), it.Requests)
		}
	}
	if p99[1]*3 > p99[0] {
		t.Fatalf("interactive TTFT p99 %v with flow control, %v without: want a third or less", p99[1], p99[0])
	}
}

// FuzzDecodeTrace feeds the trace decoder arbitrary lines: it never
// panics, and every record it accepts has its priority and tenant within
// bounds, hash ids covering its prompt, and arrival order kept.
func FuzzDecodeTrace(f *testing.F) {
	f.Add(`{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [0], "priority": 1, "tenant": "a"}`)
	f.Add(`{"timestamp": 5, "input_length": 600, "output_length": 3, "hash_ids": [1, 2]}` + "\n" + `{"timestamp": 6, "input_length": 1, "output_length": 0, "hash_ids": [9], "priority": -3}`)
	f.Add(`{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [0], "tenant": "` + strings.Repeat("x", 65) + `"}`)
	f.Fuzz(func(t *testing.T, in string) {
		recs, err := DecodeTrace(strings.NewReader(in))
		if err != nil {
			return
		}
		for i, r := range recs {
			if len(r.Tenant) > maxTenantBytes || r.Priority > maxPriority || r.Priority < -maxPriority {
				t.Fatalf("record %d accepted with a %d-byte tenant, priority %d", i, len(r.Tenant), r.Priority)
			}
			if r.InputLength < 1 || len(r.HashIDs) != (r.InputLength+TraceBlockTokens-1)/TraceBlockTokens {
				t.Fatalf("record %d accepted with input_length %d and %d hash ids", i, r.InputLength, len(r.HashIDs))
			}
			if i > 0 && recs[i].Timestamp < recs[i-1].Timestamp {
				t.Fatalf("record %d out of order", i)
			}
		}
	})
}
