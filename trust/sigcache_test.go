package trust

import (
	"bytes"
	"crypto/elliptic"
	"encoding/asn1"
	"math/big"
	"testing"
	"time"
)

// A record verified once is not verified again (its signatures), but
// every policy check still runs, and any other signature bytes — tampered,
// malleated — are verified afresh and refused.
func TestSignatureCache(t *testing.T) {
	c := &clock{t: t0}
	v := newVerifier(t, Config{}, c)
	id := newIdent(t)
	agentID := "2b8f6a0e-4c1d-4e8a-9b7c-1f2e3d4c5b6a"
	sa := signedRecord(t, id, agentID, t0)
	wantReason(t, v.VerifyAgent(sa, VerifyOptions{}), "")
	if !v.sigs.has(sigKey(sa)) {
		t.Fatal("a verified record was not remembered")
	}
	wantReason(t, v.VerifyAgent(sa, VerifyOptions{}), "")

	// Policy still applies to a remembered record: expiry, the sender.
	c.set(t0.Add(2 * time.Hour))
	wantReason(t, v.VerifyAgent(sa, VerifyOptions{}), ReasonExpired)
	c.set(t0)
	other := newIdent(t)
	wantReason(t, v.VerifyAgent(sa, VerifyOptions{From: other.PeerID}), ReasonPeerMismatch)

	// Tampered signature bytes: a different key, verified, refused.
	bad := sa.Clone()
	bad.Signature = bytes.Clone(sa.Signature)
	bad.Signature[len(bad.Signature)-1] ^= 1
	wantReason(t, v.VerifyAgent(bad, VerifyOptions{}), ReasonBadSignature)
	badPeer := sa.Clone()
	badPeer.PeerSignature = bytes.Clone(sa.PeerSignature)
	badPeer.PeerSignature[0] ^= 1
	wantReason(t, v.VerifyAgent(badPeer, VerifyOptions{}), ReasonBadPeerSignature)

	// The malleated twin of the valid signature (s → n−s) is other bytes:
	// it is verified like any new signature, whatever the cache holds.
	var sig struct{ R, S *big.Int }
	if _, err := asn1.Unmarshal(sa.Signature, &sig); err != nil {
		t.Fatal(err)
	}
	sig.S = new(big.Int).Sub(elliptic.P256().Params().N, sig.S)
	mal, err := asn1.Marshal(sig)
	if err != nil {
		t.Fatal(err)
	}
	twin := sa.Clone()
	twin.Signature = mal
	fresh := newVerifier(t, Config{}, c)
	want := fresh.VerifyAgent(twin, VerifyOptions{})
	got := v.VerifyAgent(twin, VerifyOptions{})
	if (want == nil) != (got == nil) {
		t.Fatalf("the malleated signature: %v with the cache, %v without", got, want)
	}
	if got == nil {
		t.Fatal("a malleated (high-S) signature was accepted")
	}

	// Same canonical bytes with the two signatures of another record
	// cannot pass for it.
	sb := signedRecord(t, id, agentID, t0.Add(time.Second))
	mix := sb.Clone()
	mix.SetCanonical(sa.Canonical())
	wantReason(t, v.VerifyAgent(mix, VerifyOptions{}), ReasonBadSignature)
}

// The cache is bounded.
func TestSignatureCacheBounded(t *testing.T) {
	var c sigCache
	for i := range sigCacheMax + 10 {
		var k [32]byte
		k[0], k[1] = byte(i), byte(i>>8)
		c.add(k)
	}
	if n := len(c.m); n > sigCacheMax {
		t.Fatalf("%d entries, bound %d", n, sigCacheMax)
	}
}

// A record this process signed is taken as verified (NoteSigned), but
// everything else about it is still checked.
func TestNoteSigned(t *testing.T) {
	c := &clock{t: t0}
	v := newVerifier(t, Config{}, c)
	id := newIdent(t)
	sa := signedRecord(t, id, "3c9f6a0e-4c1d-4e8a-9b7c-1f2e3d4c5b6a", t0)
	v.NoteSigned(sa)
	if !v.sigs.has(sigKey(sa)) {
		t.Fatal("a noted record is not remembered")
	}
	wantReason(t, v.VerifyAgent(sa, VerifyOptions{}), "")
	c.set(t0.Add(2 * time.Hour))
	wantReason(t, v.VerifyAgent(sa, VerifyOptions{}), ReasonExpired)
	c.set(t0)
	// Other signature bytes are not covered by the note.
	bad := sa.Clone()
	bad.Signature = bytes.Clone(sa.Signature)
	bad.Signature[len(bad.Signature)-1] ^= 1
	wantReason(t, v.VerifyAgent(bad, VerifyOptions{}), ReasonBadSignature)
}
