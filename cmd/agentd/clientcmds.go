package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/config"
	"github.com/agentd/agentd/record"
	"github.com/urfave/cli/v2"
)

// Flags of the commands that talk to a running daemon.
const (
	cfToken        = "token"
	cfFile         = "file"
	cfReason       = "reason"
	cfCapability   = "capability"
	cfSkill        = "skill"
	cfScene        = "scene"
	cfType         = "type"
	cfTag          = "tag"
	cfTenant       = "tenant"
	cfVersionC     = "version"
	cfText         = "text"
	cfLimit        = "limit"
	cfFormat       = "format"
	cfLocal        = "local"
	cfIncludeStale = "include-stale"
	cfPrefix       = "prefix"
	cfAgent        = "agent"
	cfHeartbeats   = "heartbeats"
	cfEventType    = "event"
	// cfEnvToken is the environment variable of --token.
	cfEnvToken = "AGENTD_TOKEN"
)

const clientAPIHelp = "The daemon is reached at --api (AGENTD_API; default: api.addr of the configuration,\n" +
	"127.0.0.1:4778) with the bearer token --token (AGENTD_TOKEN) when its API needs one."

// daemonClientFlags are the flags every client command takes.
func daemonClientFlags(extra ...cli.Flag) []cli.Flag {
	return withGlobal(append(extra,
		&cli.StringFlag{Name: flagAPI, EnvVars: []string{config.EnvAPI}, Usage: "API of the running daemon, `HOST:PORT` or URL (default api.addr of the configuration, 127.0.0.1:4778)"},
		&cli.StringFlag{Name: cfToken, EnvVars: []string{cfEnvToken}, Usage: "JWT bearer `TOKEN` for an API that requires one"},
		&cli.BoolFlag{Name: flagJSON, Usage: "print machine-readable JSON instead of a table"},
	)...)
}

// clientCommands are the commands that talk to a running daemon through
// its local API (package client).
func clientCommands() []*cli.Command {
	return []*cli.Command{
		{
			Name:  "register",
			Usage: "register an agent with the running daemon",
			Description: "Sends the agent in --file to the daemon, which hosts it and announces it to the\n" +
				"network. " + fileFormats + "\n" +
				"A signed Announce (with signature, as `agentd record sign` prints it, or signed by the\n" +
				"agent's own key for this daemon's peer id) is sent as is; anything else is signed by\n" +
				"the daemon: without agent_id the daemon's first agent gets the daemon's own, another\n" +
				"agent_name an agent_id of its own (docs/protocol.md). Registering the same content\n" +
				"again changes nothing. " + clientAPIHelp,
			Flags: daemonClientFlags(
				&cli.StringFlag{Name: cfFile, Aliases: []string{"f"}, Usage: "agent `FILE` (- reads standard input)"},
			),
			Action: clientRegister,
		},
		{
			Name:      "unregister",
			Usage:     "unregister an agent hosted by the running daemon",
			ArgsUsage: "[AGENT_ID]",
			Description: "Stops hosting the agent and tells the network, with a seed-001 reason.\n" +
				"Without AGENT_ID, the daemon's own agent. " + clientAPIHelp,
			Flags: daemonClientFlags(
				&cli.StringFlag{Name: cfReason, Value: string(record.ReasonShutdown), Usage: "`REASON`: SHUTDOWN, ERROR, MAINTENANCE or UPGRADE"},
			),
			Action: clientUnregister,
		},
		{
			Name:  "discover",
			Usage: "find agents by capability, skill, scene, type, tag or version",
			Description: "Asks the daemon, which answers from its live view of the network and, when that\n" +
				"has nothing, through the LAN, the DHT and the SkillCenter fallback. Filters are ANDed;\n" +
				"give at least one (`agentd list` lists every agent). Each answer says where it came\n" +
				"from and how old it is. Exits 1 when nothing matches. " + clientAPIHelp,
			Flags: daemonClientFlags(append(filterFlags(),
				&cli.IntFlag{Name: cfLimit, Aliases: []string{"n"}, Value: 100, Usage: "at most `N` agents (1-1000)"},
				&cli.BoolFlag{Name: cfIncludeStale, Usage: "include expired cache entries (marked stale)"},
				&cli.StringFlag{Name: cfFormat, Value: "table", Usage: "`FORMAT` of the answer: table, json (as --json) or a2a (a JSON array of A2A Agent Cards; docs/protocol.md)"},
			)...),
			Action: clientDiscover,
		},
		{
			Name:        "list",
			Usage:       "list the agents the running daemon sees alive",
			Description: "Lists the live agents of the daemon's view (at most 1000). " + clientAPIHelp,
			Flags:       daemonClientFlags(),
			Action:      clientList,
		},
		explainCommand(),
		{
			Name:        "peers",
			Usage:       "list the running daemon's connected peers",
			Description: clientAPIHelp,
			Flags:       daemonClientFlags(),
			Action:      clientPeers,
		},
		{
			Name:  "watch",
			Usage: "print registry events as they happen, until interrupted",
			Description: "Streams registrations, deregistrations, status changes and capability changes\n" +
				"(heartbeats with --heartbeats), one line per event; --json prints one JSON object per\n" +
				"line. Ends on SIGINT (exit 0) or when the daemon ends the stream (exit 1). " + clientAPIHelp,
			Flags: daemonClientFlags(
				&cli.StringFlag{Name: cfCapability, Usage: "only events about agents offering capability `ID`"},
				&cli.StringFlag{Name: cfPrefix, Usage: "only events whose capabilities start with `PREFIX`"},
				&cli.StringFlag{Name: cfAgent, Usage: "only events of agent `ID`"},
				&cli.BoolFlag{Name: cfHeartbeats, Usage: "include heartbeat events"},
				&cli.StringSliceFlag{Name: cfEventType, Usage: "only events of `TYPE` (repeatable), e.g. registry.agent.registered"},
			),
			Action: clientWatch,
		},
		{
			Name:   "status",
			Usage:  "set the health status of a hosted agent",
			Action: groupAction,
			Subcommands: []*cli.Command{{
				Name:      "set",
				Usage:     "set a hosted agent's status: HEALTHY, DEGRADED, UNHEALTHY or MAINTENANCE",
				ArgsUsage: "STATUS",
				Description: "Publishes the status to the network (docs/protocol.md). Without --agent, the daemon's\n" +
					"own agent. " + clientAPIHelp,
				Flags: daemonClientFlags(
					&cli.StringFlag{Name: cfAgent, Usage: "agent `ID` (default the daemon's own)"},
				),
				Action: clientStatusSet,
			}},
		},
	}
}

