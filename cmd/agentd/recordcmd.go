package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentd/agentd/internal/fsutil"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/trust"
	"github.com/urfave/cli/v2"
)

const (
	flagOut = "out"
	flagTTL = "ttl"
	// defaultRecordTTL is the ttl_seconds of records `record sign` makes
	// (seed 002's default registration lifetime).
	defaultRecordTTL = time.Hour
	// maxClockSkew is how far in the future issued_at may be before verify
	// refuses the record (the trust package's default).
	maxClockSkew = 5 * time.Minute
)

const fileFormats = "FILE is AgentSpec YAML, an agent JSON object, an agent_card, an A2A Agent Card or an\n" +
	"Announce JSON message (docs/protocol.md describes each); - reads standard input."

func recordCommand() *cli.Command {
	return &cli.Command{
		Name:   "record",
		Usage:  "validate, sign and verify agent records",
		Action: groupAction,
		Subcommands: []*cli.Command{
			{
				Name:      "validate",
				Usage:     "check an agent file and report OK or the offending field",
				ArgsUsage: "FILE",
				Description: "Checks FILE without signing it. " + fileFormats + "\n" +
					"An Announce is checked as a complete record (identity fields included);\n" +
					"other forms may leave out the identity fields that `record sign` fills.\n" +
					"Signatures are not checked: use `agentd record verify`. Exits 1 when invalid.",
				Flags:  globalFlags(),
				Action: recordValidate,
			},
			{
				Name:      "sign",
				Usage:     "sign an agent file with this node's identity and print the Announce JSON",
				ArgsUsage: "FILE",
				Description: "Fills the identity fields from the data directory's identity (agent_id unless\n" +
					"the file names one, peer_id, public_key), sets seq to the current Unix time in\n" +
					"milliseconds, issued_at to now and ttl_seconds to --ttl, signs with the agent key\n" +
					"and the peer key, and prints the seed-000 Announce message (with peer_signature).\n" +
					fileFormats + "\n" +
					"The identity must exist: create it with `agentd keygen`.",
				Flags: withGlobal(
					&cli.StringFlag{Name: flagOut, Aliases: []string{"o"}, Usage: "write the Announce JSON to `FILE` instead of standard output"},
					&cli.DurationFlag{Name: flagTTL, Value: defaultRecordTTL, Usage: "record lifetime `DURATION` (ttl_seconds), whole seconds from 1s to 168h"},
				),
				Action: recordSign,
			},
			{
				Name:      "verify",
				Usage:     "verify a signed Announce: both signatures and the expiry",
				ArgsUsage: "FILE",
				Description: "Checks an Announce JSON message (as `record sign` prints it): the agent\n" +
					"signature with the record's public_key, the peer signature with the key inside\n" +
					"its peer_id, and that issued_at + ttl_seconds has not passed. Prints the agent\n" +
					"id, peer id and key fingerprint. It checks the record alone: no trust policy,\n" +
					"allow-list or certificate chain is applied. Exits 1 when any check fails.",
				Flags:  globalFlags(),
				Action: recordVerify,
			},
		},
	}
}

// readInput reads the FILE argument ("-" is standard input), bounded by the
// largest agent file.
func readInput(c *cli.Context, name string) ([]byte, error) {
	return readArg(c, name, record.MaxAgentFileBytes)
}

// readArg reads a file named on the command line, "-" for standard input,
// at most limit bytes.
func readArg(c *cli.Context, name string, limit int64) ([]byte, error) {
	if name == "-" {
		return fsutil.ReadAll(c.App.Reader, displayName(name), limit)
	}
	return fsutil.ReadFile(name, limit)
}

func displayName(name string) string {
	if name == "-" {
		return "<stdin>"
	}
	return name
}

func recordValidate(c *cli.Context) error {
	name, err := oneArg(c, "FILE")
	if err != nil {
		return err
	}
	data, err := readInput(c, name)
	if err != nil {
		return err
	}
	shown := displayName(name)
	var out strings.Builder
	w := &out
	if record.IsAnnounce(data) {
		sa, newer, err := record.ParseAnnounce(data)
		if err != nil {
			return fmt.Errorf("%s: invalid: %w", shown, err)
		}
		signed := "unsigned"
		if len(sa.Signature) > 0 && len(sa.PeerSignature) > 0 {
			signed = "signed (not verified: use agentd record verify)"
		}
		fmt.Fprintf(w, "OK: %s: Announce of agent %s, %s, %s, %s\n", shown, sa.Agent.AgentID, plural(len(sa.Agent.Skills), "skill"), plural(len(sa.Agent.AllCapabilities()), "capability"), signed)
		if newer {
			fmt.Fprintf(w, "note: protocol_version %s is newer than this node's %s\n", sa.ProtocolVersion, record.ProtocolVersion)
		}
		return emit(c.App.Writer, &out)
	}
	a, err := record.LoadAgentFile(shown, data)
	if err != nil {
		return fmt.Errorf("invalid: %w", err)
	}
	id := a.AgentID
	if id == "" {
		id = "(agent_id filled when signed)"
	}
	fmt.Fprintf(w, "OK: %s: agent %s %s, %s, %s, unsigned\n", shown, a.AgentName, id, plural(len(a.Skills), "skill"), plural(len(a.AllCapabilities()), "capability"))
	return emit(c.App.Writer, &out)
}

