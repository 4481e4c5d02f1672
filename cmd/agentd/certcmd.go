package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/trust"
	"github.com/urfave/cli/v2"
)

const flagCN = "cn"

// maxCertInputBytes bounds the certificate, CSR and key files the trust
// commands read.
const maxCertInputBytes = 1 << 20

// certCommand is `agentd cert`: the agent's certificate.
func certCommand() *cli.Command {
	return &cli.Command{
		Name:   "cert",
		Usage:  "request and install the agent's X.509 certificate",
		Action: groupAction,
		Subcommands: []*cli.Command{
			{
				Name:  "request",
				Usage: "print a certificate signing request (CSR) for the agent key",
				Description: "Writes a PEM certificate signing request for the agent key of the data\n" +
					"directory, signed by that key, naming the agent by the URI subjectAltName\n" +
					trust.AgentURIPrefix + "<agent_id> and the subject CN (--cn, default the agent id).\n" +
					"Hand it to your CA (`agentd ca issue --csr FILE`), then install the certificate\n" +
					"it returns with `agentd cert install`. The identity must exist (`agentd keygen`).",
				Flags: withGlobal(
					&cli.StringFlag{Name: flagOut, Aliases: []string{"o"}, Usage: "write the CSR to `FILE` instead of standard output"},
					&cli.StringFlag{Name: flagCN, Usage: "subject common `NAME` (default the agent id)"},
				),
				Action: certRequest,
			},
			{
				Name:      "install",
				Usage:     "install the agent's certificate bundle into the data directory",
				ArgsUsage: "FILE",
				Description: "Checks that FILE (PEM: the agent certificate first, then its intermediate CA\n" +
					"certificates) certifies this agent key and names this agent id, and writes it\n" +
					"to " + trust.CertFile + " in the data directory. Every record the node signs then\n" +
					"carries it (the record's certificate field), which peers with the ca trust\n" +
					"policy require. The chain itself is checked by the peers' trust stores; check\n" +
					"it first with `agentd trust verify`.",
				Flags:  globalFlags(),
				Action: certInstall,
			},
			{
				Name:  "show",
				Usage: "describe the installed certificate and the key rotation state",
				Flags: withGlobal(&cli.BoolFlag{Name: flagJSON, Usage: "print JSON"}),
				Action: func(c *cli.Context) error {
					if c.NArg() > 0 {
						return usagef("cert show takes no arguments")
					}
					id, _, err := loadIdentity(c)
					if err != nil {
						return err
					}
					info := identityCertInfo(id)
					if c.Bool(flagJSON) {
						return json.NewEncoder(c.App.Writer).Encode(info)
					}
					var b strings.Builder
					fmt.Fprintf(&b, "agent_id:    %s\nfingerprint: %s\n", info.AgentID, info.Fingerprint)
					if len(info.Certificates) == 0 {
						fmt.Fprintf(&b, "certificate: none (%s is not installed)\n", trust.CertFile)
					}
					for i, ci := range info.Certificates {
						fmt.Fprintf(&b, "certificate %d:\n", i+1)
						writeCertInfo(&b, ci, "  ")
					}
					if info.RotatedFrom != "" {
						fmt.Fprintf(&b, "rotated from key %s at %s\n", info.RotatedFrom, info.RotatedAt)
					}
					return emit(c.App.Writer, &b)
				},
			},
		},
	}
}

