package record

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"math"
	"sync"
	"testing"
	"time"
)

// A compact record gives the bytes it dropped back, byte for byte: its
// signatures verify, its hash and Announce are those of the full record.
func TestCompact(t *testing.T) {
	k := newKeys(t)
	sa := signedSample(t, k)
	canon := bytes.Clone(sa.Canonical())
	announce := sa.MarshalAnnounce()
	if !sa.Compact() || sa.derive.Load() != deriveAppend {
		t.Fatalf("a record signed here does not compact directly (derive %d)", sa.derive.Load())
	}
	if sa.canon.Load() != nil {
		t.Fatal("a compact record still holds its bytes")
	}
	if !bytes.Equal(sa.Canonical(), canon) || sa.Hash() != sha256.Sum256(canon) || !bytes.Equal(sa.MarshalAnnounce(), announce) {
		t.Fatal("a compact record gives other bytes back")
	}
	if err := sa.VerifySignatures(); err != nil {
		t.Fatal(err)
	}
	if !sa.Compact() {
		t.Fatal("compacting twice")
	}
	// A copy holds its bytes, so that it may be changed.
	c := sa.Clone()
	if c.canon.Load() == nil || !bytes.Equal(c.Canonical(), canon) {
		t.Fatal("a clone of a compact record does not hold its bytes")
	}
	c.Agent.AgentName = "other"
	if !bytes.Equal(c.Canonical(), canon) || c.Compact() {
		t.Fatal("a changed copy took its bytes from its agent object")
	}
	// Decoded, as a peer's record or a stored one is.
	back, _, err := ParseAnnounce(announce)
	if err != nil {
		t.Fatal(err)
	}
	if !back.Compact() || !bytes.Equal(back.Canonical(), canon) {
		t.Fatal("a decoded record does not compact to the same bytes")
	}
}

// Records whose agent object does not give their bytes back keep them: a
// member this version does not know, an unbound record that was stamped.
func TestCompactKeepsWhatItCannotDerive(t *testing.T) {
	k := newKeys(t)
	a := sampleAgent(k)
	canon, err := Canonicalize(a)
	if err != nil {
		t.Fatal(err)
	}
	// A newer signer's member: still canonical, still signed.
	canon = append([]byte(`{"a_newer_member":1,`), canon[1:]...)
	sig, err := SignBytes(k.agent, canon)
	if err != nil {
		t.Fatal(err)
	}
	psig, err := k.peer.Sign(canon)
	if err != nil {
		t.Fatal(err)
	}
	sa, err := FromAnnounce(Announce{ProtocolVersion: ProtocolVersion, Agent: canon,
		Signature: base64.StdEncoding.EncodeToString(sig), PeerSignature: base64.StdEncoding.EncodeToString(psig)})
	if err != nil {
		t.Fatal(err)
	}
	if sa.Compact() || !bytes.Equal(sa.Canonical(), canon) || sa.VerifySignatures() != nil {
		t.Fatal("a record with an unknown member lost its bytes")
	}

	un, _, err := ParseAnnounceUnbound(unboundAnnounce(t, false))
	if err != nil {
		t.Fatal(err)
	}
	st, err := un.StampUnbound(time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if st.Compact() || st.VerifySignatures() != nil {
		t.Fatal("a stamped unbound record lost its bytes")
	}
	// A map key whose UTF-16 order appendAgent leaves to Canonicalize: the
	// record compacts the slow way.
	ls := sampleAgent(k)
	ls.Description = "one\u2028two <&>"
	ls.Metadata = map[string]any{"\ufb33x": "1.0", "\U0001F600": "2.0"}
	lsa, err := Sign(ls, k.agent, k.peer)
	if err != nil {
		t.Fatal(err)
	}
	full := bytes.Clone(lsa.Canonical())
	if !lsa.Compact() || lsa.derive.Load() != deriveCanonicalize || !bytes.Equal(lsa.Canonical(), full) || lsa.VerifySignatures() != nil {
		t.Fatalf("a record with a key beyond U+E000: derive %d", lsa.derive.Load())
	}
	if (&SignedAgent{}).Compact() || (&SignedAgent{}).Canonical() != nil {
		t.Fatal("a record without bytes compacts")
	}
}

// Compact may run while other goroutines read the record (go test -race).
func TestCompactWhileRead(t *testing.T) {
	k := newKeys(t)
	sa := signedSample(t, k)
	canon := bytes.Clone(sa.Canonical())
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 50 {
				if !bytes.Equal(sa.Canonical(), canon) || sa.Hash() != sha256.Sum256(canon) {
					t.Error("a reader saw other bytes")
					return
				}
			}
		})
	}
	sa.Compact()
	wg.Wait()
}

// FuzzCompact: whatever an agent object holds, a compact record gives back
// exactly the canonical bytes it had, built from a Go value or decoded.
func FuzzCompact(f *testing.F) {
	f.Add("a description", "key", "value", 0.5, "tier=core")
	f.Add("line\u2028sep", "\U0001F600", "\ufb33", 1e21, "<&>")
	f.Add("\x00\x1f\"\\", "", "\xff", math.Copysign(0, -1), "é")
	k := newKeys(f)
	f.Fuzz(func(t *testing.T, desc, key, val string, num float64, tag string) {
		a := sampleAgent(k)
		a.Description, a.Tags = desc, []string{tag}
		a.Metadata = map[string]any{key: val, val: num, "n": map[string]any{key: []any{num, val}}}
		a.Capabilities = map[string]string{key: val, tag: desc}
		a.Skills[0].Capabilities[0].ConfidenceHint = &num
		a.Skills[0].Scenes = []string{val, key}
		canon, err := Canonicalize(a)
		if err != nil {
			return
		}
		from := newSigned(ProtocolVersion, bytes.Clone(canon))
		from.Agent = *a
		if from.Compact() && !bytes.Equal(from.Canonical(), canon) {
			t.Fatalf("compact record built from a value gives %q, want %q", from.Canonical(), canon)
		}
		dec := newSigned(ProtocolVersion, bytes.Clone(canon))
		if err := json.Unmarshal(canon, &dec.Agent); err != nil {
			t.Fatal(err)
		}
		if dec.Compact() && !bytes.Equal(dec.Canonical(), canon) {
			t.Fatalf("compact decoded record gives %q, want %q", dec.Canonical(), canon)
		}
	})
}
