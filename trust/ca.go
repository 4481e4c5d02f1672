package trust

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentd/agentd/internal/fsutil"
	"github.com/agentd/agentd/record"
)

// Files of a CA directory (agentd ca init).
const (
	CARootCert = "root-ca.pem"        // the Root CA certificate: what verifiers list in trust.roots
	CARootKey  = "root-ca.key"        // its key, PKCS#8 PEM, mode 0600
	CASubCert  = "skillcenter-ca.pem" // the SkillCenter CA, issued by the root: trust.intermediates
	CASubKey   = "skillcenter-ca.key" // its key, mode 0600
	CARootCRL  = "root-ca.crl"        // the root's CRL (revokes SkillCenter CAs): trust.crls
	CASubCRL   = "skillcenter-ca.crl" // the SkillCenter CA's CRL (revokes agent and skill certificates): trust.crls
	CAState    = "ca.json"            // issued and revoked serials, next CRL number
	CAIssued   = "issued"             // a copy of every certificate issued, <serial>.pem
)

// Defaults of the small CA.
const (
	DefaultRootDays = 3650
	DefaultSubDays  = 1825
	DefaultLeafDays = 365
	DefaultCRLDays  = 30
	// caBackdate is subtracted from notBefore so that peers whose clock is
	// a little behind accept a fresh certificate.
	caBackdate = 5 * time.Minute
)

// Errors of the small CA.
var (
	// ErrCAExists is returned by InitCA for a directory that already holds a CA.
	ErrCAExists = errors.New("the directory already holds a CA")
	// ErrNotIssued is returned by RevokeCert for a certificate this CA did not issue.
	ErrNotIssued = errors.New("certificate was not issued by this CA")
)

// CA is a small certificate authority for tests and small deployments,
// kept in a directory: a Root CA and a SkillCenter CA (seed 001 §10.2),
// both ECDSA P-256, the agent and skill certificates the SkillCenter CA
// issues, and a CRL per CA. It is not safe for concurrent use by several
// processes on one directory.
type CA struct {
	Dir     string
	Root    *x509.Certificate
	Sub     *x509.Certificate
	rootKey *ecdsa.PrivateKey
	subKey  *ecdsa.PrivateKey
	st      caState
}

type caState struct {
	NextCRLNumber int64       `json:"next_crl_number"`
	Issued        []caIssued  `json:"issued"`
	Revoked       []caRevoked `json:"revoked"`
}

type caIssued struct {
	Serial   string    `json:"serial"`
	Kind     string    `json:"kind"` // agent | skill
	Name     string    `json:"name"` // agent id or skill id
	NotAfter time.Time `json:"not_after"`
}

type caRevoked struct {
	Serial string    `json:"serial"`
	Issuer string    `json:"issuer"` // root | skillcenter
	At     time.Time `json:"at"`
}

// CAOptions configure InitCA.
type CAOptions struct {
	// Name prefixes the CAs' common names ("<Name> Root CA", "<Name>
	// SkillCenter CA"); default "agentd".
	Name string
	// RootDays and SubDays are the validity of the two CA certificates;
	// defaults DefaultRootDays and DefaultSubDays.
	RootDays, SubDays int
	// CRLDays is how long a CRL is valid (nextUpdate); default DefaultCRLDays.
	CRLDays int
	// Now is the issuing time; zero means time.Now().
	Now time.Time
}

