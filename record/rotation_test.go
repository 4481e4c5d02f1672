package record

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

func signedRotation(t *testing.T, from, to testKeys) *KeyRotation {
	t.Helper()
	r, err := SignRotation(testAgentID, from.agent, &to.agent.PublicKey, testNow)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestRotationSignVerify(t *testing.T) {
	oldK, newK, other := newKeys(t), newKeys(t), newKeys(t)
	r := signedRotation(t, oldK, newK)
	if err := r.Verify(); err != nil {
		t.Fatalf("fresh statement does not verify: %v", err)
	}
	if r.IssuedAt != "2026-03-01T12:00:00.000Z" || !r.Issued().Equal(testNow) {
		t.Fatalf("issued_at %q", r.IssuedAt)
	}
	ok, nk, err := r.Keys()
	if err != nil || !ok.Equal(&oldK.agent.PublicKey) || !nk.Equal(&newK.agent.PublicKey) {
		t.Fatalf("keys: %v", err)
	}
	// The signed bytes are the canonical statement with the type member,
	// members sorted, no signature.
	msg, err := r.SignedBytes()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(msg, []byte(`{"agent_id":"`+testAgentID+`","issued_at":"2026-03-01T12:00:00.000Z","new_key":"-----BEGIN PUBLIC KEY-----\n`)) ||
		!bytes.HasSuffix(msg, []byte(`-----END PUBLIC KEY-----\n","type":"agentd.key_rotation.v1"}`)) || bytes.Contains(msg, []byte("signature")) {
		t.Fatalf("signed bytes:\n%s", msg)
	}

	// Any change to a signed field breaks the signature.
	for name, mut := range map[string]func(*KeyRotation){
		"agent_id":  func(r *KeyRotation) { r.AgentID = "6f1c0b8e-2d55-4c39-9a0e-3b7e4f8d2a11" },
		"new_key":   func(r *KeyRotation) { r.NewKey = other.pubPEM },
		"old_key":   func(r *KeyRotation) { r.OldKey = other.pubPEM },
		"issued_at": func(r *KeyRotation) { r.IssuedAt = "2026-03-01T12:00:00.001Z" },
	} {
		c := *r
		mut(&c)
		if err := c.Verify(); !errors.Is(err, ErrBadSignature) {
			t.Errorf("%s changed: got %v, want ErrBadSignature", name, err)
		}
	}
	// A statement signed by a key other than old_key does not verify.
	forged, err := SignRotation(testAgentID, other.agent, &newK.agent.PublicKey, testNow)
	if err != nil {
		t.Fatal(err)
	}
	forged.OldKey = oldK.pubPEM
	if err := forged.Verify(); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("forged statement: %v", err)
	}
	// The old key signs a rotation to itself: refused before signing.
	if _, err := SignRotation(testAgentID, oldK.agent, &oldK.agent.PublicKey, testNow); FieldOf(err) != "key_rotation.new_key" {
		t.Fatalf("self rotation: %v", err)
	}
}

func TestRotationValidateNamesTheField(t *testing.T) {
	oldK, newK := newKeys(t), newKeys(t)
	good := signedRotation(t, oldK, newK)
	for _, c := range []struct {
		field string
		mut   func(*KeyRotation)
	}{
		{"key_rotation.agent_id", func(r *KeyRotation) { r.AgentID = "agent-001" }},
		{"key_rotation.old_key", func(r *KeyRotation) { r.OldKey = "" }},
		{"key_rotation.old_key", func(r *KeyRotation) { r.OldKey = "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n" }},
		{"key_rotation.new_key", func(r *KeyRotation) { r.NewKey = strings.Repeat("x", MaxPublicKeyBytes+1) }},
		{"key_rotation.new_key", func(r *KeyRotation) { r.NewKey = r.OldKey }},
		{"key_rotation.issued_at", func(r *KeyRotation) { r.IssuedAt = "" }},
		{"key_rotation.issued_at", func(r *KeyRotation) { r.IssuedAt = "yesterday" }},
		{"key_rotation.signature", func(r *KeyRotation) { r.Signature = "" }},
		{"key_rotation.signature", func(r *KeyRotation) { r.Signature = "!!" }},
		{"key_rotation.signature", func(r *KeyRotation) { r.Signature = strings.Repeat("A", 132) }},
	} {
		r := *good
		c.mut(&r)
		err := r.Validate()
		if FieldOf(err) != c.field || !errors.Is(err, ErrMalformed) {
			t.Errorf("got %v, want a field error on %s", err, c.field)
		}
		if err := r.Verify(); err == nil {
			t.Errorf("%s: invalid statement verifies", c.field)
		}
	}
}

