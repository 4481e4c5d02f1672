package main

import (
	"crypto/ecdsa"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/agentd/agentd/config"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/skillcenter"
	"github.com/agentd/agentd/trust"
	"github.com/urfave/cli/v2"
)

// Flags of `agentd skill`.
const (
	skFlagFrom          = "from"
	skFlagRequireSigned = "require-signed"
	skFlagSHA256        = "sha256"
	skFlagTrustedKey    = "trusted-key"
	skFlagKeyword       = "keyword"
	skFlagTimeout       = "timeout"
)

// skillCommand is `agentd skill`: skills of a SkillCenter catalog.
func skillCommand() *cli.Command {
	from := &cli.StringFlag{Name: skFlagFrom, Usage: "SkillCenter `URL` (default discovery.skillCenter.url of the configuration)"}
	token := &cli.StringFlag{Name: cfToken, EnvVars: []string{cfEnvToken}, Usage: "bearer `TOKEN` for a catalog that requires one"}
	timeout := &cli.DurationFlag{Name: skFlagTimeout, Usage: "bound one request (default discovery.skillCenter.timeout, 10s)"}
	return &cli.Command{
		Name:   "skill",
		Usage:  "search a SkillCenter catalog and install its skills",
		Action: groupAction,
		Subcommands: []*cli.Command{
			{
				Name:      "install",
				Usage:     "download a skill's package, verify it and install it in the data directory",
				ArgsUsage: "ID",
				Description: "Looks the skill up in the catalog (GET /api/skills/{id}), downloads its package\n" +
					"(GET /api/skills/{id}/download) and checks it against the manifest the catalog\n" +
					"serves: the size and SHA-256 (which a signed manifest's signature covers), and\n" +
					"the signature. A signer is trusted when the configuration's trust store\n" +
					"(trust.roots …) certifies it for the skill or its key is a --trusted-key; with\n" +
					"either configured, a signature they do not anchor is refused, and\n" +
					"--require-signed refuses unsigned or unanchored manifests. A catalog that serves\n" +
					"no manifest (a seed-001 SkillCenter) needs the digest from the download's\n" +
					"Content-Digest or from --sha256. The package and manifest.json land in\n" +
					"<data dir>/skills/<id>/<version>/, written beside it and renamed into place,\n" +
					"so a failed install leaves nothing behind.",
				Flags: withGlobal(from, token, timeout,
					&cli.BoolFlag{Name: skFlagRequireSigned, Usage: "refuse a skill whose manifest is not signed by a trusted signer"},
					&cli.StringFlag{Name: skFlagSHA256, Usage: "expected SHA-256 of the package, `HEX`"},
					&cli.StringSliceFlag{Name: skFlagTrustedKey, Usage: "public key `FILE` (PEM) of a trusted manifest signer (repeatable)"},
					&cli.BoolFlag{Name: flagJSON, Usage: "print JSON"},
				),
				Action: skillInstall,
			},
			{
				Name:  "search",
				Usage: "search the catalog (POST /api/skills/search) and print the skills",
				Description: "Every capability must match; one of the scenes and one of the types; every\n" +
					"keyword (case-insensitive) must occur in the skill; --version is a semver range.\n" +
					"With no criteria it lists the catalog (GET /api/skills).",
				Flags: withGlobal(from, token, timeout,
					&cli.StringSliceFlag{Name: cfCapability, Usage: "capability `ID` (repeatable, all must match)"},
					&cli.StringSliceFlag{Name: cfScene, Usage: "scene `NAME` (repeatable, any may match)"},
					&cli.StringSliceFlag{Name: cfType, Usage: "skill `TYPE` (repeatable): enterprise-skill, tool-skill, integration-skill"},
					&cli.StringSliceFlag{Name: skFlagKeyword, Usage: "`WORD` (repeatable, all must occur)"},
					&cli.StringFlag{Name: cfVersionC, Usage: "semver `RANGE`, e.g. '>=0.7.0'"},
					&cli.BoolFlag{Name: flagJSON, Usage: "print the catalog's search answer as JSON"},
				),
				Action: skillSearch,
			},
		},
	}
}

// skillClient builds the catalog client of a skill command.
func skillClient(c *cli.Context, cfg config.Config) (*skillcenter.Client, error) {
	u := c.String(skFlagFrom)
	if u == "" {
		u = cfg.Discovery.SkillCenter.URL
	}
	if u == "" {
		return nil, usagef("%s: no catalog: pass --%s URL or set discovery.skillCenter.url", c.Command.HelpName, skFlagFrom)
	}
	to := cfg.Discovery.SkillCenter.Timeout.D()
	if c.IsSet(skFlagTimeout) {
		to = c.Duration(skFlagTimeout)
	}
	if to <= 0 {
		return nil, usagef("%s: --%s must be positive", c.Command.HelpName, skFlagTimeout)
	}
	cl, err := skillcenter.NewClient(u, skillcenter.Options{Timeout: to, Token: c.String(cfToken), CacheTTL: -1, UserAgent: "agentd/" + buildVersion().Version})
	if err != nil {
		return nil, usagef("%s: --%s: %v", c.Command.HelpName, skFlagFrom, err)
	}
	return cl, nil
}

