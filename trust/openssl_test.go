package trust

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/testutil"
	"github.com/agentd/agentd/record"
)

// Chains built with the openssl command-line tool (Debian's openssl
// package), so the trust store is checked against certificates, CRLs and
// extensions it did not produce itself. Skipped, loudly, when openssl is
// not installed.

type ossl struct {
	t   *testing.T
	dir string
}

func newOSSL(t *testing.T) *ossl {
	t.Helper()
	if _, err := exec.LookPath("openssl"); err != nil {
		testutil.SkipEnv(t, "SKIPPED: the openssl binary is not installed (apt-get install openssl); the openssl chain tests did not run")
	}
	o := &ossl{t: t, dir: t.TempDir()}
	o.write("ext.cnf", `
[req]
distinguished_name = dn
[dn]
[root]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[root_pathlen0]
basicConstraints = critical,CA:TRUE,pathlen:0
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[ica]
basicConstraints = critical,CA:TRUE,pathlen:0
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid:always
[ica_open]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid:always
[ica_noca]
basicConstraints = critical,CA:FALSE
keyUsage = critical,keyCertSign,cRLSign,digitalSignature
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid:always
`)
	return o
}

func (o *ossl) path(name string) string { return filepath.Join(o.dir, name) }

func (o *ossl) write(name, content string) {
	o.t.Helper()
	if err := os.WriteFile(o.path(name), []byte(content), 0o600); err != nil {
		o.t.Fatal(err)
	}
}

func (o *ossl) run(args ...string) string {
	o.t.Helper()
	cmd := exec.Command("openssl", args...)
	cmd.Dir = o.dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		o.t.Fatalf("openssl %s: %v\n%s", strings.Join(args, " "), err, errb.String())
	}
	return out.String()
}

// selfSigned makes a root CA: key name.key, certificate name.pem.
func (o *ossl) selfSigned(name, section string) {
	o.run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", name+".key", "-out", name+".pem",
		"-subj", "/O=openssl test/CN="+name, "-days", "30", "-sha256", "-config", "ext.cnf", "-extensions", section)
}

// subCA makes a CA issued by parent.
func (o *ossl) subCA(name, parent, section string) {
	o.run("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", name+".key", "-out", name+".csr",
		"-subj", "/O=openssl test/CN="+name, "-config", "ext.cnf")
	o.run("x509", "-req", "-in", name+".csr", "-CA", parent+".pem", "-CAkey", parent+".key", "-CAcreateserial", "-out", name+".pem",
		"-days", "30", "-sha256", "-extfile", "ext.cnf", "-extensions", section)
}

// caDB sets up `openssl ca` for issuer: an index, a serial, a CRL number.
func (o *ossl) caDB(issuer string) string {
	d := issuer + "-db"
	if err := os.MkdirAll(o.path(d), 0o700); err != nil {
		o.t.Fatal(err)
	}
	o.write(d+"/index.txt", "")
	o.write(d+"/serial", "1000\n")
	o.write(d+"/crlnumber", "01\n")
	cnf := d + "/ca.cnf"
	o.write(cnf, `
[ca]
default_ca = CA_default
[CA_default]
dir = `+o.path(d)+`
database = $dir/index.txt
new_certs_dir = $dir
serial = $dir/serial
crlnumber = $dir/crlnumber
certificate = `+o.path(issuer+".pem")+`
private_key = `+o.path(issuer+".key")+`
default_md = sha256
default_crl_days = 30
policy = policy_any
unique_subject = no
copy_extensions = none
[policy_any]
commonName = supplied
[agent]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid:always
subjectAltName = @agent_san
[agent_san]
URI.1 = ${ENV::AGENT_URI}
`)
	return cnf
}

// issueAgent signs a CSR for id's agent key with `openssl ca`, valid from
// start to end (openssl's YYMMDDHHMMSSZ), and returns the certificate file.
func (o *ossl) issueAgent(cnf string, id *Identity, name, start, end string) string {
	o.t.Helper()
	keyPEM, err := AgentKeyPEM(id.AgentKey)
	if err != nil {
		o.t.Fatal(err)
	}
	o.write(name+".key", string(keyPEM))
	o.run("req", "-new", "-key", name+".key", "-out", name+".csr", "-subj", "/CN="+id.AgentID, "-config", "ext.cnf")
	args := []string{"ca", "-batch", "-config", cnf, "-extensions", "agent", "-notext", "-in", name + ".csr", "-out", name + ".pem"}
	if start != "" {
		args = append(args, "-startdate", start, "-enddate", end)
	} else {
		args = append(args, "-days", "10")
	}
	cmd := exec.Command("openssl", args...)
	cmd.Dir = o.dir
	cmd.Env = append(os.Environ(), "AGENT_URI="+AgentURI(id.AgentID))
	if out, err := cmd.CombinedOutput(); err != nil {
		o.t.Fatalf("openssl ca: %v\n%s", err, out)
	}
	return o.path(name + ".pem")
}

