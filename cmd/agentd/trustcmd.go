package main

import (
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/trust"
	"github.com/urfave/cli/v2"
)

const (
	flagRoots         = "roots"
	flagIntermediates = "intermediates"
	flagCRL           = "crl"
	flagRevokedSerial = "revoked-serial"
	flagKey           = "key"
	flagAt            = "at"
	flagUsage         = "usage"
)

// trustCommand is `agentd trust`: the certificate trust decision, offline.
func trustCommand() *cli.Command {
	return &cli.Command{
		Name:   "trust",
		Usage:  "check certificates against a trust store",
		Action: groupAction,
		Subcommands: []*cli.Command{
			{
				Name:      "verify",
				Usage:     "verify a certificate (bundle) as the daemon's trust store would, and print the verdict",
				ArgsUsage: "CERT",
				Description: "CERT is a PEM file: the agent or skill certificate first, then any intermediate\n" +
					"CA certificates (the form of a record's certificate field; - reads standard\n" +
					"input). It is checked as the daemon checks a record's certificate: a path to a\n" +
					"root (expiry, key usage, path length, name constraints), not a CA, extended key\n" +
					"usage clientAuth (--usage names another: a server certificate is serverAuth),\n" +
					"not revoked by a CRL or the revoked-serial list, and, when given, that it\n" +
					"certifies --key, names --agent-id (or --skill) and is valid for the DNS name\n" +
					"--name. Flags go before CERT.\n\n" +
					"The trust store comes from the flags, else from the configuration's trust\n" +
					"section (trust.roots, trust.intermediates, trust.crls, trust.revokedSerials).\n" +
					"Prints OK, or REJECTED: <reason>: <detail> and exits 1; with --json every outcome,\n" +
					"an error before the verdict included ({\"verdict\":\"ERROR\",\"detail\":…}), is one\n" +
					"JSON object. Reasons: expired,\n" +
					"not_yet_valid, unknown_issuer, revoked, revocation_unknown, key_mismatch,\n" +
					"name_mismatch, bad_certificate, no_certificate.",
				Flags: withGlobal(
					&cli.StringSliceFlag{Name: flagRoots, Usage: "root CA certificate `FILE` or directory (repeatable)"},
					&cli.StringSliceFlag{Name: flagIntermediates, Usage: "intermediate CA certificate `FILE` or directory (repeatable)"},
					&cli.StringSliceFlag{Name: flagCRL, Usage: "CRL `FILE` or directory of *.crl (repeatable)"},
					&cli.StringSliceFlag{Name: flagRevokedSerial, Usage: "revoked certificate `SERIAL` in hex (repeatable)"},
					&cli.StringFlag{Name: flagKey, Usage: "the agent's public key `FILE` (PEM PUBLIC KEY or CERTIFICATE) the certificate must certify"},
					&cli.StringFlag{Name: flagAgentID, Usage: "the agent `ID` the certificate must name"},
					&cli.StringFlag{Name: flagSkill, Usage: "the skill `ID` the certificate must name"},
					&cli.StringFlag{Name: flagAt, Usage: "verify at `TIME` (RFC 3339) instead of now"},
					&cli.StringFlag{Name: flagUsage, Value: "clientAuth", Usage: "the extended key `USAGE` the certificate must state: clientAuth (agent and skill certificates), serverAuth, codeSigning, emailProtection, or any (none required)"},
					&cli.StringFlag{Name: flagName, Usage: "the DNS `NAME` the certificate must be valid for (a server certificate's host name)"},
					&cli.BoolFlag{Name: flagJSON, Usage: "print JSON"},
				),
				Action: trustVerify,
			},
		},
	}
}

// trustVerdict is what `agentd trust verify --json` prints.
type trustVerdict struct {
	Verdict string     `json:"verdict"` // OK | REJECTED
	Reason  string     `json:"reason,omitempty"`
	Detail  string     `json:"detail,omitempty"`
	Path    []certInfo `json:"path,omitempty"` // leaf first, root last
}

// ekuByName are the --usage values.
var ekuByName = map[string][]x509.ExtKeyUsage{
	"clientauth":      {x509.ExtKeyUsageClientAuth},
	"serverauth":      {x509.ExtKeyUsageServerAuth},
	"codesigning":     {x509.ExtKeyUsageCodeSigning},
	"emailprotection": {x509.ExtKeyUsageEmailProtection},
	"any":             {},
}