// InitCA creates a Root CA and a SkillCenter CA in dir (created 0700):
// their keys (0600), certificates, empty CRLs and the state file. It
// refuses a directory that already holds a CA.
func InitCA(dir string, o CAOptions) (*CA, error) {
	if _, err := os.Stat(filepath.Join(dir, CARootCert)); err == nil {
		return nil, fmt.Errorf("%s: %w", dir, ErrCAExists)
	}
	if o.Name == "" {
		o.Name = "agentd"
	}
	if o.RootDays <= 0 {
		o.RootDays = DefaultRootDays
	}
	if o.SubDays <= 0 {
		o.SubDays = DefaultSubDays
	}
	now := o.Now
	if now.IsZero() {
		now = time.Now()
	}
	if err := os.MkdirAll(filepath.Join(dir, CAIssued), dataDirMode); err != nil {
		return nil, fmt.Errorf("create CA directory: %w", err)
	}
	rootKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	subKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	rootTmpl := &x509.Certificate{
		SerialNumber: randomSerial(), Subject: pkix.Name{CommonName: o.Name + " Root CA", Organization: []string{o.Name}},
		NotBefore: now.Add(-caBackdate), NotAfter: now.AddDate(0, 0, o.RootDays),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true, IsCA: true, MaxPathLen: 1,
	}
	rootDER, err := x509.CreateCertificate(rand.Reader, rootTmpl, rootTmpl, &rootKey.PublicKey, rootKey)
	if err != nil {
		return nil, fmt.Errorf("create root CA: %w", err)
	}
	root, err := x509.ParseCertificate(rootDER)
	if err != nil {
		return nil, err
	}
	subTmpl := &x509.Certificate{
		SerialNumber: randomSerial(), Subject: pkix.Name{CommonName: o.Name + " SkillCenter CA", Organization: []string{o.Name}},
		NotBefore: now.Add(-caBackdate), NotAfter: minTime(now.AddDate(0, 0, o.SubDays), root.NotAfter),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true, IsCA: true, MaxPathLen: 0, MaxPathLenZero: true,
	}
	subDER, err := x509.CreateCertificate(rand.Reader, subTmpl, root, &subKey.PublicKey, rootKey)
	if err != nil {
		return nil, fmt.Errorf("create SkillCenter CA: %w", err)
	}
	sub, err := x509.ParseCertificate(subDER)
	if err != nil {
		return nil, err
	}
	ca := &CA{Dir: dir, Root: root, Sub: sub, rootKey: rootKey, subKey: subKey, st: caState{NextCRLNumber: 1}}
	for _, f := range []struct {
		name string
		key  *ecdsa.PrivateKey
	}{{CARootKey, rootKey}, {CASubKey, subKey}} {
		b, err := AgentKeyPEM(f.key)
		if err != nil {
			return nil, err
		}
		if err := fsutil.WriteFileAtomic(filepath.Join(dir, f.name), b, secretMode); err != nil {
			return nil, err
		}
	}
	if err := fsutil.WriteFileAtomic(filepath.Join(dir, CARootCert), encodeCertPEM(root), publicMode); err != nil {
		return nil, err
	}
	if err := fsutil.WriteFileAtomic(filepath.Join(dir, CASubCert), encodeCertPEM(sub), publicMode); err != nil {
		return nil, err
	}
	if err := ca.WriteCRLs(now, o.CRLDays); err != nil {
		return nil, err
	}
	return ca, nil
}

// OpenCA loads the CA kept in dir.
func OpenCA(dir string) (*CA, error) {
	ca := &CA{Dir: dir}
	var err error
	if ca.rootKey, err = LoadAgentKey(filepath.Join(dir, CARootKey)); err != nil {
		return nil, fmt.Errorf("CA %s: %w", dir, err)
	}
	if ca.subKey, err = LoadAgentKey(filepath.Join(dir, CASubKey)); err != nil {
		return nil, fmt.Errorf("CA %s: %w", dir, err)
	}
	load := func(name string, key *ecdsa.PrivateKey) (*x509.Certificate, error) {
		b, err := readBounded(filepath.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("CA %s: %w", dir, err)
		}
		cs, err := ParseCertificateFile(b)
		if err != nil || len(cs) != 1 {
			return nil, fmt.Errorf("CA %s: %s must hold one certificate: %v", dir, name, err)
		}
		if pk, ok := cs[0].PublicKey.(*ecdsa.PublicKey); !ok || !pk.Equal(&key.PublicKey) {
			return nil, fmt.Errorf("CA %s: %s does not match its key", dir, name)
		}
		return cs[0], nil
	}
	if ca.Root, err = load(CARootCert, ca.rootKey); err != nil {
		return nil, err
	}
	if ca.Sub, err = load(CASubCert, ca.subKey); err != nil {
		return nil, err
	}
	b, err := readBounded(filepath.Join(dir, CAState))
	if err != nil {
		return nil, fmt.Errorf("CA %s: %w", dir, err)
	}
	if err := json.Unmarshal(b, &ca.st); err != nil {
		return nil, fmt.Errorf("CA %s: %s: %w", dir, CAState, err)
	}
	if ca.st.NextCRLNumber < 1 {
		return nil, fmt.Errorf("CA %s: %s: next_crl_number must be at least 1", dir, CAState)
	}
	return ca, nil
}

// IssueOptions qualify CA.Issue.
type IssueOptions struct {
	// AgentID names the agent; default: the CSR's urn:agentd:agent: URI,
	// else its CN when that is a UUIDv4.
	AgentID string
	// SkillID, when set, makes a skill certificate for that skill id
	// instead of an agent certificate.
	SkillID string
	// Days is the validity; default DefaultLeafDays, never past the
	// SkillCenter CA's own notAfter.
	Days int
	// Now is the issuing time; zero means time.Now().
	Now time.Time
}

