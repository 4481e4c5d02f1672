package skillcenter

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/Masterminds/semver/v3"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/trust"
	"gopkg.in/yaml.v3"
)

// ManifestContext prefixes the bytes a manifest signature covers, so a
// manifest signature can never be taken for a signature over anything
// else the same key signs (records, heartbeats).
const ManifestContext = "agentd.skill_manifest.v1\n"

// SignatureAlg is the one manifest signature algorithm: ECDSA P-256 over
// SHA-256, ASN.1 DER (record.SignBytes, seed 001 §10.1).
const SignatureAlg = "ES256"

// MaxPackageBytes bounds a skill package.
const MaxPackageBytes = 1 << 30

// Manifest describes one skill of a mirror catalog (DIR/<id>/manifest.json
// or manifest.yaml) and is what an install verifies. See docs/skillcenter.md.
type Manifest struct {
	ID           string     `json:"id"`
	Name         string     `json:"name,omitempty"`
	Version      string     `json:"version"`
	Type         string     `json:"type"`
	Capabilities []string   `json:"capabilities"`
	Scenes       []string   `json:"scenes,omitempty"`
	Endpoint     string     `json:"endpoint,omitempty"`
	Description  string     `json:"description,omitempty"`
	Keywords     []string   `json:"keywords,omitempty"`
	Package      *Package   `json:"package,omitempty"`
	Signature    *Signature `json:"signature,omitempty"`

	// canonical is the RFC 8785 form of the manifest as read, signature
	// included.
	canonical []byte
}

// Signature is a manifest's signature member: alg "ES256", the signer's
// key as public_key (PKIX PEM) and/or certificate (PEM, leaf first, then
// intermediates), and value, the base64 ASN.1 DER signature over
// ManifestContext followed by the RFC 8785 form of the manifest without
// its signature member.
type Signature struct {
	Alg         string `json:"alg"`
	PublicKey   string `json:"public_key,omitempty"`
	Certificate string `json:"certificate,omitempty"`
	Value       string `json:"value"`
}

// Sentinel errors of manifests and installs.
var (
	// ErrUnsigned is returned by Verify for a manifest without signature,
	// and by Install when a signature is required and missing.
	ErrUnsigned = errors.New("manifest is not signed")
	// ErrBadSignature is returned when the manifest signature does not
	// verify.
	ErrBadSignature = errors.New("manifest signature does not verify")
	// ErrUntrustedSigner is returned when a signature verifies but its key
	// is not anchored by the configured trust store or trusted keys.
	ErrUntrustedSigner = errors.New("manifest signer is not trusted")
)

// The members each manifest object may have, sorted.
var (
	manifestMembers  = []string{"capabilities", "description", "endpoint", "id", "keywords", "name", "package", "scenes", "signature", "type", "version"}
	packageMembers   = []string{"file", "sha256", "size"}
	signatureMembers = []string{"alg", "certificate", "public_key", "value"}
)

// ParseManifest reads a manifest from a file's content: YAML for a .yaml
// or .yml name, JSON otherwise. Parsing is strict: the input must be
// I-JSON (no duplicate member names), member names are case-sensitive,
// unknown members are refused, and every field is validated. Errors are
// *record.SourceError naming the file and wrapping a *record.FieldError
// naming the field.
func ParseManifest(name string, data []byte) (*Manifest, error) {
	m, err := parseManifest(name, data)
	if err != nil {
		var se *record.SourceError
		if errors.As(err, &se) {
			c := *se
			c.File = name
			return nil, &c
		}
		return nil, &record.SourceError{File: name, Err: err}
	}
	return m, nil
}

func parseManifest(name string, data []byte) (*Manifest, error) {
	if len(data) > MaxManifestBytes {
		return nil, fmt.Errorf("%w: manifest is %d bytes, limit %d", ErrResponseTooLarge, len(data), MaxManifestBytes)
	}
	switch strings.ToLower(filepath.Ext(name)) {
	case ".yaml", ".yml":
		j, err := yamlToJSON(data)
		if err != nil {
			return nil, err
		}
		data = j
	}
	return ParseManifestJSON(data)
}

