package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/agentd/agentd/bootstrap"
	"github.com/agentd/agentd/config"
	"github.com/agentd/agentd/daemon"
	"github.com/agentd/agentd/internal/bearer"
	"github.com/agentd/agentd/internal/fsutil"
	"github.com/agentd/agentd/metrics"
	"github.com/agentd/agentd/p2p"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/trust"
	"github.com/urfave/cli/v2"
)

// bootstrapIgnored are the node flags that do not apply to a bootstrap node
// (it hosts no agent, runs no LAN discovery, no gossip and no registry, and
// is always a DHT server). They stay accepted, hidden, so a shared
// environment (AGENTD_NO_LAN, …) does not break it.
var bootstrapIgnored = []string{flagNoLAN, flagLANInterface, flagServeReg, flagClientMode, flagDHTMode, flagScope, flagMinFree}

func bootstrapFlags() []cli.Flag {
	flags := nodeFlags()
	for _, f := range flags {
		if !slices.Contains(bootstrapIgnored, f.Names()[0]) {
			continue
		}
		switch f := f.(type) {
		case *cli.BoolFlag:
			f.Hidden = true
		case *cli.StringFlag:
			f.Hidden = true
		case *cli.StringSliceFlag:
			f.Hidden = true
		}
	}
	return withGlobal(append(flags,
		&cli.StringFlag{Name: flagAPIAddrFile, Usage: "write the bound address of /healthz and /metrics (host:port) to `FILE` once serving, and remove it on exit"},
	)...)
}

func bootstrapCommand() *cli.Command {
	return &cli.Command{
		Name:  "bootstrap",
		Usage: "run a bootstrap node: DHT server, circuit relay and AutoNAT server, no agent",
		Description: "Runs a Kademlia DHT server under /agentd with the peer key of the data directory\n" +
			"(created on first run, so the peer id is stable across restarts) and no hosted agent.\n" +
			"It also serves circuit relay v2 (agents behind NAT reserve a slot and are reached\n" +
			"through it, within the nat.relay limits of the configuration) and AutoNAT (agents\n" +
			"learn whether they are reachable). A bootstrap node is public by definition:\n" +
			"reachability auto is taken as public, and --announce names its public addresses\n" +
			"when it sits behind a 1:1 NAT or a load balancer.\n" +
			"\n" +
			"It prints its full multiaddrs, one per line, on stdout: give one to every agentd with\n" +
			"--bootstrap, or publish them as _dnsaddr TXT records. Other bootstrap nodes may be\n" +
			"joined with --bootstrap. GET /healthz and GET /metrics (Prometheus) are served on\n" +
			"--api (default 127.0.0.1:4778; another address needs api.jwtSecret or\n" +
			"api.jwtPublicKey, and a bearer token with the discover:read scope).\n" +
			"See docs/bootstrap.md for hosting one publicly.",
		Flags:  bootstrapFlags(),
		Action: runBootstrap,
	}
}

func runBootstrap(c *cli.Context) error {
	if c.NArg() > 0 {
		return usagef("bootstrap takes no arguments (got %q)", c.Args().First())
	}
	cfg, err := effectiveConfig(c)
	if err != nil {
		return err
	}
	log := newLogger(c.App.ErrWriter, cfg.Log)
	addrFile := c.String(flagAPIAddrFile)
	if addrFile != "" {
		if addrFile, err = filepath.Abs(addrFile); err != nil {
			return err
		}
	}
	if err := serveBootstrap(c.Context, cfg, log, addrFile, func(line string) { _, _ = fmt.Fprintln(c.App.Writer, line) }); err != nil {
		log.Error("bootstrap node stopped with an error", "err", err)
		return errReported
	}
	log.Info("bootstrap node stopped")
	return nil
}

