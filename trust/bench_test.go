package trust

import (
	"bytes"
	"encoding/pem"
	"testing"
	"time"
)

// What a certificate costs per record and per heartbeat.
//
//	go test ./trust -run '^$' -bench . -benchmem

// BenchmarkStoreVerifyChain: one record's chain (leaf + SkillCenter CA
// from the bundle) verified to the root, with two CRLs.
func BenchmarkStoreVerifyChain(b *testing.B) {
	ca := newCA(b)
	s, err := LoadStore(ca.StoreConfig())
	if err != nil {
		b.Fatal(err)
	}
	id := newIdent(b)
	_, bundle := issueFor(b, ca, id, IssueOptions{})
	key := &id.AgentKey.PublicKey
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := s.VerifyChain(bundle, key, id.AgentID, t0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerifyAgentWithCertificate: the whole record decision under
// the ca policy (signatures, chain, pin).
func BenchmarkVerifyAgentWithCertificate(b *testing.B) {
	ca := newCA(b)
	s, err := LoadStore(ca.StoreConfig())
	if err != nil {
		b.Fatal(err)
	}
	id := newIdent(b)
	_, bundle := issueFor(b, ca, id, IssueOptions{})
	var pb bytes.Buffer
	for _, c := range bundle {
		_ = pem.Encode(&pb, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	v, err := NewVerifier(Config{Policy: PolicyCA, Chain: s, Now: func() time.Time { return t0 }}, nil)
	if err != nil {
		b.Fatal(err)
	}
	sa := recordOf(b, id, id.AgentID, t0, nil, pb.String())
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := v.VerifyAgent(sa, VerifyOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerifyBeatCertified: a heartbeat of a certified agent (the
// signature, then the binding re-checked against the CRLs).
func BenchmarkVerifyBeatCertified(b *testing.B) {
	ca := newCA(b)
	s, err := LoadStore(ca.StoreConfig())
	if err != nil {
		b.Fatal(err)
	}
	id := newIdent(b)
	_, bundle := issueFor(b, ca, id, IssueOptions{})
	var pb bytes.Buffer
	for _, c := range bundle {
		_ = pem.Encode(&pb, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	v, err := NewVerifier(Config{Policy: PolicyCA, Chain: s, Now: func() time.Time { return t0 }}, nil)
	if err != nil {
		b.Fatal(err)
	}
	if err := v.VerifyAgent(recordOf(b, id, id.AgentID, t0, nil, pb.String()), VerifyOptions{}); err != nil {
		b.Fatal(err)
	}
	sb := beatOf(b, id, id.AgentID, t0)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := v.VerifyBeat(sb, ""); err != nil {
			b.Fatal(err)
		}
	}
}
