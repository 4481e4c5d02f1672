package record

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/testutil"
)

func TestSignVerifyRoundTrip(t *testing.T) {
	k := newKeys(t)
	sa := signedSample(t, k)
	if err := sa.VerifySignatures(); err != nil {
		t.Fatal(err)
	}
	// Both signatures are over the RFC 8785 form of the agent object.
	raw, _ := json.Marshal(sampleAgent(k))
	want, err := CanonicalizeJSON(raw)
	if err != nil || !bytes.Equal(sa.Canonical(), want) {
		t.Fatalf("canonical bytes differ: %v\n%s\n%s", err, sa.Canonical(), want)
	}
	if !VerifyBytes(&k.agent.PublicKey, want, sa.Signature) {
		t.Fatal("agent signature is not over the canonical bytes")
	}
	if ok, err := k.peer.GetPublic().Verify(want, sa.PeerSignature); err != nil || !ok {
		t.Fatal("peer signature is not over the canonical bytes")
	}
	msg := sa.MarshalAnnounce()
	back, newer, err := ParseAnnounce(msg)
	if err != nil || newer {
		t.Fatalf("%v %v", err, newer)
	}
	if err := back.VerifySignatures(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back.Canonical(), sa.Canonical()) || back.Hash() != sha256.Sum256(sa.Canonical()) {
		t.Fatal("parsed canonical differs")
	}
	// Member order and whitespace do not matter: the canonical form does.
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, msg, "", "   "); err != nil {
		t.Fatal(err)
	}
	back, _, err = ParseAnnounce(pretty.Bytes())
	if err != nil || back.VerifySignatures() != nil {
		t.Fatalf("pretty-printed announce: %v", err)
	}
}

// A flipped bit anywhere in the agent object or in a signature is either
// refused by the parser or fails verification.
func TestTamperedAnnounceFails(t *testing.T) {
	k := newKeys(t)
	// A small record keeps the test quick under -race; every field kind is
	// still there.
	a := &Agent{AgentID: testAgentID, AgentName: "a", Capabilities: map[string]string{}, Transport: Transport{Type: "tcp", Endpoint: "h:1"},
		Metadata: map[string]any{MetaOS: "linux"}, Description: "d", Version: "1.0.0", Tags: []string{"t"}, TenantScope: "x",
		Skills: []Skill{{SkillID: "s", Version: "1.0.0", SkillType: SkillTool, Endpoint: "e", Scenes: []string{"sc"}, Status: StatusHealthy,
			Capabilities: []Capability{{ID: "c", Version: "1.0.0", Description: "x", InputSchema: json.RawMessage(`{}`), ConfidenceHint: f64(0.5)}}}}}
	a.Fill("", k.peerID, k.pubPEM, 1, testNow, time.Hour)
	sa, err := Sign(a, k.agent, k.peer)
	if err != nil {
		t.Fatal(err)
	}
	msg := sa.MarshalAnnounce()
	start := bytes.Index(msg, []byte(`"agent":`)) + len(`"agent":`)
	verified := 0
	for i := start; i < len(msg)-1; i++ {
		for _, bit := range []byte{0x01} {
			b := bytes.Clone(msg)
			b[i] ^= bit
			sa, _, err := ParseAnnounce(b)
			if err != nil {
				continue
			}
			if err := sa.VerifySignatures(); err == nil {
				t.Fatalf("byte %d ^ %#x still verifies: %s", i, bit, b)
			}
			verified++
		}
	}
	if verified < 100 {
		t.Fatalf("only %d tampered messages parsed: the test does not exercise verification", verified)
	}
}