// keyCommand is `agentd key`: the agent key's lifecycle.
func keyCommand() *cli.Command {
	return &cli.Command{
		Name:   "key",
		Usage:  "rotate the agent key",
		Action: groupAction,
		Subcommands: []*cli.Command{
			{
				Name:  "rotate",
				Usage: "replace the agent key with a new one, announced by a statement the old key signs",
				Description: "Generates a new agent key (ECDSA P-256) in the data directory, signs a\n" +
					"rotation statement with the old key (" + trust.RotationFile + "), and keeps the old\n" +
					"key and its certificate under " + trust.RetiredDir + "/. The agent id and the peer key stay.\n" +
					"Every record the node signs afterwards carries the statement, so peers that\n" +
					"know the old key accept the new one at once and the old one for their grace\n" +
					"period (trust.rotationGrace, default 24h), then refuse it.\n\n" +
					"Run it while the daemon is stopped, then start the daemon. A certificate binds\n" +
					"one key: under the ca policy, request and install a certificate for the new key\n" +
					"(`agentd cert request`, `agentd cert install`) before starting.",
				Flags: withGlobal(&cli.BoolFlag{Name: flagJSON, Usage: "print JSON"}),
				Action: func(c *cli.Context) error {
					if c.NArg() > 0 {
						return usagef("key rotate takes no arguments")
					}
					id, dataDir, err := loadIdentity(c)
					if err != nil {
						return err
					}
					oldFP := trust.Fingerprint(&id.AgentKey.PublicKey)
					hadCert := id.Certificate != ""
					nid, err := trust.Rotate(id, dataDir, time.Now())
					if err != nil {
						return fmt.Errorf("rotate the agent key in %s: %w", dataDir, err)
					}
					r := keyRotateResult{
						AgentID: nid.AgentID, OldFingerprint: oldFP, NewFingerprint: trust.Fingerprint(&nid.AgentKey.PublicKey),
						Statement: filepath.Join(dataDir, trust.RotationFile), IssuedAt: nid.Rotation.IssuedAt,
						RetiredKey: filepath.Join(dataDir, trust.RetiredDir, "private_key."+oldFP+".pem"), CertificateRetired: hadCert,
					}
					if c.Bool(flagJSON) {
						return json.NewEncoder(c.App.Writer).Encode(r)
					}
					var b strings.Builder
					fmt.Fprintf(&b, "rotated the agent key of %s\nold key:   %s (kept in %s)\nnew key:   %s\nstatement: %s\n",
						r.AgentID, r.OldFingerprint, r.RetiredKey, r.NewFingerprint, r.Statement)
					if hadCert {
						fmt.Fprintf(&b, "the certificate of the old key was moved to %s/: request one for the new key (agentd cert request)\n", trust.RetiredDir)
					}
					fmt.Fprintf(&b, "start (or restart) the daemon to announce the new key\n")
					return emit(c.App.Writer, &b)
				},
			},
		},
	}
}

// keyRotateResult is what `agentd key rotate --json` prints.
type keyRotateResult struct {
	AgentID            string `json:"agent_id"`
	OldFingerprint     string `json:"old_fingerprint"`
	NewFingerprint     string `json:"new_fingerprint"`
	Statement          string `json:"statement"`
	IssuedAt           string `json:"issued_at"`
	RetiredKey         string `json:"retired_key"`
	CertificateRetired bool   `json:"certificate_retired"`
}

// loadIdentity loads the identity of the data directory, which must
// exist, and returns it with the directory.
func loadIdentity(c *cli.Context) (*trust.Identity, string, error) {
	cfg, err := effectiveConfig(c)
	if err != nil {
		return nil, "", err
	}
	if _, err := os.Stat(filepath.Join(cfg.DataDir, trust.AgentKeyFile)); errors.Is(err, fs.ErrNotExist) {
		return nil, "", fmt.Errorf("no identity in %s: create it with `agentd keygen`", cfg.DataDir)
	}
	id, err := trust.LoadOrCreate(cfg.DataDir)
	if err != nil {
		return nil, "", fmt.Errorf("identity in %s: %w", cfg.DataDir, err)
	}
	return id, cfg.DataDir, nil
}

func certRequest(c *cli.Context) error {
	if c.NArg() > 0 {
		return usagef("cert request takes no arguments")
	}
	id, _, err := loadIdentity(c)
	if err != nil {
		return err
	}
	csr, err := trust.CreateCSR(id, c.String(flagCN))
	if err != nil {
		return err
	}
	if out := c.String(flagOut); out != "" {
		if err := os.WriteFile(out, csr, 0o644); err != nil {
			return fmt.Errorf("write %s: %w", out, err)
		}
		_, err := fmt.Fprintf(c.App.ErrWriter, "wrote the certificate request of agent %s to %s\n", id.AgentID, out)
		return err
	}
	_, err = c.App.Writer.Write(csr)
	return err
}