func trustVerify(c *cli.Context) error {
	err := trustVerifyRun(c)
	if err == nil || err == errReported || !c.Bool(flagJSON) {
		return err
	}
	// --json: one JSON object whatever happened.
	enc, merr := json.Marshal(trustVerdict{Verdict: "ERROR", Detail: err.Error()})
	if merr != nil {
		return err
	}
	var out strings.Builder
	out.Write(append(enc, '\n'))
	if werr := emit(c.App.Writer, &out); werr != nil {
		return werr
	}
	var ue *usageError
	if errors.As(err, &ue) {
		return &usageError{} // exit code 2, the message is in the JSON
	}
	return errReported
}

func trustVerifyRun(c *cli.Context) error {
	path, err := oneArg(c, "CERT")
	if err != nil {
		return err
	}
	cfg, err := effectiveConfig(c)
	if err != nil {
		return err
	}
	sc := trust.StoreConfig{Roots: cfg.Trust.Roots, Intermediates: cfg.Trust.Intermediates, CRLs: cfg.Trust.CRLs, RevokedSerials: cfg.Trust.RevokedSerials}
	if c.IsSet(flagRoots) {
		sc.Roots = nonEmpty(c.StringSlice(flagRoots))
	}
	if c.IsSet(flagIntermediates) {
		sc.Intermediates = nonEmpty(c.StringSlice(flagIntermediates))
	}
	if c.IsSet(flagCRL) {
		sc.CRLs = nonEmpty(c.StringSlice(flagCRL))
	}
	if c.IsSet(flagRevokedSerial) {
		sc.RevokedSerials = nonEmpty(c.StringSlice(flagRevokedSerial))
	}
	if len(sc.Roots) == 0 {
		return usagef("trust verify: no root certificates: pass --roots or set trust.roots in the configuration")
	}
	usage, ok := ekuByName[strings.ToLower(c.String(flagUsage))]
	if !ok {
		return usagef("trust verify: --usage %q: one of clientAuth, serverAuth, codeSigning, emailProtection, any", c.String(flagUsage))
	}
	check := trust.CertCheck{AgentID: c.String(flagAgentID), SkillID: c.String(flagSkill), Usage: usage, DNSName: c.String(flagName)}
	if check.AgentID != "" {
		if err := record.ValidateAgentID(check.AgentID); err != nil {
			return usagef("trust verify: --agent-id: %v", err)
		}
	}
	if at := c.String(flagAt); at != "" {
		t, err := time.Parse(time.RFC3339, at)
		if err != nil {
			return usagef("trust verify: --at: %v", err)
		}
		check.Now = t
	}
	if kf := c.String(flagKey); kf != "" {
		b, err := readCertInput(c, kf)
		if err != nil {
			return err
		}
		k, err := record.ParsePublicKeyPEM(strings.TrimSpace(string(b)) + "\n")
		if err != nil {
			return fmt.Errorf("--key %s: %w", kf, err)
		}
		check.Key = k
	}
	store, err := trust.LoadStore(sc)
	if err != nil {
		return err
	}
	b, err := readCertInput(c, path)
	if err != nil {
		return err
	}
	v := trustVerdict{Verdict: "OK"}
	certs, perr := trust.ParseCertificateFile(b)
	if perr == nil {
		var got []*x509.Certificate
		got, err = store.Check(certs, check)
		for _, x := range got {
			v.Path = append(v.Path, describeCert(x))
		}
	} else {
		err = &trust.RejectError{Reason: trust.ReasonBadCertificate, Detail: fmt.Sprintf("%s: %v", path, perr)}
	}
	if err != nil {
		var re *trust.RejectError
		if !errors.As(err, &re) {
			return err
		}
		v = trustVerdict{Verdict: "REJECTED", Reason: string(re.Reason), Detail: re.Detail}
	}
	var out strings.Builder
	if c.Bool(flagJSON) {
		enc, err := json.Marshal(v)
		if err != nil {
			return err
		}
		out.Write(append(enc, '\n'))
	} else if v.Verdict == "OK" {
		fmt.Fprintf(&out, "OK\n")
		for i, ci := range v.Path {
			role := "intermediate"
			switch i {
			case 0:
				role = "certificate"
			case len(v.Path) - 1:
				role = "root"
			}
			fmt.Fprintf(&out, "%s:\n", role)
			writeCertInfo(&out, ci, "  ")
		}
	} else {
		fmt.Fprintf(&out, "REJECTED: %s: %s\n", v.Reason, v.Detail)
	}
	if err := emit(c.App.Writer, &out); err != nil {
		return err
	}
	if v.Verdict != "OK" {
		return errReported
	}
	return nil
}
