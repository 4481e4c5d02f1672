package trust

// Certification paths: building one with crypto/x509 and applying
// agentd's rules to it (end-entity, extended key usage, key strength,
// serials), and saying in words why a path could not be built.

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"time"
)

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
