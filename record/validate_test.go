package record

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/Masterminds/semver/v3"
)

func pemOf(t *testing.T, pub any) string {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}

// Every rule names its field.
func TestValidateNamesTheField(t *testing.T) {
	k := newKeys(t)
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 1024)
	nan, inf := math.NaN(), math.Inf(1)
	manySkills := make([]Skill, MaxSkills+1)
	for i := range manySkills {
		manySkills[i] = Skill{SkillID: fmt.Sprintf("s%d", i), Version: "1.0.0", SkillType: SkillTool, Capabilities: []Capability{{ID: "c"}}}
	}
	cases := []struct {
		name  string
		edit  func(a *Agent)
		field string
	}{
		{"missing agent_id", func(a *Agent) { a.AgentID = "" }, "agent_id"},
		{"agent_id not a uuid", func(a *Agent) { a.AgentID = "agent-001" }, "agent_id"},
		{"agent_id uuid v1", func(a *Agent) { a.AgentID = "6ba7b810-9dad-11d1-80b4-00c04fd430c8" }, "agent_id"},
		{"agent_id uuid v5", func(a *Agent) { a.AgentID = "886313e1-3b8a-5372-9b90-0c9aee199e5d" }, "agent_id"},
		{"agent_id microsoft variant", func(a *Agent) { a.AgentID = "3cde1b52-1fc2-4f7b-cd8c-5e3e6f5c9c1d" }, "agent_id"},
		{"agent_id braces", func(a *Agent) { a.AgentID = "{" + testAgentID + "}" }, "agent_id"},
		{"agent_id urn", func(a *Agent) { a.AgentID = "urn:uuid:" + testAgentID }, "agent_id"},
		{"agent_name not a label", func(a *Agent) { a.AgentName = "-data" }, "agent_name"},
		{"agent_name too long", func(a *Agent) { a.AgentName = strings.Repeat("a", 64) }, "agent_name"},
		{"missing capabilities", func(a *Agent) { a.Capabilities = nil }, "capabilities"},
		{"capability name", func(a *Agent) { a.Capabilities["a b"] = "1" }, "capabilities.a b"},
		{"capability value control", func(a *Agent) { a.Capabilities["metrics"] = "2\n0" }, "capabilities.metrics"},
		{"missing public_key", func(a *Agent) { a.PublicKey = "" }, "public_key"},
		{"public_key not pem", func(a *Agent) { a.PublicKey = "MIIBIjANBgkqh…" }, "public_key"},
		{"public_key rsa", func(a *Agent) { a.PublicKey = pemOf(t, &rsaKey.PublicKey) }, "public_key"},
		{"public_key p384", func(a *Agent) { a.PublicKey = pemOf(t, &p384.PublicKey) }, "public_key"},
		{"public_key trailing data", func(a *Agent) { a.PublicKey += "garbage" }, "public_key"},
		{"public_key private block", func(a *Agent) { a.PublicKey = strings.ReplaceAll(a.PublicKey, "PUBLIC KEY", "PRIVATE KEY") }, "public_key"},
		{"certificate garbage", func(a *Agent) { a.Certificate = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n" }, "certificate"},
		{"missing transport type", func(a *Agent) { a.Transport.Type = "" }, "transport.type"},
		{"transport type", func(a *Agent) { a.Transport.Type = "t c p" }, "transport.type"},
		{"transport endpoint", func(a *Agent) { a.Transport.Endpoint = "a\x00b" }, "transport.endpoint"},
		{"reserved metadata", func(a *Agent) { a.Metadata[MetaOS] = 7 }, "metadata.__os"},
		{"metadata key", func(a *Agent) { a.Metadata[""] = 1 }, "metadata"},
		{"missing peer_id", func(a *Agent) { a.PeerID = "" }, "peer_id"},
		{"peer_id garbage", func(a *Agent) { a.PeerID = "12D3Koo" }, "peer_id"},
		// An RSA peer id is a SHA-256 multihash: it does not embed its key,
		// so a peer signature could not be checked from the record.
		{"peer id without embedded key", func(a *Agent) { a.PeerID = "QmaeANgBs1DTSxWSrPPtobgQuxW8XTfsS4ydbK4rCHzqxG" }, "peer_id"},
		{"description too long", func(a *Agent) { a.Description = strings.Repeat("d", MaxTextLen+1) }, "description"},
		{"bad semver", func(a *Agent) { a.Version = "1.0" }, "version"},
		{"semver with v", func(a *Agent) { a.Version = "v1.0.0" }, "version"},
		{"too many skills", func(a *Agent) { a.Skills = manySkills }, "skills"},
		{"missing skill_id", func(a *Agent) { a.Skills[0].SkillID = "" }, "skills[0].skill_id"},
		{"skill_id separator", func(a *Agent) { a.Skills[1].SkillID = "a:b" }, "skills[1].skill_id"},
		{"skill_id wildcard", func(a *Agent) { a.Skills[1].SkillID = "*" }, "skills[1].skill_id"},
		{"duplicate skill", func(a *Agent) { a.Skills[1].SkillID = a.Skills[0].SkillID }, "skills[1].skill_id"},
		{"skill bad semver", func(a *Agent) { a.Skills[0].Version = "0.7" }, "skills[0].version"},
		{"unknown skill type", func(a *Agent) { a.Skills[0].SkillType = "plugin-skill" }, "skills[0].skill_type"},
		{"skill endpoint separator", func(a *Agent) { a.Skills[0].Endpoint = "a;b" }, "skills[0].endpoint"},
		{"skill without capabilities", func(a *Agent) { a.Skills[1].Capabilities = nil }, "skills[1].capabilities"},
		{"capability without id", func(a *Agent) { a.Skills[0].Capabilities[1].ID = "" }, "skills[0].capabilities[1].id"},
		{"duplicate capability", func(a *Agent) { a.Skills[0].Capabilities[1].ID = "org-data-read" }, "skills[0].capabilities[1].id"},
		{"capability version", func(a *Agent) { a.Skills[0].Capabilities[1].Version = "one" }, "skills[0].capabilities[1].version"},
		{"confidence -0.1", func(a *Agent) { a.Skills[0].Capabilities[0].ConfidenceHint = f64(-0.1) }, "skills[0].capabilities[0].confidence_hint"},
		{"confidence 1.1", func(a *Agent) { a.Skills[0].Capabilities[0].ConfidenceHint = f64(1.1) }, "skills[0].capabilities[0].confidence_hint"},
		{"confidence NaN", func(a *Agent) { a.Skills[0].Capabilities[0].ConfidenceHint = &nan }, "skills[0].capabilities[0].confidence_hint"},
		{"confidence Inf", func(a *Agent) { a.Skills[0].Capabilities[0].ConfidenceHint = &inf }, "skills[0].capabilities[0].confidence_hint"},
		{"schema not an object", func(a *Agent) { a.Skills[0].Capabilities[0].InputSchema = json.RawMessage(`[1]`) }, "skills[0].capabilities[0].input_schema"},
		{"schema not json", func(a *Agent) { a.Skills[0].Capabilities[0].OutputSchema = json.RawMessage(`{`) }, "skills[0].capabilities[0].output_schema"},
		{"schema too large", func(a *Agent) {
			a.Skills[0].Capabilities[0].InputSchema = json.RawMessage(`{"description":"` + strings.Repeat("x", MaxSchemaBytes) + `"}`)
		}, "skills[0].capabilities[0].input_schema"},
		{"bad scene", func(a *Agent) { a.Skills[0].Scenes = []string{"auth", "a|b"} }, "skills[0].scenes[1]"},
		{"bad status", func(a *Agent) { a.Skills[0].Status = "OK" }, "skills[0].status"},
		{"empty tag", func(a *Agent) { a.Tags = append(a.Tags, "") }, "tags[2]"},
		{"too many tags", func(a *Agent) { a.Tags = make([]string, MaxTags+1) }, "tags"},
		{"tenant", func(a *Agent) { a.TenantScope = "a b" }, "tenant_scope"},
		{"seq zero", func(a *Agent) { a.Seq = 0 }, "seq"},
		{"seq above 2^53-1", func(a *Agent) { a.Seq = MaxSeq + 1 }, "seq"},
		{"missing issued_at", func(a *Agent) { a.IssuedAt = "" }, "issued_at"},
		{"issued_at", func(a *Agent) { a.IssuedAt = "yesterday" }, "issued_at"},
		{"ttl zero", func(a *Agent) { a.TTLSeconds = 0 }, "ttl_seconds"},
		{"ttl negative", func(a *Agent) { a.TTLSeconds = -1 }, "ttl_seconds"},
		{"ttl above a week", func(a *Agent) { a.TTLSeconds = MaxTTLSeconds + 1 }, "ttl_seconds"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := sampleAgent(k)
			if err := a.Validate(); err != nil {
				t.Fatalf("the sample is invalid: %v", err)
			}
			c.edit(a)
			err := a.Validate()
			wantField(t, err, c.field)
			if !errors.Is(err, ErrMalformed) {
				t.Errorf("%v does not wrap ErrMalformed", err)
			}
			if _, err := Sign(a, k.agent, k.peer); err == nil {
				t.Error("Sign accepted an invalid record")
			}
		})
	}
}

