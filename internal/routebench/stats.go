package routebench

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"time"
)

// Result is what one policy achieved on one workload at one rate.
type Result struct {
	Policy   string
	Workload string
	// Setup names the mode beyond the workload ("3 gateways", "churn"); ""
	// is one gateway, a steady fleet.
	Setup    string
	Rate     float64
	Requests int
	Errors   int
	// FirstError is the first failed request's error ("" when none): what
	// the errors column counts, named in the report.
	FirstError string
	// Rejected counts the errors that were 503s: kvroute's refusals (no
	// eligible replica), and the gateway's "upstream connect error" for an
	// engine that is down (Envoy answers 503 there too); Decisions tells
	// kvroute's own apart.
	Rejected int
	// Bound marks a ceiling row (no routing): its TTFT holds each request's
	// zero-queue time to first token under that cache (Ceilings); it has no
	// throughput, balance or errors.
	Bound bool
	// BelowFloor counts the answered requests faster than their own
	// infinite-cache floor (routed rows; 0 when the floor holds).
	BelowFloor int
	// Wait holds, per answered request, its TTFT minus the zero-queue
	// prefill of the prompt tokens it did not hit (routed rows): the time
	// it spent behind other work.
	Wait []time.Duration
	// WorkingSetBlocks is the distinct prompt blocks of the workload and
	// SharedBlocks those in more than one request (Bound rows only).
	WorkingSetBlocks int
	SharedBlocks     int
	Churn            *ChurnStats
	// Mesh is how late the peer mesh's messages were handled during the
	// phase, summed over the kvroutes (nil without the mesh).
	Mesh         *MeshDelay
	PromptTokens int64
	CachedTokens int64 // prompt tokens served from the prefix cache (usage.prompt_tokens_details.cached_tokens)
	TTFT         []time.Duration
	PerReplica   map[string]int
	ReplicaOrder []string // PerReplica's keys in fleet order; nil: sorted
	Elapsed      time.Duration
	// EngineQueriedTokens and EngineHitTokens are the engines' own prefix
	// cache counters over the run (deltas of vllm:prefix_cache_queries_total
	// and vllm:prefix_cache_hits_total, summed over the fleet): a cross-check
	// of the responses' usage that also counts requests that failed.
	EngineQueriedTokens int64
	EngineHitTokens     int64
	// Decisions counts kvroute's routing decisions by "outcome/reason"
	// (kvroute_route_decisions_total); nil for gateway-side policies.
	Decisions map[string]int
	// Funnel is kvroute's prompt-token funnel over the phase by outcome
	// (kvroute_prompt_tokens_total deltas, summed over the kvroutes); nil
	// for gateway-side policies.
	Funnel map[string]int64
	// ParityChecks is kvroute's parity check evaluations over the phase by
	// "check/result" (kvroute_parity_checks_total deltas); a tokens
	// evaluation is one canary round (two /tokenize requests).
	ParityChecks map[string]int
}

// Label is the report section of r: its workload and setup.
func (r *Result) Label() string {
	if r.Setup == "" {
		return r.Workload
	}
	return r.Workload + " · " + r.Setup
}

// ChurnStats is what a churn phase did and how the policy coped.
type ChurnStats struct {
	Restarted, Joined string        // replica names
	RestartAt, JoinAt time.Duration // after the phase started
	ToRestarted       int           // requests that reached the restarted engine ≥ 1 s after its restart
	StaleRouted       int           // of those, kvroute claimed more matched tokens than the engine held (x-kvroute-matched-tokens > cached_tokens + one block)
	ToJoined          int           // requests that reached the joined engine
}

// EngineHitRate is the prefix-cache hit rate by the engines' own counters.
func (r *Result) EngineHitRate() float64 {
	if r.EngineQueriedTokens == 0 {
		return 0
	}
	return float64(r.EngineHitTokens) / float64(r.EngineQueriedTokens)
}

// CrossCheck compares the run's two independent counts of prefix-cache
// hits: what the clients read in the responses (usage.prompt_tokens and
// usage.prompt_tokens_details.cached_tokens, summed) and what the engines
// counted themselves (vllm:prefix_cache_queries_total and
// vllm:prefix_cache_hits_total deltas from /metrics). With every request
// answered they must agree exactly; a run with failed requests is not
// checked (the engines counted work whose response the client lost).
func (r *Result) CrossCheck() error {
	if r.Errors > 0 {
		return nil
	}
	if r.EngineQueriedTokens != r.PromptTokens || r.EngineHitTokens != r.CachedTokens {
		return fmt.Errorf("responses' usage says %d of %d prompt tokens cached, engines' /metrics %d of %d",
			r.CachedTokens, r.PromptTokens, r.EngineHitTokens, r.EngineQueriedTokens)
	}
	return nil
}

