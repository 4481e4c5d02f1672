package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/agentd/agentd/trust"
	"github.com/urfave/cli/v2"
)

const (
	flagDir      = "dir"
	flagCSR      = "csr"
	flagDays     = "days"
	flagSkill    = "skill"
	flagAgentID  = "agent-id"
	flagName     = "name"
	flagRootDays = "root-days"
	flagSubDays  = "sub-days"
	flagCRLDays  = "crl-days"
)

// caCommand is `agentd ca`: a small CA for tests and small deployments.
func caCommand() *cli.Command {
	dirFlag := &cli.StringFlag{Name: flagDir, Usage: "CA `DIR`ectory", Required: true}
	crlDays := &cli.IntFlag{Name: flagCRLDays, Value: trust.DefaultCRLDays, Usage: "validity of the CRLs in `DAYS` (their nextUpdate)"}
	return &cli.Command{
		Name:  "ca",
		Usage: "a small certificate authority (Root CA → SkillCenter CA → agent and skill certificates)",
		Description: "For tests and small deployments: everything lives in one directory (keys mode\n" +
			"0600). Verifiers trust it with trust.roots = DIR/" + trust.CARootCert + ", trust.intermediates =\n" +
			"DIR/" + trust.CASubCert + " and trust.crls = DIR (its *.crl files). All keys are ECDSA P-256.",
		Action: groupAction,
		Subcommands: []*cli.Command{
			{
				Name:  "init",
				Usage: "create a Root CA and a SkillCenter CA",
				Description: "Creates DIR (0700) with the Root CA (" + trust.CARootCert + ", key " + trust.CARootKey + ", path length 1),\n" +
					"the SkillCenter CA it issues (" + trust.CASubCert + ", key " + trust.CASubKey + ", path length 0,\n" +
					"extended key usage clientAuth), an empty CRL for each (" + trust.CARootCRL + ", " + trust.CASubCRL + ")\n" +
					"and the state file " + trust.CAState + ". Refuses a directory that already holds a CA.",
				Flags: withGlobal(dirFlag,
					&cli.StringFlag{Name: flagName, Value: "agentd", Usage: "`NAME` prefix of the CAs' common names"},
					&cli.IntFlag{Name: flagRootDays, Value: trust.DefaultRootDays, Usage: "Root CA validity in `DAYS`"},
					&cli.IntFlag{Name: flagSubDays, Value: trust.DefaultSubDays, Usage: "SkillCenter CA validity in `DAYS`"},
					crlDays,
					&cli.BoolFlag{Name: flagJSON, Usage: "print JSON"},
				),
				Action: func(c *cli.Context) error {
					if c.NArg() > 0 {
						return usagef("ca init takes no arguments")
					}
					if c.Int(flagRootDays) <= 0 || c.Int(flagSubDays) <= 0 || c.Int(flagCRLDays) <= 0 {
						return usagef("ca init: --root-days, --sub-days and --crl-days must be positive")
					}
					ca, err := trust.InitCA(c.String(flagDir), trust.CAOptions{Name: c.String(flagName), RootDays: c.Int(flagRootDays),
						SubDays: c.Int(flagSubDays), CRLDays: c.Int(flagCRLDays)})
					if err != nil {
						return err
					}
					sc := ca.StoreConfig()
					r := caInitResult{Dir: ca.Dir, Root: describeCert(ca.Root), SkillCenter: describeCert(ca.Sub),
						Trust: trustPaths{Roots: sc.Roots, Intermediates: sc.Intermediates, CRLs: sc.CRLs}}
					if c.Bool(flagJSON) {
						return json.NewEncoder(c.App.Writer).Encode(r)
					}
					var b strings.Builder
					fmt.Fprintf(&b, "created the CA in %s\nRoot CA:\n", ca.Dir)
					writeCertInfo(&b, r.Root, "  ")
					fmt.Fprintf(&b, "SkillCenter CA:\n")
					writeCertInfo(&b, r.SkillCenter, "  ")
					fmt.Fprintf(&b, "verifiers trust it with:\n  trust:\n    roots: [%s]\n    intermediates: [%s]\n    crls: [%s]\n",
						r.Trust.Roots[0], r.Trust.Intermediates[0], strings.Join(r.Trust.CRLs, ", "))
					return emit(c.App.Writer, &b)
				},
			},
			{
				Name:  "issue",
				Usage: "issue an agent or skill certificate from a certificate signing request",
				Description: "Signs a certificate for the key of the CSR (agentd cert request, or openssl req)\n" +
					"with the SkillCenter CA and writes the bundle (the certificate, then the\n" +
					"SkillCenter CA) to --out or standard output: what `agentd cert install` takes.\n" +
					"Only the key is taken from the CSR. The certificate names the agent\n" +
					"(" + trust.AgentURIPrefix + "<id>: --agent-id, else the CSR's agentd URI, else its CN when it\n" +
					"is a UUID) or, with --skill, the skill (" + trust.SkillURIPrefix + "<id>); it carries keyUsage\n" +
					"digitalSignature, extKeyUsage clientAuth and cA=FALSE.",
				Flags: withGlobal(dirFlag,
					&cli.StringFlag{Name: flagCSR, Usage: "certificate signing request `FILE` (PEM or DER; - reads standard input)", Required: true},
					&cli.IntFlag{Name: flagDays, Value: trust.DefaultLeafDays, Usage: "validity in `DAYS` (never past the SkillCenter CA's)"},
					&cli.StringFlag{Name: flagSkill, Usage: "issue a skill certificate for skill `ID`"},
					&cli.StringFlag{Name: flagAgentID, Usage: "the agent `ID` to name (default: from the CSR)"},
					&cli.StringFlag{Name: flagOut, Aliases: []string{"o"}, Usage: "write the bundle to `FILE`"},
				),
				Action: caIssue,
			},
			{
				Name:      "revoke",
				Usage:     "revoke a certificate by serial number or file, and re-sign the CRLs",
				ArgsUsage: "SERIAL|CERT",
				Description: "SERIAL is hex, as printed by `agentd ca issue` and openssl; CERT is a PEM file.\n" +
					"The SkillCenter CA itself is revoked on the Root CA's CRL, every other\n" +
					"certificate on the SkillCenter CA's. Verifiers see it once they load the new CRL\n" +
					"(a restart, or a reload of the trust store).",
				Flags:  withGlobal(dirFlag, crlDays),
				Action: caRevoke,
			},
			{
				Name:        "crl",
				Usage:       "re-sign both CRLs (run before their nextUpdate passes)",
				Description: "Signs both CRLs again with a new CRL number, thisUpdate now and nextUpdate now + --crl-days.",
				Flags:       withGlobal(dirFlag, crlDays),
				Action: func(c *cli.Context) error {
					if c.NArg() > 0 {
						return usagef("ca crl takes no arguments")
					}
					ca, err := trust.OpenCA(c.String(flagDir))
					if err != nil {
						return err
					}
					if err := ca.WriteCRLs(time.Now(), c.Int(flagCRLDays)); err != nil {
						return err
					}
					_, err = fmt.Fprintf(c.App.Writer, "re-signed %s and %s in %s\n", trust.CARootCRL, trust.CASubCRL, ca.Dir)
					return err
				},
			},
		},
	}
}

