package fleetsim

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/kvroute/kvroute/internal/routebench"
	"github.com/kvroute/kvroute/routing"
)

// Report is a simulation's outcome: every policy, and the two ceilings.
type Report struct {
	Results []*Result
	// Ideal is the infinite-cache reuse bound: every prefix ever seen is
	// still cached (whole engine blocks, never the last prompt token).
	Ideal float64
	// Pooled is the pooled-cache bound: one engine with the whole fleet's
	// KV and the same eviction.
	Pooled *Result
}

// RunAll runs the policies in order, then the pooled bound, and computes
// the ideal bound.
func RunAll(src Source, policies []string, o Options) (*Report, error) {
	rep := &Report{}
	for _, p := range policies {
		r, err := Run(src, p, o)
		if err != nil {
			return nil, err
		}
		rep.Results = append(rep.Results, r)
	}
	pooled, err := Run(src, policyPooled, o)
	if err != nil {
		return nil, err
	}
	rep.Pooled = pooled
	var hit, total int64
	for i := range src.Len() {
		tokens, _ := src.Prompt(i)
		total += int64(len(tokens))
		hit += int64(src.IdealHit(i, o.BlockSize))
	}
	if total > 0 {
		rep.Ideal = float64(hit) / float64(total)
	}
	return rep, nil
}

// jsonPolicy and jsonReport are results.json: per policy the token hit rate,
// TTFT quantiles and counts, beside the ideal and pooled hit rates.
type jsonPolicy struct {
	Name         string  `json:"name"`
	TokenHitRate float64 `json:"token_hit_rate"`
	TTFTP50      float64 `json:"ttft_p50_ms"`
	TTFTP90      float64 `json:"ttft_p90_ms"`
	TTFTP99      float64 `json:"ttft_p99_ms"`
	Requests     int     `json:"requests"`
	Errors       int     `json:"errors"`
	// Shed is the requests flow control answered 429 instead of serving
	// (ShedByReason breaks it down); TTFT quantiles are of served requests.
	Shed         int            `json:"shed"`
	ShedByReason map[string]int `json:"shed_by_reason,omitempty"`
	FlowControl  bool           `json:"flow_control,omitempty"`
	Held         int            `json:"held,omitempty"`
	// MaxShedAfterMs is the longest a shed request waited for its answer.
	MaxShedAfterMs float64      `json:"max_shed_after_ms,omitempty"`
	Tenants        []jsonTenant `json:"tenants,omitempty"`
	// PromptTokens is a kvroute policy's prompt-token funnel by outcome
	// (kvroute_prompt_tokens_total's), PromptTokensTruth the simulator's
	// ground truth of given_up_for_load and stale (with GroundTruth).
	PromptTokens      map[string]int64 `json:"prompt_tokens,omitempty"`
	PromptTokensTruth map[string]int64 `json:"prompt_tokens_ground_truth,omitempty"`
	// ParityCachedTokens is what a kvroute policy's cached_tokens parity
	// check found: windows judged and mismatch flags (all false ones here).
	ParityCachedTokens *ParityResult `json:"parity_cached_tokens,omitempty"`
}

// jsonTenant is one tenant's part of a policy's run.
type jsonTenant struct {
	Tenant       string  `json:"tenant"`
	Priority     int     `json:"priority"`
	Requests     int     `json:"requests"`
	Served       int     `json:"served"`
	Shed         int     `json:"shed"`
	Errors       int     `json:"errors"`
	TokenHitRate float64 `json:"token_hit_rate"`
	TTFTP50      float64 `json:"ttft_p50_ms"`
	TTFTP90      float64 `json:"ttft_p90_ms"`
	TTFTP99      float64 `json:"ttft_p99_ms"`
	// PrefilledTokens is the uncached prompt tokens its served requests
	// prefilled; PrefilledUntilLastArrival those prefilled before the
	// run's last arrival (while every tenant was sending).
	PrefilledTokens           int64 `json:"prefilled_tokens"`
	PrefilledUntilLastArrival int64 `json:"prefilled_until_last_arrival"`
}

type jsonReport struct {
	Policies      []jsonPolicy `json:"policies"`
	IdealHitRate  float64      `json:"ideal_hit_rate"`
	PooledHitRate float64      `json:"pooled_hit_rate"`
}