// yamlToJSON converts one YAML document (a mapping) to JSON text.
func yamlToJSON(data []byte) ([]byte, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var n yaml.Node
	if err := dec.Decode(&n); err != nil {
		return nil, fieldErr("", "invalid YAML: %v", err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, fieldErr("", "holds more than one YAML document")
	}
	if err := noAliases(&n); err != nil {
		return nil, err
	}
	var v any
	if err := n.Decode(&v); err != nil {
		return nil, fieldErr("", "invalid YAML: %v", err)
	}
	if _, ok := v.(map[string]any); !ok {
		return nil, fieldErr("", "must be a YAML mapping with string keys")
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fieldErr("", "cannot be represented as JSON: %v", err)
	}
	return b, nil
}

func noAliases(n *yaml.Node) error {
	if n.Kind == yaml.AliasNode {
		return &record.SourceError{Line: n.Line, Err: fieldErr("", "YAML aliases are not allowed in a manifest")}
	}
	for _, c := range n.Content {
		if err := noAliases(c); err != nil {
			return err
		}
	}
	return nil
}

// ParseManifestJSON parses and validates a JSON manifest (see
// ParseManifest). Errors are *record.FieldError.
func ParseManifestJSON(data []byte) (*Manifest, error) {
	if len(data) > MaxManifestBytes {
		return nil, fmt.Errorf("%w: manifest is %d bytes, limit %d", ErrResponseTooLarge, len(data), MaxManifestBytes)
	}
	canon, err := record.CanonicalizeJSON(data)
	if err != nil {
		return nil, fieldErr("", "is not I-JSON (UTF-8, no duplicate member names, exact numbers): %v", innerReason(err))
	}
	if err := checkMembers(canon, "", manifestMembers); err != nil {
		return nil, err
	}
	var m Manifest
	if err := strictUnmarshal(canon, &m); err != nil {
		return nil, err
	}
	if m.Package != nil {
		if err := checkMembers(memberRaw(canon, "package"), "package", packageMembers); err != nil {
			return nil, err
		}
	}
	if m.Signature != nil {
		if err := checkMembers(memberRaw(canon, "signature"), "signature", signatureMembers); err != nil {
			return nil, err
		}
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	m.canonical = canon
	return &m, nil
}

// memberRaw returns one member of a JSON object.
func memberRaw(obj []byte, name string) []byte {
	var m map[string]json.RawMessage
	_ = json.Unmarshal(obj, &m)
	return m[name]
}

// checkMembers refuses an object member that is not in allowed.
func checkMembers(raw []byte, path string, allowed []string) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		return fieldErr(orManifest(path), "must be a JSON object")
	}
	for k := range m {
		if _, ok := slices.BinarySearch(allowed, k); !ok {
			hint := ""
			for _, a := range allowed {
				if strings.EqualFold(a, k) {
					hint = fmt.Sprintf(" (member names are case-sensitive: %q)", a)
				}
			}
			return fieldErr(joinPath(path, trunc(k)), "unknown member%s; allowed: %s", hint, strings.Join(allowed, ", "))
		}
	}
	return nil
}

func orManifest(path string) string {
	if path == "" {
		return "manifest"
	}
	return path
}

// Validate checks every field, naming the first that is wrong.
func (m *Manifest) Validate() error {
	if m.ID == "" {
		return fieldErr("id", "is required")
	}
	if !ValidID(m.ID) {
		return fieldErr("id", "%q is not a catalog skill id (an identifier of at most %d bytes without '/' or '..')", trunc(m.ID), record.MaxIDLen)
	}
	if len(m.Name) > record.MaxShortTextLen || !record.Printable(m.Name) {
		return fieldErr("name", "must be printable UTF-8 of at most %d bytes", record.MaxShortTextLen)
	}
	if m.Version == "" {
		return fieldErr("version", "is required")
	}
	if len(m.Version) > record.MaxShortTextLen {
		return fieldErr("version", "is longer than %d bytes", record.MaxShortTextLen)
	}
	if _, err := semver.StrictNewVersion(m.Version); err != nil {
		return fieldErr("version", "%q is not a semantic version (MAJOR.MINOR.PATCH): %v", trunc(m.Version), err)
	}
	if !record.SkillType(m.Type).Valid() {
		return fieldErr("type", "%q is not one of enterprise-skill, tool-skill, integration-skill", trunc(m.Type))
	}
	if len(m.Capabilities) == 0 {
		return fieldErr("capabilities", "a skill needs at least one capability")
	}
	if err := checkIdents("capabilities", m.Capabilities, record.MaxCapabilitiesPer); err != nil {
		return err
	}
	if err := checkIdents("scenes", m.Scenes, record.MaxScenesPerSkill); err != nil {
		return err
	}
	if len(m.Endpoint) > record.MaxEndpointLen || !record.Printable(m.Endpoint) || strings.ContainsAny(m.Endpoint, ";|,") {
		return fieldErr("endpoint", "must be printable, at most %d bytes, without ; | or ,", record.MaxEndpointLen)
	}
	if len(m.Description) > record.MaxTextLen || !utf8.ValidString(m.Description) {
		return fieldErr("description", "must be UTF-8 of at most %d bytes", record.MaxTextLen)
	}
	if len(m.Keywords) > MaxKeywords {
		return fieldErr("keywords", "lists %d keywords, more than %d", len(m.Keywords), MaxKeywords)
	}
	for i, k := range m.Keywords {
		if strings.TrimSpace(k) == "" || len(k) > record.MaxIDLen || !record.Printable(k) {
			return fieldErr(fmt.Sprintf("keywords[%d]", i), "must be 1-%d printable bytes, not blank", record.MaxIDLen)
		}
	}
	if m.Package != nil {
		if err := m.Package.validate("package"); err != nil {
			return err
		}
	}
	if s := m.Signature; s != nil {
		if _, _, err := s.parse(); err != nil {
			return err
		}
	}
	return nil
}

