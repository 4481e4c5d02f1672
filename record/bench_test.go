package record

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

// benchAgent is a realistic record: 3 skills × 4 capabilities, each with
// small input and output schemas.
func benchAgent(k testKeys) *Agent {
	a := &Agent{
		AgentID:      testAgentID,
		AgentName:    "bench-agent",
		Capabilities: map[string]string{},
		Transport:    Transport{Type: "libp2p", Endpoint: "/ip4/10.0.0.12/tcp/4001"},
		Metadata:     map[string]any{MetaOS: "linux", MetaArch: "amd64", MetaMCPVersion: "2025-06-18"},
		Description:  "an agent with a typical number of skills",
		Version:      "1.4.2",
		Tags:         []string{"tier=core", "region=eu"},
	}
	for s := 0; s < 3; s++ {
		sk := Skill{SkillID: fmt.Sprintf("skill-%d", s), Version: "0.7.0", SkillType: SkillEnterprise,
			Endpoint: "10.0.0.12:8080", Scenes: []string{"auth", "data"}, Status: StatusHealthy}
		for c := 0; c < 4; c++ {
			sk.Capabilities = append(sk.Capabilities, Capability{
				ID: fmt.Sprintf("cap-%d-%d", s, c), Version: "1.0.0", Description: "reads organisation data by department",
				InputSchema:    json.RawMessage(`{"type":"object","properties":{"dept":{"type":"string"},"limit":{"type":"integer","minimum":1}},"required":["dept"]}`),
				OutputSchema:   json.RawMessage(`{"type":"array","items":{"type":"object","properties":{"id":{"type":"string"},"name":{"type":"string"}}}}`),
				ConfidenceHint: f64(0.8),
			})
		}
		a.Skills = append(a.Skills, sk)
	}
	a.Fill("", k.peerID, k.pubPEM, 1, testNow, time.Hour)
	return a
}

func BenchmarkCanonicalizeSign(b *testing.B) {
	k := newKeys(b)
	a := benchAgent(k)
	sa, err := Sign(a, k.agent, k.peer)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(sa.Canonical())))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Sign(a, k.agent, k.peer); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkVerify(b *testing.B) {
	k := newKeys(b)
	sa, err := Sign(benchAgent(k), k.agent, k.peer)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(sa.Canonical())))
	b.ReportAllocs()
	for b.Loop() {
		if err := sa.VerifySignatures(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseAnnounce(b *testing.B) {
	k := newKeys(b)
	sa, err := Sign(benchAgent(k), k.agent, k.peer)
	if err != nil {
		b.Fatal(err)
	}
	msg := sa.MarshalAnnounce()
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := ParseAnnounce(msg); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseSkillMessage(b *testing.B) {
	line := "SKILL_REGISTER:agent-001;skill-org-feishu;0.7.0;enterprise-skill;192.168.1.100:8080;org-data-read,user-auth;auth;1707868800000;MEUCIQDxxx"
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseSkillMessage(line); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFromStored: decoding a stored record, what a start does for
// every hosted agent before the API serves.
func BenchmarkFromStored(b *testing.B) {
	k := newKeys(b)
	sa := signedSample(b, k)
	sig, psig := base64.StdEncoding.EncodeToString(sa.Signature), base64.StdEncoding.EncodeToString(sa.PeerSignature)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := FromStored(sa.ProtocolVersion, sa.Canonical(), sig, psig); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAnnounceCompact: the wire form of a hosted record, which a
// lookup answer holds, from a compact record (encoded again from the
// agent object) and from one holding its bytes.
func BenchmarkAnnounceCompact(b *testing.B) {
	k := newKeys(b)
	a := &Agent{AgentName: "word-other", Description: "six words of a description here", Tags: []string{"tag"},
		Capabilities: map[string]string{}, Transport: Transport{Type: "http", Endpoint: "http://127.0.0.1:9042"},
		Skills: []Skill{{SkillID: "s7", Version: "1.0.0", SkillType: SkillTool, Capabilities: []Capability{{ID: "cap.42", Version: "1.0.0"}}}}}
	a.Fill(testAgentID, k.peerID, k.pubPEM, 1, testNow, time.Hour)
	sa, err := Sign(a, k.agent, k.peer)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("held", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = sa.MarshalAnnounce()
		}
	})
	c := sa.Clone()
	if !c.Compact() {
		b.Fatal("does not compact")
	}
	b.Run("compact", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = c.MarshalAnnounce()
		}
	})
}
