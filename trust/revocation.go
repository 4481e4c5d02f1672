package trust

// Revocation: CRLs (parsing, which issuer's they are, whether they are
// usable) and the revoked-serial list, checked along a path.

import (
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"fmt"
	"math/big"
	"sync"
	"time"
)

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
