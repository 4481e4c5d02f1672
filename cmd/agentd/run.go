package main

import (
	"io"
	"log/slog"
	"path/filepath"

	"github.com/agentd/agentd/config"
	"github.com/urfave/cli/v2"
)

const flagAPIAddrFile = "api-addr-file"

func runCommand() *cli.Command {
	return &cli.Command{
		Name:  "run",
		Usage: "run the daemon until SIGINT or SIGTERM",
		Description: "Loads the configuration, loads or creates the identity in the data directory,\n" +
			"opens the database (<data dir>/" + DBDir + "), starts the libp2p host on --listen\n" +
			"(default TCP and QUIC on port 4777) and serves GET /healthz on the loopback API\n" +
			"address --api (default 127.0.0.1:4778). SIGINT or SIGTERM shuts it down: the API\n" +
			"server, then the host, then the database, within 10 s; a second signal exits at once.\n\n" +
			"This version runs the host and the health endpoint only: DHT, gossip and LAN\n" +
			"discovery, and the agent API, are not started yet.",
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
			opts := daemonOptions{Version: buildVersion().Version}
			if f := c.String(flagAPIAddrFile); f != "" {
				opts.APIAddrFile, err = filepath.Abs(f)
				if err != nil {
					return err
				}
			}
			if err := runDaemon(c.Context, cfg, log, opts); err != nil {
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
