package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"text/tabwriter"
	"time"

	"github.com/kvroute/kvroute/routing"
	"github.com/kvroute/kvroute/server"
)

// Bounds of `kvroute explain`: the request body it sends (the server applies
// routing.body_limit_bytes itself) and the answer it reads.
const (
	maxExplainBodyBytes   = 256 << 20
	maxExplainAnswerBytes = 16 << 20
)

// runExplain implements `kvroute explain`: it POSTs a request body to a
// running kvroute's admin /debug/explain and prints the decision kvroute
// would make for it (without routing it) as a table, or the JSON answer.
func runExplain(ctx context.Context, args []string, io stdio) error {
	fs := flag.NewFlagSet("explain", flag.ContinueOnError)
	fs.SetOutput(io.err)
	fs.Usage = func() {
		fmt.Fprintln(io.err, "usage: kvroute explain --admin ADDR --path /v1/chat/completions --body FILE [--objective NAME] [--json]")
		fmt.Fprintln(io.err, "  asks a running kvroute's admin listener which replica it would pick for the request in FILE (- for stdin) and why; nothing is routed")
		fs.PrintDefaults()
	}
	admin := fs.String("admin", "", "the admin listener, host:port or http://host:port (listen.admin)")
	path := fs.String("path", "/v1/chat/completions", "the request's API path")
	bodyFile := fs.String("body", "", "file holding the request body (- for stdin)")
	objective := fs.String("objective", "", "the request's x-gateway-inference-objective header (flow control: its priority's saturation test)")
	asJSON := fs.Bool("json", false, "print the JSON answer instead of a table")
	timeout := fs.Duration("timeout", 30*time.Second, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	if *admin == "" || *bodyFile == "" || fs.NArg() != 0 {
		fs.Usage()
		return errUsage
	}
	in := io.in
	if *bodyFile != "-" {
		f, err := os.Open(*bodyFile)
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	body, err := readAllLimited(in, maxExplainBodyBytes)
	if err != nil {
		return fmt.Errorf("--body: %w", err)
	}
	q := url.Values{"path": {*path}}
	if *objective != "" {
		q.Set("objective", *objective)
	}
	answer, err := askAdmin(ctx, *admin, *timeout, http.MethodPost, "/debug/explain?"+q.Encode(), body, maxExplainAnswerBytes)
	if err != nil {
		return err
	}
	if *asJSON {
		_, err := io.out.Write(answer)
		return err
	}
	var x routing.Explanation
	if err := json.Unmarshal(answer, &x); err != nil {
		return fmt.Errorf("answer is not an explanation: %w", err)
	}
	if err := printExplanation(io.out, &x); err != nil {
		return err
	}
	return printParityFindings(io.out, answer)
}

// printParityFindings writes the parity mismatches of the decision's pool
// (POST /debug/explain's parity_mismatches), if any.
func printParityFindings(w io.Writer, answer []byte) error {
	var p struct {
		Parity []server.ParityFinding `json:"parity_mismatches"`
	}
	if json.Unmarshal(answer, &p) != nil || len(p.Parity) == 0 {
		return nil
	}
	fmt.Fprintf(w, "\nparity mismatches in the pool (kvroute status shows every check):\n")
	for _, f := range p.Parity {
		if _, err := fmt.Fprintf(w, "  %s %s: %s\n", f.Replica, f.Check, f.Evidence); err != nil {
			return err
		}
	}
	return nil
}

// printExplanation writes x as a summary and one table row per endpoint.
func printExplanation(w io.Writer, x *routing.Explanation) error {
	switch {
	case x.BlockSize > 0:
		fmt.Fprintf(w, "pool %s: prompt of %d tokens, %d full blocks of %d\n", x.Pool, x.PromptTokens, x.PromptBlocks, x.BlockSize)
	case x.PromptTokens > 0:
		fmt.Fprintf(w, "pool %s: prompt of %d tokens, not keyed (block size unknown)\n", x.Pool, x.PromptTokens)
	default:
		fmt.Fprintf(w, "pool %s: prompt not tokenized\n", x.Pool)
	}
	if x.Pick != "" {
		fmt.Fprintf(w, "pick %s (%s): outcome %s, reason %s, %d tokens cached, cost %s s (seconds to first token + FLEET_S, the prefill seconds of its uncached tokens)\n",
			x.Pick, x.PickAddress, x.Outcome, x.Reason, x.MatchedTokens, figure(x.Cost))
	} else {
		fmt.Fprintf(w, "no pick: outcome %s, reason %s, status %d: %s\n", x.Outcome, x.Reason, x.Status, x.Error)
	}
	if x.SlackBound > 0 {
		fmt.Fprintf(w, "candidates costing up to %s s compete on cache turnover (SLACK yes); the least TURNOVER is picked\n", figure(x.SlackBound))
	}
	if f := x.Flow; f != nil {
		saturated := f.Saturated
		band := ""
		if b := x.FlowBand; b != nil {
			saturated = b.Saturated
			band = fmt.Sprintf(" for priority %d (%s)", b.Priority, bandTestLine(b))
		}
		wait := "would be decided at once"
		switch {
		case !f.Enabled || (!saturated && f.Queued == 0):
		case x.FlowBand != nil && x.FlowBand.Priority < 0:
			wait = "would be shed (sheddable)"
		default:
			wait = "would wait for capacity first"
		}
		fmt.Fprintf(w, "flow control %s: pool %s%s, %d waiting; this request %s\n", onOff(f.Enabled),
			map[bool]string{true: "saturated", false: "not saturated"}[saturated], band, f.Queued, wait)
	}
	if len(x.Candidates) == 0 {
		fmt.Fprintln(w, "no endpoint weighed (the decision ended before choosing a replica)")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\nENDPOINT\tADDRESS\tELIGIBLE\tMATCHED\tGPU\tCPU\tWEIGHTED\tIN_FLIGHT\tQUEUED_TOK\tQUEUE_S\tKV_USAGE\tUNCACHED\tFLEET_S\tCOST_S\tRECENT_TOK\tTURNOVER\tSLACK\tPICK")
	for _, c := range x.Candidates {
		el := "yes"
		if !c.Eligible {
			el = "no: " + c.Ineligible
		}
		pick := ""
		if c.Picked {
			pick = "<-"
		}
		if !c.Weighed {
			fmt.Fprintf(tw, "%s\t%s\t%s\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t%s\n", c.Name, c.Address, el, pick)
			continue
		}
		slack := "-"
		if x.SlackBound > 0 {
			slack = "no"
			if c.WithinSlack {
				slack = "yes"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", c.Name, c.Address, el,
			c.MatchedBlocks, c.GPUBlocks, c.CPUBlocks, figure(c.WeightedBlocks), c.InFlight, figure(c.QueuedTokens),
			figure(c.QueueSeconds), figure(c.KVUsage), figure(c.UncachedTokens), figure(c.FleetSeconds), figure(c.Cost),
			figure(c.RecentUncachedTokens), figure(c.TurnoverTokens), slack, pick)
	}
	return tw.Flush()
}

// figure formats a number of an explanation compactly (inf when infinite).
func figure(f routing.Figure) string {
	v := float64(f)
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return "inf"
	}
	return fmt.Sprintf("%.4g", v)
}

// bandTestLine is a band's saturation test: "busy past D[, N replicas
// reserved for higher priorities]" ("no time bound" when that test is off).
func bandTestLine(b *routing.BandTest) string {
	s := "no time bound"
	if b.SaturationTTFT > 0 {
		s = "busy past " + time.Duration(float64(b.SaturationTTFT)*float64(time.Second)).Round(time.Microsecond).String()
	}
	switch {
	case b.ReservedReplicas == 1:
		s += ", 1 replica reserved for higher priorities"
	case b.ReservedReplicas > 1:
		s += fmt.Sprintf(", %d replicas reserved for higher priorities", b.ReservedReplicas)
	}
	return s
}