// Nobody can publish a record for a peer id that is not theirs.
func TestRecordNamingAnotherPeerID(t *testing.T) {
	attacker, victim := newKeys(t), newKeys(t)
	a := sampleAgent(attacker)
	a.PeerID = victim.peerID
	if _, err := Sign(a, attacker.agent, attacker.peer); FieldOf(err) != "peer_id" {
		t.Fatalf("Sign with a peer key that is not the record's: %v", err)
	}
	sa, err := Sign(a, attacker.agent, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sa.CoSign(attacker.peer); FieldOf(err) != "peer_id" {
		t.Fatalf("CoSign: %v", err)
	}
	// Forged by hand: the peer signature is the attacker's.
	sa.PeerSignature, _ = attacker.peer.Sign(sa.Canonical())
	back, _, err := ParseAnnounce(sa.MarshalAnnounce())
	if err != nil {
		t.Fatal(err)
	}
	if err := back.VerifySignatures(); !errors.Is(err, ErrBadPeerSignature) {
		t.Fatalf("got %v, want ErrBadPeerSignature", err)
	}
}

// Nobody can publish a record for an agent key that is not theirs.
func TestRecordWithSomeoneElsesPublicKey(t *testing.T) {
	attacker, victim := newKeys(t), newKeys(t)
	a := sampleAgent(attacker)
	a.PublicKey = victim.pubPEM
	if _, err := Sign(a, attacker.agent, attacker.peer); FieldOf(err) != "public_key" {
		t.Fatalf("Sign with another agent key: %v", err)
	}
	canon, _ := Canonicalize(a)
	sig, _ := SignBytes(attacker.agent, canon)
	psig, _ := attacker.peer.Sign(canon)
	msg, _ := json.Marshal(Announce{ProtocolVersion: ProtocolVersion, Agent: canon,
		Signature: base64.StdEncoding.EncodeToString(sig), PeerSignature: base64.StdEncoding.EncodeToString(psig)})
	back, _, err := ParseAnnounce(msg)
	if err != nil {
		t.Fatal(err)
	}
	if err := back.VerifySignatures(); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("got %v, want ErrBadSignature", err)
	}
}

