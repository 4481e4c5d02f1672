package record

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

// testKeys is an identity for tests: the agent key and the peer key.
type testKeys struct {
	agent  *ecdsa.PrivateKey
	peer   crypto.PrivKey
	peerID string
	pubPEM string
}

func newKeys(t testing.TB) testKeys {
	t.Helper()
	ak, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pk, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPrivateKey(pk)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&ak.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return testKeys{agent: ak, peer: pk, peerID: id.String(),
		pubPEM: string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))}
}

const testAgentID = "3cde1b52-1fc2-4f7b-8d8c-5e3e6f5c9c1d" // seed 000 §2

var testNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func f64(v float64) *float64 { return &v }

// sampleAgent is a complete, valid record for k: two skills, capabilities
// with schemas, tags, metadata.
func sampleAgent(k testKeys) *Agent {
	a := &Agent{
		AgentID:      testAgentID,
		AgentName:    "data-processor",
		Capabilities: map[string]string{"metrics": "2.0"},
		Transport:    Transport{Type: "tcp", Endpoint: "10.0.0.12:9000"},
		Metadata:     map[string]any{MetaOS: "linux", MetaArch: "amd64"},
		Description:  "Feishu organisation data",
		Version:      "1.4.0",
		Skills: []Skill{
			{
				SkillID: "skill-org-feishu", Version: "0.7.0", SkillType: SkillEnterprise,
				Endpoint: "192.168.1.100:8080",
				Capabilities: []Capability{
					{ID: "org-data-read", Description: "read the org chart", ConfidenceHint: f64(0.9),
						InputSchema:  json.RawMessage(`{"type":"object","properties":{"dept":{"type":"string"}}}`),
						OutputSchema: json.RawMessage(`{"type":"array"}`)},
					{ID: "user-auth", Version: "1.0.0"},
				},
				Scenes: []string{"auth"},
				Status: StatusHealthy,
			},
			{
				SkillID: "skill-search", Version: "1.0.0", SkillType: SkillTool,
				Capabilities: []Capability{{ID: "web-search"}},
			},
		},
		Tags:        []string{"tier=core", "domain=org"},
		TenantScope: "acme",
	}
	a.Fill("", k.peerID, k.pubPEM, 7, testNow, time.Hour)
	return a
}

// signedSample signs sampleAgent with both keys.
func signedSample(t testing.TB, k testKeys) *SignedAgent {
	t.Helper()
	sa, err := Sign(sampleAgent(k), k.agent, k.peer)
	if err != nil {
		t.Fatal(err)
	}
	return sa
}

// wantField fails unless err is a *FieldError naming field.
func wantField(t *testing.T, err error, field string) {
	t.Helper()
	if err == nil {
		t.Fatalf("want an error naming %q, got nil", field)
	}
	if got := FieldOf(err); got != field {
		t.Fatalf("error names field %q, want %q (error: %v)", got, field, err)
	}
}