// serveBootstrap runs the bootstrap node until ctx ends: host, DHT, relay,
// AutoNAT and the HTTP surface. print receives each full multiaddr.
func serveBootstrap(ctx context.Context, cfg config.Config, log *slog.Logger, addrFile string, print func(string)) (err error) {
	key, err := bootstrap.LoadOrCreateKey(filepath.Join(cfg.DataDir, trust.PeerKeyFile))
	if err != nil {
		return err
	}
	list, err := bootstrap.PeersLog(cfg.Discovery.DHT, nil, log)
	if err != nil {
		return err
	}
	peers := daemon.ResolveBootstrap(ctx, list, log)
	st, err := store.Open(store.Options{Dir: filepath.Join(cfg.DataDir, daemon.DBDir), Logger: log})
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	defer func() { err = errors.Join(err, st.Close()) }()
	if cfg.NAT.Reachability == config.ReachabilityAuto || cfg.NAT.Reachability == "" {
		// A bootstrap node is dialable by definition (its address is
		// handed to every agent), and the first one of a network has no
		// AutoNAT server to confirm it: the relay would never start.
		cfg.NAT.Reachability = config.ReachabilityPublic
	}
	nat, err := daemon.NATConfig(cfg.NAT, peers, true)
	if err != nil {
		return err
	}
	nat.AutoRelay = false // it is the relay
	m := metrics.New(true)
	// Every agent behind NAT keeps a connection to its relay: the
	// connection manager must not trim below the reservations it admits.
	low := nat.RelayResources.MaxReservations + 256
	h, err := p2p.New(p2p.Config{Key: key, Listen: cfg.Listen, NAT: nat, ConnsPerIP: cfg.NAT.ConnsPerIP,
		LowWater: low, HighWater: low + 256, SystemInbound: max(2048, 2*(low+256)),
		UserAgent: "agentd-bootstrap/" + buildVersion().Version, Registerer: m.Registry})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, h.Close()) }()
	ver, err := trust.NewVerifier(trust.Config{Policy: trust.Policy(cfg.Trust.Policy), AllowList: cfg.Trust.AllowList}, st)
	if err != nil {
		return err
	}
	n, err := bootstrap.StartNode(ctx, h, bootstrap.NodeConfig{Peers: peers, Book: st, Verifier: ver, Metrics: m}, log)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, n.Close()) }()

	var auth *bearer.Verifier
	if cfg.API.JWTSecret != "" || cfg.API.JWTPublicKey != "" {
		var pub []byte
		if cfg.API.JWTPublicKey != "" {
			if pub, err = os.ReadFile(cfg.API.JWTPublicKey); err != nil {
				return fmt.Errorf("api.jwtPublicKey: %w", err)
			}
		}
		if auth, err = bearer.New(cfg.API.JWTSecret, pub, nil); err != nil {
			return fmt.Errorf("api auth: %w", err)
		}
	}
	ln, err := daemon.ListenAPI(cfg.API.Addr)
	if err != nil {
		return err
	}
	srv := daemon.NewHTTPServer(n.Handler(bootstrap.HTTPConfig{Registry: m.Registry, Version: buildVersion().Version,
		Auth: auth, AuthOnLoopback: cfg.API.RequireAuthOnLoopback}), log)
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		serr := srv.Shutdown(sctx)
		if e := <-serveErr; e != nil && !errors.Is(e, http.ErrServerClosed) {
			serr = errors.Join(serr, e)
		}
		err = errors.Join(err, serr)
	}()
	apiAddr := ln.Addr().String()
	if addrFile != "" {
		if err := fsutil.WriteFileAtomic(addrFile, []byte(apiAddr+"\n"), 0o644); err != nil {
			return fmt.Errorf("write --api-addr-file: %w", err)
		}
		defer func() { _ = os.Remove(addrFile) }()
	}
	for _, a := range n.Addrs() {
		print(a.String())
	}
	log.Info("bootstrap node running", "health", "http://"+apiAddr+"/healthz", "metrics", "http://"+apiAddr+"/metrics",
		"peer_id", h.ID().String(), "relay", nat.RelayService, "reachability", cfg.NAT.Reachability)
	select {
	case <-ctx.Done():
		log.Info("shutting down", "reason", context.Cause(ctx))
		return nil
	case err := <-serveErr:
		serveErr <- err
		return fmt.Errorf("HTTP server: %w", err)
	}
}
