package trust

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentd/agentd/record"
)

// Names of agents and skills inside certificates. An agent certificate
// carries the URI subjectAltName AgentURIPrefix+agent_id, a skill
// certificate SkillURIPrefix+skill_id (agentd ca issue writes both the URI
// and the id as the subject CN). A certificate with no agentd URI at all
// names what its subject CN says.
const (
	AgentURIPrefix = "urn:agentd:agent:"
	SkillURIPrefix = "urn:agentd:skill:"
)

// Limits of the trust store.
const (
	// MaxBundleCerts bounds the certificates of one presented chain (the
	// record's certificate bundle: the leaf and its intermediates).
	MaxBundleCerts = 8
	// DefaultMaxIntermediates is how many CA certificates may sit between
	// a leaf and its root (self-issued ones not counted). The seed-001
	// chain Root CA → SkillCenter CA → agent has one.
	DefaultMaxIntermediates = 4
	// maxTrustFileBytes bounds one roots/intermediates/CRL file.
	maxTrustFileBytes = 16 << 20
	// maxInterned bounds the CA certificates the store remembers for
	// re-checking bindings (heartbeats) against new CRLs.
	maxInterned = 4096
)

// Sentinel errors of the trust store.
var (
	// ErrNoRoots is returned by LoadStore when no root certificate was found.
	ErrNoRoots = errors.New("trust store has no root certificate")
	// ErrBadSerial is returned for a serial number that is not hex.
	ErrBadSerial = errors.New("not a certificate serial number")
)

// StoreConfig says where the trust store's material is. Each path is a
// file or a directory; in a directory every regular, non-hidden file with
// a known extension is read (.pem, .crt, .cer, .cert for certificates;
// .crl, .der for CRLs, so that a CA directory holding both can be named
// for both). A file named explicitly may have any name. A file may hold
// several PEM blocks.
type StoreConfig struct {
	// Roots are the trust anchors (the Root CA). Required.
	Roots []string
	// Intermediates are CA certificates used to build paths from a leaf to
	// a root (the SkillCenter CA), in addition to the intermediates a
	// record carries in its certificate bundle.
	Intermediates []string
	// CRLs are certificate revocation lists, PEM ("X509 CRL") or DER.
	CRLs []string
	// RevokedSerials are revoked certificate serial numbers in hex (as
	// openssl prints them; colons, spaces and a 0x prefix are allowed).
	// A listed serial is revoked under every issuer.
	RevokedSerials []string
	// MaxIntermediates bounds the CA certificates between leaf and root,
	// self-issued ones not counted. 0 means DefaultMaxIntermediates.
	MaxIntermediates int
}

// Store is the certificate trust store: it verifies the chain Root CA →
// SkillCenter CA → agent or skill certificate with crypto/x509 (expiry,
// key usage, path length, name constraints) and adds agentd's policy on
// top: the leaf is not a CA, carries the clientAuth extended key usage
// explicitly, names the agent and certifies the record's key; weak keys
// and malformed serials are refused anywhere in the chain; revocation by
// CRLs and by a revoked-serial list. It implements ChainVerifier and is
// safe for concurrent use. Reload swaps in new material atomically.
type Store struct {
	cfg  StoreConfig
	snap atomic.Pointer[snapshot]

	mu       sync.Mutex
	interned map[[32]byte]*x509.Certificate // CA certificates seen in verified chains
}

// snapshot is one immutable load of the store's material.
type snapshot struct {
	gen           uint64
	roots         *x509.CertPool
	rootCerts     []*x509.Certificate
	inter         []*x509.Certificate
	interPool     *x509.CertPool
	crls          []*crl
	crlByIssuer   map[string][]*crl // by the CRL's raw issuer name
	revoked       map[string]bool   // serialKey → revoked
	maxInter      int
	loadedAt      time.Time
	staleCRLCount int
}

// crl is one parsed revocation list and its verdicts.
type crl struct {
	rl      *x509.RevocationList
	source  string
	serials map[string]time.Time // serialKey → revocation time
	// structErr is set when the CRL is unusable whatever its issuer: a
	// missing or critical CRL number, an unknown critical extension.
	structErr error

	mu      sync.Mutex
	checked map[[32]byte]crlVerdict // issuer certificate hash → verdict
}

type crlVerdict struct {
	applies bool  // the issuer's key signed it
	err     error // it applies but is not usable (issuer lacks cRLSign, …)
}

// LoadStore reads the trust store's material. It fails when a file does
// not parse, holds something other than certificates (or CRLs), when no
// root is found, or when a CRL issued by a configured CA does not verify.
func LoadStore(cfg StoreConfig) (*Store, error) {
	s := &Store{cfg: cfg, interned: map[[32]byte]*x509.Certificate{}}
	if err := s.Reload(); err != nil {
		return nil, err
	}
	return s, nil
}