// apiClient builds the client of the daemon named by --api, or by the
// configuration's api.addr.
func daemonClient(c *cli.Context) (*client.Client, error) {
	addr, ok := stringFlag(c, flagAPI)
	if !ok || addr == "" {
		cfg, err := effectiveConfig(c)
		if err != nil {
			return nil, err
		}
		addr = cfg.API.Addr
	}
	addr = dialableAddr(addr)
	var opts []client.Option
	if tok, ok := stringFlag(c, cfToken); ok && tok != "" {
		opts = append(opts, client.WithToken(tok))
	}
	cl, err := client.New(addr, opts...)
	if err != nil {
		return nil, usagef("--api: %v", err)
	}
	return cl, nil
}

// dialable turns a listen address into one to dial: a wildcard host
// (0.0.0.0, ::, empty) becomes the loopback address.
func dialableAddr(addr string) string {
	hostport := addr
	scheme := ""
	if i := strings.Index(addr, "://"); i >= 0 {
		u, err := url.Parse(addr)
		if err != nil {
			return addr
		}
		scheme, hostport = u.Scheme+"://", u.Host
		if u.Path != "" {
			return addr
		}
	}
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return addr
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	default:
		return addr
	}
	return scheme + net.JoinHostPort(host, port)
}

func clientNoArgs(c *cli.Context) error {
	if c.NArg() > 0 {
		return usagef("%s takes no arguments (got %q)", c.Command.HelpName, c.Args().First())
	}
	return nil
}

// printJSON writes v as indented JSON.
func clientPrintJSON(w io.Writer, v any) error {
	return jsonEncoder(w, "  ").Encode(v)
}

// jsonEncoder writes JSON without HTML escaping, so that agent objects
// print as the daemon sent them.
func jsonEncoder(w io.Writer, indent string) *json.Encoder {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	if indent != "" {
		enc.SetIndent("", indent)
	}
	return enc
}

// ---- register ----

