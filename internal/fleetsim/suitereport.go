package fleetsim

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// SuiteGoal is one goal of the routing suite and whether the run met it.
type SuiteGoal struct {
	Goal   string `json:"goal"`
	Met    bool   `json:"met"`
	Detail string `json:"detail"`
	// None: the run had no cell the goal speaks of (a subset).
	None bool `json:"no_cells,omitempty"`
}

// SuiteWallLimit is how long the whole suite may take on a 2-core machine.
const SuiteWallLimit = 30 * time.Minute

// Synthetic is the suite workload name of the Mooncake synthetic trace.
const Synthetic = "mooncake_synthetic"

// cellVerdict is kvroute against the best of the other policies in one cell.
type cellVerdict struct {
	kv                         PolicyStats
	bestHit, minP90, minP99    float64
	bestHitName, minP90Name    string
	hitOK, p90OK, p99OK, valid bool
}

func verdict(c *Cell) cellVerdict {
	var v cellVerdict
	kv, ok := c.Policy(PolicyKVRoute)
	if !ok {
		return v
	}
	v.kv = kv
	first := true
	for _, p := range c.Policies {
		if p.Name == PolicyKVRoute {
			continue
		}
		if first || p.HitRate > v.bestHit {
			v.bestHit, v.bestHitName = p.HitRate, p.Name
		}
		if first || p.P90 < v.minP90 {
			v.minP90, v.minP90Name = p.P90, p.Name
		}
		if first || p.P99 < v.minP99 {
			v.minP99 = p.P99
		}
		first = false
	}
	if first {
		return v
	}
	v.valid = true
	v.hitOK = kv.HitRate >= v.bestHit-0.01
	v.p90OK = kv.P90 <= v.minP90
	v.p99OK = kv.P99 <= 1.1*v.minP99
	return v
}