// parse checks the signature member and returns the signer's key, the
// certificate chain (nil without certificate) and the signature bytes.
func (s *Signature) parse() (*ecdsa.PublicKey, []*x509.Certificate, error) {
	k, chain, _, err := s.parseAll()
	return k, chain, err
}

func (s *Signature) parseAll() (*ecdsa.PublicKey, []*x509.Certificate, []byte, error) {
	if s.Alg != SignatureAlg {
		return nil, nil, nil, fieldErr("signature.alg", "%q is not %q", trunc(s.Alg), SignatureAlg)
	}
	var key *ecdsa.PublicKey
	if s.PublicKey != "" {
		if len(s.PublicKey) > record.MaxPublicKeyBytes {
			return nil, nil, nil, fieldErr("signature.public_key", "is larger than %d bytes", record.MaxPublicKeyBytes)
		}
		k, err := record.ParsePublicKeyPEM(s.PublicKey)
		if err != nil {
			return nil, nil, nil, fieldErr("signature.public_key", "%v", err)
		}
		key = k
	}
	var chain []*x509.Certificate
	if s.Certificate != "" {
		if len(s.Certificate) > record.MaxCertificateBytes {
			return nil, nil, nil, fieldErr("signature.certificate", "is larger than %d bytes", record.MaxCertificateBytes)
		}
		c, err := record.ParseCertificatesPEM(s.Certificate)
		if err != nil {
			return nil, nil, nil, fieldErr("signature.certificate", "%v", err)
		}
		lk, ok := c[0].PublicKey.(*ecdsa.PublicKey)
		if !ok || lk.Curve != elliptic.P256() {
			return nil, nil, nil, fieldErr("signature.certificate", "the leaf certificate's key is not ECDSA P-256")
		}
		if key != nil && !key.Equal(lk) {
			return nil, nil, nil, fieldErr("signature.certificate", "the leaf certificate certifies another key than public_key")
		}
		key, chain = lk, c
	}
	if key == nil {
		return nil, nil, nil, fieldErr("signature", "needs public_key or certificate")
	}
	if s.Value == "" || len(s.Value) > 256 {
		return nil, nil, nil, fieldErr("signature.value", "must be a base64 signature of at most 256 characters")
	}
	sig, err := record.DecodeBase64(s.Value)
	if err != nil {
		return nil, nil, nil, fieldErr("signature.value", "is %v", err)
	}
	return key, chain, sig, nil
}

// Canonical returns the RFC 8785 form of the manifest as it was read,
// signature included (nil for a manifest built in Go).
func (m *Manifest) Canonical() []byte { return m.canonical }

// Skill returns the catalog entry of the manifest (without downloadUrl
// and manifest, which the server adds).
func (m *Manifest) Skill() Skill {
	s := Skill{
		ID: m.ID, Name: m.Name, Version: m.Version, Type: m.Type,
		Capabilities: slices.Clone(m.Capabilities), Scenes: slices.Clone(m.Scenes),
		Endpoint: m.Endpoint, Description: m.Description, Keywords: slices.Clone(m.Keywords),
	}
	if s.Name == "" {
		s.Name = m.ID
	}
	if s.Scenes == nil {
		s.Scenes = []string{}
	}
	if m.Package != nil {
		p := *m.Package
		s.Package = &p
	}
	return s
}

// SigningInput returns the bytes a manifest signature covers:
// ManifestContext followed by the RFC 8785 form of the manifest JSON
// without its signature member.
func SigningInput(manifestJSON []byte) ([]byte, error) {
	var obj map[string]json.RawMessage
	canon, err := record.CanonicalizeJSON(manifestJSON)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(canon, &obj); err != nil || obj == nil {
		return nil, fieldErr("manifest", "must be a JSON object")
	}
	delete(obj, "signature")
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	body, err := record.CanonicalizeJSON(b)
	if err != nil {
		return nil, err
	}
	return append([]byte(ManifestContext), body...), nil
}

