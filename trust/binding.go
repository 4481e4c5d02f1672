package trust

// Bindings: what a verified chain proved about an agent's key, kept to
// re-check heartbeats (which carry no certificate) against revocation and
// expiry.

import (
	"crypto/ecdsa"
	"crypto/sha256"
	"crypto/x509"
	"math/big"
	"time"
)

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