// ReplicaCounts lists requests per replica in fleet order.
func (r *Result) ReplicaCounts() []int {
	order := r.ReplicaOrder
	if order == nil {
		for k := range r.PerReplica {
			order = append(order, k)
		}
		slices.Sort(order)
	}
	out := make([]int, len(order))
	for i, k := range order {
		out[i] = r.PerReplica[k]
	}
	return out
}

// HitRate is the token-level prefix-cache hit rate.
func (r *Result) HitRate() float64 {
	if r.PromptTokens == 0 {
		return 0
	}
	return float64(r.CachedTokens) / float64(r.PromptTokens)
}

// Percentile returns the q-quantile (0..1) of TTFT, nearest rank.
func (r *Result) Percentile(q float64) time.Duration { return NearestRank(r.TTFT, q) }

// NearestRank is the q-quantile (0..1) of ds by nearest rank; 0 when ds is
// empty. ds is not modified.
func NearestRank(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

// Throughput is completed requests per second.
func (r *Result) Throughput() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Requests-r.Errors) / r.Elapsed.Seconds()
}

// Imbalance is max/mean requests per replica (1 = perfectly even).
func (r *Result) Imbalance() float64 { return Imbalance(slices.Collect(maps.Values(r.PerReplica))) }

// Imbalance is the largest of perReplica's request counts over their mean
// (1 = perfectly even; 0 when there are none).
func Imbalance(perReplica []int) float64 {
	var sum, peak int
	for _, n := range perReplica {
		sum += n
		peak = max(peak, n)
	}
	if sum == 0 {
		return 0
	}
	return float64(peak) / (float64(sum) / float64(len(perReplica)))
}

// WriteMarkdown writes one table row per result; ceiling rows show their
// hit rate and zero-queue TTFT quantiles (floors for the infinite cache,
// estimates for the pooled one).
func WriteMarkdown(w io.Writer, results []*Result) {
	fmt.Fprintln(w, "| workload | rate (req/s) | policy | token hit rate | TTFT p50 | TTFT p90 | TTFT p99 | throughput (req/s) | imbalance (max/mean) | errors | rejected (503) |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range results {
		if r.Bound {
			// The infinite cache's TTFTs are floors; the pooled cache's are
			// estimates (Ceilings).
			tag := "floor"
			if r.Policy == BoundPooled {
				tag = "est."
			}
			cell := func(q float64) string {
				if len(r.TTFT) == 0 {
					return "—"
				}
				return ms(r.Percentile(q)) + " " + tag
			}
			fmt.Fprintf(w, "| %s | %g | *%s* | %.1f %% | %s | %s | %s | — | — | — | — |\n", r.Label(), r.Rate, r.Policy, 100*r.HitRate(),
				cell(0.5), cell(0.9), cell(0.99))
			continue
		}
		fmt.Fprintf(w, "| %s | %g | %s | %.1f %% | %s | %s | %s | %.1f | %.2f | %d | %d |\n",
			r.Label(), r.Rate, r.Policy, 100*r.HitRate(),
			ms(r.Percentile(0.5)), ms(r.Percentile(0.9)), ms(r.Percentile(0.99)),
			r.Throughput(), r.Imbalance(), r.Errors, r.Rejected)
	}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

// WriteSVG draws TTFT p90 against request rate, one line per policy, for the
// results of one workload. The y axis is logarithmic. Results at a single
// rate are a labelled bar chart instead (a line needs two rates).
func WriteSVG(w io.Writer, title string, results []*Result) {
	if len(results) > 0 && !slices.ContainsFunc(results, func(r *Result) bool { return r.Rate != results[0].Rate }) {
		writeBarSVG(w, title, results)
		return
	}
	const width, height, left, right, top, bottom = 760.0, 420.0, 70.0, 190.0, 40.0, 50.0
	byPolicy := map[string][]*Result{}
	var policies []string
	minRate, maxRate := math.Inf(1), math.Inf(-1)
	minY, maxY := math.Inf(1), math.Inf(-1)
	for _, r := range results {
		if _, ok := byPolicy[r.Policy]; !ok {
			policies = append(policies, r.Policy)
		}
		byPolicy[r.Policy] = append(byPolicy[r.Policy], r)
		y := math.Max(float64(r.Percentile(0.9))/1e6, 0.1)
		minRate, maxRate = math.Min(minRate, r.Rate), math.Max(maxRate, r.Rate)
		minY, maxY = math.Min(minY, y), math.Max(maxY, y)
	}
	if len(results) == 0 {
		return
	}
	if maxRate == minRate {
		maxRate = minRate + 1
	}
	lo, hi := math.Floor(math.Log10(minY)), math.Ceil(math.Log10(maxY))
	if hi == lo {
		hi = lo + 1
	}
	px := func(rate float64) float64 { return left + (rate-minRate)/(maxRate-minRate)*(width-left-right) }
	py := func(msv float64) float64 {
		return height - bottom - (math.Log10(math.Max(msv, 0.1))-lo)/(hi-lo)*(height-top-bottom)
	}
	colors := []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" font-family="sans-serif" font-size="12">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/><text x="%g" y="22" font-size="15">%s</text>`+"\n", left, escapeXML(title))
	for e := lo; e <= hi; e++ {
		y := py(math.Pow(10, e))
		fmt.Fprintf(&b, `<line x1="%g" y1="%.1f" x2="%g" y2="%.1f" stroke="#ddd"/><text x="%g" y="%.1f" text-anchor="end">%g ms</text>`+"\n",
			left, y, width-right, y, left-6, y+4, math.Pow(10, e))
	}
	rates := map[float64]bool{}
	for _, r := range results {
		if !rates[r.Rate] {
			rates[r.Rate] = true
			x := px(r.Rate)
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%g" x2="%.1f" y2="%g" stroke="#eee"/><text x="%.1f" y="%g" text-anchor="middle">%g</text>`+"\n",
				x, top, x, height-bottom, x, height-bottom+16, r.Rate)
		}
	}
	fmt.Fprintf(&b, `<text x="%g" y="%g" text-anchor="middle">request rate (req/s)</text>`+"\n", (left+width-right)/2, height-12)
	fmt.Fprintf(&b, `<text x="16" y="%g" transform="rotate(-90 16 %g)" text-anchor="middle">TTFT p90 (log)</text>`+"\n", (top+height-bottom)/2, (top+height-bottom)/2)
	for i, pol := range policies {
		rs := byPolicy[pol]
		slices.SortFunc(rs, func(a, b *Result) int { return int(math.Copysign(1, a.Rate-b.Rate)) })
		color := colors[i%len(colors)]
		var pts []string
		for _, r := range rs {
			x, y := px(r.Rate), py(float64(r.Percentile(0.9))/1e6)
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", x, y, color)
		}
		fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(pts, " "), color)
		ly := top + 10 + float64(i)*18
		fmt.Fprintf(&b, `<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="%s" stroke-width="3"/><text x="%g" y="%g">%s</text>`+"\n",
			width-right+12, ly, width-right+32, ly, color, width-right+38, ly+4, escapeXML(pol))
	}
	b.WriteString("</svg>\n")
	io.WriteString(w, b.String())
}

