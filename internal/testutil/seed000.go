package testutil

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/asn1"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"testing"

	"github.com/gowebpki/jcs"
)

// Seed000Agent is an agent written from seed 000 alone, for the tests of
// every surface that must accept one: it knows nothing of agentd's peer_id
// and peer_signature, nor of seq, issued_at and ttl_seconds, and signs the
// RFC 8785 form of its agent object with its ECDSA key without normalising
// S (as Python's cryptography and Java's Signature do not). It does not
// use package record, so record's own tests can use it.
type Seed000Agent struct {
	Key   *ecdsa.PrivateKey
	Agent map[string]any
}

// NewSeed000Agent makes one with a fresh P-256 key, the agent id given
// and one capability, shaped as seed 000 §2's example.
func NewSeed000Agent(t testing.TB, agentID, capability string) *Seed000Agent {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s := &Seed000Agent{Key: key, Agent: map[string]any{
		"agent_id":     agentID,
		"agent_name":   "data-processor",
		"capabilities": map[string]any{capability: "2.0"},
		"transport":    map[string]any{"type": "tcp", "endpoint": "10.0.0.12:9000"},
		"metadata":     map[string]any{"__os": "linux", "__arch": "amd64"},
	}}
	s.SetKey(t, key)
	return s
}

// SetKey makes key the agent's: it signs, and public_key is its PEM.
func (s *Seed000Agent) SetKey(t testing.TB, key *ecdsa.PrivateKey) {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	s.Key = key
	s.Agent["public_key"] = string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}

// Announce is the seed's §7.1 message for the agent object as it is now;
// highS picks the high-S twin of the signature (both verify).
func (s *Seed000Agent) Announce(t testing.TB, highS bool) []byte {
	t.Helper()
	raw, err := json.Marshal(s.Agent)
	if err != nil {
		t.Fatal(err)
	}
	canon, err := jcs.Transform(raw)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(canon)
	r, sv, err := ecdsa.Sign(rand.Reader, s.Key, h[:])
	if err != nil {
		t.Fatal(err)
	}
	n := s.Key.Curve.Params().N
	if (sv.Cmp(new(big.Int).Rsh(n, 1)) > 0) != highS {
		sv = new(big.Int).Sub(n, sv)
	}
	sig, err := asn1.Marshal(struct{ R, S *big.Int }{r, sv})
	if err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(map[string]any{"protocol_version": "v1.0", "agent": json.RawMessage(canon), "signature": base64.StdEncoding.EncodeToString(sig)})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
