package skillcenter

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/trust"
)

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestParseManifestJSONAndYAML(t *testing.T) {
	j := mustJSON(t, skillManifest("skill-a", []string{"cap-a"}, []byte("pkg")))
	m, err := ParseManifest("skill-a/manifest.json", j)
	if err != nil {
		t.Fatal(err)
	}
	if m.ID != "skill-a" || m.Package == nil || m.Package.Size != 3 || len(m.Canonical()) == 0 {
		t.Fatalf("manifest: %+v", m)
	}
	y := `id: skill-a
name: Skill skill-a
version: 0.7.0
type: enterprise-skill
capabilities: [cap-a]
scenes: [auth]
endpoint: https://skills.example.net/skill-a
description: the skill-a skill
keywords: [org, skill-a]
package:
  file: skill-a-0.7.0.tar.gz
  sha256: ` + m.Package.SHA256 + `
  size: 3
`
	my, err := ParseManifest("manifest.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	if string(my.Canonical()) != string(m.Canonical()) {
		t.Fatalf("YAML and JSON differ:\n%s\n%s", my.Canonical(), m.Canonical())
	}
	sk := m.Skill()
	if sk.Name != "Skill skill-a" || sk.Package.SHA256 != m.Package.SHA256 || sk.Validate() != nil {
		t.Fatalf("skill: %+v", sk)
	}
}

func TestParseManifestErrorsNameFileAndField(t *testing.T) {
	base := func() map[string]any { return skillManifest("skill-a", []string{"cap-a"}, []byte("pkg")) }
	for _, c := range []struct {
		name  string
		mod   func(map[string]any)
		raw   string
		field string
	}{
		{name: "missing id", mod: func(m map[string]any) { delete(m, "id") }, field: "id"},
		{name: "id with slash", mod: func(m map[string]any) { m["id"] = "a/b" }, field: "id"},
		{name: "id with dotdot", mod: func(m map[string]any) { m["id"] = "a..b" }, field: "id"},
		{name: "missing version", mod: func(m map[string]any) { delete(m, "version") }, field: "version"},
		{name: "loose version", mod: func(m map[string]any) { m["version"] = "1.2" }, field: "version"},
		{name: "bad type", mod: func(m map[string]any) { m["type"] = "app" }, field: "type"},
		{name: "no capabilities", mod: func(m map[string]any) { m["capabilities"] = []string{} }, field: "capabilities"},
		{name: "bad capability", mod: func(m map[string]any) { m["capabilities"] = []string{"a,b"} }, field: "capabilities[0]"},
		{name: "endpoint separator", mod: func(m map[string]any) { m["endpoint"] = "a;b" }, field: "endpoint"},
		{name: "blank keyword", mod: func(m map[string]any) { m["keywords"] = []string{""} }, field: "keywords[0]"},
		{name: "capabilities wrong type", mod: func(m map[string]any) { m["capabilities"] = "cap-a" }, field: "capabilities"},
		{name: "unknown member", mod: func(m map[string]any) { m["capabilites"] = []string{"x"} }, field: "capabilites"},
		{name: "member case", mod: func(m map[string]any) { m["Version"] = "1.0.0" }, field: "Version"},
		{name: "package file path", mod: func(m map[string]any) { m["package"].(map[string]any)["file"] = "../x" }, field: "package.file"},
		{name: "package digest", mod: func(m map[string]any) { m["package"].(map[string]any)["sha256"] = strings.Repeat("A", 64) }, field: "package.sha256"},
		{name: "package size", mod: func(m map[string]any) { m["package"].(map[string]any)["size"] = -1 }, field: "package.size"},
		{name: "package unknown member", mod: func(m map[string]any) { m["package"].(map[string]any)["url"] = "x" }, field: "package.url"},
		{name: "signature alg", mod: func(m map[string]any) { m["signature"] = map[string]any{"alg": "RS256", "value": "AA=="} }, field: "signature.alg"},
		{name: "signature without key", mod: func(m map[string]any) { m["signature"] = map[string]any{"alg": "ES256", "value": "AA=="} }, field: "signature"},
		{name: "signature key", mod: func(m map[string]any) {
			m["signature"] = map[string]any{"alg": "ES256", "public_key": "x", "value": "AA=="}
		}, field: "signature.public_key"},
		{name: "duplicate member", raw: `{"id":"a","id":"b"}`, field: ""},
		{name: "not an object", raw: `[1]`, field: "manifest"},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := []byte(c.raw)
			if c.mod != nil {
				m := base()
				c.mod(m)
				in = mustJSON(t, m)
			}
			_, err := ParseManifest("cat/skill-a/manifest.json", in)
			if err == nil {
				t.Fatal("accepted")
			}
			var se *record.SourceError
			if !errors.As(err, &se) || se.File != "cat/skill-a/manifest.json" {
				t.Fatalf("error does not name the file: %v", err)
			}
			if got := record.FieldOf(err); got != c.field {
				t.Fatalf("field %q, want %q: %v", got, c.field, err)
			}
			if !strings.HasPrefix(err.Error(), "cat/skill-a/manifest.json: ") {
				t.Fatalf("message %q", err)
			}
		})
	}
	if _, err := ParseManifest("m.yaml", []byte("a: &x 1\nb: *x\n")); err == nil || !strings.Contains(err.Error(), "aliases") {
		t.Fatalf("YAML alias: %v", err)
	}
	if _, err := ParseManifest("m.yaml", []byte("id: a\n---\nid: b\n")); err == nil {
		t.Fatal("two YAML documents accepted")
	}
}

