package trust

// Names and serials: how a certificate names an agent or a skill, how it
// is labelled in messages, and serial numbers as operators write them.

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"fmt"
	"math/big"
	"strings"
)

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