func recordSign(c *cli.Context) error {
	name, err := oneArg(c, "FILE")
	if err != nil {
		return err
	}
	ttl := c.Duration(flagTTL)
	if ttl < time.Second || ttl > record.MaxTTLSeconds*time.Second || ttl%time.Second != 0 {
		return usagef("--ttl %s: must be whole seconds from 1s to %s", ttl, time.Duration(record.MaxTTLSeconds)*time.Second)
	}
	cfg, err := effectiveConfig(c)
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(cfg.DataDir, trust.AgentKeyFile)); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("no identity in %s: create one with `agentd keygen` (or give --data-dir)", cfg.DataDir)
	}
	id, err := trust.LoadOrCreate(cfg.DataDir)
	if err != nil {
		return fmt.Errorf("identity in %s: %w", cfg.DataDir, err)
	}
	data, err := readInput(c, name)
	if err != nil {
		return err
	}
	a, err := record.LoadAgentFile(displayName(name), data)
	if err != nil {
		return fmt.Errorf("invalid: %w", err)
	}
	now := time.Now()
	a.Fill(id.AgentID, id.PeerID.String(), id.PublicKeyPEM(), uint64(now.UnixMilli()), now, ttl)
	sa, err := id.Sign(a)
	if err != nil {
		return fmt.Errorf("sign %s: %w", displayName(name), err)
	}
	ann := append(sa.MarshalAnnounce(), '\n')
	if f := c.String(flagOut); f != "" {
		if err := fsutil.WriteFileAtomic(f, ann, 0o644); err != nil {
			return fmt.Errorf("write %s: %w", f, err)
		}
		_, _ = fmt.Fprintf(c.App.ErrWriter, "signed agent %s (seq %d, expires %s) into %s\n",
			sa.Agent.AgentID, sa.Agent.Seq, sa.Agent.ExpiresAt().UTC().Format(time.RFC3339), f)
		return nil
	}
	_, err = c.App.Writer.Write(ann)
	return err
}

func recordVerify(c *cli.Context) error {
	name, err := oneArg(c, "FILE")
	if err != nil {
		return err
	}
	data, err := readInput(c, name)
	if err != nil {
		return err
	}
	shown := displayName(name)
	if !record.IsAnnounce(data) {
		return fmt.Errorf("%s: not an Announce message (a JSON object with \"agent\" and signatures); sign it first with `agentd record sign`", shown)
	}
	sa, _, err := record.ParseAnnounce(data)
	if err != nil {
		return fmt.Errorf("%s: invalid: %w", shown, err)
	}
	if err := sa.VerifySignatures(); err != nil {
		return fmt.Errorf("%s: verification failed: %w", shown, err)
	}
	now := time.Now()
	issued, expires := sa.Agent.Issued(), sa.Agent.ExpiresAt()
	switch {
	case issued.IsZero():
		return fmt.Errorf("%s: verification failed: issued_at %q is not an RFC 3339 time", shown, sa.Agent.IssuedAt)
	case issued.After(now.Add(maxClockSkew)):
		return fmt.Errorf("%s: verification failed: issued_at %s is in the future", shown, sa.Agent.IssuedAt)
	case !now.Before(expires):
		return fmt.Errorf("%s: verification failed: the record expired at %s", shown, expires.UTC().Format(time.RFC3339))
	}
	key, err := sa.AgentPublicKey()
	if err != nil {
		return fmt.Errorf("%s: public_key: %w", shown, err)
	}
	var out strings.Builder
	w := &out
	fmt.Fprintf(w, "OK: %s: both signatures verify and the record is current\n", shown)
	fmt.Fprintf(w, "agent_id:    %s\n", sa.Agent.AgentID)
	if sa.Agent.AgentName != "" {
		fmt.Fprintf(w, "agent_name:  %s\n", sa.Agent.AgentName)
	}
	fmt.Fprintf(w, "peer_id:     %s\n", sa.Agent.PeerID)
	fmt.Fprintf(w, "fingerprint: %s\n", trust.Fingerprint(key))
	fmt.Fprintf(w, "seq:         %d\n", sa.Agent.Seq)
	fmt.Fprintf(w, "expires_at:  %s (in %s)\n", expires.UTC().Format(time.RFC3339), expires.Sub(now).Round(time.Second))
	return emit(c.App.Writer, &out)
}

// plural writes a count with its noun in the right number: "1 skill",
// "2 skills", "1 capability", "3 capabilities".
func plural(n int, noun string) string {
	if n == 1 {
		return fmt.Sprintf("1 %s", noun)
	}
	if strings.HasSuffix(noun, "y") {
		return fmt.Sprintf("%d %sies", n, strings.TrimSuffix(noun, "y"))
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
