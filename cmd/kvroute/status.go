package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kvroute/kvroute/routing"
	"github.com/kvroute/kvroute/server"
)

// maxStatusAnswerBytes bounds the /debug/replicas answer `kvroute status`
// reads (a few KiB per replica rank).
const maxStatusAnswerBytes = 64 << 20

// statusChecks are the parity checks in the order status prints them.
var statusChecks = []string{"tokens", "hashes", "block_size", "hash_algorithm", "cached_tokens"}

// runStatus implements `kvroute status`: it reads a running kvroute's
// admin GET /debug/replicas and prints every pool and replica for a person
// (or the JSON answer).
func runStatus(ctx context.Context, args []string, io stdio) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(io.err)
	fs.Usage = func() {
		fmt.Fprintln(io.err, "usage: kvroute status --admin ADDR [--json]")
		fmt.Fprintln(io.err, "  asks a running kvroute's admin listener for every pool and replica: health, parity checks with their evidence, where prompt tokens went, flow control's queue, index size, event lag, replays and restarts")
		fs.PrintDefaults()
	}
	admin := fs.String("admin", "", "the admin listener, host:port or http://host:port (listen.admin)")
	asJSON := fs.Bool("json", false, "print the JSON answer instead of tables")
	timeout := fs.Duration("timeout", 10*time.Second, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	if *admin == "" || fs.NArg() != 0 {
		fs.Usage()
		return errUsage
	}
	answer, err := askAdmin(ctx, *admin, *timeout, http.MethodGet, "/debug/replicas", nil, maxStatusAnswerBytes)
	if err != nil {
		return err
	}
	if *asJSON {
		_, err := io.out.Write(answer)
		return err
	}
	var v server.ReplicasView
	if err := json.Unmarshal(answer, &v); err != nil {
		return fmt.Errorf("answer is not a replicas view: %w", err)
	}
	return printStatus(io.out, &v)
}

// printStatus writes v as one block per pool: its routing mode, index size
// and prompt-token funnel, a table of its replica ranks, and the evidence of
// every check that does not match.
func printStatus(w io.Writer, v *server.ReplicasView) error {
	for i, p := range v.Pools {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "pool %s: routing by %s, %d index entries, %d parity mismatches\n", p.Pool,
			map[string]string{"prefix": "prefix and load", "load_only": "load only (parity mismatch)"}[p.Routing], p.IndexEntries, len(p.ParityMismatches))
		fmt.Fprintf(w, "prompt tokens %s\n", funnelLine(p.PromptTokens))
		if f := p.Flow; f != nil {
			fmt.Fprintf(w, "flow control: %s, %s, %d waiting (%d body bytes)", onOff(f.Enabled), map[bool]string{true: "saturated", false: "not saturated"}[f.Saturated], f.Queued, f.Bytes)
			for _, b := range f.Bands {
				fmt.Fprintf(w, ", priority %d: %d", b.Priority, b.Queued)
			}
			fmt.Fprintln(w)
			sat := map[bool]string{true: "saturated", false: "not saturated"}
			fmt.Fprintf(w, "  priority %d and above: %s, %s; below: %s, %s\n", f.Top.Priority, bandTestLine(&f.Top), sat[f.Top.Saturated],
				bandTestLine(&f.BelowTop), sat[f.BelowTop.Saturated])
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprint(tw, "REPLICA\tRANK\tHEALTHY\tEVENTS\tBLOCKS\tLAG_S\tREPLAYS\tRESTARTS\tGAPS\tSCHEME_MISMATCHES")
		for _, c := range statusChecks {
			fmt.Fprintf(tw, "\t%s", strings.ToUpper(c))
		}
		fmt.Fprintln(tw)
		var evidence []string
		for _, r := range v.Replicas {
			if r.Pool != p.Pool {
				continue
			}
			events := "connected"
			switch {
			case r.Events == "":
				events = "-"
			case !r.Connected:
				events = "disconnected"
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%.3f\t%d\t%d\t%d\t%d", r.Replica, r.DPRank, yesNo(r.Healthy), events,
				r.BlocksHeld, r.LagSeconds, r.Replays, r.Restarts, r.Gaps, r.SchemeMismatches)
			for _, c := range statusChecks {
				st, ok := r.Parity[c]
				if !ok {
					fmt.Fprint(tw, "\t-")
					continue
				}
				fmt.Fprintf(tw, "\t%s", st.State)
				if r.DPRank == 0 && st.State != "match" && st.Evidence != "" {
					evidence = append(evidence, fmt.Sprintf("  %s %s %s since %s: %s", r.Replica, c, st.State, st.Since.UTC().Format(time.RFC3339), st.Evidence))
				}
			}
			fmt.Fprintln(tw)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		var byRank []string
		for _, r := range v.Replicas {
			if r.Pool == p.Pool && r.PromptTokens != nil {
				byRank = append(byRank, fmt.Sprintf("  %s: %s", r.Replica, funnelLine(r.PromptTokens)))
			}
		}
		if len(byRank) > 0 {
			fmt.Fprintln(w, "prompt tokens by replica:")
			for _, l := range byRank {
				fmt.Fprintln(w, l)
			}
		}
		if len(evidence) > 0 {
			fmt.Fprintln(w, "checks not matching:")
			for _, e := range evidence {
				fmt.Fprintln(w, e)
			}
		}
	}
	return nil
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// funnelLine is one prompt-token funnel: the tokens routed and their split
// at routing time (shares of the routed), then what the engines reported
// of them (stale: share of cached_predicted; cached_unpredicted: share of
// new and given_up_for_load).
func funnelLine(t map[string]int64) string {
	pct := func(n, of int64) string {
		if of <= 0 {
			return ""
		}
		return fmt.Sprintf(" (%.1f%%)", 100*float64(n)/float64(of))
	}
	cp, nw, gu := t[routing.TokensCachedPredicted], t[routing.TokensNew], t[routing.TokensGivenUpForLoad]
	total := cp + nw + gu
	return fmt.Sprintf("routed %d: %s %d%s, %s %d%s, %s %d%s; engines: %s %d%s of cached_predicted, %s %d%s of the rest",
		total, routing.TokensCachedPredicted, cp, pct(cp, total), routing.TokensNew, nw, pct(nw, total),
		routing.TokensGivenUpForLoad, gu, pct(gu, total),
		routing.TokensStale, t[routing.TokensStale], pct(t[routing.TokensStale], cp),
		routing.TokensCachedUnpredicted, t[routing.TokensCachedUnpredicted], pct(t[routing.TokensCachedUnpredicted], nw+gu))
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