// Goals judges the suite's goals; command is what produced the run.
func (s *SuiteResult) Goals() []SuiteGoal {
	var goals []SuiteGoal
	count := func(name string, ok func(*Cell) (applies, met bool, why string)) {
		n, m := 0, 0
		var fails []string
		for _, c := range s.Cells {
			applies, met, why := ok(c)
			if !applies {
				continue
			}
			n++
			if met {
				m++
			} else if len(fails) < 4 {
				fails = append(fails, why)
			}
		}
		d := fmt.Sprintf("%d of %d cells", m, n)
		if len(fails) > 0 {
			d += "; e.g. " + strings.Join(fails, "; ")
		}
		if n == 0 {
			d = "no such cell in this run"
		}
		goals = append(goals, SuiteGoal{Goal: name, Met: n > 0 && m == n, Detail: d, None: n == 0})
	}
	where := func(c *Cell) string {
		return fmt.Sprintf("%s %s seed %d %g×", c.Workload, c.Setup(), c.Seed, c.Load)
	}
	count("every cell: kvroute token hit rate ≥ best other policy's − 1 point", func(c *Cell) (bool, bool, string) {
		v := verdict(c)
		return v.valid, v.hitOK, fmt.Sprintf("%s: %.1f %% vs %s %.1f %%", where(c), 100*v.kv.HitRate, v.bestHitName, 100*v.bestHit)
	})
	count("every cell: kvroute TTFT p90 ≤ every other policy's", func(c *Cell) (bool, bool, string) {
		v := verdict(c)
		return v.valid, v.p90OK, fmt.Sprintf("%s: %.0f ms vs %s %.0f ms", where(c), v.kv.P90, v.minP90Name, v.minP90)
	})
	count("every cell: kvroute TTFT p99 ≤ 1.1 × best other policy's", func(c *Cell) (bool, bool, string) {
		v := verdict(c)
		return v.valid, v.p99OK, fmt.Sprintf("%s: %.0f ms vs %.0f ms", where(c), v.kv.P99, v.minP99)
	})
	count("every cell where it judged a window: kvroute's cached_tokens parity check flags no engine (its engines are honest)", func(c *Cell) (bool, bool, string) {
		kv, ok := c.Policy(PolicyKVRoute)
		if !ok || kv.Parity == nil || kv.Parity.WindowsJudged == 0 {
			return false, false, ""
		}
		return true, kv.Parity.Flags == 0, fmt.Sprintf("%s: %d flags in %d windows", where(c), kv.Parity.Flags, kv.Parity.WindowsJudged)
	})
	pooledGoal := func(name string, frac float64, match func(*Cell) bool) {
		count(name, func(c *Cell) (bool, bool, string) {
			if !match(c) || c.Gateways != 1 {
				return false, false, ""
			}
			kv, ok := c.Policy(PolicyKVRoute)
			if !ok || c.Pooled <= 0 {
				return false, false, ""
			}
			return true, kv.HitRate >= frac*c.Pooled, fmt.Sprintf("%s: %.0f %% of %.1f %%", where(c), 100*kv.HitRate/c.Pooled, 100*c.Pooled)
		})
	}
	isTrace := map[string]bool{}
	for _, w := range s.Workloads {
		isTrace[w.Name] = w.Trace
	}
	pooledGoal("synthetic trace, 1 gateway: kvroute ≥ 95 % of the pooled bound", 0.95, func(c *Cell) bool { return c.Workload == Synthetic })
	pooledGoal("every trace, 1 gateway: kvroute ≥ 90 % of the pooled bound", 0.90, func(c *Cell) bool { return isTrace[c.Workload] })
	one := map[string]float64{}
	for _, c := range s.Cells {
		if kv, ok := c.Policy(PolicyKVRoute); ok && c.Gateways == 1 {
			one[fmt.Sprintf("%s|%d|%g", c.Workload, c.Seed, c.Load)] = kv.HitRate
		}
	}
	count("8 gateways with the mesh: kvroute hit rate ≥ 95 % of its 1-gateway figure", func(c *Cell) (bool, bool, string) {
		base, ok := one[fmt.Sprintf("%s|%d|%g", c.Workload, c.Seed, c.Load)]
		kv, ok2 := c.Policy(PolicyKVRoute)
		if c.Gateways != 8 || !c.Mesh || !ok || !ok2 {
			return false, false, ""
		}
		return true, kv.HitRate >= 0.95*base, fmt.Sprintf("%s: %.1f %% vs %.1f %%", where(c), 100*kv.HitRate, 100*base)
	})
	count("no-sharing cells: kvroute TTFT p90 ≤ 1.05 × round-robin's", func(c *Cell) (bool, bool, string) {
		kv, ok := c.Policy(PolicyKVRoute)
		rr, ok2 := c.Policy(PolicyRoundRobin)
		if c.Workload != FamilyNoSharing || !ok || !ok2 {
			return false, false, ""
		}
		return true, kv.P90 <= 1.05*rr.P90, fmt.Sprintf("%s: %.0f ms vs %.0f ms", where(c), kv.P90, rr.P90)
	})
	wall := SuiteGoal{Goal: "the whole suite runs in ≤ 30 minutes", Met: s.Wall > 0 && s.Wall <= SuiteWallLimit,
		Detail: fmt.Sprintf("wall %s with %d parallel cells", s.Wall.Round(time.Second), max(s.Options.Jobs, 1))}
	if s.Wall == 0 {
		wall.Detail = "not measured: summary of cells already run"
	}
	goals = append(goals, wall)
	return goals
}

// group is the cells of one workload × setup × load, over seeds.
type group struct {
	workload, setup string
	gateways        int
	mesh            bool
	load            float64
	cells           []*Cell
}