// SignManifest signs manifest JSON with key and returns the signed
// manifest (indented JSON): its signature member replaced by one naming
// the key as public_key and, when certPEM is not empty, the certificate
// chain (leaf first; its leaf must certify key). The result parses with
// ParseManifestJSON.
func SignManifest(manifestJSON []byte, key *ecdsa.PrivateKey, certPEM string) ([]byte, error) {
	if len(manifestJSON) > MaxManifestBytes {
		return nil, fmt.Errorf("%w: manifest is %d bytes, limit %d", ErrResponseTooLarge, len(manifestJSON), MaxManifestBytes)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(manifestJSON, &obj); err != nil || obj == nil {
		return nil, fieldErr("manifest", "must be a JSON object")
	}
	delete(obj, "signature")
	unsigned, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	if _, err := ParseManifestJSON(unsigned); err != nil {
		return nil, err
	}
	input, err := SigningInput(unsigned)
	if err != nil {
		return nil, err
	}
	sig, err := record.SignBytes(key, input)
	if err != nil {
		return nil, err
	}
	s := Signature{Alg: SignatureAlg, PublicKey: trust.PublicKeyPEM(&key.PublicKey), Certificate: certPEM, Value: base64.StdEncoding.EncodeToString(sig)}
	if _, _, err := s.parse(); err != nil {
		return nil, err
	}
	sb, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	obj["signature"] = sb
	out, err := json.MarshalIndent(obj, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}

// CertChecker verifies a certificate chain for a skill; *trust.Store
// implements it.
type CertChecker interface {
	Check(chain []*x509.Certificate, c trust.CertCheck) ([]*x509.Certificate, error)
}

// Anchors are what makes a manifest signer trusted: a certificate trust
// store (the leaf must chain to a root, be unrevoked and name the skill,
// urn:agentd:skill:<id> or CN) and/or pinned keys. With neither, a valid
// signature proves integrity only (Signer.Anchored is false).
type Anchors struct {
	Certs CertChecker
	Keys  []*ecdsa.PublicKey
	// Now is the verification time (default time.Now).
	Now func() time.Time
}

// Signer is who signed a manifest.
type Signer struct {
	Key *ecdsa.PublicKey
	// Fingerprint is trust.Fingerprint(Key).
	Fingerprint string
	// Subject is the leaf certificate's subject CN, when certified.
	Subject string
	// Anchored says the signer is certified by Anchors.Certs or is one of
	// Anchors.Keys.
	Anchored bool
}

// Verify checks the manifest's signature and, when anchors are given, that
// the signer is trusted. It returns ErrUnsigned for an unsigned manifest,
// an error wrapping ErrBadSignature when the signature does not verify,
// and one wrapping ErrUntrustedSigner when anchors are configured and the
// signer is not anchored by them.
func (m *Manifest) Verify(a Anchors) (*Signer, error) {
	if m.Signature == nil {
		return nil, ErrUnsigned
	}
	key, chain, sig, err := m.Signature.parseAll()
	if err != nil {
		return nil, err
	}
	canon := m.canonical
	if canon == nil {
		if canon, err = record.Canonicalize(m); err != nil {
			return nil, err
		}
	}
	input, err := SigningInput(canon)
	if err != nil {
		return nil, err
	}
	if !record.VerifyBytes(key, input, sig) {
		return nil, fmt.Errorf("%w (skill %s, key %s)", ErrBadSignature, m.ID, trust.Fingerprint(key))
	}
	sg := &Signer{Key: key, Fingerprint: trust.Fingerprint(key)}
	if len(chain) > 0 {
		sg.Subject = chain[0].Subject.CommonName
	}
	if a.Certs == nil && len(a.Keys) == 0 {
		return sg, nil
	}
	for _, k := range a.Keys {
		if k.Equal(key) {
			sg.Anchored = true
			return sg, nil
		}
	}
	if a.Certs != nil {
		if len(chain) == 0 {
			return nil, fmt.Errorf("%w: skill %s is signed by key %s without a certificate, and the key is not pinned", ErrUntrustedSigner, m.ID, sg.Fingerprint)
		}
		now := time.Now()
		if a.Now != nil {
			now = a.Now()
		}
		if _, err := a.Certs.Check(chain, trust.CertCheck{Now: now, Key: key, SkillID: m.ID}); err != nil {
			return nil, fmt.Errorf("%w: skill %s: %w", ErrUntrustedSigner, m.ID, err)
		}
		sg.Anchored = true
		return sg, nil
	}
	return nil, fmt.Errorf("%w: skill %s is signed by key %s, which is not one of the trusted keys", ErrUntrustedSigner, m.ID, sg.Fingerprint)
}

// innerReason strips the sentinel prefix record puts before a JCS error.
func innerReason(err error) string {
	s := err.Error()
	if i := strings.Index(s, "not canonicalizable JSON: "); i >= 0 {
		return s[i+len("not canonicalizable JSON: "):]
	}
	return s
}
