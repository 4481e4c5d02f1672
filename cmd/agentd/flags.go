package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/agentd/agentd/config"
	"github.com/agentd/agentd/p2p"
	"github.com/urfave/cli/v2"
)

// Flag names.
const (
	flagConfig       = "config"
	flagDataDir      = "data-dir"
	flagLogLevel     = "log-level"
	flagLogFormat    = "log-format"
	flagListen       = "listen"
	flagAPI          = "api"
	flagBootstrap    = "bootstrap"
	flagTrustPolicy  = "trust-policy"
	flagNoLAN        = "no-lan"
	flagLANInterface = "lan-interface"
	flagClientMode   = "client-mode"
	flagServeReg     = "serve-registry"
	flagAgentCard    = "agent-card"
	flagMinFree      = "min-free"
	flagScope        = "scope"
	flagDHTMode      = "dht-mode"
	flagReachability = "reachability"
	flagAnnounce     = "announce"
	flagNoPortMap    = "no-port-mapping"
	flagJSON         = "json"
)

// globalFlags apply to every command. They are accepted both before the
// command (agentd --data-dir D keygen) and after it (agentd keygen
// --data-dir D); the one after the command wins.
func globalFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: flagConfig, Aliases: []string{"c"}, EnvVars: []string{config.EnvConfig}, Usage: "YAML configuration `FILE` (docs/operations.md lists every key); none by default"},
		&cli.StringFlag{Name: flagDataDir, EnvVars: []string{config.EnvDataDir}, Usage: "data `DIR` holding the keys, the agent_id and the database (default ~/.agentd)"},
		&cli.StringFlag{Name: flagLogLevel, EnvVars: []string{config.EnvLogLevel}, Usage: "log `LEVEL`: debug, info, warn or error (default info)"},
		&cli.StringFlag{Name: flagLogFormat, EnvVars: []string{config.EnvLogFormat}, Usage: "log `FORMAT`: text or json (default text)"},
	}
}

// nodeFlags override the node settings of the configuration; `run` and
// `config print` accept them.
func nodeFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringSliceFlag{Name: flagListen, EnvVars: []string{config.EnvListen}, Usage: "libp2p listen `MULTIADDR` (repeatable; default TCP and QUIC on port 4777, IPv4 and IPv6)"},
		&cli.StringFlag{Name: flagAPI, EnvVars: []string{config.EnvAPI}, Usage: "local HTTP API `HOST:PORT`; must be loopback unless api auth is configured (default 127.0.0.1:4778)"},
		&cli.StringSliceFlag{Name: flagBootstrap, EnvVars: []string{config.EnvBootstrap}, Usage: "bootstrap peer `MULTIADDR` ending in /p2p/<peer id> (an address, or /dns4/<name>/tcp/<port>), or a list published in DNS as /dnsaddr/<name> (_dnsaddr TXT records); repeatable, replaces discovery.dht.bootstrapNodes. Peers remembered in the address book are tried too, so a restarted node needs none"},
		&cli.StringFlag{Name: flagTrustPolicy, EnvVars: []string{config.EnvTrustPolicy}, Usage: "trust `POLICY`: open (valid signatures, first key seen keeps an agent id), allowlist (only trust.allowList agent ids) or ca (a certificate chain to trust.roots for agents not allow-listed); default open"},
		&cli.BoolFlag{Name: flagNoLAN, EnvVars: []string{config.EnvNoLAN}, Usage: "turn LAN discovery off: the seed-001 UDP multicast protocol and mDNS/DNS-SD (sets discovery.udp.enabled and discovery.mdns.enabled to false)"},
		&cli.StringFlag{Name: flagLANInterface, EnvVars: []string{config.EnvLANInterface}, Usage: "network `INTERFACE` for LAN discovery (default: every multicast-capable interface)"},
		&cli.BoolFlag{Name: flagServeReg, EnvVars: []string{config.EnvServeRegistry}, Usage: "act as a seed-000 registry (POST /agents) for agents that cannot run P2P; needs api.jwtSecret or api.jwtPublicKey (auth is required)"},
		&cli.StringFlag{Name: flagAgentCard, EnvVars: []string{config.EnvAgentCard}, Usage: "serve the A2A Agent Card of the hosted agent `ID` (\"self\": this daemon's own) at /.well-known/agent-card.json"},
		&cli.BoolFlag{Name: flagClientMode, EnvVars: []string{config.EnvClientMode}, Usage: "DHT client mode, for hosts that cannot accept connections: the node queries the DHT but does not serve it (same as --dht-mode client)"},
		&cli.StringFlag{Name: flagDHTMode, EnvVars: []string{config.EnvDHTMode}, Usage: "DHT `MODE`: auto (serve the DHT unless AutoNAT finds this node behind a NAT nobody can dial; a LAN without public addresses keeps serving), server or client (default auto)"},
		&cli.StringFlag{Name: flagReachability, EnvVars: []string{config.EnvReachability}, Usage: "`REACHABILITY` on the internet: auto (AutoNAT asks peers to dial back), public (this node is dialable at its addresses: no relay, DHT server) or private (behind a NAT: relay and hole punching); default auto"},
		&cli.BoolFlag{Name: flagNoPortMap, EnvVars: []string{config.EnvNoPortMapping}, Usage: "do not ask the gateway for a port mapping (UPnP IGD, NAT-PMP): for networks that forbid it, and tests (sets nat.portMapping to false)"},
		&cli.StringSliceFlag{Name: flagAnnounce, EnvVars: []string{config.EnvAnnounce}, Usage: "advertise `MULTIADDR` instead of the detected addresses, e.g. /ip4/198.51.100.7/tcp/4777 for a known public address (repeatable; sets nat.announce)"},
		&cli.StringFlag{Name: flagScope, EnvVars: []string{config.EnvScope}, Usage: "what the node hears of the network: `SCOPE` interest (the agents of the capabilities it hosts, queries and watches; other queries go to the DHT) or full (every agent). Default interest, or full with --serve-registry (sets discovery.scope)"},
		&cli.StringFlag{Name: flagMinFree, EnvVars: []string{config.EnvMinFree}, Usage: "free `SIZE` kept on the data directory's filesystem (\"64MiB\", bytes, 0 = off): below it registrations and other writes get HTTP 507 while reads and the network go on (default 64MiB)"},
	}
}

