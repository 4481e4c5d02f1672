package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentd/agentd/trust"
	"github.com/urfave/cli/v2"
)

// keygenResult is what `agentd keygen` prints.
type keygenResult struct {
	AgentID       string `json:"agent_id"`
	PeerID        string `json:"peer_id"`
	PublicKeyPath string `json:"public_key_path"`
	Fingerprint   string `json:"fingerprint"`
	DataDir       string `json:"data_dir"`
	Created       bool   `json:"created"`
}

func keygenCommand() *cli.Command {
	return &cli.Command{
		Name:  "keygen",
		Usage: "create this node's identity in the data directory (never overwrites)",
		Description: "Creates what is missing in the data directory: the agent key (ECDSA P-256,\n" +
			trust.AgentKeyFile + " mode 0600 and " + trust.AgentPubFile + "), the libp2p peer key (Ed25519,\n" +
			trust.PeerKeyFile + " mode 0600) and the agent_id (a UUIDv4, " + trust.AgentIDFile + "). Existing files\n" +
			"are kept, so running it again prints the same identity. `agentd run` does the\n" +
			"same on start; keygen lets you learn the identity before the first run.",
		Flags: withGlobal(&cli.BoolFlag{Name: flagJSON, Usage: "print JSON"}),
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("keygen takes no arguments")
			}
			cfg, err := effectiveConfig(c)
			if err != nil {
				return err
			}
			_, statErr := os.Stat(filepath.Join(cfg.DataDir, trust.AgentKeyFile))
			created := errors.Is(statErr, fs.ErrNotExist)
			id, err := trust.LoadOrCreate(cfg.DataDir)
			if err != nil {
				return fmt.Errorf("identity in %s: %w", cfg.DataDir, err)
			}
			r := keygenResult{
				AgentID:       id.AgentID,
				PeerID:        id.PeerID.String(),
				PublicKeyPath: filepath.Join(cfg.DataDir, trust.AgentPubFile),
				Fingerprint:   trust.Fingerprint(&id.AgentKey.PublicKey),
				DataDir:       cfg.DataDir,
				Created:       created,
			}
			if c.Bool(flagJSON) {
				return json.NewEncoder(c.App.Writer).Encode(r)
			}
			var out strings.Builder
			w := &out
			if created {
				fmt.Fprintf(w, "created a new identity in %s\n", r.DataDir)
			} else {
				fmt.Fprintf(w, "identity already exists in %s (kept)\n", r.DataDir)
			}
			fmt.Fprintf(w, "agent_id:    %s\npeer_id:     %s\npublic_key:  %s\nfingerprint: %s\n", r.AgentID, r.PeerID, r.PublicKeyPath, r.Fingerprint)
			return emit(c.App.Writer, &out)
		},
	}
}
