package fleetsim

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
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
		FlowControl: true, Shed: map[string]int{"ttl": 2}, Held: 4, Wait: []time.Duration{time.Second, 3 * time.Second},
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
	for _, want := range []string{"| kvroute (flow control) |", "of 5 requests 2 were served, 2 shed and 1 errors; 4 waited", "shed by reason: ttl 2", "| kvroute (flow control) | a | 2 | 5 |"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, md.String())
		}
	}
}
