package main

import (
	"fmt"
	"path/filepath"

	"github.com/agentd/agentd/bootstrap"
	"github.com/agentd/agentd/config"
	"github.com/agentd/agentd/metrics"
	"github.com/agentd/agentd/p2p"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/trust"
	ma "github.com/multiformats/go-multiaddr"
	"github.com/urfave/cli/v2"
)

func bootstrapCommand() *cli.Command {
	return &cli.Command{
		Name:  "bootstrap",
		Usage: "run a bootstrap node: a DHT server with a stable identity and no agent",
		Description: "Runs a Kademlia DHT server under /agentd with the peer key of the data\n" +
			"directory (created on first run, so the peer id is stable across restarts), and no\n" +
			"hosted agent. It prints its full multiaddrs, one per line, on stdout: give one to\n" +
			"every agentd with --bootstrap. Other bootstrap nodes may be joined with --bootstrap.\n" +
			"See docs/bootstrap.md for hosting one publicly.",
		Flags: withGlobal(nodeFlags()...),
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("bootstrap takes no arguments (got %q)", c.Args().First())
			}
			cfg, err := effectiveConfig(c)
			if err != nil {
				return err
			}
			log := newLogger(c.App.ErrWriter, cfg.Log)
			key, err := bootstrap.LoadOrCreateKey(filepath.Join(cfg.DataDir, trust.PeerKeyFile))
			if err != nil {
				return err
			}
			list, err := bootstrap.PeersLog(cfg.Discovery.DHT, nil, log)
			if err != nil {
				return err
			}
			peers := resolveBootstrap(c.Context, list, log)
			st, err := store.Open(store.Options{Dir: filepath.Join(cfg.DataDir, DBDir), Logger: log})
			if err != nil {
				return fmt.Errorf("open store: %w", err)
			}
			defer func() { _ = st.Close() }() // the run's own error matters more
			if cfg.NAT.Reachability == config.ReachabilityAuto || cfg.NAT.Reachability == "" {
				// A bootstrap node is dialable by definition (its address is
				// handed to every agent), and the first one of a network has
				// no AutoNAT server to confirm it: the relay would never start.
				cfg.NAT.Reachability = config.ReachabilityPublic
			}
			nat, err := natConfig(cfg.NAT, peers, true)
			if err != nil {
				return err
			}
			nat.AutoRelay = false // it is the relay
			h, err := p2p.New(p2p.Config{Key: key, Listen: cfg.Listen, NAT: nat, UserAgent: "agentd-bootstrap/" + buildVersion().Version, DisableMetrics: true})
			if err != nil {
				return err
			}
			defer func() { _ = h.Close() }()
			ver, err := trust.NewVerifier(trust.Config{Policy: trust.Policy(cfg.Trust.Policy), AllowList: cfg.Trust.AllowList}, st)
			if err != nil {
				return err
			}
			return bootstrap.RunNode(c.Context, h, bootstrap.NodeConfig{
				Peers: peers, Book: st, Verifier: ver, Metrics: metrics.New(false),
			}, log, func(addrs []ma.Multiaddr) {
				for _, a := range addrs {
					_, _ = fmt.Fprintln(c.App.Writer, a.String())
				}
			})
		},
	}
}