// Reload re-reads every file of the configuration and swaps the new
// material in atomically; on error the store keeps what it had. An
// operator replaces a CRL and reloads (agentd wires SIGHUP to it).
func (s *Store) Reload() error {
	roots, err := loadCertPaths(s.cfg.Roots)
	if err != nil {
		return fmt.Errorf("trust roots: %w", err)
	}
	if len(roots) == 0 {
		return ErrNoRoots
	}
	for _, c := range roots {
		if !c.BasicConstraintsValid || !c.IsCA {
			return fmt.Errorf("trust roots: %q is not a CA certificate (basicConstraints cA is not set)", c.Subject)
		}
	}
	inter, err := loadCertPaths(s.cfg.Intermediates)
	if err != nil {
		return fmt.Errorf("trust intermediates: %w", err)
	}
	for _, c := range inter {
		if !c.BasicConstraintsValid || !c.IsCA {
			return fmt.Errorf("trust intermediates: %q is not a CA certificate (basicConstraints cA is not set)", c.Subject)
		}
	}
	crls, err := loadCRLPaths(s.cfg.CRLs)
	if err != nil {
		return fmt.Errorf("trust crls: %w", err)
	}
	revoked := make([]string, 0, len(s.cfg.RevokedSerials))
	for _, r := range s.cfg.RevokedSerials {
		n, err := ParseSerial(r)
		if err != nil {
			return fmt.Errorf("trust revokedSerials: %w", err)
		}
		revoked = append(revoked, serialKey(n))
	}
	snap := newSnapshot(roots, inter, crls, revoked, s.cfg.MaxIntermediates)
	// A CRL named for a configured CA must be that CA's and usable: an
	// operator learns of a wrong file now, not at the first verification.
	cas := append(append([]*x509.Certificate(nil), roots...), inter...)
	for _, c := range crls {
		if c.structErr != nil {
			return fmt.Errorf("trust crls: %s: %w", c.source, c.structErr)
		}
		named, applied := false, false
		for _, ca := range cas {
			if !bytes.Equal(ca.RawSubject, c.rl.RawIssuer) {
				continue
			}
			named = true
			v := c.verdictFor(ca)
			if v.applies {
				applied = true
				if v.err != nil {
					return fmt.Errorf("trust crls: %s: %w", c.source, v.err)
				}
			}
		}
		if named && !applied {
			return fmt.Errorf("trust crls: %s is issued in the name of a configured CA but no configured CA key verifies its signature", c.source)
		}
	}
	if old := s.snap.Load(); old != nil {
		snap.gen = old.gen + 1
	}
	s.snap.Store(snap)
	return nil
}

func newSnapshot(roots, inter []*x509.Certificate, crls []*crl, revoked []string, maxInter int) *snapshot {
	if maxInter == 0 {
		maxInter = DefaultMaxIntermediates
	}
	sn := &snapshot{
		roots: x509.NewCertPool(), rootCerts: roots, inter: inter, interPool: x509.NewCertPool(),
		crls: crls, crlByIssuer: map[string][]*crl{}, revoked: map[string]bool{}, maxInter: maxInter, loadedAt: time.Now(),
	}
	for _, c := range roots {
		sn.roots.AddCert(c)
	}
	for _, c := range inter {
		sn.interPool.AddCert(c)
	}
	for _, c := range crls {
		sn.crlByIssuer[string(c.rl.RawIssuer)] = append(sn.crlByIssuer[string(c.rl.RawIssuer)], c)
		if !c.rl.NextUpdate.IsZero() && sn.loadedAt.After(c.rl.NextUpdate) {
			sn.staleCRLCount++
		}
	}
	for _, r := range revoked {
		sn.revoked[r] = true
	}
	return sn
}

// StoreInfo summarises what a store holds.
type StoreInfo struct {
	Generation     uint64 // incremented by every successful Reload
	Roots          int
	Intermediates  int
	CRLs           int
	StaleCRLs      int // CRLs past their nextUpdate when loaded (still applied)
	RevokedSerials int
	LoadedAt       time.Time
}

// Info returns a summary of the current material.
func (s *Store) Info() StoreInfo {
	sn := s.snap.Load()
	return StoreInfo{Generation: sn.gen, Roots: len(sn.rootCerts), Intermediates: len(sn.inter), CRLs: len(sn.crls),
		StaleCRLs: sn.staleCRLCount, RevokedSerials: len(sn.revoked), LoadedAt: sn.loadedAt}
}

// CertCheck qualifies Store.Check.
type CertCheck struct {
	// Now is the verification time; zero means time.Now().
	Now time.Time
	// Key, when set, must be the leaf's public key.
	Key *ecdsa.PublicKey
	// AgentID, when set, must be named by the leaf (URI SAN
	// urn:agentd:agent:<id>, or the subject CN when the leaf has no agentd
	// URI).
	AgentID string
	// SkillID, when set, must be named by the leaf (urn:agentd:skill:<id>,
	// or the CN).
	SkillID string
	// Usage is the extended key usage the leaf must state explicitly (one
	// of them); nil means clientAuth, an agent or skill certificate's. An
	// empty, non-nil list requires none.
	Usage []x509.ExtKeyUsage
	// DNSName, when set, must be a name the leaf is valid for (checked as
	// crypto/x509 checks a server's name).
	DNSName string
}