func (s *SuiteResult) groups() []*group {
	var out []*group
	idx := map[string]*group{}
	for _, c := range s.Cells {
		k := fmt.Sprintf("%s|%s|%g", c.Workload, c.Setup(), c.Load)
		g := idx[k]
		if g == nil {
			g = &group{workload: c.Workload, setup: c.Setup(), gateways: c.Gateways, mesh: c.Mesh, load: c.Load}
			idx[k] = g
			out = append(out, g)
		}
		g.cells = append(g.cells, c)
	}
	order := map[string]int{}
	for i, w := range s.Workloads {
		order[w.Name] = i
	}
	slices.SortStableFunc(out, func(a, b *group) int {
		if d := order[a.workload] - order[b.workload]; d != 0 {
			return d
		}
		if a.load != b.load {
			return int(math.Copysign(1, a.load-b.load))
		}
		if a.gateways != b.gateways {
			return a.gateways - b.gateways
		}
		if a.mesh != b.mesh {
			if a.mesh {
				return 1
			}
			return -1
		}
		return 0
	})
	return out
}

// means are a group's seed averages: kvroute's hit rate minus the best
// other's (points), kvroute's p90 over the least other p90, and more.
type means struct {
	kvHit, bestHit, dHit, kvP90, minP90, p90Ratio, kvP99, minP99, pooled float64
	met, n                                                               int
}

func (g *group) means() means {
	var m means
	for _, c := range g.cells {
		v := verdict(c)
		if !v.valid {
			continue
		}
		m.n++
		m.kvHit += v.kv.HitRate
		m.bestHit += v.bestHit
		m.kvP90 += v.kv.P90
		m.minP90 += v.minP90
		m.kvP99 += v.kv.P99
		m.minP99 += v.minP99
		m.pooled += c.Pooled
		if v.minP90 > 0 {
			m.p90Ratio += v.kv.P90 / v.minP90
		} else {
			m.p90Ratio++
		}
		if v.hitOK && v.p90OK && v.p99OK {
			m.met++
		}
	}
	if m.n > 0 {
		f := float64(m.n)
		m.kvHit, m.bestHit, m.kvP90, m.minP90, m.kvP99, m.minP99, m.pooled, m.p90Ratio =
			m.kvHit/f, m.bestHit/f, m.kvP90/f, m.minP90/f, m.kvP99/f, m.minP99/f, m.pooled/f, m.p90Ratio/f
		m.dHit = 100 * (m.kvHit - m.bestHit)
	}
	return m
}