// withGlobal returns flags plus the global flags, so that a command accepts
// them after its name too.
func withGlobal(flags ...cli.Flag) []cli.Flag {
	return append(flags, globalFlags()...)
}

// setFlag finds the innermost command level at which name was given on the
// command line or through its environment variable.
func setFlag(c *cli.Context, name string) (*cli.Context, bool) {
	for _, x := range c.Lineage() {
		if x.Command == nil || !defines(x.Command.Flags, name) {
			continue
		}
		if x.IsSet(name) {
			return x, true
		}
	}
	return nil, false
}

func defines(flags []cli.Flag, name string) bool {
	for _, f := range flags {
		for _, n := range f.Names() {
			if n == name {
				return true
			}
		}
	}
	return false
}

func stringFlag(c *cli.Context, name string) (string, bool) {
	if x, ok := setFlag(c, name); ok {
		return x.String(name), true
	}
	return "", false
}

// flagHint names, for a configuration field, the flag and environment
// variable that set it, for error messages about overridden values.
var flagHint = []struct{ field, hint string }{
	{"dataDir", "--data-dir / " + config.EnvDataDir},
	{"listen", "--listen / " + config.EnvListen},
	{"api.addr", "--api / " + config.EnvAPI},
	{"discovery.dht.bootstrapNodes", "--bootstrap / " + config.EnvBootstrap},
	{"trust.policy", "--trust-policy / " + config.EnvTrustPolicy},
	{"discovery.interface", "--lan-interface / " + config.EnvLANInterface},
	{"log.level", "--log-level / " + config.EnvLogLevel},
	{"log.format", "--log-format / " + config.EnvLogFormat},
	{"api.serveRegistry", "--serve-registry / " + config.EnvServeRegistry},
	{"api.agentCard", "--agent-card / " + config.EnvAgentCard},
	{"storage.minFree", "--min-free / " + config.EnvMinFree},
	{"discovery.scope", "--scope / " + config.EnvScope},
	{"discovery.dht.mode", "--dht-mode / " + config.EnvDHTMode},
	{"nat.reachability", "--reachability / " + config.EnvReachability},
	{"nat.announce", "--announce / " + config.EnvAnnounce},
}