func clientRegister(c *cli.Context) error {
	if err := clientNoArgs(c); err != nil {
		return err
	}
	name := c.String(cfFile)
	if name == "" {
		return usagef("register: --file FILE is required")
	}
	data, err := readInput(c, name)
	if err != nil {
		return err
	}
	cl, err := daemonClient(c)
	if err != nil {
		return err
	}
	var sa *record.SignedAgent
	if record.IsSignedAnnounce(data) {
		signed, _, err := record.ParseAnnounceUnbound(data)
		if err != nil {
			return fmt.Errorf("%s: %w", displayName(name), err)
		}
		sa, err = cl.RegisterSigned(c.Context, signed)
		if err != nil {
			return err
		}
	} else {
		a, err := record.LoadAgentFile(displayName(name), data)
		if err != nil {
			return err
		}
		sa, err = cl.Register(c.Context, a)
		if err != nil {
			return err
		}
	}
	if c.Bool(flagJSON) {
		var out bytes.Buffer
		if err := json.Indent(&out, sa.MarshalAnnounce(), "", "  "); err != nil {
			return err
		}
		out.WriteByte('\n')
		_, err := c.App.Writer.Write(out.Bytes())
		return err
	}
	a := &sa.Agent
	var b strings.Builder
	fmt.Fprintf(&b, "registered %s", a.AgentID)
	if a.AgentName != "" {
		fmt.Fprintf(&b, " (%s)", a.AgentName)
	}
	fmt.Fprintf(&b, " seq %d, %s", a.Seq, plural(len(a.Skills), "skill"))
	if caps := a.AllCapabilities(); len(caps) > 0 {
		fmt.Fprintf(&b, ", capabilities: %s", strings.Join(caps, ", "))
	}
	b.WriteString("\n")
	return emit(c.App.Writer, &b)
}

// ---- unregister, status set ----

// ownAgentID is the daemon's own agent id (from /healthz).
func daemonAgentID(c *cli.Context, cl *client.Client) (string, error) {
	h, err := cl.Health(c.Context)
	if err != nil {
		return "", err
	}
	return h.AgentID, nil
}

func clientUnregister(c *cli.Context) error {
	if c.NArg() > 1 {
		return usagef("unregister: takes at most one AGENT_ID (flags go before it)")
	}
	reason := record.UnregisterReason(strings.ToUpper(c.String(cfReason)))
	if !reason.Valid() {
		return usagef("unregister: --reason %q is not one of SHUTDOWN, ERROR, MAINTENANCE, UPGRADE", c.String(cfReason))
	}
	cl, err := daemonClient(c)
	if err != nil {
		return err
	}
	id := c.Args().First()
	if id == "" {
		if id, err = daemonAgentID(c, cl); err != nil {
			return err
		}
	}
	if err := cl.Unregister(c.Context, id, reason); err != nil {
		return err
	}
	if c.Bool(flagJSON) {
		return clientPrintJSON(c.App.Writer, map[string]string{"agent_id": id, "status": "unregistered", "reason": string(reason)})
	}
	var b strings.Builder
	fmt.Fprintf(&b, "unregistered %s (%s)\n", id, reason)
	return emit(c.App.Writer, &b)
}

func clientStatusSet(c *cli.Context) error {
	arg, err := oneArg(c, "STATUS")
	if err != nil {
		return err
	}
	st := record.Status(strings.ToUpper(arg))
	if !st.Valid() {
		return usagef("status set: %q is not one of HEALTHY, DEGRADED, UNHEALTHY, MAINTENANCE", arg)
	}
	cl, err := daemonClient(c)
	if err != nil {
		return err
	}
	id := c.String(cfAgent)
	if id == "" {
		if id, err = daemonAgentID(c, cl); err != nil {
			return err
		}
	}
	if err := cl.SetStatus(c.Context, id, st); err != nil {
		return err
	}
	if c.Bool(flagJSON) {
		return clientPrintJSON(c.App.Writer, map[string]string{"agent_id": id, "status": string(st)})
	}
	var b strings.Builder
	fmt.Fprintf(&b, "status of %s: %s\n", id, st)
	return emit(c.App.Writer, &b)
}

// ---- discover, list ----

// filterFlags are the query filters discover and explain take.
func filterFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: cfCapability, Usage: "capability `ID`"},
		&cli.StringFlag{Name: cfSkill, Usage: "skill `ID`"},
		&cli.StringFlag{Name: cfScene, Usage: "`SCENE` of the skill"},
		&cli.StringFlag{Name: cfType, Usage: "skill `TYPE`: enterprise-skill, tool-skill or integration-skill"},
		&cli.StringSliceFlag{Name: cfTag, Usage: "`TAG` the agent must carry (repeatable, all must match)"},
		&cli.StringFlag{Name: cfTenant, Usage: "`TENANT` scope"},
		&cli.StringFlag{Name: cfVersionC, Usage: "semver `CONSTRAINT`, e.g. '>=1.2.0 <2.0.0'"},
		&cli.StringFlag{Name: cfText, Aliases: []string{"q"}, Usage: "free `TEXT` over names, descriptions and ids"},
		&cli.BoolFlag{Name: cfLocal, Usage: "answer from the daemon's view and cache only, without asking the network"},
	}
}