// writeBarSVG draws one horizontal bar of TTFT p90 per policy, each named
// and labelled with its value, on a linear axis from 0.
func writeBarSVG(w io.Writer, title string, results []*Result) {
	const width, left, right, top, rowH = 760.0, 170.0, 90.0, 58.0, 28.0
	height := top + float64(len(results))*rowH + 40
	maxMS := 0.0
	for _, r := range results {
		maxMS = math.Max(maxMS, float64(r.Percentile(0.9))/1e6)
	}
	if maxMS <= 0 {
		maxMS = 1
	}
	colors := []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" font-family="sans-serif" font-size="12">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/><text x="10" y="22" font-size="15">%s</text>`+"\n", escapeXML(title))
	fmt.Fprintf(&b, `<text x="%g" y="44">TTFT p90 at %g req/s (lower is better)</text>`+"\n", left, results[0].Rate)
	for i, r := range results {
		y := top + float64(i)*rowH
		v := float64(r.Percentile(0.9)) / 1e6
		bw := (width - left - right) * v / maxMS
		fmt.Fprintf(&b, `<text x="%g" y="%g" text-anchor="end">%s</text>`+"\n", left-8, y+15, escapeXML(r.Policy))
		fmt.Fprintf(&b, `<rect x="%g" y="%g" width="%.1f" height="20" fill="%s"/><text x="%.1f" y="%g">%.1f ms</text>`+"\n",
			left, y, bw, colors[i%len(colors)], left+bw+4, y+15, v)
	}
	fmt.Fprintf(&b, `<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="#555"/>`+"\n", left, top-4, left, top+float64(len(results))*rowH)
	b.WriteString("</svg>\n")
	io.WriteString(w, b.String())
}

func escapeXML(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}

// WriteDemoTable prints the demo's summary: per policy the engines' own
// prefix-cache hit rate (from their /metrics), TTFT p50/p90 and the requests
// each replica served.
func WriteDemoTable(w io.Writer, results []*Result) {
	var names []string
	if len(results) > 0 {
		names = results[0].ReplicaOrder
	}
	fmt.Fprintf(w, "%-14s %14s %10s %10s %7s   %s\n", "policy", "cache hit rate", "TTFT p50", "TTFT p90", "errors",
		"requests per replica ("+strings.Join(names, " ")+")")
	for _, r := range results {
		counts := make([]string, 0, len(r.PerReplica))
		for _, n := range r.ReplicaCounts() {
			counts = append(counts, fmt.Sprint(n))
		}
		fmt.Fprintf(w, "%-14s %12.1f %% %10s %10s %7d   %s\n", r.Policy, 100*r.EngineHitRate(),
			ms(r.Percentile(0.5)), ms(r.Percentile(0.9)), r.Errors, strings.Join(counts, " "))
	}
}