// Check verifies chain[0] for agentd use, with chain[1:] as extra
// intermediates, and returns the verified path (leaf first, root last).
// Every failure is a *RejectError: key_mismatch, name_mismatch, expired,
// not_yet_valid, unknown_issuer, revoked, revocation_unknown or
// bad_certificate.
func (s *Store) Check(chain []*x509.Certificate, c CertCheck) ([]*x509.Certificate, error) {
	path, _, err := s.check(chain, c)
	return path, err
}

// VerifyChain implements ChainVerifier: the chain must verify to a root,
// be unrevoked, name agentID and certify key.
func (s *Store) VerifyChain(chain []*x509.Certificate, key *ecdsa.PublicKey, agentID string, now time.Time) error {
	_, _, err := s.check(chain, CertCheck{Now: now, Key: key, AgentID: agentID})
	return err
}

func (s *Store) check(chain []*x509.Certificate, c CertCheck) ([]*x509.Certificate, *binding, error) {
	if len(chain) == 0 {
		return nil, nil, reject(ReasonNoCertificate, "no certificate presented")
	}
	if len(chain) > MaxBundleCerts {
		return nil, nil, reject(ReasonBadCertificate, "the bundle holds %d certificates, at most %d are accepted", len(chain), MaxBundleCerts)
	}
	now := c.Now
	if now.IsZero() {
		now = time.Now()
	}
	leaf := chain[0]
	if c.Key != nil {
		lk, ok := leaf.PublicKey.(*ecdsa.PublicKey)
		if !ok || !lk.Equal(c.Key) {
			return nil, nil, reject(ReasonKeyMismatch, "certificate %s certifies %s, not the record's key %s", certLabel(leaf), certKeyLabel(leaf), Fingerprint(c.Key))
		}
	}
	if c.AgentID != "" && !namesID(leaf, AgentURIPrefix, c.AgentID) {
		return nil, nil, reject(ReasonNameMismatch, "certificate %s does not name agent %s (it names %s)", certLabel(leaf), c.AgentID, describeNames(leaf))
	}
	if c.SkillID != "" && !namesID(leaf, SkillURIPrefix, c.SkillID) {
		return nil, nil, reject(ReasonNameMismatch, "certificate %s does not name skill %s (it names %s)", certLabel(leaf), c.SkillID, describeNames(leaf))
	}
	sn := s.snap.Load()
	p := agentPolicy(now, sn.maxInter)
	if c.Usage != nil {
		p.ekus = c.Usage
	}
	p.dnsName = c.DNSName
	path, err := s.verifyPath(sn, leaf, chain[1:], p)
	if err != nil {
		return nil, nil, err
	}
	return path, s.bindingOf(path), nil
}

// pathPolicy is what verifyPath requires beyond crypto/x509.
type pathPolicy struct {
	now time.Time
	// ekus: the leaf must carry one of these extended key usages
	// explicitly (no EKU extension, or anyExtendedKeyUsage alone, is not
	// enough); CA certificates that restrict EKUs must allow it.
	ekus []x509.ExtKeyUsage
	// leafKU: when the leaf has a keyUsage extension it must have these bits.
	leafKU           x509.KeyUsage
	dnsName          string // checked by crypto/x509 when set (CertCheck.DNSName)
	maxIntermediates int    // < 0: unlimited
	checkRevocation  bool
}

func agentPolicy(now time.Time, maxInter int) pathPolicy {
	return pathPolicy{now: now, ekus: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, leafKU: x509.KeyUsageDigitalSignature,
		maxIntermediates: maxInter, checkRevocation: true}
}

// verifyPath builds and checks a path from leaf to a root of sn.
func (s *Store) verifyPath(sn *snapshot, leaf *x509.Certificate, extra []*x509.Certificate, p pathPolicy) ([]*x509.Certificate, error) {
	if err := checkLeaf(leaf, p); err != nil {
		return nil, err
	}
	pool := sn.interPool
	if len(extra) > 0 {
		pool = sn.interPool.Clone()
		for _, c := range extra {
			pool.AddCert(c)
		}
	}
	chains, err := leaf.Verify(x509.VerifyOptions{
		Roots: sn.roots, Intermediates: pool, CurrentTime: p.now, DNSName: p.dnsName,
		// EKUs are agentd's check (checkEKU): crypto/x509 treats a leaf
		// without the extension as valid for every usage.
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny},
	})
	if err != nil {
		return nil, classify(err, sn, leaf, extra, p.now)
	}
	var first, revoked error
	for _, ch := range chains {
		err := checkPathPolicy(ch, p)
		if err == nil && p.checkRevocation {
			err = s.revocationOf(sn, ch, p.now)
		}
		if err == nil {
			return ch, nil
		}
		if first == nil {
			first = err
		}
		if ReasonOf(err) == ReasonRevoked && revoked == nil {
			revoked = err
		}
	}
	// A revoked certificate is revoked on every path.
	if revoked != nil {
		return nil, revoked
	}
	return nil, first
}

