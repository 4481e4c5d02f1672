package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/trust"
)

// The key-lifecycle commands end to end: a CA, a CSR, a certificate, its
// installation, verification, revocation, and a key rotation.
func TestCertCALifecycle(t *testing.T) {
	dir := t.TempDir()
	data, caDir := filepath.Join(dir, "data"), filepath.Join(dir, "ca")
	mustRun(t, "--data-dir", data, "keygen")
	agentID := strings.TrimSpace(string(mustReadFile(t, filepath.Join(data, trust.AgentIDFile))))

	var ini caInitResult
	if err := json.Unmarshal([]byte(mustRun(t, "ca", "init", "--dir", caDir, "--json").stdout), &ini); err != nil {
		t.Fatal(err)
	}
	if !ini.Root.CA || !ini.SkillCenter.CA || len(ini.Trust.CRLs) != 2 {
		t.Fatalf("%+v", ini)
	}
	if r := runCLI(t, "", "ca", "init", "--dir", caDir); r.code != exitFailed || !strings.Contains(r.stderr, "already holds a CA") {
		t.Fatalf("second init: %+v", r)
	}

	csr := filepath.Join(dir, "agent.csr")
	mustRun(t, "--data-dir", data, "cert", "request", "--out", csr)
	bundle := filepath.Join(dir, "bundle.pem")
	r := mustRun(t, "ca", "issue", "--dir", caDir, "--csr", csr, "--out", bundle, "--days", "30")
	if !strings.Contains(r.stdout, "urn:agentd:agent:"+agentID) {
		t.Fatal(r.stdout)
	}
	// Without --out the bundle goes to stdout, the note to stderr.
	r = mustRun(t, "ca", "issue", "--dir", caDir, "--csr", csr)
	if !strings.HasPrefix(r.stdout, "-----BEGIN CERTIFICATE-----") || strings.Count(r.stdout, "BEGIN CERTIFICATE") != 2 || !strings.Contains(r.stderr, "issued serial") {
		t.Fatalf("%+v", r)
	}
	mustRun(t, "--data-dir", data, "cert", "install", bundle)
	var show identityInfo
	if err := json.Unmarshal([]byte(mustRun(t, "--data-dir", data, "cert", "show", "--json").stdout), &show); err != nil {
		t.Fatal(err)
	}
	if show.AgentID != agentID || len(show.Certificates) != 2 || show.Certificates[0].Names[0] != trust.AgentURI(agentID) {
		t.Fatalf("%+v", show)
	}

	roots, crls := filepath.Join(caDir, trust.CARootCert), caDir
	pub := filepath.Join(data, trust.AgentPubFile)
	r = mustRun(t, "trust", "verify", "--roots", roots, "--crl", crls, "--key", pub, "--agent-id", agentID, bundle)
	if !strings.HasPrefix(r.stdout, "OK\n") || !strings.Contains(r.stdout, "root:") {
		t.Fatal(r.stdout)
	}
	// Rejections: exit 1 and the reason.
	reject := func(want string, args ...string) {
		t.Helper()
		r := runCLI(t, "", append([]string{"trust", "verify"}, args...)...)
		if r.code != exitFailed || !strings.HasPrefix(r.stdout, "REJECTED: "+want+": ") {
			t.Fatalf("trust verify %v: exit %d, stdout %q, stderr %q; want REJECTED: %s", args, r.code, r.stdout, r.stderr, want)
		}
	}
	other := filepath.Join(dir, "other")
	mustRun(t, "--data-dir", other, "keygen")
	reject("key_mismatch", "--roots", roots, "--key", filepath.Join(other, trust.AgentPubFile), bundle)
	reject("name_mismatch", "--roots", roots, "--agent-id", "6f1c0b8e-2d55-4c39-9a0e-3b7e4f8d2a11", bundle)
	reject("expired", "--roots", roots, "--at", time.Now().AddDate(0, 0, 31).Format(time.RFC3339), bundle)
	strangerCA := filepath.Join(dir, "stranger")
	mustRun(t, "ca", "init", "--dir", strangerCA)
	reject("unknown_issuer", "--roots", filepath.Join(strangerCA, trust.CARootCert), bundle)
	reject("bad_certificate", "--roots", roots, csr)

	// The JSON verdict.
	var v trustVerdict
	r = runCLI(t, "", "trust", "verify", "--roots", roots, "--json", "--skill", "billing", bundle)
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || r.code != exitFailed || v.Verdict != "REJECTED" || v.Reason != "name_mismatch" {
		t.Fatalf("%+v %v", v, err)
	}

	// The trust store from the configuration file.
	cfgFile := filepath.Join(dir, "agentd.yaml")
	if err := os.WriteFile(cfgFile, []byte("trust:\n  roots: ["+roots+"]\n  crls: ["+crls+"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	mustRun(t, "--config", cfgFile, "trust", "verify", bundle)

	// Revoke by serial, then by file.
	var leafSerial string
	for _, l := range strings.Split(mustRun(t, "ca", "issue", "--dir", caDir, "--csr", csr, "--out", filepath.Join(dir, "b2.pem")).stdout, "\n") {
		if f := strings.Fields(l); len(f) > 2 && f[0] == "issued" {
			leafSerial = f[2]
		}
	}
	r = mustRun(t, "ca", "revoke", "--dir", caDir, strings.ToLower(leafSerial))
	if !strings.Contains(r.stdout, "revoked serial "+leafSerial) || strings.Contains(r.stdout, "no record") {
		t.Fatal(r.stdout)
	}
	reject("revoked", "--config", cfgFile, filepath.Join(dir, "b2.pem"))
	mustRun(t, "--config", cfgFile, "trust", "verify", bundle)
	mustRun(t, "ca", "revoke", "--dir", caDir, bundle)
	reject("revoked", "--config", cfgFile, bundle)
	// The revoked-serial list from a flag, with no CRL.
	reject("revoked", "--roots", roots, "--crl", "", "--revoked-serial", leafSerial, filepath.Join(dir, "b2.pem"))
	r = mustRun(t, "ca", "revoke", "--dir", caDir, "0A0B0C")
	if !strings.Contains(r.stdout, "no record of issuing serial 0A0B0C") {
		t.Fatal(r.stdout)
	}
	mustRun(t, "ca", "crl", "--dir", caDir)

	// A skill certificate.
	r = mustRun(t, "ca", "issue", "--dir", caDir, "--csr", csr, "--skill", "skill-org-feishu", "--out", filepath.Join(dir, "skill.pem"))
	if !strings.Contains(r.stdout, "urn:agentd:skill:skill-org-feishu") {
		t.Fatal(r.stdout)
	}
	mustRun(t, "trust", "verify", "--roots", roots, "--skill", "skill-org-feishu", filepath.Join(dir, "skill.pem"))

	// A certificate for another agent's key is not installed.
	if r := runCLI(t, "", "--data-dir", other, "cert", "install", bundle); r.code != exitFailed || !strings.Contains(r.stderr, "not the agent key") {
		t.Fatalf("%+v", r)
	}

	// Key rotation: the old key and its certificate are retired.
	var rot keyRotateResult
	if err := json.Unmarshal([]byte(mustRun(t, "--data-dir", data, "key", "rotate", "--json").stdout), &rot); err != nil {
		t.Fatal(err)
	}
	if rot.AgentID != agentID || rot.OldFingerprint == rot.NewFingerprint || !rot.CertificateRetired {
		t.Fatalf("%+v", rot)
	}
	if err := json.Unmarshal([]byte(mustRun(t, "--data-dir", data, "cert", "show", "--json").stdout), &show); err != nil {
		t.Fatal(err)
	}
	if show.Fingerprint != rot.NewFingerprint || show.RotatedFrom != rot.OldFingerprint || len(show.Certificates) != 0 {
		t.Fatalf("%+v", show)
	}
	reject("key_mismatch", "--roots", roots, "--key", pub, bundle)
}

func TestTrustCommandUsage(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"cert"}, exitUsage, "request"},
		{[]string{"ca"}, exitUsage, "issue"},
		{[]string{"trust"}, exitUsage, "verify"},
		{[]string{"key"}, exitUsage, "rotate"},
		{[]string{"trust", "verify"}, exitUsage, "CERT is required"},
		{[]string{"trust", "verify", "x.pem"}, exitUsage, "no root certificates"},
		{[]string{"trust", "verify", "--roots", "r.pem", "--agent-id", "agent-001", "x.pem"}, exitUsage, "UUID"},
		{[]string{"trust", "verify", "--roots", "r.pem", "--at", "yesterday", "x.pem"}, exitUsage, "--at"},
		{[]string{"trust", "verify", "--roots", filepath.Join(dir, "missing.pem"), "x.pem"}, exitFailed, "no such file"},
		{[]string{"ca", "init"}, exitFailed, "dir"},
		{[]string{"ca", "init", "--dir", filepath.Join(dir, "c"), "--crl-days", "0"}, exitUsage, "positive"},
		{[]string{"ca", "revoke", "--dir", dir}, exitUsage, "SERIAL or CERT is required"},
		{[]string{"ca", "issue", "--dir", dir, "--csr", "x", "extra"}, exitUsage, "takes no arguments"},
		{[]string{"ca", "issue", "--dir", filepath.Join(dir, "none"), "--csr", "x"}, exitFailed, "CA"},
		{[]string{"--data-dir", filepath.Join(dir, "none"), "cert", "request"}, exitFailed, "agentd keygen"},
		{[]string{"--data-dir", filepath.Join(dir, "none"), "key", "rotate"}, exitFailed, "agentd keygen"},
		{[]string{"cert", "install"}, exitUsage, "FILE is required"},
		{[]string{"key", "rotate", "now"}, exitUsage, "takes no arguments"},
		{[]string{"trust", "verify", "--help"}, exitOK, "REJECTED"},
		{[]string{"key", "rotate", "--help"}, exitOK, "grace"},
		{[]string{"ca", "--help"}, exitOK, "SkillCenter"},
	} {
		r := runCLI(t, "", tc.args...)
		if r.code != tc.code || !strings.Contains(r.stdout+r.stderr, tc.want) {
			t.Errorf("agentd %s: exit %d, want %d and %q\nstdout: %s\nstderr: %s", strings.Join(tc.args, " "), r.code, tc.code, tc.want, r.stdout, r.stderr)
		}
	}
	// A revoke of something that is neither a file nor hex.
	caDir := filepath.Join(dir, "ca")
	mustRun(t, "ca", "init", "--dir", caDir)
	if r := runCLI(t, "", "ca", "revoke", "--dir", caDir, "not-a-serial"); r.code != exitUsage || !strings.Contains(r.stderr, "neither a file nor a hex serial") {
		t.Fatalf("%+v", r)
	}
}

func mustReadFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// `trust verify --usage` and `--name` check a certificate for another
// purpose than an agent's (a server's), and --json prints JSON whatever
// happens, errors before the verdict included.
func TestTrustVerifyUsageNameAndJSON(t *testing.T) {
	dir := t.TempDir()
	rootKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	rootTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "Test Root"}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
	rootDER, err := x509.CreateCertificate(rand.Reader, rootTmpl, rootTmpl, &rootKey.PublicKey, rootKey)
	if err != nil {
		t.Fatal(err)
	}
	root, _ := x509.ParseCertificate(rootDER)
	leafKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leafDER, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "svc.example"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(12 * time.Hour), DNSNames: []string{"svc.example"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, root, &leafKey.PublicKey, rootKey)
	if err != nil {
		t.Fatal(err)
	}
	roots, server := filepath.Join(dir, "root.pem"), filepath.Join(dir, "server.pem")
	if err := os.WriteFile(roots, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: rootDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(server, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leafDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	// The default usage is an agent certificate's: a server certificate fails.
	if r := runCLI(t, "", "trust", "verify", "--roots", roots, server); r.code != exitFailed || !strings.Contains(r.stdout, "REJECTED: bad_certificate") || !strings.Contains(r.stdout, "--usage") {
		t.Fatalf("%+v", r)
	}
	mustRun(t, "trust", "verify", "--roots", roots, "--usage", "serverAuth", "--name", "svc.example", server)
	if r := runCLI(t, "", "trust", "verify", "--roots", roots, "--usage", "serverAuth", "--name", "other.example", server); r.code != exitFailed || !strings.Contains(r.stdout, "REJECTED: name_mismatch") {
		t.Fatalf("%+v", r)
	}
	mustRun(t, "trust", "verify", "--roots", roots, "--usage", "any", server)
	// Flags after CERT are refused with the rule.
	if r := runCLI(t, "", "trust", "verify", server, "--roots", roots); r.code != exitUsage || !strings.Contains(r.stderr, "flags go before CERT") {
		t.Fatalf("%+v", r)
	}
	// --json: always one JSON object.
	for _, tc := range []struct {
		args    []string
		code    int
		verdict string
	}{
		{[]string{"--roots", roots, "--usage", "serverAuth", server}, exitOK, "OK"},
		{[]string{"--roots", roots, server}, exitFailed, "REJECTED"},
		{[]string{"--roots", filepath.Join(dir, "missing.pem"), server}, exitFailed, "ERROR"},
		{[]string{"--roots", roots, filepath.Join(dir, "missing.pem")}, exitFailed, "ERROR"},
		{[]string{"--roots", roots, "--usage", "telepathy", server}, exitUsage, "ERROR"},
		{[]string{server}, exitUsage, "ERROR"},
	} {
		r := runCLI(t, "", append([]string{"trust", "verify", "--json"}, tc.args...)...)
		var v trustVerdict
		if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || r.code != tc.code || v.Verdict != tc.verdict {
			t.Errorf("trust verify --json %v: exit %d, stdout %q (%v); want %d and %s", tc.args, r.code, r.stdout, err, tc.code, tc.verdict)
		}
		if tc.verdict == "ERROR" && v.Detail == "" {
			t.Errorf("%v: ERROR without detail", tc.args)
		}
	}
}