func TestManifestSignature(t *testing.T) {
	key := newKey(t)
	raw := mustJSON(t, skillManifest("skill-a", []string{"cap-a"}, []byte("pkg")))
	signed, err := SignManifest(raw, key, "")
	if err != nil {
		t.Fatal(err)
	}
	m, err := ParseManifestJSON(signed)
	if err != nil {
		t.Fatal(err)
	}
	s, err := m.Verify(Anchors{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Anchored || s.Fingerprint != trust.Fingerprint(&key.PublicKey) {
		t.Fatalf("signer %+v", s)
	}
	s, err = m.Verify(Anchors{Keys: []*ecdsa.PublicKey{&key.PublicKey}})
	if err != nil || !s.Anchored {
		t.Fatalf("pinned key: %+v %v", s, err)
	}
	if _, err := m.Verify(Anchors{Keys: []*ecdsa.PublicKey{&newKey(t).PublicKey}}); !errors.Is(err, ErrUntrustedSigner) {
		t.Fatalf("other pinned key: %v", err)
	}
	// Re-signing replaces the signature; the signed bytes exclude it.
	again, err := SignManifest(signed, key, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mustParse(t, again).Verify(Anchors{}); err != nil {
		t.Fatal(err)
	}
	// Any change of a signed member breaks the signature, the package
	// digest included.
	var obj map[string]any
	if err := json.Unmarshal(signed, &obj); err != nil {
		t.Fatal(err)
	}
	obj["package"].(map[string]any)["sha256"] = strings.Repeat("0", 64)
	if _, err := mustParse(t, mustJSON(t, obj)).Verify(Anchors{}); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("tampered digest: %v", err)
	}
	// The signature is not one over the bare canonical manifest: the
	// context string is part of what is signed.
	in, err := SigningInput(signed)
	if err != nil || !strings.HasPrefix(string(in), ManifestContext+"{") || strings.Contains(string(in), `"signature"`) {
		t.Fatalf("signing input %q %v", in, err)
	}
	if _, err := mustParse(t, raw).Verify(Anchors{}); !errors.Is(err, ErrUnsigned) {
		t.Fatalf("unsigned: %v", err)
	}
}

func mustParse(t testing.TB, b []byte) *Manifest {
	t.Helper()
	m, err := ParseManifestJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestManifestCertificate signs with a skill certificate of an agentd CA
// and verifies against the CA's trust store.
func TestManifestCertificate(t *testing.T) {
	ca, err := trust.InitCA(filepath.Join(t.TempDir(), "ca"), trust.CAOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ts, err := trust.LoadStore(ca.StoreConfig())
	if err != nil {
		t.Fatal(err)
	}
	issue := func(key *ecdsa.PrivateKey, skill string) string {
		der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: skill}}, key)
		if err != nil {
			t.Fatal(err)
		}
		csr, err := x509.ParseCertificateRequest(der)
		if err != nil {
			t.Fatal(err)
		}
		_, bundle, err := ca.Issue(csr, trust.IssueOptions{SkillID: skill})
		if err != nil {
			t.Fatal(err)
		}
		return string(bundle)
	}
	key := newKey(t)
	raw := mustJSON(t, skillManifest("skill-a", []string{"cap-a"}, []byte("pkg")))
	signed, err := SignManifest(raw, key, issue(key, "skill-a"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := mustParse(t, signed).Verify(Anchors{Certs: ts})
	if err != nil || !s.Anchored {
		t.Fatalf("certified: %+v %v", s, err)
	}
	// A certificate for another skill does not vouch for this one.
	other, err := SignManifest(raw, key, issue(key, "skill-b"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = mustParse(t, other).Verify(Anchors{Certs: ts})
	if !errors.Is(err, ErrUntrustedSigner) || trust.ReasonOf(err) != trust.ReasonNameMismatch {
		t.Fatalf("certificate for another skill: %v", err)
	}
	// Without a certificate the trust store cannot anchor the key.
	bare, err := SignManifest(raw, key, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mustParse(t, bare).Verify(Anchors{Certs: ts}); !errors.Is(err, ErrUntrustedSigner) {
		t.Fatalf("no certificate: %v", err)
	}
	// A certificate of another key than public_key is refused at parse.
	var obj map[string]any
	_ = json.Unmarshal(signed, &obj)
	obj["signature"].(map[string]any)["public_key"] = trust.PublicKeyPEM(&newKey(t).PublicKey)
	if _, err := ParseManifestJSON(mustJSON(t, obj)); record.FieldOf(err) != "signature.certificate" {
		t.Fatalf("mismatched key: %v", err)
	}
	// A self-signed certificate that is not ECDSA P-256 is refused.
	k384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: bigOne(), Subject: pkix.Name{CommonName: "x"}, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour)}
	der, _ := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k384.PublicKey, k384)
	obj["signature"] = map[string]any{"alg": "ES256", "certificate": string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})), "value": "AA=="}
	if _, err := ParseManifestJSON(mustJSON(t, obj)); record.FieldOf(err) != "signature.certificate" {
		t.Fatalf("P-384 certificate: %v", err)
	}
}