// checkLeaf applies the end-entity rules.
func checkLeaf(leaf *x509.Certificate, p pathPolicy) error {
	if leaf.BasicConstraintsValid && leaf.IsCA {
		return reject(ReasonBadCertificate, "certificate %s is a CA certificate (basicConstraints cA=TRUE), not an agent or skill certificate", certLabel(leaf))
	}
	if leaf.KeyUsage&(x509.KeyUsageCertSign|x509.KeyUsageCRLSign) != 0 {
		return reject(ReasonBadCertificate, "certificate %s may sign certificates or CRLs (keyUsage keyCertSign/cRLSign): not an end-entity certificate", certLabel(leaf))
	}
	if leaf.KeyUsage != 0 && leaf.KeyUsage&p.leafKU != p.leafKU {
		return reject(ReasonBadCertificate, "certificate %s lacks the keyUsage digitalSignature", certLabel(leaf))
	}
	return nil
}

// checkPathPolicy applies agentd's rules to one path built by crypto/x509.
func checkPathPolicy(ch []*x509.Certificate, p pathPolicy) error {
	if p.maxIntermediates >= 0 {
		n := 0
		for _, c := range ch[1 : len(ch)-1] {
			if !bytes.Equal(c.RawSubject, c.RawIssuer) {
				n++
			}
		}
		if n > p.maxIntermediates {
			return reject(ReasonBadCertificate, "path has %d intermediate CAs, at most %d are allowed", n, p.maxIntermediates)
		}
	}
	for i, c := range ch {
		if err := checkKeyStrength(c); err != nil {
			return err
		}
		if i < len(ch)-1 {
			if err := checkSerial(c); err != nil {
				return err
			}
		}
	}
	return checkEKU(ch, p.ekus)
}

// checkEKU: the leaf carries one of want explicitly; every CA certificate
// that restricts extended key usages allows it (or anyExtendedKeyUsage).
func checkEKU(ch []*x509.Certificate, want []x509.ExtKeyUsage) error {
	if len(want) == 0 {
		return nil
	}
	leaf := ch[0]
	found := false
	for _, u := range leaf.ExtKeyUsage {
		if u == x509.ExtKeyUsageAny {
			return reject(ReasonBadCertificate, "certificate %s carries anyExtendedKeyUsage: an agent certificate must be valid for its purpose only", certLabel(leaf))
		}
		for _, w := range want {
			if u == w {
				found = true
			}
		}
	}
	if !found {
		return reject(ReasonBadCertificate, "certificate %s does not carry the extended key usage %s (it must state it explicitly; an agent certificate's is clientAuth, and `agentd trust verify --usage` checks another)", certLabel(leaf), ekuNames(want))
	}
	for _, c := range ch[1:] {
		if len(c.ExtKeyUsage) == 0 && len(c.UnknownExtKeyUsage) == 0 {
			continue
		}
		ok := false
		for _, u := range c.ExtKeyUsage {
			if u == x509.ExtKeyUsageAny {
				ok = true
			}
			for _, w := range want {
				if u == w {
					ok = true
				}
			}
		}
		if !ok {
			return reject(ReasonBadCertificate, "CA certificate %s restricts extended key usages and does not allow %s", certLabel(c), ekuNames(want))
		}
	}
	return nil
}

func ekuNames(us []x509.ExtKeyUsage) string {
	names := make([]string, len(us))
	for i, u := range us {
		switch u {
		case x509.ExtKeyUsageClientAuth:
			names[i] = "clientAuth"
		case x509.ExtKeyUsageServerAuth:
			names[i] = "serverAuth"
		default:
			names[i] = fmt.Sprintf("eku(%d)", u)
		}
	}
	return strings.Join(names, " or ")
}

// checkKeyStrength refuses weak or unexpected keys anywhere in a path:
// RSA below 2048 bits or not a multiple of 8, ECDSA curves other than
// P-256/P-384/P-521, DSA.
func checkKeyStrength(c *x509.Certificate) error {
	switch k := c.PublicKey.(type) {
	case *ecdsa.PublicKey:
		switch k.Curve {
		case elliptic.P256(), elliptic.P384(), elliptic.P521():
			return nil
		}
		return reject(ReasonBadCertificate, "certificate %s has an ECDSA key on an unsupported curve", certLabel(c))
	case *rsa.PublicKey:
		if n := k.N.BitLen(); n < 2048 || n%8 != 0 {
			return reject(ReasonBadCertificate, "certificate %s has a %d-bit RSA key (at least 2048 bits, a multiple of 8, are required)", certLabel(c), n)
		}
		return nil
	case ed25519.PublicKey:
		return nil
	}
	return reject(ReasonBadCertificate, "certificate %s has a %s key, which agentd does not accept", certLabel(c), c.PublicKeyAlgorithm)
}

