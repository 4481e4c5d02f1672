package trust

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/x509"
	"errors"
	"fmt"
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

var (
	_ ChainVerifier   = (*Store)(nil)
	_ bindingVerifier = (*Store)(nil)
)

func trunc(s string) string { return record.Truncate(s, 64) }