// WriteMarkdown writes summary.md: the goals, the workloads, the summary
// table (seed means), the gateway curve.
func (s *SuiteResult) WriteMarkdown(w io.Writer, command string) {
	o := s.Options
	fmt.Fprintf(w, "# Routing suite\n\n`%s` — %d cells, wall %s (%d cells in parallel); fleet %d engines × %d blocks × %d tokens; policies %s.\n\n",
		command, len(s.Cells), s.Wall.Round(time.Second), max(o.Jobs, 1), o.Fleet.Engines, o.Fleet.KVBlocks, o.Fleet.BlockSize, strings.Join(o.Policies, ", "))
	fmt.Fprintln(w, "## Goals")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| goal | met? | cells |")
	fmt.Fprintln(w, "|---|---|---|")
	for _, g := range s.Goals() {
		met := "**missed**"
		switch {
		case g.Met:
			met = "met"
		case g.None:
			met = "—"
		}
		fmt.Fprintf(w, "| %s | %s | %s |\n", g.Goal, met, g.Detail)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "## Workloads")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| workload | parameters |")
	fmt.Fprintln(w, "|---|---|")
	for _, wl := range s.Workloads {
		fmt.Fprintf(w, "| %s | %s |\n", wl.Name, wl.Describe)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "## Summary (means over seeds)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Best other = the best of the other policies in each cell (highest hit rate; lowest p90, p99). A cell meets its goals when kvroute's hit rate ≥ best − 1 point, its p90 ≤ every other's and its p99 ≤ 1.1 × the best.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| workload | gateways | load | kvroute hits | best other hits | Δ points | kvroute p90 | best other p90 | p90 ratio | kvroute p99 | best other p99 | pooled bound | cells meeting all |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, g := range s.groups() {
		m := g.means()
		fmt.Fprintf(w, "| %s | %s | %g× | %.1f %% | %.1f %% | %+.1f | %.0f ms | %.0f ms | %.2f | %.0f ms | %.0f ms | %.1f %% | %d/%d |\n",
			g.workload, g.setup, g.load, 100*m.kvHit, 100*m.bestHit, m.dHit, m.kvP90, m.minP90, m.p90Ratio, m.kvP99, m.minP99, 100*m.pooled, m.met, m.n)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "![kvroute against the best other policy, per cell](summary.svg)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Per-policy means over seeds:")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "| workload | gateways | load |")
	for _, p := range o.Policies {
		fmt.Fprintf(w, " %s hits / p90 |", p)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "|---|---|---|%s\n", strings.Repeat("---|", len(o.Policies)))
	for _, g := range s.groups() {
		fmt.Fprintf(w, "| %s | %s | %g× |", g.workload, g.setup, g.load)
		for _, p := range o.Policies {
			hit, p90, n := 0.0, 0.0, 0
			for _, c := range g.cells {
				if st, ok := c.Policy(p); ok {
					hit += st.HitRate
					p90 += st.P90
					n++
				}
			}
			if n == 0 {
				fmt.Fprint(w, " — |")
				continue
			}
			fmt.Fprintf(w, " %.1f %% / %.0f ms |", 100*hit/float64(n), p90/float64(n))
		}
		fmt.Fprintln(w)
	}
	if len(s.Curve) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintf(w, "## Gateway curve (%s, seed %d, load %g×)\n\n", o.CurveWorkload, o.curveSeed(), o.Loads[0])
		s.writeCurveTable(w)
		fmt.Fprintln(w)
		fmt.Fprintln(w, "![hit rate and TTFT p90 against gateways](curve.svg)")
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Each cell's own table: `cells/WORKLOAD/gN[-mesh]/seedS-loadLx/results.md` (and results.json).")
}

func (s *SuiteResult) writeCurveTable(w io.Writer) {
	lines := []string{PolicyApproxPrefix, PolicyKVRoute, curveMesh}
	fmt.Fprint(w, "| gateways |")
	for _, l := range lines {
		fmt.Fprintf(w, " %s hits / p90 |", l)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "|---|%s\n", strings.Repeat("---|", len(lines)))
	for _, g := range s.Options.Curve {
		fmt.Fprintf(w, "| %d |", g)
		for _, l := range lines {
			for _, p := range s.Curve {
				if p.Gateways == g && p.Policy == l {
					fmt.Fprintf(w, " %.1f %% / %.0f ms |", 100*p.HitRate, p.P90)
				}
			}
		}
		fmt.Fprintln(w)
	}
}

