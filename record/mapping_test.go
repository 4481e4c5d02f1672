package record

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestExternalAgentID(t *testing.T) {
	// Golden values computed independently (Python hashlib + uuid):
	// sha256(ns + ":" + id)[:16], version nibble 4, variant 10xx.
	for _, c := range []struct{ ns, id, want string }{
		{"rtfs", "unique-agent-identifier-123", "122c52e4-6686-40b1-8f92-37e6b518ee31"},
		{"ws", "agent-1", "2d444068-d369-4238-8c5a-bb3ed26dbb17"},
		{"rtfs", "agent-001", "a4a70c8b-ebe8-4542-999c-0daadeb58a04"},
	} {
		got := ExternalAgentID(c.ns, c.id)
		if got != c.want {
			t.Errorf("ExternalAgentID(%q, %q) = %s, want %s", c.ns, c.id, got, c.want)
		}
		if err := ValidateAgentID(got); err != nil {
			t.Errorf("%s is not a valid agent_id: %v", got, err)
		}
	}
	if ExternalAgentID("ws", "agent-1") == ExternalAgentID("rtfs", "agent-1") {
		t.Error("namespaces do not separate equal ids")
	}
	// A UUIDv4 is kept as it is; anything else is mapped.
	if id, ext := agentIDFor("ws", testAgentID); id != testAgentID || ext {
		t.Errorf("UUIDv4 mapped to %s", id)
	}
	v1 := "6ba7b810-9dad-11d1-80b4-00c04fd430c8"
	if id, ext := agentIDFor("ws", v1); id == v1 || !ext {
		t.Error("a version-1 UUID is not an agent_id and must be mapped")
	}
}

func TestDNSLabel(t *testing.T) {
	for in, want := range map[string]string{
		"DataProcessorAgent":      "data-processor-agent",
		"Code Assistant":          "code-assistant",
		"product-search-agent":    "product-search-agent",
		"  --Hello__World!! ":     "hello-world",
		"HTTPServer2Go":           "httpserver2-go",
		"agent-1":                 "agent-1",
		"日本語":                     "",
		"":                        "",
		strings.Repeat("ab-", 40): strings.TrimRight(strings.Repeat("ab-", 21), "-"),
	} {
		got := DNSLabel(in)
		if got != want {
			t.Errorf("DNSLabel(%q) = %q, want %q", in, got, want)
		}
		if got != "" && !dnsLabelRe.MatchString(got) {
			t.Errorf("DNSLabel(%q) = %q is not a DNS label", in, got)
		}
	}
	long := DNSLabel(strings.Repeat("a", 100))
	if len(long) != 63 {
		t.Errorf("long label has %d bytes", len(long))
	}
}

func TestFill(t *testing.T) {
	k := newKeys(t)
	a := &Agent{Capabilities: nil, Transport: Transport{Type: "tcp"},
		Skills: []Skill{{SkillID: "s", Version: "1.2.0", SkillType: SkillTool, Capabilities: []Capability{{ID: "c"}, {ID: "d", Version: "3.0.0"}}}}}
	now := time.Date(2026, 1, 2, 3, 4, 5, 678912345, time.FixedZone("x", 3600))
	a.Fill(testAgentID, k.peerID, k.pubPEM, 42, now, 90*time.Minute+500*time.Millisecond)
	if a.AgentID != testAgentID || a.PeerID != k.peerID || a.PublicKey != k.pubPEM {
		t.Fatalf("identity not filled: %+v", a)
	}
	if a.Seq != 42 || a.IssuedAt != "2026-01-02T02:04:05.678Z" || a.TTLSeconds != 5400 {
		t.Fatalf("seq %d issued_at %s ttl %d", a.Seq, a.IssuedAt, a.TTLSeconds)
	}
	if !reflect.DeepEqual(a.Capabilities, map[string]string{"c": "1.2.0", "d": "3.0.0"}) {
		t.Fatalf("capabilities %v", a.Capabilities)
	}
	if err := a.Validate(); err != nil {
		t.Fatal(err)
	}
	// Set identity fields are kept; the others always change.
	other := newKeys(t)
	a.Fill(ExternalAgentID("x", "y"), other.peerID, other.pubPEM, 43, now.Add(time.Second), time.Hour)
	if a.AgentID != testAgentID || a.PeerID != k.peerID || a.PublicKey != k.pubPEM || a.Seq != 43 || a.TTLSeconds != 3600 {
		t.Fatalf("refill: %+v", a)
	}
}