// checkSerial enforces RFC 5280 §4.1.2.2: a positive integer of at most
// 20 octets (revocation is by serial; a malformed one is ambiguous).
func checkSerial(c *x509.Certificate) error {
	n := c.SerialNumber
	if n == nil || n.Sign() <= 0 {
		return reject(ReasonBadCertificate, "certificate %s has a serial number that is not positive", certLabel(c))
	}
	// 20 octets of two's complement: the positive value fits in 159 bits.
	if n.BitLen() > 159 {
		return reject(ReasonBadCertificate, "certificate %s has a serial number longer than 20 octets", certLabel(c))
	}
	return nil
}

// revocationOf checks every certificate of a path but the root against
// the revoked-serial list and the CRLs of its issuer; the root only
// against the list.
func (s *Store) revocationOf(sn *snapshot, ch []*x509.Certificate, now time.Time) error {
	for i, c := range ch {
		if sn.revoked[serialKey(c.SerialNumber)] {
			return reject(ReasonRevoked, "certificate %s is in the revoked-serial list", certLabel(c))
		}
		if i == len(ch)-1 {
			break
		}
		if err := crlStatus(sn, c.SerialNumber, c.RawIssuer, ch[i+1], certLabel(c)); err != nil {
			return err
		}
	}
	return nil
}

// crlStatus looks serial up in every CRL issued by issuer.
func crlStatus(sn *snapshot, serial *big.Int, rawIssuer []byte, issuer *x509.Certificate, label string) error {
	key := serialKey(serial)
	for _, c := range sn.crlByIssuer[string(rawIssuer)] {
		v := c.verdictFor(issuer)
		if !v.applies {
			continue // same name, another key: not this issuer's list
		}
		if v.err != nil {
			return reject(ReasonRevocationUnknown, "the CRL %s of %s is not usable: %v", c.source, certLabel(issuer), v.err)
		}
		if at, ok := c.serials[key]; ok {
			return reject(ReasonRevoked, "certificate %s was revoked by %s at %s", label, certLabel(issuer), at.UTC().Format(time.RFC3339))
		}
	}
	return nil
}

// verdictFor decides, once per issuer certificate, whether the CRL is the
// issuer's (its key signed it) and usable (the issuer may sign CRLs).
func (c *crl) verdictFor(issuer *x509.Certificate) crlVerdict {
	h := sha256.Sum256(issuer.Raw)
	c.mu.Lock()
	defer c.mu.Unlock()
	if v, ok := c.checked[h]; ok {
		return v
	}
	var v crlVerdict
	if issuer.CheckSignature(c.rl.SignatureAlgorithm, c.rl.RawTBSRevocationList, c.rl.Signature) == nil {
		v.applies = true
		switch {
		case c.structErr != nil:
			v.err = c.structErr
		case issuer.BasicConstraintsValid && !issuer.IsCA:
			v.err = fmt.Errorf("its issuer %s is not a CA", certLabel(issuer))
		case issuer.KeyUsage != 0 && issuer.KeyUsage&x509.KeyUsageCRLSign == 0:
			v.err = fmt.Errorf("its issuer %s has a keyUsage without cRLSign", certLabel(issuer))
		}
	}
	if c.checked == nil {
		c.checked = map[[32]byte]crlVerdict{}
	}
	c.checked[h] = v
	return v
}

// Object identifiers of the CRL extensions agentd understands.
var (
	oidCRLNumber = []int{2, 5, 29, 20}
	oidAKI       = []int{2, 5, 29, 35}
)

func parseCRL(der []byte, source string) (*crl, error) {
	rl, err := x509.ParseRevocationList(der)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	c := &crl{rl: rl, source: source, serials: make(map[string]time.Time, len(rl.RevokedCertificateEntries))}
	for _, e := range rl.RevokedCertificateEntries {
		if e.SerialNumber == nil {
			continue
		}
		for _, x := range e.Extensions {
			if x.Critical {
				c.structErr = fmt.Errorf("entry %s has a critical extension %s agentd does not support (indirect CRLs are not supported)", FormatSerial(e.SerialNumber), x.Id)
			}
		}
		c.serials[serialKey(e.SerialNumber)] = e.RevocationTime
	}
	hasNumber := false
	for _, x := range rl.Extensions {
		switch {
		case x.Id.Equal(oidCRLNumber):
			hasNumber = true
			if x.Critical {
				c.structErr = errors.New("its CRL number extension is critical (RFC 5280 §5.2.3: it MUST be non-critical)")
			}
		case x.Id.Equal(oidAKI):
		case x.Critical:
			c.structErr = fmt.Errorf("it has a critical extension %s agentd does not support (delta and partitioned CRLs are not supported)", x.Id)
		}
	}
	if !hasNumber && c.structErr == nil {
		c.structErr = errors.New("it has no CRL number (RFC 5280 §5.2.3: conforming CRLs MUST include it)")
	}
	return c, nil
}