func TestValidateContentAllowsUnfilledIdentity(t *testing.T) {
	a := sampleAgent(newKeys(t))
	a.AgentID, a.PublicKey, a.PeerID, a.Seq, a.IssuedAt, a.TTLSeconds = "", "", "", 0, "", 0
	if err := a.ValidateContent(); err != nil {
		t.Fatal(err)
	}
	wantField(t, a.Validate(), "agent_id")
	// Set identity fields must still be valid.
	a.PeerID = "nope"
	wantField(t, a.ValidateContent(), "peer_id")
	a.PeerID = ""
	a.TTLSeconds = -5
	wantField(t, a.ValidateContent(), "ttl_seconds")
	a.TTLSeconds = 0
	a.Capabilities = nil
	wantField(t, a.ValidateContent(), "capabilities")
}

// An oversize record is refused when signed and when received.
func TestOversizeRecord(t *testing.T) {
	k := newKeys(t)
	a := sampleAgent(k)
	for i := 0; i < 5; i++ {
		s := Skill{SkillID: fmt.Sprintf("big-%d", i), Version: "1.0.0", SkillType: SkillTool}
		for j := 0; j < 8; j++ {
			s.Capabilities = append(s.Capabilities, Capability{ID: fmt.Sprintf("c%d", j), Description: strings.Repeat("x", MaxTextLen)})
		}
		a.Skills = append(a.Skills, s)
	}
	if err := a.Validate(); err != nil {
		t.Fatalf("every field is within its limit, yet: %v", err)
	}
	if _, err := Sign(a, k.agent, k.peer); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Sign of a %d-skill record: %v, want ErrTooLarge", len(a.Skills), err)
	}
	// The same record received: the agent object is over MaxAgentBytes
	// while the message is under MaxMessageBytes.
	raw, _ := Canonicalize(a)
	if len(raw) <= MaxAgentBytes || len(raw) >= MaxMessageBytes {
		t.Fatalf("fixture: agent is %d bytes", len(raw))
	}
	msg, _ := json.Marshal(Announce{ProtocolVersion: ProtocolVersion, Agent: raw, Signature: "AAAA", PeerSignature: "AAAA"})
	if _, _, err := ParseAnnounce(msg); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("ParseAnnounce: %v, want ErrTooLarge", err)
	}
	big := append([]byte(`{"protocol_version":"v1.0","agent":{},"x":"`), make([]byte, MaxMessageBytes)...)
	if _, _, err := ParseAnnounce(big); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("ParseAnnounce of a huge message: %v", err)
	}
}

