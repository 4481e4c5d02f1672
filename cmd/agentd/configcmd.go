package main

import (
	"github.com/urfave/cli/v2"
)

func configCommand() *cli.Command {
	return &cli.Command{
		Name:   "config",
		Usage:  "inspect the configuration",
		Action: groupAction,
		Subcommands: []*cli.Command{{
			Name:  "print",
			Usage: "print the effective configuration (defaults < file < environment < flags)",
			Description: "Prints the configuration agentd would run with: the defaults, overridden by\n" +
				"the --config file, then by AGENTD_* environment variables, then by flags.\n" +
				"The data directory is shown expanded and listen shows the default addresses\n" +
				"when none are configured. Secrets (api.jwtSecret, discovery.udp.hmacKey,\n" +
				"registry.token) are shown as <redacted>. The YAML output is a valid --config file.",
			Flags: withGlobal(append(nodeFlags(), &cli.BoolFlag{Name: flagJSON, Usage: "print JSON instead of YAML"})...),
			Action: func(c *cli.Context) error {
				if c.NArg() > 0 {
					return usagef("config print takes no arguments")
				}
				cfg, err := effectiveConfig(c)
				if err != nil {
					return err
				}
				r := cfg.Redacted()
				out, err := r.YAML()
				if c.Bool(flagJSON) {
					out, err = r.JSON()
				}
				if err != nil {
					return err
				}
				_, err = c.App.Writer.Write(out)
				return err
			},
		}},
	}
}