func msOf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// WriteJSON writes results.json.
func (rep *Report) WriteJSON(w io.Writer) error {
	out := jsonReport{Policies: []jsonPolicy{}, IdealHitRate: rep.Ideal}
	if rep.Pooled != nil {
		out.PooledHitRate = rep.Pooled.HitRate()
	}
	for _, r := range rep.Results {
		jp := jsonPolicy{Name: r.Name, TokenHitRate: r.HitRate(),
			TTFTP50: msOf(r.Percentile(0.5)), TTFTP90: msOf(r.Percentile(0.9)), TTFTP99: msOf(r.Percentile(0.99)),
			Requests: r.Requests, Errors: r.Errors, Shed: r.ShedTotal(), ShedByReason: r.Shed, FlowControl: r.FlowControl, Held: r.Held,
			PromptTokens: r.Funnel, PromptTokensTruth: r.FunnelTruth, ParityCachedTokens: r.Parity}
		if len(r.ShedAfter) > 0 {
			jp.MaxShedAfterMs = msOf(slices.Max(r.ShedAfter))
		}
		for _, name := range r.tenantNames() {
			t := r.Tenants[name]
			jp.Tenants = append(jp.Tenants, jsonTenant{Tenant: name, Priority: t.Priority, Requests: t.Requests, Served: len(t.TTFT),
				Shed: t.Shed, Errors: t.Errors, TokenHitRate: ratio(t.HitTokens, t.PromptTokens),
				TTFTP50: msOf(t.Percentile(0.5)), TTFTP90: msOf(t.Percentile(0.9)), TTFTP99: msOf(t.Percentile(0.99)),
				PrefilledTokens: t.PromptTokens - t.HitTokens, PrefilledUntilLastArrival: t.Prefilled(0, r.LastArrival+1)})
		}
		out.Policies = append(out.Policies, jp)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// tenantNames is the run's tenants in name order.
func (r *Result) tenantNames() []string {
	names := make([]string, 0, len(r.Tenants))
	for name := range r.Tenants {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// WriteMarkdown writes the results table.
func (rep *Report) WriteMarkdown(w io.Writer) {
	fmt.Fprintln(w, "| policy | token hit rate | TTFT p50 | TTFT p90 | TTFT p99 | requests | errors | shed | imbalance (max/mean) | wall |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|")
	rows := append([]*Result(nil), rep.Results...)
	if rep.Pooled != nil {
		rows = append(rows, rep.Pooled)
	}
	for _, r := range rows {
		name := r.label()
		if r == rep.Pooled {
			name = "pooled bound (1 engine, whole fleet's KV)"
		}
		fmt.Fprintf(w, "| %s | %.1f %% | %.0f ms | %.0f ms | %.0f ms | %d | %d | %d | %.2f | %.0f s |\n", name, 100*r.HitRate(),
			msOf(r.Percentile(0.5)), msOf(r.Percentile(0.9)), msOf(r.Percentile(0.99)), r.Requests, r.Errors, r.ShedTotal(), r.Imbalance(), r.Wall.Seconds())
	}
	fmt.Fprintf(w, "\nIdeal (infinite cache) hit rate: %.1f %%.", 100*rep.Ideal)
	if rep.Pooled != nil {
		fmt.Fprintf(w, " Pooled-cache bound: %.1f %%.", 100*rep.Pooled.HitRate())
	}
	fmt.Fprintln(w)
	for _, r := range rep.Results {
		if r.FlowControl {
			fmt.Fprintf(w, "\n%s\n", flowSummary(r))
		}
		if len(r.Decisions) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s\n", decisionSummary(r))
		if r.Funnel != nil {
			fmt.Fprintf(w, "\n%s\n", funnelSummary(r))
		}
	}
	rep.writeTenants(w)
}

// flowSummary says in words what flow control did: how many requests
// waited and how long, how many were served and how many shed, and why.
func flowSummary(r *Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s with flow control: of %d requests %d were served, %d shed and %d errors; %d waited in its queue",
		r.Name, r.Requests, r.Served(), r.ShedTotal(), r.Errors, r.Held)
	if len(r.Wait) > 0 {
		fmt.Fprintf(&b, ", %d of them decided after a wait of p50 %.0f ms, p99 %.0f ms, at most %.0f ms", len(r.Wait),
			msOf(routebench.NearestRank(r.Wait, 0.5)), msOf(routebench.NearestRank(r.Wait, 0.99)), msOf(slices.Max(r.Wait)))
	}
	if n := r.ShedTotal(); n > 0 {
		var parts []string
		for k, v := range r.Shed {
			parts = append(parts, fmt.Sprintf("%s %d", k, v))
		}
		slices.Sort(parts)
		fmt.Fprintf(&b, "; shed by reason: %s, each answered at most %.0f ms after it arrived", strings.Join(parts, ", "), msOf(slices.Max(r.ShedAfter)))
	}
	b.WriteString(". TTFT and hit rate are of served requests.")
	return b.String()
}

// writeTenants writes, when the requests name tenants, each policy's
// results per tenant: requests, served and shed, TTFT and the share of
// the fleet's prefill (uncached prompt tokens) each tenant got.
func (rep *Report) writeTenants(w io.Writer) {
	header := false
	for _, r := range rep.Results {
		// While requests arrive: the drain after the last arrival serves
		// whatever is left, whoever sent it.
		end := r.LastArrival + 1
		var total int64
		for _, t := range r.Tenants {
			total += t.Prefilled(0, end)
		}
		for _, name := range r.tenantNames() {
			if !header {
				fmt.Fprintln(w, "\n| policy | tenant | priority | requests | served | shed | TTFT p50 | TTFT p90 | TTFT p99 | share of prefill until the last arrival |")
				fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|")
				header = true
			}
			t := r.Tenants[name]
			fmt.Fprintf(w, "| %s | %s | %d | %d | %d | %d | %.0f ms | %.0f ms | %.0f ms | %.1f %% |\n", r.label(), name, t.Priority, t.Requests,
				len(t.TTFT), t.Shed, msOf(t.Percentile(0.5)), msOf(t.Percentile(0.9)), msOf(t.Percentile(0.99)),
				100*ratio(t.Prefilled(0, end), total))
		}
	}
}

// label is the policy's name in tables.
func (r *Result) label() string {
	if r.FlowControl {
		return r.Name + " (flow control)"
	}
	return r.Name
}

// funnelSummary says where a kvroute policy's prompt tokens went, as
// kvroute_prompt_tokens_total counts them, beside the ground truth when the
// run computed it.
func funnelSummary(r *Result) string {
	f := r.Funnel
	routed := f[routing.TokensCachedPredicted] + f[routing.TokensNew] + f[routing.TokensGivenUpForLoad]
	share := func(n, of int64) float64 {
		if of == 0 {
			return 0
		}
		return 100 * float64(n) / float64(of)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s prompt tokens: %d routed (the engines admitted %d); %s %.1f %%, %s %.1f %%, %s %.1f %% of them; %s %.1f %% of cached_predicted, %s %.1f %% of the rest",
		r.Name, routed, r.PromptTokens,
		routing.TokensCachedPredicted, share(f[routing.TokensCachedPredicted], routed),
		routing.TokensNew, share(f[routing.TokensNew], routed),
		routing.TokensGivenUpForLoad, share(f[routing.TokensGivenUpForLoad], routed),
		routing.TokensStale, share(f[routing.TokensStale], f[routing.TokensCachedPredicted]),
		routing.TokensCachedUnpredicted, share(f[routing.TokensCachedUnpredicted], f[routing.TokensNew]+f[routing.TokensGivenUpForLoad]))
	if t := r.FunnelTruth; t != nil {
		fmt.Fprintf(&b, "; ground truth: %s %d (kvroute %d), %s %d (kvroute %d)",
			routing.TokensGivenUpForLoad, t[truthGivenUp], f[routing.TokensGivenUpForLoad], routing.TokensStale, t[truthStale], f[routing.TokensStale])
	}
	if p := r.Parity; p != nil {
		fmt.Fprintf(&b, "; the cached_tokens parity check judged %d windows and flagged a mismatch %d times", p.WindowsJudged, p.Flags)
	}
	b.WriteString(".")
	return b.String()
}

// decisionSummary says in words what a kvroute policy decided: how many
// requests went to a replica holding less of their prefix than the best
// holder (the load term outweighing the cache), the cached tokens given up
// that way, and the routing outcomes by reason.
func decisionSummary(r *Result) string {
	d := r.Decisions
	var b strings.Builder
	fmt.Fprintf(&b, "%s: ", r.Name)
	moved, given := d[counterMoved], d[counterMovedTokens]
	if moved == 0 {
		b.WriteString("every request went to the replica holding the most of its prefix")
	} else {
		fmt.Fprintf(&b, "%d of %d requests went to a replica holding less of their prefix than the best holder, to spread load, giving up %d cached tokens",
			moved, r.Requests, given)
	}
	if exp, ok := d[counterExpected]; ok {
		fmt.Fprintf(&b, "; the index expected %d cached tokens over the run", exp)
	}
	var parts []string
	for k, v := range d {
		if k == counterMoved || k == counterMovedTokens || k == counterExpected {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %d", k, v))
	}
	slices.Sort(parts)
	if len(parts) > 0 {
		fmt.Fprintf(&b, ". Decisions by outcome/reason: %s", strings.Join(parts, ", "))
	}
	b.WriteString(".")
	return b.String()
}

// WriteSVG draws hit rate and TTFT p90 per policy as two bar groups.
func (rep *Report) WriteSVG(w io.Writer, title string) {
	const width, rowH, left, top = 760.0, 26.0, 150.0, 50.0
	rows := rep.Results
	height := top + float64(len(rows))*rowH*2 + 70
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" font-family="sans-serif" font-size="12">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/><text x="10" y="22" font-size="15">%s</text>`+"\n", escapeXML(title))
	half := (width - left - 40) / 2
	maxP90 := 0.0
	for _, r := range rows {
		maxP90 = max(maxP90, msOf(r.Percentile(0.9)))
	}
	// Each column's heading fits its column; the dashed lines are explained
	// under the chart.
	fmt.Fprintf(&b, `<text x="%g" y="42">token hit rate</text>`+"\n", left)
	fmt.Fprintf(&b, `<text x="%g" y="42">TTFT p90 (ms)</text>`+"\n", left+half+20)
	for i, r := range rows {
		y := top + float64(i)*rowH*2
		fmt.Fprintf(&b, `<text x="%g" y="%g" text-anchor="end">%s</text>`+"\n", left-8, y+16, escapeXML(r.Name))
		wHit := half * r.HitRate()
		fmt.Fprintf(&b, `<rect x="%g" y="%g" width="%.1f" height="20" fill="#1f77b4"/><text x="%.1f" y="%g">%.1f %%</text>`+"\n", left, y+2, wHit, left+wHit+4, y+16, 100*r.HitRate())
		p90 := msOf(r.Percentile(0.9))
		wP := 0.0
		if maxP90 > 0 {
			wP = (half - 60) * p90 / maxP90
		}
		fmt.Fprintf(&b, `<rect x="%g" y="%g" width="%.1f" height="20" fill="#ff7f0e"/><text x="%.1f" y="%g">%.0f</text>`+"\n", left+half+20, y+2, wP, left+half+24+wP, y+16, p90)
	}
	bottom := top + float64(len(rows))*rowH*2
	for _, v := range []float64{rep.Ideal, rep.pooledRate()} {
		x := left + half*v
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%g" x2="%.1f" y2="%g" stroke="#555" stroke-dasharray="4 3"/>`+"\n", x, top, x, bottom)
	}
	fmt.Fprintf(&b, `<text x="%g" y="%g">dashed: ideal hit rate (infinite cache) %.1f %%, pooled-cache bound %.1f %%</text>`+"\n",
		left, bottom+24, 100*rep.Ideal, 100*rep.pooledRate())
	b.WriteString("</svg>\n")
	io.WriteString(w, b.String())
}

func (rep *Report) pooledRate() float64 {
	if rep.Pooled == nil {
		return 0
	}
	return rep.Pooled.HitRate()
}

// Write puts results.json, results.md and results.svg into dir.
func (rep *Report) Write(dir, header string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var js strings.Builder
	if err := rep.WriteJSON(&js); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), []byte(js.String()), 0o644); err != nil {
		return err
	}
	var md strings.Builder
	md.WriteString(header)
	rep.WriteMarkdown(&md)
	md.WriteString("\n![hit rate and TTFT p90 per policy](results.svg)\n")
	if err := os.WriteFile(filepath.Join(dir, "results.md"), []byte(md.String()), 0o644); err != nil {
		return err
	}
	var svg strings.Builder
	rep.WriteSVG(&svg, strings.TrimSpace(strings.SplitN(header, "\n", 2)[0]))
	return os.WriteFile(filepath.Join(dir, "results.svg"), []byte(svg.String()), 0o644)
}

func escapeXML(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}