// classify turns a crypto/x509 failure into a RejectError.
func classify(err error, sn *snapshot, leaf *x509.Certificate, extra []*x509.Certificate, now time.Time) error {
	var inv x509.CertificateInvalidError
	if errors.As(err, &inv) {
		c := inv.Cert
		if c == nil {
			c = leaf
		}
		switch inv.Reason {
		case x509.Expired:
			if now.Before(c.NotBefore) {
				return reject(ReasonNotYetValid, "certificate %s is valid from %s", certLabel(c), c.NotBefore.UTC().Format(time.RFC3339))
			}
			return reject(ReasonExpired, "certificate %s expired at %s", certLabel(c), c.NotAfter.UTC().Format(time.RFC3339))
		case x509.NotAuthorizedToSign:
			return reject(ReasonBadCertificate, "certificate %s is not a CA and cannot issue certificates", certLabel(c))
		case x509.TooManyIntermediates:
			return reject(ReasonBadCertificate, "path length constraint exceeded: %v", err)
		case x509.CANotAuthorizedForThisName, x509.UnconstrainedName, x509.TooManyConstraints:
			return reject(ReasonBadCertificate, "name constraints: %v", err)
		}
		return reject(ReasonBadCertificate, "%v", err)
	}
	var ua x509.UnknownAuthorityError
	if errors.As(err, &ua) {
		if re := diagnose(sn, leaf, extra, now); re != nil {
			return re
		}
		return reject(ReasonUnknownIssuer, "certificate %s does not chain to a configured root (issuer %q)", certLabel(leaf), leaf.Issuer.String())
	}
	var hn x509.HostnameError
	if errors.As(err, &hn) {
		return reject(ReasonNameMismatch, "%v", err)
	}
	var uce x509.UnhandledCriticalExtension
	if errors.As(err, &uce) {
		return reject(ReasonBadCertificate, "%v", err)
	}
	return reject(ReasonBadCertificate, "%v", err)
}

// diagnose explains an unknown-authority failure: it walks issuers by name
// and signature alone, ignoring validity periods and CA flags, and if a
// path to a root exists says which certificate on it broke the chain
// (expired, not yet valid, not a CA). nil means no such path.
func diagnose(sn *snapshot, leaf *x509.Certificate, extra []*x509.Certificate, now time.Time) *RejectError {
	cands := make([]*x509.Certificate, 0, len(sn.rootCerts)+len(sn.inter)+len(extra))
	cands = append(cands, sn.rootCerts...)
	cands = append(cands, sn.inter...)
	cands = append(cands, extra...)
	isRoot := func(c *x509.Certificate) bool {
		for _, r := range sn.rootCerts {
			if r.Equal(c) {
				return true
			}
		}
		return false
	}
	// A hostile bundle could offer many same-named issuers: every
	// signature is checked at most once, and the walk gives up after a
	// fixed number of signature checks.
	type pair struct{ child, parent *x509.Certificate }
	signed := map[pair]bool{}
	budget := 64
	issued := func(c, p *x509.Certificate) bool {
		k := pair{c, p}
		if v, ok := signed[k]; ok {
			return v
		}
		if budget <= 0 {
			return false
		}
		budget--
		v := p.CheckSignature(c.SignatureAlgorithm, c.RawTBSCertificate, c.Signature) == nil
		signed[k] = v
		return v
	}
	var walk func(c *x509.Certificate, path []*x509.Certificate) []*x509.Certificate
	walk = func(c *x509.Certificate, path []*x509.Certificate) []*x509.Certificate {
		if len(path) > MaxBundleCerts+2 {
			return nil
		}
		for _, p := range cands {
			if !bytes.Equal(p.RawSubject, c.RawIssuer) || !issued(c, p) {
				continue
			}
			seen := false
			for _, q := range path {
				if q.Equal(p) {
					seen = true
				}
			}
			if seen {
				continue
			}
			np := append(append([]*x509.Certificate(nil), path...), p)
			if isRoot(p) {
				return np
			}
			if r := walk(p, np); r != nil {
				return r
			}
		}
		return nil
	}
	path := walk(leaf, []*x509.Certificate{leaf})
	if path == nil {
		return nil
	}
	for _, c := range path {
		if now.Before(c.NotBefore) {
			return reject(ReasonNotYetValid, "certificate %s on the path to the root is valid from %s", certLabel(c), c.NotBefore.UTC().Format(time.RFC3339))
		}
		if now.After(c.NotAfter) {
			return reject(ReasonExpired, "certificate %s on the path to the root expired at %s", certLabel(c), c.NotAfter.UTC().Format(time.RFC3339))
		}
	}
	for _, c := range path[1:] {
		if !c.BasicConstraintsValid || !c.IsCA {
			return reject(ReasonBadCertificate, "certificate %s issued %s but is not a CA (basicConstraints cA is not set)", certLabel(c), certLabel(path[0]))
		}
	}
	return nil
}

// ---- names ----

// AgentURI is the URI subjectAltName that names an agent in its
// certificate.
func AgentURI(agentID string) string { return AgentURIPrefix + strings.ToLower(agentID) }

// SkillURI is the URI subjectAltName that names a skill in its certificate.
func SkillURI(skillID string) string { return SkillURIPrefix + skillID }