type caInitResult struct {
	Dir         string     `json:"dir"`
	Root        certInfo   `json:"root"`
	SkillCenter certInfo   `json:"skillcenter"`
	Trust       trustPaths `json:"trust"`
}

// trustPaths is the trust section of a configuration that trusts a CA.
type trustPaths struct {
	Roots         []string `json:"roots"`
	Intermediates []string `json:"intermediates"`
	CRLs          []string `json:"crls"`
}

func caIssue(c *cli.Context) error {
	if c.NArg() > 0 {
		return usagef("ca issue takes no arguments (the CSR goes in --csr)")
	}
	if c.Int(flagDays) <= 0 {
		return usagef("ca issue: --days must be positive")
	}
	ca, err := trust.OpenCA(c.String(flagDir))
	if err != nil {
		return err
	}
	b, err := readCertInput(c, c.String(flagCSR))
	if err != nil {
		return err
	}
	csr, err := trust.ParseCSRPEM(b)
	if err != nil {
		return fmt.Errorf("%s: %w", c.String(flagCSR), err)
	}
	leaf, bundle, err := ca.Issue(csr, trust.IssueOptions{AgentID: c.String(flagAgentID), SkillID: c.String(flagSkill), Days: c.Int(flagDays)})
	if err != nil {
		return err
	}
	var note strings.Builder
	fmt.Fprintf(&note, "issued serial %s to %s, valid until %s\n", trust.FormatSerial(leaf.SerialNumber), strings.Join(describeCert(leaf).Names, ", "),
		leaf.NotAfter.UTC().Format(time.RFC3339))
	if out := c.String(flagOut); out != "" {
		if err := os.WriteFile(out, bundle, 0o644); err != nil {
			return fmt.Errorf("write %s: %w", out, err)
		}
		fmt.Fprintf(&note, "wrote the bundle to %s\n", out)
		return emit(c.App.Writer, &note)
	}
	if _, err := c.App.Writer.Write(bundle); err != nil {
		return err
	}
	return emit(c.App.ErrWriter, &note)
}

func caRevoke(c *cli.Context) error {
	arg, err := oneArg(c, "SERIAL or CERT")
	if err != nil {
		return err
	}
	ca, err := trust.OpenCA(c.String(flagDir))
	if err != nil {
		return err
	}
	now := time.Now()
	if st, statErr := os.Stat(arg); statErr == nil && !st.IsDir() {
		b, err := readCertInput(c, arg)
		if err != nil {
			return err
		}
		certs, err := trust.ParseCertificateFile(b)
		if err != nil {
			return fmt.Errorf("%s: %w", arg, err)
		}
		if err := ca.RevokeCert(certs[0], now, c.Int(flagCRLDays)); err != nil {
			return err
		}
		_, err = fmt.Fprintf(c.App.Writer, "revoked serial %s (%s); CRLs re-signed in %s\n", trust.FormatSerial(certs[0].SerialNumber), certs[0].Subject.CommonName, ca.Dir)
		return err
	}
	serial, err := trust.ParseSerial(arg)
	if err != nil {
		if errors.Is(err, trust.ErrBadSerial) {
			return usagef("ca revoke: %q is neither a file nor a hex serial number", arg)
		}
		return err
	}
	known, err := ca.Revoke(serial, now, c.Int(flagCRLDays))
	if err != nil {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "revoked serial %s; CRLs re-signed in %s\n", trust.FormatSerial(serial), ca.Dir)
	if !known {
		fmt.Fprintf(&b, "note: this CA has no record of issuing serial %s; it is on the SkillCenter CA's CRL all the same\n", trust.FormatSerial(serial))
	}
	return emit(c.App.Writer, &b)
}