func skillInstall(c *cli.Context) error {
	id, err := oneArg(c, "ID")
	if err != nil {
		return err
	}
	if !skillcenter.ValidID(id) {
		return usagef("skill install: %q is not a skill id", id)
	}
	cfg, err := effectiveConfig(c)
	if err != nil {
		return err
	}
	o := skillcenter.InstallOptions{DataDir: cfg.DataDir, RequireSigned: c.Bool(skFlagRequireSigned), SHA256: c.String(skFlagSHA256)}
	if len(cfg.Trust.Roots) > 0 {
		ts, err := trust.LoadStore(trust.StoreConfig{Roots: cfg.Trust.Roots, Intermediates: cfg.Trust.Intermediates, CRLs: cfg.Trust.CRLs, RevokedSerials: cfg.Trust.RevokedSerials})
		if err != nil {
			return fmt.Errorf("trust store: %w", err)
		}
		o.Anchors.Certs = ts
	}
	for _, f := range nonEmpty(c.StringSlice(skFlagTrustedKey)) {
		k, err := readPublicKeyFile(f)
		if err != nil {
			return fmt.Errorf("--%s %s: %w", skFlagTrustedKey, f, err)
		}
		o.Anchors.Keys = append(o.Anchors.Keys, k)
	}
	cl, err := skillClient(c, cfg)
	if err != nil {
		return err
	}
	defer func() { _ = cl.Close() }()
	in, err := skillcenter.Install(c.Context, cl, id, o)
	if err != nil {
		return fmt.Errorf("install %s from %s: %w", id, cl.URL(), err)
	}
	if c.Bool(flagJSON) {
		return json.NewEncoder(c.App.Writer).Encode(in)
	}
	var b strings.Builder
	verb := "installed"
	if in.Already {
		verb = "already installed"
	}
	fmt.Fprintf(&b, "%s %s %s in %s\n", verb, in.ID, in.Version, in.Dir)
	fmt.Fprintf(&b, "package: %s (%d bytes, sha256 %s)\n", in.File, in.Size, in.SHA256)
	switch {
	case in.Signer == "":
		b.WriteString("manifest: unsigned\n")
	case in.Anchored:
		fmt.Fprintf(&b, "manifest: signed by key %s, trusted\n", in.Signer)
	default:
		fmt.Fprintf(&b, "manifest: signed by key %s, not anchored (no trust store or trusted key vouches for it)\n", in.Signer)
	}
	return emit(c.App.Writer, &b)
}

// readPublicKeyFile reads an ECDSA P-256 public key (PEM PUBLIC KEY or
// CERTIFICATE).
func readPublicKeyFile(path string) (*ecdsa.PublicKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return record.ParsePublicKeyPEM(strings.TrimSpace(string(b)) + "\n")
}

func skillSearch(c *cli.Context) error {
	if c.NArg() > 0 {
		return usagef("skill search takes no arguments (got %q); use --keyword", c.Args().First())
	}
	cfg, err := effectiveConfig(c)
	if err != nil {
		return err
	}
	req := skillcenter.SearchRequest{
		Capabilities: nonEmpty(c.StringSlice(cfCapability)), Scenes: nonEmpty(c.StringSlice(cfScene)),
		Types: nonEmpty(c.StringSlice(cfType)), Keywords: nonEmpty(c.StringSlice(skFlagKeyword)), Version: c.String(cfVersionC),
	}
	if err := req.Validate(); err != nil {
		return usagef("skill search: --%s", fieldFlag(err))
	}
	cl, err := skillClient(c, cfg)
	if err != nil {
		return err
	}
	defer func() { _ = cl.Close() }()
	var ans skillcenter.Answer[skillcenter.SkillList]
	if len(req.Capabilities)+len(req.Scenes)+len(req.Types)+len(req.Keywords) == 0 && req.Version == "" {
		ans, err = cl.List(c.Context)
	} else {
		ans, err = cl.Search(c.Context, req)
	}
	if err != nil {
		return fmt.Errorf("search %s: %w", cl.URL(), err)
	}
	if c.Bool(flagJSON) {
		return json.NewEncoder(c.App.Writer).Encode(ans.Value)
	}
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	_, _ = fmt.Fprintln(tw, "ID\tVERSION\tTYPE\tCAPABILITIES\tSCENES\tENDPOINT")
	for _, s := range ans.Value.Skills {
		_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", s.ID, s.Version, s.Type, strings.Join(s.Capabilities, ","), dashIfEmpty(strings.Join(s.Scenes, ",")), dashIfEmpty(s.Endpoint))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(ans.Value.Skills) == 0 {
		return errors.New("no skill matches")
	}
	return emit(c.App.Writer, &b)
}

// fieldFlag renders a search validation error with the flag it came from.
func fieldFlag(err error) string {
	field := record.FieldOf(err)
	name, _, _ := strings.Cut(field, "[")
	flag := map[string]string{"capabilities": cfCapability, "scenes": cfScene, "types": cfType, "keywords": skFlagKeyword, "version": cfVersionC}[name]
	if flag == "" {
		return err.Error()
	}
	var fe *record.FieldError
	if errors.As(err, &fe) {
		return flag + ": " + fe.Reason
	}
	return flag + ": " + err.Error()
}