// namesID reports whether c names id under prefix: by its URI SANs when it
// has any agentd URI, else by its subject CN. Agent ids (UUIDs) compare
// case-insensitively, skill ids exactly.
func namesID(c *x509.Certificate, prefix, id string) bool {
	eq := func(a, b string) bool {
		if prefix == AgentURIPrefix {
			return strings.EqualFold(a, b)
		}
		return a == b
	}
	hasAgentd := false
	for _, u := range c.URIs {
		s := u.String()
		if !strings.HasPrefix(strings.ToLower(s), "urn:agentd:") {
			continue
		}
		hasAgentd = true
		if strings.HasPrefix(strings.ToLower(s), prefix) && eq(s[len(prefix):], id) {
			return true
		}
	}
	return !hasAgentd && eq(c.Subject.CommonName, id)
}

func describeNames(c *x509.Certificate) string {
	var names []string
	for _, u := range c.URIs {
		if strings.HasPrefix(strings.ToLower(u.String()), "urn:agentd:") {
			names = append(names, u.String())
		}
	}
	if len(names) == 0 {
		if c.Subject.CommonName == "" {
			return "nothing (no agentd URI, empty CN)"
		}
		return fmt.Sprintf("CN=%q", c.Subject.CommonName)
	}
	return strings.Join(names, ", ")
}

func certLabel(c *x509.Certificate) string {
	name := c.Subject.CommonName
	if name == "" {
		name = c.Subject.String()
	}
	return fmt.Sprintf("%q (serial %s)", name, FormatSerial(c.SerialNumber))
}

func certKeyLabel(c *x509.Certificate) string {
	if k, ok := c.PublicKey.(*ecdsa.PublicKey); ok && k.Curve == elliptic.P256() {
		return "key " + Fingerprint(k)
	}
	return "a " + c.PublicKeyAlgorithm.String() + " key"
}

// ---- serials ----

// ParseSerial parses a certificate serial number written in hex, as
// openssl and agentd ca print it: "0x" prefix, colons and spaces allowed.
func ParseSerial(s string) (*big.Int, error) {
	t := strings.TrimSpace(s)
	t = strings.TrimPrefix(strings.TrimPrefix(t, "0x"), "0X")
	t = strings.NewReplacer(":", "", " ", "").Replace(t)
	if t == "" || len(t) > 64 {
		return nil, fmt.Errorf("%w: %q (want 1-64 hex digits)", ErrBadSerial, trunc(s))
	}
	for _, r := range t {
		if !strings.ContainsRune("0123456789abcdefABCDEF", r) {
			return nil, fmt.Errorf("%w: %q is not hex", ErrBadSerial, trunc(s))
		}
	}
	n, ok := new(big.Int).SetString(t, 16)
	if !ok {
		return nil, fmt.Errorf("%w: %q is not hex", ErrBadSerial, trunc(s))
	}
	return n, nil
}

// FormatSerial writes a serial number as upper-case hex with an even
// number of digits, as openssl prints it.
func FormatSerial(n *big.Int) string {
	if n == nil {
		return "?"
	}
	if n.Sign() < 0 {
		return "-" + FormatSerial(new(big.Int).Neg(n))
	}
	s := strings.ToUpper(n.Text(16))
	if len(s)%2 == 1 {
		s = "0" + s
	}
	return s
}

func serialKey(n *big.Int) string {
	if n == nil {
		return ""
	}
	return n.Text(16)
}

// ---- files ----

var (
	certExts = map[string]bool{".pem": true, ".crt": true, ".cer": true, ".cert": true}
	crlExts  = map[string]bool{".crl": true, ".der": true}
)

// expand lists the files named by paths: files as given, directories by
// their regular non-hidden files with one of exts, sorted.
func expand(paths []string, exts map[string]bool) ([]string, error) {
	var out []string
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		if !st.IsDir() {
			out = append(out, p)
			continue
		}
		ents, err := os.ReadDir(p)
		if err != nil {
			return nil, err
		}
		var names []string
		for _, e := range ents {
			n := e.Name()
			if strings.HasPrefix(n, ".") || !exts[strings.ToLower(filepath.Ext(n))] {
				continue
			}
			full := filepath.Join(p, n)
			if fi, err := os.Stat(full); err != nil || !fi.Mode().IsRegular() {
				continue
			}
			names = append(names, full)
		}
		sort.Strings(names)
		out = append(out, names...)
	}
	return out, nil
}

func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }() // read-only
	b, err := io.ReadAll(io.LimitReader(f, maxTrustFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(b) > maxTrustFileBytes {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, maxTrustFileBytes)
	}
	return b, nil
}

func loadCertPaths(paths []string) ([]*x509.Certificate, error) {
	files, err := expand(paths, certExts)
	if err != nil {
		return nil, err
	}
	var out []*x509.Certificate
	for _, f := range files {
		b, err := readBounded(f)
		if err != nil {
			return nil, err
		}
		certs, err := ParseCertificateFile(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		out = append(out, certs...)
	}
	return out, nil
}

// ParseCertificateFile parses the PEM certificates of a file, or one DER
// certificate. Any PEM block that is not a CERTIFICATE is an error (a
// private key in a trust file is a mistake worth stopping for).
func ParseCertificateFile(b []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	rest := b
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("holds a PEM %q block; only CERTIFICATE blocks belong in a trust file", block.Type)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d: %w", len(out)+1, err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		if len(bytes.TrimSpace(b)) == 0 {
			return nil, errors.New("is empty")
		}
		c, err := x509.ParseCertificate(b)
		if err != nil {
			return nil, fmt.Errorf("holds no PEM certificate and is not a DER certificate: %w", err)
		}
		out = append(out, c)
	} else if len(bytes.TrimSpace(rest)) != 0 {
		return nil, errors.New("has data after the last PEM block")
	}
	return out, nil
}

