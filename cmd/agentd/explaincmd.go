package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/record"
	"github.com/urfave/cli/v2"
)

const cfTimeout = "timeout"

func explainCommand() *cli.Command {
	return &cli.Command{
		Name:      "explain",
		Usage:     "say why the running daemon does or does not see an agent, or how it resolves a query",
		ArgsUsage: "[AGENT-ID]",
		Description: "With an agent id: what the daemon holds of the agent (live view, cache, unregistration),\n" +
			"which transports delivered its records and heartbeats and when, every refusal with its\n" +
			"reason (bad signature, revoked certificate, allow-list, quota, …), and what to do next.\n" +
			"With filters (--capability, …): how the resolver answers them, step by step with timings,\n" +
			"and agents offering the capability that were refused. Both: whether the filters match the\n" +
			"agent. Exits 0 when the agent is visible or the query finds agents, 1 otherwise.\n" +
			"docs/operations.md, \"Why can't I see agent X?\".\n" + clientAPIHelp,
		Flags: daemonClientFlags(append(filterFlags(),
			&cli.DurationFlag{Name: cfTimeout, Usage: "bound the resolver's lookup to `DURATION` (at most 10s; default the daemon's lookup_timeout)"},
		)...),
		Action: clientExplain,
	}
}

func clientExplain(c *cli.Context) error {
	if c.NArg() > 1 {
		return usagef("explain: give at most one agent id, after the flags (got %d arguments)", c.NArg())
	}
	q := client.ExplainQuery{AgentID: c.Args().First(), Query: filterQuery(c), Timeout: c.Duration(cfTimeout)}
	if q.AgentID != "" {
		if err := record.ValidateAgentID(q.AgentID); err != nil {
			return usagef("explain: %v", err)
		}
	} else if !q.Filtered() {
		return usagef("explain: give an agent id, or a query (%s)", filterFlagNames)
	}
	if q.Timeout < 0 || q.Timeout > 10*time.Second {
		return usagef("explain: --timeout must be between 1ms and 10s")
	}
	cl, err := daemonClient(c)
	if err != nil {
		return err
	}
	ex, err := cl.Explain(c.Context, q)
	if err != nil {
		return err
	}
	if c.Bool(flagJSON) {
		var b bytes.Buffer
		if err := json.Indent(&b, ex.JSON(), "", "  "); err != nil {
			return err
		}
		b.WriteByte('\n')
		if _, err := c.App.Writer.Write(b.Bytes()); err != nil {
			return err
		}
	} else if err := emit(c.App.Writer, formatExplanation(ex, time.Now())); err != nil {
		return err
	}
	switch ex.Verdict {
	case "visible", "found":
		return nil
	}
	return errReported // the explanation said why
}