// effectiveConfig builds the configuration of this invocation: defaults,
// then the file, then environment variables and flags (urfave/cli reads the
// environment variable of a flag when the flag is absent, which gives
// flags > environment). The data directory is expanded and an empty listen
// list becomes the default addresses, so the result is what `run` uses.
func effectiveConfig(c *cli.Context) (config.Config, error) {
	cfg := config.Default()
	if path, ok := stringFlag(c, flagConfig); ok && path != "" {
		loaded, err := config.Load(path)
		if err != nil {
			return config.Config{}, err
		}
		cfg = loaded
	}
	overridden := map[string]bool{}
	set := func(field string, apply func(x *cli.Context, name string)) func(string) {
		return func(name string) {
			if x, ok := setFlag(c, name); ok {
				apply(x, name)
				overridden[field] = true
			}
		}
	}
	set("dataDir", func(x *cli.Context, n string) { cfg.DataDir = x.String(n) })(flagDataDir)
	set("log.level", func(x *cli.Context, n string) { cfg.Log.Level = x.String(n) })(flagLogLevel)
	set("log.format", func(x *cli.Context, n string) { cfg.Log.Format = x.String(n) })(flagLogFormat)
	set("listen", func(x *cli.Context, n string) { cfg.Listen = nonEmpty(x.StringSlice(n)) })(flagListen)
	set("api.addr", func(x *cli.Context, n string) { cfg.API.Addr = x.String(n) })(flagAPI)
	set("discovery.dht.bootstrapNodes", func(x *cli.Context, n string) {
		cfg.Discovery.DHT.BootstrapNodes = nil
		for _, a := range nonEmpty(x.StringSlice(n)) {
			cfg.Discovery.DHT.BootstrapNodes = append(cfg.Discovery.DHT.BootstrapNodes, config.BootstrapNode{Multiaddr: a})
		}
	})(flagBootstrap)
	set("trust.policy", func(x *cli.Context, n string) { cfg.Trust.Policy = x.String(n) })(flagTrustPolicy)
	set("discovery.interface", func(x *cli.Context, n string) { cfg.Discovery.Interface = x.String(n) })(flagLANInterface)
	set("discovery.dht.clientMode", func(x *cli.Context, n string) { cfg.Discovery.DHT.ClientMode = x.Bool(n) })(flagClientMode)
	set("api.serveRegistry", func(x *cli.Context, n string) { cfg.API.ServeRegistry = x.Bool(n) })(flagServeReg)
	set("api.agentCard", func(x *cli.Context, n string) { cfg.API.AgentCard = x.String(n) })(flagAgentCard)
	set("discovery.scope", func(x *cli.Context, n string) { cfg.Discovery.Scope = x.String(n) })(flagScope)
	set("discovery.dht.mode", func(x *cli.Context, n string) { cfg.Discovery.DHT.Mode = x.String(n) })(flagDHTMode)
	set("nat.reachability", func(x *cli.Context, n string) { cfg.NAT.Reachability = x.String(n) })(flagReachability)
	set("nat.announce", func(x *cli.Context, n string) { cfg.NAT.Announce = nonEmpty(x.StringSlice(n)) })(flagAnnounce)
	set("nat.portMapping", func(x *cli.Context, n string) {
		if x.Bool(n) {
			cfg.NAT.PortMapping = false
		}
	})(flagNoPortMap)
	var sizeErr error
	set("storage.minFree", func(x *cli.Context, n string) {
		v, err := config.ParseByteSize(x.String(n))
		if err != nil {
			sizeErr = usagef("--%s / %s: %v", n, config.EnvMinFree, err)
			return
		}
		cfg.Storage.MinFree = v
	})(flagMinFree)
	if sizeErr != nil {
		return config.Config{}, sizeErr
	}
	set("discovery.udp.enabled", func(x *cli.Context, n string) {
		if x.Bool(n) {
			cfg.Discovery.UDP.Enabled = false
			cfg.Discovery.MDNS.Enabled = false
		}
	})(flagNoLAN)

	dir, err := config.ExpandHome(cfg.DataDir)
	if err != nil {
		return config.Config{}, fmt.Errorf("dataDir: %w", err)
	}
	cfg.DataDir = dir
	if cfg.Listen == nil {
		cfg.Listen = append([]string(nil), p2p.DefaultListen...)
	}
	if err := cfg.Validate(); err != nil {
		return config.Config{}, explain(err, overridden)
	}
	return cfg, nil
}

// explain prefixes each configuration error about an overridden field with
// the flag and environment variable that set it.
func explain(err error, overridden map[string]bool) error {
	var out []error
	for _, fe := range config.FieldErrors(err) {
		hint := ""
		for _, h := range flagHint {
			if overridden[h.field] && (fe.Field == h.field || strings.HasPrefix(fe.Field, h.field+"[") || strings.HasPrefix(fe.Field, h.field+".")) {
				hint = h.hint
			}
		}
		if hint != "" {
			out = append(out, fmt.Errorf("%s: %w", hint, fe))
		} else {
			out = append(out, fmt.Errorf("configuration: %w", fe))
		}
	}
	if len(out) == 0 {
		return err
	}
	return errors.Join(out...)
}

func nonEmpty(in []string) []string {
	out := make([]string, 0, len(in))
	for _, s := range in {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