// Issue makes an agent or skill certificate, signed by the SkillCenter
// CA, for the key of a certificate signing request. Only the key comes
// from the request: the name is checked (a UUIDv4 agent id, a valid skill
// id) and written by the CA, and the certificate carries keyUsage
// digitalSignature, extKeyUsage clientAuth and cA=FALSE. It returns the
// certificate and the bundle to install (leaf, then the SkillCenter CA).
func (ca *CA) Issue(csr *x509.CertificateRequest, o IssueOptions) (*x509.Certificate, []byte, error) {
	if err := csr.CheckSignature(); err != nil {
		return nil, nil, fmt.Errorf("certificate request: signature does not verify: %w", err)
	}
	key, ok := csr.PublicKey.(*ecdsa.PublicKey)
	if !ok || key.Curve != elliptic.P256() {
		return nil, nil, errors.New("certificate request: the key must be ECDSA P-256 (the agent key)")
	}
	now := o.Now
	if now.IsZero() {
		now = time.Now()
	}
	if o.Days <= 0 {
		o.Days = DefaultLeafDays
	}
	var kind, name, uri string
	if o.SkillID != "" {
		if !record.ValidIdent(o.SkillID) {
			return nil, nil, fmt.Errorf("skill id %q is not a valid identifier", o.SkillID)
		}
		kind, name, uri = "skill", o.SkillID, SkillURI(o.SkillID)
	} else {
		id := o.AgentID
		if id == "" {
			id = csrAgentID(csr)
		}
		if id == "" {
			return nil, nil, errors.New("certificate request names no agent (no urn:agentd:agent: URI, CN is not a UUID): pass the agent id")
		}
		if err := record.ValidateAgentID(id); err != nil {
			return nil, nil, fmt.Errorf("agent id: %w", err)
		}
		kind, name, uri = "agent", strings.ToLower(id), AgentURI(id)
	}
	u, err := url.Parse(uri)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: randomSerial(), Subject: pkix.Name{CommonName: name},
		NotBefore: now.Add(-caBackdate), NotAfter: minTime(now.AddDate(0, 0, o.Days), ca.Sub.NotAfter),
		URIs:                  []*url.URL{u},
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Sub, key, ca.subKey)
	if err != nil {
		return nil, nil, fmt.Errorf("issue certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	serial := FormatSerial(leaf.SerialNumber)
	if err := fsutil.WriteFileAtomic(filepath.Join(ca.Dir, CAIssued, serial+".pem"), encodeCertPEM(leaf), publicMode); err != nil {
		return nil, nil, err
	}
	ca.st.Issued = append(ca.st.Issued, caIssued{Serial: serial, Kind: kind, Name: name, NotAfter: leaf.NotAfter})
	if err := ca.saveState(); err != nil {
		return nil, nil, err
	}
	return leaf, append(encodeCertPEM(leaf), encodeCertPEM(ca.Sub)...), nil
}

// csrAgentID returns the agent id a request names.
func csrAgentID(csr *x509.CertificateRequest) string {
	for _, u := range csr.URIs {
		s := u.String()
		if strings.HasPrefix(strings.ToLower(s), AgentURIPrefix) {
			return s[len(AgentURIPrefix):]
		}
	}
	if record.ValidateAgentID(csr.Subject.CommonName) == nil {
		return csr.Subject.CommonName
	}
	return ""
}

// Revoke revokes a serial at now and re-signs the CRLs. The SkillCenter
// CA's serial is revoked on the root's CRL, any other on the SkillCenter
// CA's. It reports whether the serial is one this CA recorded issuing
// (an unknown serial is revoked all the same). Revoking twice is a no-op.
func (ca *CA) Revoke(serial *big.Int, now time.Time, crlDays int) (known bool, err error) {
	issuer := "skillcenter"
	s := FormatSerial(serial)
	known = false
	if serial.Cmp(ca.Sub.SerialNumber) == 0 {
		issuer, known = "root", true
	}
	for _, i := range ca.st.Issued {
		if i.Serial == s {
			known = true
		}
	}
	for _, r := range ca.st.Revoked {
		if r.Serial == s && r.Issuer == issuer {
			return known, nil
		}
	}
	ca.st.Revoked = append(ca.st.Revoked, caRevoked{Serial: s, Issuer: issuer, At: now.UTC()})
	return known, ca.WriteCRLs(now, crlDays)
}

// RevokeCert revokes a certificate this CA issued (or the SkillCenter CA
// itself); ErrNotIssued for any other.
func (ca *CA) RevokeCert(c *x509.Certificate, now time.Time, crlDays int) error {
	if c.CheckSignatureFrom(ca.Sub) != nil && c.CheckSignatureFrom(ca.Root) != nil {
		return fmt.Errorf("%s: %w", certLabel(c), ErrNotIssued)
	}
	_, err := ca.Revoke(c.SerialNumber, now, crlDays)
	return err
}

// WriteCRLs signs both CRLs anew (a new CRL number, thisUpdate now,
// nextUpdate now+crlDays, default DefaultCRLDays) and saves the state.
// Run it before nextUpdate passes (agentd ca crl).
func (ca *CA) WriteCRLs(now time.Time, crlDays int) error {
	if crlDays <= 0 {
		crlDays = DefaultCRLDays
	}
	for _, c := range []struct {
		issuer string
		cert   *x509.Certificate
		key    *ecdsa.PrivateKey
		file   string
	}{{"root", ca.Root, ca.rootKey, CARootCRL}, {"skillcenter", ca.Sub, ca.subKey, CASubCRL}} {
		var entries []x509.RevocationListEntry
		for _, r := range ca.st.Revoked {
			if r.Issuer != c.issuer {
				continue
			}
			n, err := ParseSerial(r.Serial)
			if err != nil {
				return fmt.Errorf("%s: %w", CAState, err)
			}
			entries = append(entries, x509.RevocationListEntry{SerialNumber: n, RevocationTime: r.At})
		}
		der, err := x509.CreateRevocationList(rand.Reader, &x509.RevocationList{
			Number: big.NewInt(ca.st.NextCRLNumber), ThisUpdate: now.Add(-caBackdate), NextUpdate: now.AddDate(0, 0, crlDays),
			RevokedCertificateEntries: entries,
		}, c.cert, c.key)
		if err != nil {
			return fmt.Errorf("sign %s: %w", c.file, err)
		}
		ca.st.NextCRLNumber++
		if err := fsutil.WriteFileAtomic(filepath.Join(ca.Dir, c.file), pem.EncodeToMemory(&pem.Block{Type: "X509 CRL", Bytes: der}), publicMode); err != nil {
			return err
		}
	}
	return ca.saveState()
}

func (ca *CA) saveState() error {
	b, err := json.MarshalIndent(ca.st, "", "  ")
	if err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(filepath.Join(ca.Dir, CAState), append(b, '\n'), publicMode)
}

// StoreConfig returns the trust store configuration that trusts this CA:
// the root, the SkillCenter CA as intermediate, both CRLs.
func (ca *CA) StoreConfig() StoreConfig {
	return StoreConfig{
		Roots:         []string{filepath.Join(ca.Dir, CARootCert)},
		Intermediates: []string{filepath.Join(ca.Dir, CASubCert)},
		CRLs:          []string{filepath.Join(ca.Dir, CARootCRL), filepath.Join(ca.Dir, CASubCRL)},
	}
}

// ParseCSRPEM parses a PEM "CERTIFICATE REQUEST" (or "NEW CERTIFICATE
// REQUEST") or a DER request.
func ParseCSRPEM(b []byte) (*x509.CertificateRequest, error) {
	der := b
	if block, rest := pem.Decode(b); block != nil {
		if block.Type != "CERTIFICATE REQUEST" && block.Type != "NEW CERTIFICATE REQUEST" {
			return nil, fmt.Errorf("PEM block %q is not a CERTIFICATE REQUEST", block.Type)
		}
		if len(strings.TrimSpace(string(rest))) != 0 {
			return nil, errors.New("data after the certificate request")
		}
		der = block.Bytes
	}
	csr, err := x509.ParseCertificateRequest(der)
	if err != nil {
		return nil, fmt.Errorf("certificate request: %w", err)
	}
	return csr, nil
}

// Issued returns the path of the copy of an issued certificate.
func (ca *CA) Issued(serial *big.Int) (string, error) {
	p := filepath.Join(ca.Dir, CAIssued, FormatSerial(serial)+".pem")
	if _, err := os.Stat(p); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("serial %s: %w", FormatSerial(serial), ErrNotIssued)
		}
		return "", err
	}
	return p, nil
}

// randomSerial is a positive 127-bit serial (at most 16 octets).
func randomSerial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic("trust: crypto/rand failed: " + err.Error())
	}
	if n.Sign() == 0 {
		n.SetInt64(1)
	}
	return n
}

func encodeCertPEM(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