const filterFlagNames = "--capability, --skill, --scene, --type, --tag, --tenant, --version, --text"

// filterQuery reads filterFlags.
func filterQuery(c *cli.Context) client.Query {
	return client.Query{
		Capability: c.String(cfCapability), Skill: c.String(cfSkill), Scene: c.String(cfScene),
		Type: c.String(cfType), Tags: c.StringSlice(cfTag), Tenant: c.String(cfTenant),
		Version: c.String(cfVersionC), Text: c.String(cfText), LocalOnly: c.Bool(cfLocal),
	}
}

func clientDiscover(c *cli.Context) error {
	if err := clientNoArgs(c); err != nil {
		return err
	}
	q := filterQuery(c)
	q.Limit, q.IncludeStale = c.Int(cfLimit), c.Bool(cfIncludeStale)
	if !q.Filtered() {
		return usagef("discover: give at least one of %s (`agentd list` lists every agent)", filterFlagNames)
	}
	if c.IsSet(cfLimit) && (q.Limit < 1 || q.Limit > 1000) {
		return usagef("discover: --limit must be from 1 to 1000")
	}
	format := c.String(cfFormat)
	if format != "table" && format != "json" && format != "a2a" {
		return usagef("discover: --format must be table, json or a2a")
	}
	cl, err := daemonClient(c)
	if err != nil {
		return err
	}
	res, err := cl.Discover(c.Context, q)
	if client.IsNotFound(err) {
		return fmt.Errorf("no agent matches (%v)", err)
	}
	if err != nil {
		return err
	}
	if format == "a2a" {
		return printA2ACards(c, res)
	}
	if format == "json" {
		if err := c.Set(flagJSON, "true"); err != nil {
			return err
		}
	}
	return printAgentTable(c, res)
}

// printA2ACards prints each agent of an answer as an A2A Agent Card, a
// JSON array (unsigned: GET /agents/{id}/card answers a hosted agent's
// card signed).
func printA2ACards(c *cli.Context, res []client.AgentResult) error {
	cards := make([]*a2a.AgentCard, 0, len(res))
	for i := range res {
		card, err := record.AgentToA2ACard(&res[i].Agent)
		if err != nil {
			return fmt.Errorf("agent %s: %w", res[i].Agent.AgentID, err)
		}
		cards = append(cards, card)
	}
	b, err := json.MarshalIndent(cards, "", "  ")
	if err != nil {
		return err
	}
	_, err = c.App.Writer.Write(append(b, '\n'))
	return err
}

func clientList(c *cli.Context) error {
	if err := clientNoArgs(c); err != nil {
		return err
	}
	cl, err := daemonClient(c)
	if err != nil {
		return err
	}
	res, err := cl.List(c.Context)
	if err != nil {
		return err
	}
	return printAgentTable(c, res)
}

// agentListJSON is the --json output of discover and list: the API's shape.
type agentListJSON struct {
	Agents []client.AgentResult `json:"agents"`
	Total  int                  `json:"total"`
}

func printAgentTable(c *cli.Context, res []client.AgentResult) error {
	if c.Bool(flagJSON) {
		if res == nil {
			res = []client.AgentResult{}
		}
		return clientPrintJSON(c.App.Writer, agentListJSON{Agents: res, Total: len(res)})
	}
	var b strings.Builder
	if len(res) == 0 {
		b.WriteString("no agents\n")
		return emit(c.App.Writer, &b)
	}
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	_, _ = fmt.Fprintln(tw, "AGENT ID\tNAME\tSTATUS\tSOURCE\tAGE\tENDPOINT\tCAPABILITIES")
	for _, r := range res {
		a := &r.Agent
		status := string(r.Status)
		if status == "" {
			status = "-"
		}
		src := r.Source
		if r.Stale {
			src += " (stale)"
		}
		_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", a.AgentID, dashIfEmpty(a.AgentName), status, src, fmtAge(r.Age),
			dashIfEmpty(a.Transport.Endpoint), dashIfEmpty(strings.Join(tableCaps(a), ",")))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return emit(c.App.Writer, &b)
}