// WriteSVG draws the suite at a glance: one row per workload, one column
// per gateway mode and load, two panels: kvroute's hit rate minus the best
// other policy's (points), and kvroute's TTFT p90 over the best other's.
// Green meets the goal, red misses it; the deeper the colour, the larger
// the gap.
func (s *SuiteResult) WriteSVG(w io.Writer) {
	gs := s.groups()
	var cols []string
	colOf := map[string]int{}
	var rows []string
	rowOf := map[string]int{}
	for _, g := range gs {
		c := fmt.Sprintf("%s|%g", g.setup, g.load)
		if _, ok := colOf[c]; !ok {
			colOf[c] = len(cols)
			cols = append(cols, c)
		}
		if _, ok := rowOf[g.workload]; !ok {
			rowOf[g.workload] = len(rows)
			rows = append(rows, g.workload)
		}
	}
	slices.SortStableFunc(cols, func(a, b string) int {
		la, lb := a[strings.Index(a, "|")+1:], b[strings.Index(b, "|")+1:]
		return strings.Compare(la, lb)
	})
	for i, c := range cols {
		colOf[c] = i
	}
	const left, cellW, cellH, top, gap = 150.0, 74.0, 26.0, 70.0, 50.0
	panelH := float64(len(rows))*cellH + 40
	width := left + float64(len(cols))*cellW + 20
	height := top + 2*panelH + gap + 20
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" font-family="sans-serif" font-size="11">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/><text x="10" y="20" font-size="15">kvroute against the best other policy, per cell (mean over seeds)</text>`+"\n")
	fmt.Fprintf(&b, `<text x="10" y="38" fill="#444">green: goal met, red: missed; columns are gateways (+ mesh) at 1× and 2× load</text>`+"\n")
	panel := func(y0 float64, title string, val func(means) (float64, string, bool, float64)) {
		fmt.Fprintf(&b, `<text x="10" y="%g" font-size="13">%s</text>`+"\n", y0+14, escapeXML(title))
		for i, c := range cols {
			parts := strings.SplitN(c, "|", 2)
			x := left + float64(i)*cellW
			fmt.Fprintf(&b, `<text x="%g" y="%g" text-anchor="middle">%s</text><text x="%g" y="%g" text-anchor="middle" fill="#444">%s×</text>`+"\n",
				x+cellW/2, y0+30, escapeXML(parts[0]), x+cellW/2, y0+42, parts[1])
		}
		for r, name := range rows {
			y := y0 + 48 + float64(r)*cellH
			fmt.Fprintf(&b, `<text x="%g" y="%g" text-anchor="end">%s</text>`+"\n", left-6, y+cellH/2+4, escapeXML(name))
		}
		for _, g := range gs {
			m := g.means()
			if m.n == 0 {
				continue
			}
			x := left + float64(colOf[fmt.Sprintf("%s|%g", g.setup, g.load)])*cellW
			y := y0 + 48 + float64(rowOf[g.workload])*cellH
			_, label, ok, depth := val(m)
			fill := heat(ok, depth)
			fmt.Fprintf(&b, `<rect x="%g" y="%g" width="%g" height="%g" fill="%s" stroke="white"/><text x="%g" y="%g" text-anchor="middle">%s</text>`+"\n",
				x, y, cellW, cellH, fill, x+cellW/2, y+cellH/2+4, label)
		}
	}
	panel(top-20, "token hit rate: kvroute − best other policy (points; goal ≥ −1)", func(m means) (float64, string, bool, float64) {
		return m.dHit, fmt.Sprintf("%+.1f", m.dHit), m.dHit >= -1, math.Min(math.Abs(m.dHit)/10, 1)
	})
	panel(top-20+panelH+gap, "TTFT p90: kvroute ÷ best other policy's (goal ≤ 1.00)", func(m means) (float64, string, bool, float64) {
		return m.p90Ratio, fmt.Sprintf("%.2f", m.p90Ratio), m.p90Ratio <= 1, math.Min(math.Abs(math.Log(math.Max(m.p90Ratio, 1e-3)))/math.Log(2), 1)
	})
	b.WriteString("</svg>\n")
	io.WriteString(w, b.String())
}

// heat is a cell colour: green for a met goal, red for a missed one,
// deeper with depth in 0..1.
func heat(ok bool, depth float64) string {
	d := 0.25 + 0.75*depth
	c := func(full float64) int { return int(math.Round(255 - (255-full)*d)) }
	if ok {
		return fmt.Sprintf("rgb(%d,%d,%d)", c(90), c(190), c(110))
	}
	return fmt.Sprintf("rgb(%d,%d,%d)", c(220), c(80), c(70))
}

