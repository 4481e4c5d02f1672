package record

import (
	"bytes"
	"encoding/base64"
	"maps"
	"reflect"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"unsafe"
)

// signedAndStored returns a signed sample record and the same record
// decoded again from its canonical bytes, as a start reads it.
func signedAndStored(t *testing.T) (signed, stored *SignedAgent) {
	t.Helper()
	signed = signedSample(t, newKeys(t))
	stored, err := FromStored(ProtocolVersion, signed.Canonical(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	return signed, stored
}

// TestDecodedRecordsShareCommonStrings: two records of one key, signed and
// decoded separately, hold one copy of the strings they share, and still
// carry the same values. Within one GC cycle: unique.Make's table forgets a
// value once no Handle to it is left, and intern keeps only the string
// (see intern), so a collection between the two decodes gave two copies —
// 1 run of make test in a few dozen. The collector is held off here.
func TestDecodedRecordsShareCommonStrings(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	a, b := signedAndStored(t)
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

// TestDecodedRecordPacksItsOwnStrings: a decoded record's own strings
// (name, description, endpoints, issued_at, capability descriptions) are
// slices of one allocation, in order, with their values kept; the agent id
// is a string of its own.
func TestDecodedRecordPacksItsOwnStrings(t *testing.T) {
	for _, sa := range func() []*SignedAgent { a, b := signedAndStored(t); return []*SignedAgent{a, b} }() {
		a := &sa.Agent
		want := sampleAgent(newKeys(t))
		var fields []string
		for _, s := range a.packed(nil) {
			if *s != "" {
				fields = append(fields, *s)
			}
		}
		if len(fields) != 6 || a.AgentName != want.AgentName || a.Description != want.Description ||
			a.Transport.Endpoint != want.Transport.Endpoint || a.Skills[0].Endpoint != want.Skills[0].Endpoint ||
			a.Skills[0].Capabilities[0].Description != want.Skills[0].Capabilities[0].Description {
			t.Fatalf("packed fields %q", fields)
		}
		for i := 1; i < len(fields); i++ {
			if unsafe.Pointer(unsafe.StringData(fields[i])) != unsafe.Add(unsafe.Pointer(unsafe.StringData(fields[i-1])), len(fields[i-1])) {
				t.Fatalf("%q does not follow %q in one allocation", fields[i], fields[i-1])
			}
		}
		end := uintptr(unsafe.Pointer(unsafe.StringData(fields[0])))
		if p := uintptr(unsafe.Pointer(unsafe.StringData(a.AgentID))); p >= end && p < end+uintptr(len(strings.Join(fields, ""))) {
			t.Fatal("the agent id was packed")
		}
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

// TestDecodedRecordsShareCapabilities: two records with the same
// capabilities object hold one map; syncing one record's copy with a new
// skill leaves the other's alone.
func TestDecodedRecordsShareCapabilities(t *testing.T) {
	a, b := signedAndStored(t)
	if len(a.Agent.Capabilities) == 0 {
		t.Fatal("the sample has no capabilities object")
	}
	if reflect.ValueOf(a.Agent.Capabilities).UnsafePointer() != reflect.ValueOf(b.Agent.Capabilities).UnsafePointer() {
		t.Fatal("two maps for one capabilities object")
	}
	want := maps.Clone(a.Agent.Capabilities)
	c := b.Agent // a copy, as code that builds a new record from a decoded one makes
	c.Skills = append(slices.Clone(c.Skills), Skill{SkillID: "extra", Version: "1.0.0", SkillType: SkillTool, Capabilities: []Capability{{ID: "brand-new"}}})
	c.SyncCapabilities()
	if c.Capabilities["brand-new"] != "1.0.0" {
		t.Fatalf("the synced copy lacks the new capability: %v", c.Capabilities)
	}
	if !maps.Equal(a.Agent.Capabilities, want) || !maps.Equal(b.Agent.Capabilities, want) {
		t.Fatalf("syncing a copy changed the shared map: %v", a.Agent.Capabilities)
	}
	// A different object is not merged with it.
	d := c
	d.Capabilities = map[string]string{"other": "2.0.0"}
	if got := shareCapabilities(d.Capabilities); !maps.Equal(got, map[string]string{"other": "2.0.0"}) {
		t.Fatalf("shareCapabilities returned %v", got)
	}
	// Nor are two objects whose strings, run together, read the same.
	for _, m := range []map[string]string{{"a\x00b": "c"}, {"a": "b\x00c"}, {"a\x00b\x00c": ""}} {
		if got := shareCapabilities(maps.Clone(m)); !maps.Equal(got, m) {
			t.Fatalf("shareCapabilities(%q) returned %q", m, got)
		}
		if got, ok := sharedCapabilities([]string{slices.Collect(maps.Keys(m))[0], slices.Collect(maps.Values(m))[0]}); !ok || !maps.Equal(got, m) {
			t.Fatalf("sharedCapabilities(%q) found %q, %v", m, got, ok)
		}
	}
}

// TestSignaturesInOneAllocation: a signed and a decoded record hold both
// signatures in one allocation, both still verify, and appending to the
// agent signature does not write over the peer signature.
func TestSignaturesInOneAllocation(t *testing.T) {
	a, _ := signedAndStored(t)
	b, err := FromStored(ProtocolVersion, a.Canonical(), base64.StdEncoding.EncodeToString(a.Signature), base64.StdEncoding.EncodeToString(a.PeerSignature))
	if err != nil {
		t.Fatal(err)
	}
	for _, sa := range []*SignedAgent{a, b} {
		s, p := sa.Signature, sa.PeerSignature
		if len(s) == 0 || len(p) == 0 {
			t.Fatal("a signature is missing")
		}
		if unsafe.Pointer(unsafe.SliceData(p)) != unsafe.Add(unsafe.Pointer(unsafe.SliceData(s)), len(s)) {
			t.Fatal("the signatures are two allocations")
		}
		if err := sa.VerifySignatures(); err != nil {
			t.Fatal(err)
		}
		peer := bytes.Clone(p)
		_ = append(sa.Signature, 0xff, 0xff)
		if !bytes.Equal(sa.PeerSignature, peer) {
			t.Fatal("an append to the agent signature overwrote the peer signature")
		}
	}
}

// TestShardsInterned: two records of one capability hold one copy of its
// shard's name (a registry keeps every hosted agent's shards).
func TestShardsInterned(t *testing.T) {
	a, b := signedAndStored(t)
	x, y := a.Agent.Shards(), b.Agent.Shards()
	if len(x) == 0 || !slices.Equal(x, y) {
		t.Fatalf("shards %v and %v", x, y)
	}
	if unsafe.StringData(x[0]) != unsafe.StringData(y[0]) {
		t.Fatal("two copies of one shard name")
	}
}