func loadCRLPaths(paths []string) ([]*crl, error) {
	files, err := expand(paths, crlExts)
	if err != nil {
		return nil, err
	}
	var out []*crl
	for _, f := range files {
		b, err := readBounded(f)
		if err != nil {
			return nil, err
		}
		cs, err := parseCRLFile(b, f)
		if err != nil {
			return nil, err
		}
		out = append(out, cs...)
	}
	return out, nil
}

// parseCRLFile parses the PEM "X509 CRL" blocks of a file, or one DER CRL.
func parseCRLFile(b []byte, source string) ([]*crl, error) {
	var out []*crl
	rest := b
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "X509 CRL" {
			return nil, fmt.Errorf("%s: holds a PEM %q block; only X509 CRL blocks belong in a CRL file", source, block.Type)
		}
		c, err := parseCRL(block.Bytes, fmt.Sprintf("%s#%d", source, len(out)+1))
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		c, err := parseCRL(b, source)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	} else if len(bytes.TrimSpace(rest)) != 0 {
		return nil, fmt.Errorf("%s: has data after the last PEM block", source)
	}
	if len(out) == 1 && strings.HasSuffix(out[0].source, "#1") {
		out[0].source = source
	}
	return out, nil
}

// ---- bindings: what a verified chain proved, re-checked on heartbeats ----

// binding is kept by the Verifier per agent key after a successful chain
// verification, so that a heartbeat (which carries no certificate) is
// refused as soon as the certificate expires or a reloaded CRL revokes it.
type binding struct {
	refs      []certRef
	notBefore time.Time
	notAfter  time.Time
	leafNB    time.Time // the leaf's notBefore: orders certificates for one agent
}

type certRef struct {
	serial *big.Int
	issuer *x509.Certificate // interned; nil for the root
	label  string
}

func (s *Store) bindingOf(path []*x509.Certificate) *binding {
	b := &binding{notBefore: path[0].NotBefore, notAfter: path[0].NotAfter, leafNB: path[0].NotBefore}
	for i, c := range path {
		if c.NotBefore.After(b.notBefore) {
			b.notBefore = c.NotBefore
		}
		if c.NotAfter.Before(b.notAfter) {
			b.notAfter = c.NotAfter
		}
		r := certRef{serial: c.SerialNumber, label: certLabel(c)}
		if i < len(path)-1 {
			r.issuer = s.intern(path[i+1])
		}
		b.refs = append(b.refs, r)
	}
	return b
}

func (s *Store) intern(c *x509.Certificate) *x509.Certificate {
	h := sha256.Sum256(c.Raw)
	s.mu.Lock()
	defer s.mu.Unlock()
	if have, ok := s.interned[h]; ok {
		return have
	}
	if len(s.interned) < maxInterned {
		s.interned[h] = c
	}
	return c
}

// checkBinding re-checks a binding at now against the current material.
func (s *Store) checkBinding(b *binding, now time.Time) error {
	if now.Before(b.notBefore) {
		return reject(ReasonNotYetValid, "the agent's certificate chain is valid from %s", b.notBefore.UTC().Format(time.RFC3339))
	}
	if now.After(b.notAfter) {
		return reject(ReasonExpired, "the agent's certificate chain expired at %s", b.notAfter.UTC().Format(time.RFC3339))
	}
	sn := s.snap.Load()
	for _, r := range b.refs {
		if sn.revoked[serialKey(r.serial)] {
			return reject(ReasonRevoked, "certificate %s is in the revoked-serial list", r.label)
		}
		if r.issuer != nil {
			if err := crlStatus(sn, r.serial, r.issuer.RawSubject, r.issuer, r.label); err != nil {
				return err
			}
		}
	}
	return nil
}

// bindingVerifier is implemented by *Store: chain verification that also
// returns what it proved, and the cheap re-check of that proof.
type bindingVerifier interface {
	verifyBinding(chain []*x509.Certificate, key *ecdsa.PublicKey, agentID string, now time.Time) (*binding, error)
	checkBinding(b *binding, now time.Time) error
}

func (s *Store) verifyBinding(chain []*x509.Certificate, key *ecdsa.PublicKey, agentID string, now time.Time) (*binding, error) {
	_, b, err := s.check(chain, CertCheck{Now: now, Key: key, AgentID: agentID})
	return b, err
}

var (
	_ ChainVerifier   = (*Store)(nil)
	_ bindingVerifier = (*Store)(nil)
)

func trunc(s string) string { return record.Truncate(s, 64) }