// formatExplanation renders an explanation for a terminal.
func formatExplanation(ex *client.Explanation, now time.Time) *strings.Builder {
	var b strings.Builder
	ago := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		d := now.Sub(t)
		if d < 0 {
			return "in " + (-d).Round(time.Millisecond).String()
		}
		return d.Round(time.Millisecond).String() + " ago"
	}
	fmt.Fprintf(&b, "%s: %s\n", strings.ToUpper(ex.Verdict), ex.Summary)
	if l := ex.Live; l != nil {
		fmt.Fprintf(&b, "\nlive view: status %s, source %s, seq %d, last heard %s, interval %s\n", l.Status, l.Source, l.Seq, ago(l.LastHeard), l.Interval)
		if !l.Local {
			fmt.Fprintf(&b, "  UNHEALTHY at %s, removed at %s without news; peer %s connected: %v\n",
				l.UnhealthyAt.UTC().Format(time.RFC3339), l.TimeoutAt.UTC().Format(time.RFC3339), l.PeerID, l.PeerConnected)
		}
	}
	if h := ex.Held; h != nil {
		fmt.Fprintf(&b, "\nheld since %s until peer %s is reached\n", ago(h.Since), h.PeerID)
	}
	if cch := ex.Cached; cch != nil {
		fmt.Fprintf(&b, "\ncache: source %s, seq %d, received %s, fresh until %s, stale %v\n", cch.Source, cch.Seq, ago(cch.ReceivedAt), cch.ExpiresAt.UTC().Format(time.RFC3339), cch.Stale)
	}
	if t := ex.Tombstone; t != nil {
		fmt.Fprintf(&b, "\nunregistered %s (reason %s, seq %d)\n", ago(t.At), t.Reason, t.Seq)
	}
	if l := ex.Left; l != nil {
		fmt.Fprintf(&b, "\nleft the live view %s: %s\n", ago(l.At), l.Reason)
	}
	if len(ex.Heard) > 0 {
		b.WriteString("\nheard (verified):\n")
		tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
		_, _ = fmt.Fprintln(tw, "  TRANSPORT\tKIND\tCOUNT\tFIRST\tLAST\tLAST SEQ")
		for _, h := range ex.Heard {
			_, _ = fmt.Fprintf(tw, "  %s\t%s\t%d\t%s\t%s\t%d\n", h.Transport, h.Kind, h.Count, ago(h.First), ago(h.Last), h.LastSeq)
		}
		_ = tw.Flush()
	}
	if len(ex.Refusals) > 0 {
		b.WriteString("\nrefused:\n")
		for _, r := range ex.Refusals {
			times := ""
			if r.Count > 1 {
				times = fmt.Sprintf(" (%d times in a row)", r.Count)
			}
			fmt.Fprintf(&b, "  %s  %s %s seq %d: %s%s — %s\n", ago(r.At), r.Transport, r.Kind, r.Seq, r.Reason, times, r.Detail)
		}
	}
	if t := ex.Trust; t != nil {
		fmt.Fprintf(&b, "\ntrust: policy %s, admitted by policy %v, key pinned %v, certificate %v\n", t.Policy, t.Allowed, t.KeyPinned, t.Certificate)
	}
	if len(ex.Mismatched) > 0 {
		fmt.Fprintf(&b, "\nfilters it does not match: %s\n", strings.Join(ex.Mismatched, ", "))
	}
	if in := ex.Interest; in != nil {
		fmt.Fprintf(&b, "\ninterest: scope %s, covered by the live view %v", in.Scope, in.Covered)
		if in.Shard != "" {
			fmt.Fprintf(&b, ", shard %s", in.Shard)
		}
		b.WriteByte('\n')
	}
	if r := ex.Resolver; r != nil {
		fmt.Fprintf(&b, "\nresolver (%s, answered by %s):\n", r.Took.Round(time.Microsecond), dashIfEmpty(r.AnsweredBy))
		tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
		_, _ = fmt.Fprintln(tw, "  STEP\tTOOK\tFOUND\tNOTE")
		for _, s := range r.Steps {
			note := s.Note
			if s.Error != "" {
				note = "error: " + s.Error
			}
			_, _ = fmt.Fprintf(tw, "  %s\t%s\t%d\t%s\n", s.Name, s.Took.Round(time.Microsecond), s.Found, dashIfEmpty(note))
		}
		_ = tw.Flush()
		if ex.ResolverError != "" {
			fmt.Fprintf(&b, "  %s\n", ex.ResolverError)
		}
	}
	if len(ex.Results) > 0 && ex.AgentID == "" {
		b.WriteString("\nfound:\n")
		for _, r := range ex.Results {
			fmt.Fprintf(&b, "  %s  %s  %s  %s\n", r.AgentID, r.AgentName, r.Source, dashIfEmpty(r.Status))
		}
	}
	for _, e := range ex.RefusedOffering {
		if n := len(e.Refusals); n > 0 {
			fmt.Fprintf(&b, "\nrefused offer: %s: %s (%s)\n", e.AgentID, e.Refusals[n-1].Reason, e.Refusals[n-1].Detail)
		}
	}
	if len(ex.Next) > 0 {
		b.WriteString("\nnext:\n")
		for _, n := range ex.Next {
			fmt.Fprintf(&b, "  - %s\n", n)
		}
	}
	return &b
}