// capsOf lists at most eight capabilities of an agent for the table.
func tableCaps(a *record.Agent) []string {
	caps := a.AllCapabilities()
	if len(caps) > 8 {
		caps = append(caps[:8], fmt.Sprintf("…+%d", len(caps)-8))
	}
	return caps
}

func dashIfEmpty(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func fmtAge(d time.Duration) string {
	switch {
	case d < time.Second:
		return "<1s"
	case d < time.Minute:
		return strconv.Itoa(int(d/time.Second)) + "s"
	case d < time.Hour:
		return strconv.Itoa(int(d/time.Minute)) + "m"
	}
	return strconv.Itoa(int(d/time.Hour)) + "h"
}

// ---- peers ----

func clientPeers(c *cli.Context) error {
	if err := clientNoArgs(c); err != nil {
		return err
	}
	cl, err := daemonClient(c)
	if err != nil {
		return err
	}
	peers, err := cl.Peers(c.Context)
	if err != nil {
		return err
	}
	if c.Bool(flagJSON) {
		if peers == nil {
			peers = []client.Peer{}
		}
		return clientPrintJSON(c.App.Writer, map[string]any{"peers": peers, "total": len(peers)})
	}
	var b strings.Builder
	if len(peers) == 0 {
		b.WriteString("no peers connected\n")
		return emit(c.App.Writer, &b)
	}
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	_, _ = fmt.Fprintln(tw, "PEER ID\tDIRECTION\tCONNECTION\tLATENCY\tAGENTS\tADDRESSES")
	for _, p := range peers {
		lat := "-"
		if p.Latency > 0 {
			lat = p.Latency.Round(100 * time.Microsecond).String()
		}
		_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", p.ID, dashIfEmpty(p.Direction), dashIfEmpty(p.Connection), lat, len(p.Agents), dashIfEmpty(strings.Join(p.Addrs, ",")))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return emit(c.App.Writer, &b)
}

// ---- watch ----

func clientWatch(c *cli.Context) error {
	if err := clientNoArgs(c); err != nil {
		return err
	}
	cl, err := daemonClient(c)
	if err != nil {
		return err
	}
	f := client.WatchFilter{Capability: c.String(cfCapability), Prefix: c.String(cfPrefix), AgentID: c.String(cfAgent),
		Heartbeats: c.Bool(cfHeartbeats), Types: c.StringSlice(cfEventType)}
	events, err := cl.Watch(c.Context, f)
	if err != nil {
		return err
	}
	// The daemon acknowledged the subscription: every event from now on
	// is delivered. Say so on stderr (stdout carries the events).
	_, _ = fmt.Fprintln(c.App.ErrWriter, "watching; Ctrl-C stops")
	w := c.App.Writer
	for ev := range events {
		if ev.Type == client.EventError {
			if c.Err() != nil {
				break
			}
			return fmt.Errorf("watch ended: %v", ev.Err)
		}
		if c.Bool(flagJSON) {
			if err := jsonEncoder(w, "").Encode(ev); err != nil {
				return err
			}
			continue
		}
		if _, err := io.WriteString(w, watchLine(ev)+"\n"); err != nil {
			return err
		}
	}
	if c.Err() == nil {
		return errors.New("watch ended")
	}
	return nil
}

// eventLine is the human form of an event.
func watchLine(ev client.Event) string {
	parts := []string{ev.Time.UTC().Format("2006-01-02T15:04:05.000Z"), strings.TrimPrefix(ev.Type, "registry.")}
	if ev.AgentID != "" {
		parts = append(parts, ev.AgentID)
	}
	if ev.Capability != "" {
		parts = append(parts, ev.Change+" "+ev.Capability)
	}
	if ev.Status != "" {
		parts = append(parts, "status="+string(ev.Status))
	}
	if ev.Reason != "" {
		parts = append(parts, "reason="+ev.Reason)
	}
	if len(ev.Capabilities) > 0 && ev.Capability == "" {
		caps := slices.Clone(ev.Capabilities)
		if len(caps) > 8 {
			caps = append(caps[:8], "…")
		}
		parts = append(parts, "capabilities="+strings.Join(caps, ","))
	}
	if ev.Source != "" {
		parts = append(parts, "source="+ev.Source)
	}
	return strings.Join(parts, "  ")
}
