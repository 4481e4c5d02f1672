package record

import (
	"testing"
	"unsafe"
)

// TestDecodedRecordsShareCommonStrings: two records of one key, signed and
// decoded separately, hold one copy of the strings they share, and still
// carry the same values.
func TestDecodedRecordsShareCommonStrings(t *testing.T) {
	k := newKeys(t)
	a := signedSample(t, k)
	b, err := FromStored(ProtocolVersion, a.Canonical, "", "")
	if err != nil {
		t.Fatal(err)
	}
	same := func(what, x, y string) {
		t.Helper()
		if x != y {
			t.Fatalf("%s: %q and %q", what, x, y)
		}
		if unsafe.StringData(x) != unsafe.StringData(y) {
			t.Errorf("%s: two copies", what)
		}
	}
	same("public_key", a.Agent.PublicKey, b.Agent.PublicKey)
	same("peer_id", a.Agent.PeerID, b.Agent.PeerID)
	same("transport.type", a.Agent.Transport.Type, b.Agent.Transport.Type)
	same("skill_id", a.Agent.Skills[0].SkillID, b.Agent.Skills[0].SkillID)
	same("capability id", a.Agent.Skills[0].Capabilities[1].ID, b.Agent.Skills[0].Capabilities[1].ID)
	same("capability version", a.Agent.Capabilities["metrics"], b.Agent.Capabilities["metrics"])
	same("tag", a.Agent.Tags[1], b.Agent.Tags[1])
	if a.Agent.AgentName != b.Agent.AgentName || a.Agent.Description != b.Agent.Description {
		t.Fatal("the records differ")
	}
}

func BenchmarkIntern(b *testing.B) {
	k := newKeys(b)
	sa := signedSample(b, k)
	for b.Loop() {
		a := sa.Agent
		a.intern()
	}
}