// WriteCurveSVG draws the gateway curve: hit rate and TTFT p90 against the
// number of gateways, one line per policy.
func (s *SuiteResult) WriteCurveSVG(w io.Writer) {
	lines := []string{PolicyApproxPrefix, PolicyKVRoute, curveMesh}
	colors := []string{"#ff7f0e", "#1f77b4", "#2ca02c"}
	gws := s.Options.Curve
	const pw, ph, left, top = 300.0, 220.0, 60.0, 60.0
	width, height := left+2*pw+80, top+ph+70
	maxP90 := 0.0
	for _, p := range s.Curve {
		maxP90 = max(maxP90, p.P90)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" font-family="sans-serif" font-size="11">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/><text x="10" y="20" font-size="15">Gateway curve: %s, seed %d, load %g×</text>`+"\n", escapeXML(s.Options.CurveWorkload), s.Options.curveSeed(), s.Options.Loads[0])
	for i, l := range lines {
		fmt.Fprintf(&b, `<rect x="%g" y="30" width="12" height="12" fill="%s"/><text x="%g" y="40">%s</text>`+"\n", left+float64(i)*150, colors[i], left+float64(i)*150+16, escapeXML(l))
	}
	panel := func(x0 float64, title string, ymax float64, val func(CurvePoint) float64, fmtY func(float64) string) {
		fmt.Fprintf(&b, `<text x="%g" y="%g" font-size="13">%s</text>`+"\n", x0, top-4, escapeXML(title))
		fmt.Fprintf(&b, `<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="#888"/><line x1="%g" y1="%g" x2="%g" y2="%g" stroke="#888"/>`+"\n", x0, top+ph, x0+pw-20, top+ph, x0, top, x0, top+ph)
		for k := 0; k <= 4; k++ {
			v := ymax * float64(k) / 4
			y := top + ph - ph*float64(k)/4
			fmt.Fprintf(&b, `<text x="%g" y="%g" text-anchor="end" fill="#444">%s</text><line x1="%g" y1="%g" x2="%g" y2="%g" stroke="#eee"/>`+"\n", x0-4, y+4, fmtY(v), x0, y, x0+pw-20, y)
		}
		xOf := func(i int) float64 { return x0 + 20 + float64(i)*(pw-60)/float64(max(len(gws)-1, 1)) }
		for i, g := range gws {
			fmt.Fprintf(&b, `<text x="%g" y="%g" text-anchor="middle">%d</text>`+"\n", xOf(i), top+ph+16, g)
		}
		fmt.Fprintf(&b, `<text x="%g" y="%g" text-anchor="middle" fill="#444">gateways</text>`+"\n", x0+pw/2, top+ph+32)
		for li, l := range lines {
			var pts []string
			for i, g := range gws {
				for _, p := range s.Curve {
					if p.Gateways == g && p.Policy == l && ymax > 0 {
						x, y := xOf(i), top+ph-ph*val(p)/ymax
						pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
						fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", x, y, colors[li])
					}
				}
			}
			fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(pts, " "), colors[li])
		}
	}
	panel(left, "token hit rate", 1, func(p CurvePoint) float64 { return p.HitRate }, func(v float64) string { return fmt.Sprintf("%.0f %%", 100*v) })
	panel(left+pw+60, "TTFT p90 (ms)", maxP90*1.1, func(p CurvePoint) float64 { return p.P90 }, func(v float64) string { return fmt.Sprintf("%.0f", v) })
	b.WriteString("</svg>\n")
	io.WriteString(w, b.String())
}

// Write puts summary.md, summary.json, summary.svg and (with a curve)
// curve.svg into dir.
func (s *SuiteResult) Write(dir, command string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	write := func(name string, f func(io.Writer) error) error {
		var sb strings.Builder
		if err := f(&sb); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, name), []byte(sb.String()), 0o644)
	}
	if err := write("summary.md", func(w io.Writer) error { s.WriteMarkdown(w, command); return nil }); err != nil {
		return err
	}
	if err := write("summary.json", func(w io.Writer) error { return s.WriteJSON(w, s.Goals()) }); err != nil {
		return err
	}
	if err := write("summary.svg", func(w io.Writer) error { s.WriteSVG(w); return nil }); err != nil {
		return err
	}
	if len(s.Curve) == 0 {
		return nil
	}
	return write("curve.svg", func(w io.Writer) error { s.WriteCurveSVG(w); return nil })
}