func (o *ossl) bundle(files ...string) string {
	o.t.Helper()
	var b []byte
	for _, f := range files {
		b = append(b, mustRead(o.t, o.path(f))...)
	}
	return string(b)
}

func osslTime(t time.Time) string { return t.UTC().Format("060102150405Z") }

func TestOpenSSLChains(t *testing.T) {
	o := newOSSL(t)
	o.selfSigned("root", "root")
	o.subCA("ica", "root", "ica")
	cnf := o.caDB("ica")
	id, other := newIdent(t), newIdent(t)
	// Verify a little after now: openssl stamps notBefore with the
	// second it issues, which may be after this line ran.
	now := time.Now().Add(2 * time.Minute)
	o.issueAgent(cnf, id, "agent", "", "")

	s := loadStore(t, StoreConfig{Roots: []string{o.path("root.pem")}})
	verify := func(bundle string, id *Identity, key *Identity, at time.Time) error {
		certs, err := record.ParseCertificatesPEM(bundle)
		if err != nil {
			t.Fatal(err)
		}
		return s.VerifyChain(certs, &key.AgentKey.PublicKey, id.AgentID, at)
	}

	t.Run("valid chain", func(t *testing.T) {
		wantReason(t, verify(o.bundle("agent.pem", "ica.pem"), id, id, now), "")
		// With the intermediate configured, the leaf alone.
		s2 := loadStore(t, StoreConfig{Roots: []string{o.path("root.pem")}, Intermediates: []string{o.path("ica.pem")}})
		certs, _ := record.ParseCertificatesPEM(o.bundle("agent.pem"))
		wantReason(t, s2.VerifyChain(certs, &id.AgentKey.PublicKey, id.AgentID, now), "")
	})
	t.Run("expired leaf", func(t *testing.T) {
		o.issueAgent(cnf, id, "expired", osslTime(now.Add(-72*time.Hour)), osslTime(now.Add(-24*time.Hour)))
		wantReason(t, verify(o.bundle("expired.pem", "ica.pem"), id, id, now), ReasonExpired)
	})
	t.Run("wrong issuer", func(t *testing.T) {
		o.selfSigned("root2", "root")
		o.subCA("ica2", "root2", "ica")
		cnf2 := o.caDB("ica2")
		o.issueAgent(cnf2, id, "stranger", "", "")
		wantReason(t, verify(o.bundle("stranger.pem", "ica2.pem"), id, id, now), ReasonUnknownIssuer)
	})
	t.Run("intermediate without CA bit", func(t *testing.T) {
		o.subCA("icanoca", "root", "ica_noca")
		cnf3 := o.caDB("icanoca")
		o.issueAgent(cnf3, id, "undernoca", "", "")
		err := verify(o.bundle("undernoca.pem", "icanoca.pem"), id, id, now)
		wantReason(t, err, ReasonBadCertificate)
		if !strings.Contains(err.Error(), "not a CA") {
			t.Fatal(err)
		}
	})
	t.Run("path too long", func(t *testing.T) {
		// A root with pathlen:0 cannot have an intermediate.
		o.selfSigned("root0", "root_pathlen0")
		o.subCA("ica0", "root0", "ica")
		cnf4 := o.caDB("ica0")
		o.issueAgent(cnf4, id, "deep", "", "")
		s0 := loadStore(t, StoreConfig{Roots: []string{o.path("root0.pem")}})
		certs, _ := record.ParseCertificatesPEM(o.bundle("deep.pem", "ica0.pem"))
		err := s0.VerifyChain(certs, &id.AgentKey.PublicKey, id.AgentID, now)
		wantReason(t, err, ReasonBadCertificate)
		if !strings.Contains(err.Error(), "path length") {
			t.Fatal(err)
		}
		// pathlen:0 on the intermediate: a CA below it is refused too.
		o.subCA("icadeep", "ica", "ica_open")
		cnf5 := o.caDB("icadeep")
		o.issueAgent(cnf5, id, "deeper", "", "")
		wantReason(t, verify(o.bundle("deeper.pem", "icadeep.pem", "ica.pem"), id, id, now), ReasonBadCertificate)
	})
	t.Run("revoked", func(t *testing.T) {
		o.issueAgent(cnf, other, "revokeme", "", "")
		cmd := exec.Command("openssl", "ca", "-batch", "-config", cnf, "-revoke", "revokeme.pem", "-crl_reason", "keyCompromise")
		cmd.Dir, cmd.Env = o.dir, append(os.Environ(), "AGENT_URI=unused:x")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		cmd = exec.Command("openssl", "ca", "-batch", "-config", cnf, "-gencrl", "-out", "ica.crl")
		cmd.Dir, cmd.Env = o.dir, append(os.Environ(), "AGENT_URI=unused:x")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		sr := loadStore(t, StoreConfig{Roots: []string{o.path("root.pem")}, CRLs: []string{o.path("ica.crl")}})
		certs, _ := record.ParseCertificatesPEM(o.bundle("revokeme.pem", "ica.pem"))
		err := sr.VerifyChain(certs, &other.AgentKey.PublicKey, other.AgentID, now)
		wantReason(t, err, ReasonRevoked)
		// The other agent of the same CA is not revoked.
		certs, _ = record.ParseCertificatesPEM(o.bundle("agent.pem", "ica.pem"))
		wantReason(t, sr.VerifyChain(certs, &id.AgentKey.PublicKey, id.AgentID, now), "")
		// The serial as openssl prints it, in the revoked-serial list.
		serial := strings.TrimPrefix(strings.TrimSpace(o.run("x509", "-in", "revokeme.pem", "-noout", "-serial")), "serial=")
		ss := loadStore(t, StoreConfig{Roots: []string{o.path("root.pem")}, RevokedSerials: []string{serial}})
		certs, _ = record.ParseCertificatesPEM(o.bundle("revokeme.pem", "ica.pem"))
		wantReason(t, ss.VerifyChain(certs, &other.AgentKey.PublicKey, other.AgentID, now), ReasonRevoked)
		// A CRL openssl makes without a crlnumber file has no CRL number:
		// refused when loaded (RFC 5280 §5.2.3).
		if err := os.Remove(o.path("ica-db/crlnumber")); err != nil {
			t.Fatal(err)
		}
		noNum := strings.ReplaceAll(string(mustRead(t, o.path(cnf))), "crlnumber = $dir/crlnumber\n", "")
		o.write("nonum.cnf", noNum)
		cmd = exec.Command("openssl", "ca", "-batch", "-config", "nonum.cnf", "-gencrl", "-out", "nonum.crl")
		cmd.Dir, cmd.Env = o.dir, append(os.Environ(), "AGENT_URI=unused:x")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if _, err := LoadStore(StoreConfig{Roots: []string{o.path("root.pem")}, Intermediates: []string{o.path("ica.pem")}, CRLs: []string{o.path("nonum.crl")}}); err == nil || !strings.Contains(err.Error(), "CRL number") {
			t.Fatalf("CRL without a number: %v", err)
		}
	})
	t.Run("key mismatch", func(t *testing.T) {
		// The certificate of id presented with another agent's key.
		wantReason(t, verify(o.bundle("agent.pem", "ica.pem"), id, other, now), ReasonKeyMismatch)
	})
	t.Run("name mismatch", func(t *testing.T) {
		wantReason(t, verify(o.bundle("agent.pem", "ica.pem"), other, id, now), ReasonNameMismatch)
	})
	t.Run("agentd ca issues from an openssl CSR", func(t *testing.T) {
		ca := newCA(t)
		csr, err := ParseCSRPEM(mustRead(t, o.path("agent.csr")))
		if err != nil {
			t.Fatal(err)
		}
		// The openssl CSR has only CN = agent id: the CA names the agent from it.
		leaf, bundle, err := ca.Issue(csr, IssueOptions{Now: now})
		if err != nil {
			t.Fatal(err)
		}
		if leaf.URIs[0].String() != AgentURI(id.AgentID) {
			t.Fatal(leaf.URIs)
		}
		o.write("agentd-leaf.pem", string(bundle))
		o.write("agentd-root.pem", string(mustRead(t, filepath.Join(ca.Dir, CARootCert))))
		// openssl accepts agentd's chain for client authentication.
		out := o.run("verify", "-purpose", "sslclient", "-CAfile", "agentd-root.pem", "-untrusted", "agentd-leaf.pem", "agentd-leaf.pem")
		if !strings.Contains(out, "OK") {
			t.Fatal(out)
		}
		// and agentd's CRL.
		o.write("agentd-crl.pem", string(mustRead(t, filepath.Join(ca.Dir, CASubCRL))))
		out = o.run("crl", "-in", "agentd-crl.pem", "-noout", "-text")
		if !strings.Contains(out, "X509v3 CRL Number") {
			t.Fatal(out)
		}
	})
}