func TestUnsignedAndCoSigned(t *testing.T) {
	k := newKeys(t)
	sa, err := Sign(sampleAgent(k), k.agent, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := sa.VerifySignatures(); !errors.Is(err, ErrUnsigned) {
		t.Fatalf("without peer signature: %v", err)
	}
	co, err := sa.CoSign(k.peer)
	if err != nil {
		t.Fatal(err)
	}
	if err := co.VerifySignatures(); err != nil {
		t.Fatal(err)
	}
	if len(sa.PeerSignature) != 0 {
		t.Fatal("CoSign changed the original")
	}
	noSig := co.Clone()
	noSig.Signature = nil
	if err := noSig.VerifySignatures(); !errors.Is(err, ErrUnsigned) {
		t.Fatalf("without agent signature: %v", err)
	}
	msg := bytes.Replace(co.MarshalAnnounce(), []byte(`"signature":"`), []byte(`"signature":"!`), 1)
	_, _, err = ParseAnnounce(msg)
	wantField(t, err, "signature")
}

func TestParseAnnounceRejects(t *testing.T) {
	k := newKeys(t)
	msg := string(signedSample(t, k).MarshalAnnounce())
	cases := []struct{ name, doc, field string }{
		{"no agent", `{"protocol_version":"v1.0"}`, "agent"},
		{"null agent", `{"protocol_version":"v1.0","agent":null}`, "agent"},
		{"no version", `{"agent":{}}`, "protocol_version"},
		{"agent without capabilities", `{"protocol_version":"v1.0","agent":{"agent_id":"` + testAgentID + `"}}`, "agent.capabilities"},
		{"capabilities null", `{"protocol_version":"v1.0","agent":{"capabilities":null}}`, "agent.capabilities"},
		{"agent_id a number", `{"protocol_version":"v1.0","agent":{"agent_id":5,"capabilities":{}}}`, "agent.agent_id"},
		{"not json", `{"protocol_version":`, ""},
		{"duplicate key", `{"protocol_version":"v1.0","protocol_version":"v1.0","agent":{}}`, ""},
		{"lone surrogate", `{"protocol_version":"v1.0","agent":{"agent_name":"\ud800"}}`, ""},
		{"no transport endpoint", strings.Replace(msg, `"transport":{"endpoint":`, `"transport":{"port":`, 1), "agent.transport.endpoint"},
	}
	for _, c := range cases {
		_, _, err := ParseAnnounce([]byte(c.doc))
		if err == nil || !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if c.field != "" && FieldOf(err) != c.field {
			t.Errorf("%s: names %q, want %q (%v)", c.name, FieldOf(err), c.field, err)
		}
	}
	// The timestamp member is allowed and ignored (seed 000 §4.1).
	withTS := msg[:len(msg)-1] + `,"timestamp":"2026-01-01T00:00:00Z"}`
	sa, _, err := ParseAnnounce([]byte(withTS))
	if err != nil || sa.VerifySignatures() != nil {
		t.Fatalf("timestamp: %v", err)
	}
}

func TestExpiry(t *testing.T) {
	a := sampleAgent(newKeys(t))
	if !a.Issued().Equal(testNow) || !a.ExpiresAt().Equal(testNow.Add(time.Hour)) {
		t.Fatalf("issued %v expires %v", a.Issued(), a.ExpiresAt())
	}
	a.IssuedAt = "garbage"
	if !a.Issued().IsZero() {
		t.Fatal("unparseable issued_at gives a time")
	}
}

// unboundAnnounce is a seed-000 Announce as an implementation of seed 000
// alone writes it: no peer_id, peer_signature, seq, issued_at or
// ttl_seconds, signed by the agent key; highS picks the high-S twin of
// the signature.
func unboundAnnounce(t testing.TB, highS bool) []byte {
	return testutil.NewSeed000Agent(t, "3cde1b52-1fc2-4f7b-8d8c-5e3e6f5c9c1d", "metrics").Announce(t, highS)
}

func TestParseAnnounceUnbound(t *testing.T) {
	for _, highS := range []bool{false, true} {
		msg := unboundAnnounce(t, highS)
		if _, _, err := ParseAnnounce(msg); err == nil || !strings.Contains(err.Error(), "peer_id") {
			t.Fatalf("the strict parser accepted a record without peer_id: %v", err)
		}
		sa, _, err := ParseAnnounceUnbound(msg)
		if err != nil {
			t.Fatal(err)
		}
		if !sa.Unbound() || sa.Agent.Seq != 0 || sa.Agent.IssuedAt != "" {
			t.Fatalf("%+v", sa.Agent)
		}
		// A high S is refused until stamping rewrites it to its twin.
		if err := sa.VerifySignatures(); (err == nil) == highS {
			t.Fatalf("highS %v: %v", highS, err)
		}
		now := time.Date(2026, 11, 26, 5, 0, 0, 0, time.UTC)
		st, err := sa.StampUnbound(now, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.VerifySignatures(); err != nil {
			t.Fatalf("stamped record: %v", err)
		}
		if st.Agent.Seq != uint64(now.UnixMilli()) || st.Agent.TTLSeconds != 3600 || st.Agent.Issued() != now || !bytes.Equal(st.Canonical(), sa.Canonical()) {
			t.Fatalf("%+v", st.Agent)
		}
		if sa.Agent.Seq != 0 {
			t.Fatal("StampUnbound changed its receiver")
		}
		// Tampering with the object breaks the signature.
		bad := st.Clone()
		bad.SetCanonical(bytes.Replace(bad.Canonical(), []byte("metrics"), []byte("metricz"), 1))
		if err := bad.VerifySignatures(); err == nil {
			t.Fatal("tampered object verifies")
		}
	}
	// A peer_signature without a peer_id, or a peer_id without its
	// peer_signature's record fields, is not an unbound record.
	var m map[string]any
	_ = json.Unmarshal(unboundAnnounce(t, false), &m)
	m["peer_signature"] = m["signature"]
	b, _ := json.Marshal(m)
	if _, _, err := ParseAnnounceUnbound(b); err == nil {
		t.Fatal("peer_signature without peer_id accepted")
	}
	_ = json.Unmarshal(unboundAnnounce(t, false), &m)
	delete(m, "peer_signature")
	m["agent"].(map[string]any)["peer_id"] = "12D3KooWBqD3FpaTVwqLxU3FkP2UQrjdCVrpj5oxZ2w7qeLPDhDV"
	b, _ = json.Marshal(m)
	if _, _, err := ParseAnnounceUnbound(b); err == nil || !strings.Contains(err.Error(), "seq") {
		t.Fatalf("a bound record without seq: %v", err)
	}
}