func TestAgentCarriesRotation(t *testing.T) {
	oldK, newK := newKeys(t), newKeys(t)
	a := sampleAgent(newK)
	a.KeyRotation = signedRotation(t, oldK, newK)
	sa, err := Sign(a, newK.agent, newK.peer)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(sa.Canonical(), []byte(`"key_rotation":{"agent_id":`)) {
		t.Fatalf("statement not in the canonical record: %s", sa.Canonical())
	}
	msg := sa.MarshalAnnounce()
	if err := ValidateSchema(SchemaAnnounce, msg); err != nil {
		t.Fatalf("schema: %v", err)
	}
	back, _, err := ParseAnnounce(msg)
	if err != nil {
		t.Fatal(err)
	}
	if err := back.VerifySignatures(); err != nil {
		t.Fatal(err)
	}
	if back.Agent.KeyRotation == nil || *back.Agent.KeyRotation != *a.KeyRotation || back.Agent.KeyRotation.Verify() != nil {
		t.Fatal("statement did not survive the wire")
	}

	// The statement must be about this agent and its public_key.
	other := newKeys(t)
	for field, mut := range map[string]func(*Agent){
		"key_rotation.new_key":  func(a *Agent) { a.KeyRotation = signedRotation(t, oldK, other) },
		"key_rotation.agent_id": func(a *Agent) { a.AgentID = "6f1c0b8e-2d55-4c39-9a0e-3b7e4f8d2a11" },
		"key_rotation.old_key":  func(a *Agent) { r := *a.KeyRotation; r.OldKey = "junk"; a.KeyRotation = &r },
	} {
		b := sampleAgent(newK)
		b.KeyRotation = signedRotation(t, oldK, newK)
		mut(b)
		if err := b.Validate(); FieldOf(err) != field {
			t.Errorf("got %v, want a field error on %s", err, field)
		}
		if _, err := Sign(b, newK.agent, newK.peer); FieldOf(err) != field {
			t.Errorf("Sign: got %v, want a field error on %s", err, field)
		}
	}
	// Before Fill, public_key and agent_id may still be empty.
	c := sampleAgent(newK)
	c.AgentID, c.PublicKey = "", ""
	c.KeyRotation = signedRotation(t, oldK, newK)
	if err := c.ValidateContent(); err != nil {
		t.Fatalf("unfilled record with a statement: %v", err)
	}
}

func TestParseRotation(t *testing.T) {
	oldK, newK := newKeys(t), newKeys(t)
	r := signedRotation(t, oldK, newK)
	b, err := MarshalRotation(r)
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseRotation(b)
	if err != nil {
		t.Fatal(err)
	}
	if *back != *r || back.Verify() != nil {
		t.Fatal("round trip changed the statement")
	}
	for name, in := range map[string]string{
		"case":      strings.Replace(string(b), `"agent_id"`, `"Agent_ID"`, 1),
		"unknown":   strings.Replace(string(b), `{"agent_id"`, `{"extra":1,"agent_id"`, 1),
		"duplicate": strings.Replace(string(b), `{"agent_id"`, `{"signature":"AA==","agent_id"`, 1),
		"type":      strings.Replace(string(b), `"agent_id":"`, `"agent_id":7,"x":"`, 1),
		"not json":  "{",
		"huge":      strings.Repeat(" ", MaxRotationBytes+1),
	} {
		if _, err := ParseRotation([]byte(in)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := ParseRotation([]byte(strings.Repeat(" ", MaxRotationBytes+1))); !errors.Is(err, ErrTooLarge) {
		t.Errorf("oversize: %v", err)
	}
}

// FuzzParseRotation: an accepted statement re-encodes to bytes that parse
// to the same statement, and its verdict (signature valid or not) is
// stable across the round trip.
func FuzzParseRotation(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := ParseRotation(data)
		if err != nil {
			return
		}
		b, err := MarshalRotation(r)
		if err != nil {
			t.Fatalf("accepted statement does not marshal: %v", err)
		}
		r2, err := ParseRotation(b)
		if err != nil {
			t.Fatalf("re-encoded statement refused: %v\n%s", err, b)
		}
		if *r2 != *r {
			t.Fatal("statement changed on a round trip")
		}
		if (r.Verify() == nil) != (r2.Verify() == nil) {
			t.Fatal("verdict changed on a round trip")
		}
		if _, err := r.SignedBytes(); err != nil {
			t.Fatalf("accepted statement has no signed bytes: %v", err)
		}
	})
}

// The statement round-trips through the time layout of issued_at.
func TestRotationIssuedAtLayout(t *testing.T) {
	oldK, newK := newKeys(t), newKeys(t)
	at := time.Date(2026, 1, 2, 3, 4, 5, 678_900_000, time.FixedZone("x", 3600))
	r, err := SignRotation(testAgentID, oldK.agent, &newK.agent.PublicKey, at)
	if err != nil {
		t.Fatal(err)
	}
	if r.IssuedAt != "2026-01-02T02:04:05.678Z" {
		t.Fatalf("%q", r.IssuedAt)
	}
}
