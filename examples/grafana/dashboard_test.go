// Package grafana holds the Grafana dashboard for kvroute's metrics; its
// tests prove every query names metrics and labels kvroute really exports.
package grafana

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

type panel struct {
	ID      int    `json:"id"`
	Type    string `json:"type"`
	Title   string `json:"title"`
	GridPos *struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Datasource *struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		Expr  string `json:"expr"`
		RefID string `json:"refId"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

type dashboard struct {
	UID           string  `json:"uid"`
	Title         string  `json:"title"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
}

var (
	metricRef  = regexp.MustCompile(`\bkvroute_[a-zA-Z0-9_:]+`)
	selectorRe = regexp.MustCompile(`(kvroute_[a-zA-Z0-9_:]+)\{([^}]*)\}`)
	matcherRe  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)`)
	groupingRe = regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
)

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile("kvroute-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	dec := json.NewDecoder(strings.NewReader(string(b)))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	return d
}

func flatten(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, flatten(p.Panels)...)
	}
	return out
}

// baseMetric maps a histogram series name to its metric family.
func baseMetric(name string, known map[string][]string) (string, bool) {
	if _, ok := known[name]; ok {
		return name, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if b, ok := strings.CutSuffix(name, suffix); ok {
			if _, ok := known[b]; ok {
				return b, true
			}
		}
	}
	return "", false
}

func TestDashboardQueriesUseExportedMetricsAndLabels(t *testing.T) {
	known, err := kvrouteMetrics()
	if err != nil {
		t.Fatal(err)
	}
	if len(known) < 20 {
		t.Fatalf("collected only %d kvroute metrics: the registry walk is broken", len(known))
	}
	d := loadDashboard(t)
	used := map[string]bool{}
	exprs := 0
	for _, p := range flatten(d.Panels) {
		for _, tg := range p.Targets {
			exprs++
			names := metricRef.FindAllString(tg.Expr, -1)
			if len(names) == 0 {
				t.Errorf("panel %q %s: no kvroute metric in %q", p.Title, tg.RefID, tg.Expr)
			}
			// Labels the expression may group by: those of its metrics, plus
			// le for histograms and instance/job added by Prometheus.
			allowed := []string{"instance", "job"}
			for _, n := range names {
				base, ok := baseMetric(n, known)
				if !ok {
					t.Errorf("panel %q: metric %s is not exported by kvroute", p.Title, n)
					continue
				}
				used[base] = true
				allowed = append(allowed, known[base]...)
				if strings.HasSuffix(n, "_bucket") {
					allowed = append(allowed, "le")
				}
			}
			for _, m := range selectorRe.FindAllStringSubmatch(tg.Expr, -1) {
				base, ok := baseMetric(m[1], known)
				if !ok {
					continue
				}
				for _, lm := range matcherRe.FindAllStringSubmatch(m[2], -1) {
					if !slices.Contains(known[base], lm[1]) && lm[1] != "instance" && lm[1] != "job" {
						t.Errorf("panel %q: %s has no label %q (has %v)", p.Title, base, lm[1], known[base])
					}
				}
			}
			for _, g := range groupingRe.FindAllStringSubmatch(tg.Expr, -1) {
				for _, l := range strings.Split(g[1], ",") {
					if l = strings.TrimSpace(l); l != "" && !slices.Contains(allowed, l) {
						t.Errorf("panel %q: groups by %q, which none of %v carries", p.Title, l, names)
					}
				}
			}
		}
	}
	if exprs == 0 {
		t.Fatal("dashboard has no queries")
	}
	// The brief's must-haves: each of these families appears on the dashboard.
	for _, want := range []string{
		"kvroute_route_decisions_total", "kvroute_route_decision_duration_seconds", "kvroute_extproc_streams",
		"kvroute_index_entries", "kvroute_index_evictions_total", "kvroute_ingest_events_total",
		"kvroute_ingest_gaps_total", "kvroute_ingest_replays_total", "kvroute_ingest_lag_seconds",
		"kvroute_hash_scheme_mismatch_total", "kvroute_ingest_scrapes_total",
	} {
		if !used[want] {
			t.Errorf("dashboard does not chart %s", want)
		}
	}
}

func TestDashboardIsWellFormed(t *testing.T) {
	d := loadDashboard(t)
	if d.UID == "" || d.Title == "" || d.SchemaVersion < 30 {
		t.Fatalf("uid %q title %q schemaVersion %d", d.UID, d.Title, d.SchemaVersion)
	}
	ids := map[int]string{}
	for _, p := range flatten(d.Panels) {
		if prev, dup := ids[p.ID]; dup || p.ID == 0 {
			t.Errorf("panel %q: id %d missing or shared with %q", p.Title, p.ID, prev)
		}
		ids[p.ID] = p.Title
		if p.GridPos == nil || p.GridPos.W <= 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q: bad gridPos %+v", p.Title, p.GridPos)
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: datasource must be the ${datasource} variable", p.Title)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no queries", p.Title)
		}
	}
}