func certInstall(c *cli.Context) error {
	path, err := oneArg(c, "FILE")
	if err != nil {
		return err
	}
	id, dataDir, err := loadIdentity(c)
	if err != nil {
		return err
	}
	b, err := readCertInput(c, path)
	if err != nil {
		return err
	}
	if err := trust.InstallCertificate(id, dataDir, b); err != nil {
		return err
	}
	certs, _ := record.ParseCertificatesPEM(id.Certificate)
	var out strings.Builder
	fmt.Fprintf(&out, "installed %s (%d certificates) for agent %s\n", filepath.Join(dataDir, trust.CertFile), len(certs), id.AgentID)
	writeCertInfo(&out, describeCert(certs[0]), "  ")
	return emit(c.App.Writer, &out)
}

// readCertInput reads a certificate, CSR or key file (or standard input
// for "-"), bounded.
func readCertInput(c *cli.Context, path string) ([]byte, error) {
	return readArg(c, path, maxCertInputBytes)
}

// certInfo describes one certificate for people and for --json.
type certInfo struct {
	Subject     string   `json:"subject"`
	Issuer      string   `json:"issuer"`
	Serial      string   `json:"serial"`
	NotBefore   string   `json:"not_before"`
	NotAfter    string   `json:"not_after"`
	Names       []string `json:"names,omitempty"`
	CA          bool     `json:"ca"`
	Fingerprint string   `json:"key_fingerprint,omitempty"`
}

func describeCert(c *x509.Certificate) certInfo {
	ci := certInfo{Subject: c.Subject.String(), Issuer: c.Issuer.String(), Serial: trust.FormatSerial(c.SerialNumber),
		NotBefore: c.NotBefore.UTC().Format(time.RFC3339), NotAfter: c.NotAfter.UTC().Format(time.RFC3339), CA: c.IsCA}
	for _, u := range c.URIs {
		ci.Names = append(ci.Names, u.String())
	}
	ci.Names = append(ci.Names, c.DNSNames...)
	if k, ok := c.PublicKey.(*ecdsa.PublicKey); ok && k.Curve == elliptic.P256() {
		ci.Fingerprint = trust.Fingerprint(k)
	}
	return ci
}

func writeCertInfo(b *strings.Builder, ci certInfo, indent string) {
	fmt.Fprintf(b, "%ssubject:   %s\n%sissuer:    %s\n%sserial:    %s\n%svalid:     %s to %s\n", indent, ci.Subject, indent, ci.Issuer, indent, ci.Serial, indent, ci.NotBefore, ci.NotAfter)
	if len(ci.Names) > 0 {
		fmt.Fprintf(b, "%snames:     %s\n", indent, strings.Join(ci.Names, ", "))
	}
	if ci.Fingerprint != "" {
		fmt.Fprintf(b, "%skey:       %s\n", indent, ci.Fingerprint)
	}
}

type identityInfo struct {
	AgentID      string     `json:"agent_id"`
	Fingerprint  string     `json:"fingerprint"`
	Certificates []certInfo `json:"certificates"`
	RotatedFrom  string     `json:"rotated_from,omitempty"`
	RotatedAt    string     `json:"rotated_at,omitempty"`
}

func identityCertInfo(id *trust.Identity) identityInfo {
	info := identityInfo{AgentID: id.AgentID, Fingerprint: trust.Fingerprint(&id.AgentKey.PublicKey), Certificates: []certInfo{}}
	if id.Certificate != "" {
		if certs, err := record.ParseCertificatesPEM(id.Certificate); err == nil {
			for _, c := range certs {
				info.Certificates = append(info.Certificates, describeCert(c))
			}
		}
	}
	if id.Rotation != nil {
		if old, _, err := id.Rotation.Keys(); err == nil {
			info.RotatedFrom, info.RotatedAt = trust.Fingerprint(old), id.Rotation.IssuedAt
		}
	}
	return info
}