// A member whose name differs from a field only in case is refused, so
// agentd never reads a record differently from other implementations.
func TestCaseFoldedMembersRefused(t *testing.T) {
	sa := signedSample(t, newKeys(t))
	for _, c := range []struct{ old, new, field string }{
		{`"agent_name":`, `"Agent_Name":`, "agent.Agent_Name"},
		{`"skill_type":`, `"SKILL_TYPE":`, "agent.skills[0].SKILL_TYPE"},
		{`"endpoint":"10.0.0.12:9000"`, `"Endpoint":"10.0.0.12:9000"`, "agent.transport.Endpoint"},
	} {
		raw := strings.Replace(string(sa.Canonical()), c.old, c.new, 1)
		var a Agent
		wantField(t, DecodeAgent([]byte(raw), &a), c.field)
	}
	msg := strings.Replace(string(sa.MarshalAnnounce()), `"protocol_version"`, `"Protocol_Version"`, 1)
	_, _, err := ParseAnnounce([]byte(msg))
	wantField(t, err, "Protocol_Version")
}

// TestCheckLooseVersion: the memo of accepted capability versions gives
// semver.NewVersion's verdict, the first time and every time after.
func TestCheckLooseVersion(t *testing.T) {
	for _, v := range []string{"1.2.3", "v1.2", "1", "1.2.3-rc.1+b.5", "01.2.3", "1.2.3-01", "1.2.3-", "x", "1..2", " 1.2.3", "1.2.3\x00"} {
		_, want := semver.NewVersion(v)
		for range 2 {
			if got := checkLooseVersion(v); (got == nil) != (want == nil) {
				t.Fatalf("checkLooseVersion(%q) = %v, semver.NewVersion: %v", v, got, want)
			}
		}
	}
}

// TestPeerPublicKeyRemembered: a remembered key is the key the id embeds,
// and an id refused once is refused again (refusals are not remembered).
func TestPeerPublicKeyRemembered(t *testing.T) {
	keys := newKeys(t)
	pub := keys.peer.GetPublic()
	for range 2 {
		k, err := PeerPublicKey(keys.peerID)
		if err != nil || !k.Equals(pub) {
			t.Fatalf("PeerPublicKey = %v, %v; want the embedded key", k, err)
		}
	}
	if _, ok := peerKeys.m.Load(keys.peerID); !ok {
		t.Fatal("the key was not remembered")
	}
	for range 2 {
		if _, err := PeerPublicKey("12D3KooWnotapeerid"); err == nil {
			t.Fatal("an invalid peer id was accepted")
		}
	}
}
