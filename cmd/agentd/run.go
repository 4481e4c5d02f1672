package main

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"

	"github.com/agentd/agentd/config"
	"github.com/agentd/agentd/daemon"
	"github.com/urfave/cli/v2"
)

const flagAPIAddrFile = "api-addr-file"

func runCommand() *cli.Command {
	return &cli.Command{
		Name:  "run",
		Usage: "run the daemon until SIGINT or SIGTERM",
		Description: "Loads the configuration, loads or creates the identity in the data directory,\n" +
			"opens the database (<data dir>/" + daemon.DBDir + "), starts the libp2p host on --listen\n" +
			"(default TCP and QUIC on port 4777) and the node: the Kademlia DHT under /agentd,\n" +
			"GossipSub announcements and heartbeats, LAN discovery (UDP multicast and mDNS, off\n" +
			"with --no-lan), the live view, the resolver. It joins the\n" +
			"network through --bootstrap peers (or a list in DNS: /dnsaddr/<name>) and the address\n" +
			"book of earlier runs; behind a NAT it learns so from AutoNAT, takes a relay slot on a\n" +
			"bootstrap node and hole punches where the NATs allow (docs/nat.md). It serves\n" +
			"the local API on --api (default 127.0.0.1:4778). SIGINT or SIGTERM shuts it down:\n" +
			"hosted agents are unregistered (reason SHUTDOWN), then the API server, the node, the\n" +
			"host and the database close, within 10 s; a second signal exits at once.\n" +
			"With AGENTD_PPROF=127.0.0.1:6060 it also serves Go's profiler (/debug/pprof/) there.",
		Flags: withGlobal(append(nodeFlags(),
			&cli.StringFlag{Name: flagAPIAddrFile, Usage: "write the bound API address (host:port) to `FILE` once serving, and remove it on exit; useful with --api 127.0.0.1:0"},
		)...),
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("run takes no arguments (got %q)", c.Args().First())
			}
			cfg, err := effectiveConfig(c)
			if err != nil {
				return err
			}
			log := newLogger(c.App.ErrWriter, cfg.Log)
			if path, ok := stringFlag(c, flagConfig); ok && path != "" {
				log.Info("configuration loaded", "file", path)
			}
			opts := daemon.Options{Logger: log, Version: buildVersion().Version}
			if os.Getenv("GOGC") == "" {
				// See daemonGOGC (gctarget.go).
				debug.SetGCPercent(daemonStartGOGC)
				var gct *gcTarget
				opts.Serving = func() { gct = startGCTarget() }
				defer func() {
					if gct != nil {
						gct.stop()
					}
				}()
			}
			if addr := os.Getenv(envPprof); addr != "" {
				_, stop, err := startPprof(addr, log)
				if err != nil {
					return usagef("%v", err)
				}
				defer stop()
			}
			if f := c.String(flagAPIAddrFile); f != "" {
				opts.APIAddrFile, err = filepath.Abs(f)
				if err != nil {
					return err
				}
			}
			if err := daemon.Run(c.Context, cfg, opts); err != nil {
				log.Error("agentd stopped with an error", "err", err)
				return errReported
			}
			log.Info("agentd stopped")
			return nil
		},
	}
}

// newLogger builds the slog logger of the configuration (the level and
// format were validated with the configuration).
func newLogger(w io.Writer, lc config.LogConfig) *slog.Logger {
	var level slog.Level
	switch lc.Level {
	case "debug":
		level = slog.LevelDebug
	case "warn":
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	default:
		level = slog.LevelInfo
	}
	ho := &slog.HandlerOptions{Level: level}
	if lc.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, ho))
	}
	return slog.New(slog.NewTextHandler(w, ho))
}
