package record

import (
	"crypto/ecdsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

func TestDecodeBase64AcceptsOneSpelling(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{"", true},
		{"AQ==", true},
		{"AQI=", true},
		{"AQID", true},
		{"AR==", false},   // unused trailing bits set
		{"AQJ=", false},   // unused trailing bits set
		{"AQ", false},     // padding missing
		{"AQ=", false},    // padding short
		{"AQ===", false},  // padding long
		{"AQ\n==", false}, // encoding/base64 skips line breaks even when strict
		{"AQ\r==", false},
		{"AQ-_", false}, // URL alphabet
		{" AQ==", false},
	} {
		_, err := DecodeBase64(tc.in)
		if (err == nil) != tc.ok {
			t.Errorf("DecodeBase64(%q): err=%v, want ok=%v", tc.in, err, tc.ok)
		}
	}
}

// Every single-bit flip of every character of either signature string is
// refused by the parser or fails verification: there is one encoding of each
// signature. Before the strict decoder, a flip of an unused trailing bit of
// a padded signature still verified (issue 12, TestTamperedAnnounceFails
// failed in ~15 % of runs).
func TestEverySignatureBitFlipFails(t *testing.T) {
	k := newKeys(t)
	// A low-S P-256 signature is at most 71 bytes of DER, so its base64
	// always ends in padding (and its last character in unused bits); so
	// does a 64-byte Ed25519 signature. Three signings vary r's length.
	padded := 0
	for seq := uint64(1); seq <= 3; seq++ {
		a := sampleAgent(k)
		a.Fill("", k.peerID, k.pubPEM, seq, testNow, time.Hour)
		sa, err := Sign(a, k.agent, k.peer)
		if err != nil {
			t.Fatal(err)
		}
		var env Announce
		if err := json.Unmarshal(sa.MarshalAnnounce(), &env); err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(env.Signature, "=") {
			padded++
		}
		for field, orig := range map[string]*string{"signature": &env.Signature, "peer_signature": &env.PeerSignature} {
			s := *orig
			for i := range len(s) {
				for bit := range 8 {
					b := []byte(s)
					b[i] ^= 1 << bit
					*orig = string(b)
					if flipVerifies(t, sa, field, string(b)) {
						t.Fatalf("%s: char %d ^ %#x still verifies: %q", field, i, 1<<bit, b)
					}
					// The whole parser, for the characters that carry
					// padding and trailing bits (the full loop through
					// ParseAnnounce takes a minute under -race).
					if i >= len(s)-4 {
						msg, err := json.Marshal(env)
						if err != nil {
							t.Fatal(err)
						}
						if got, _, err := ParseAnnounce(msg); err == nil && got.VerifySignatures() == nil {
							t.Fatalf("%s: char %d ^ %#x still verifies through ParseAnnounce: %q", field, i, 1<<bit, b)
						}
					}
				}
			}
			*orig = s
		}
	}
	if padded == 0 {
		t.Fatal("no padded signature: the test did not exercise trailing bits")
	}
}

func TestSignBytesEmitsCanonicalLowS(t *testing.T) {
	k := newKeys(t)
	half := new(big.Int).Rsh(k.agent.Curve.Params().N, 1)
	for i := range 300 {
		msg := []byte{byte(i), byte(i >> 8)}
		sig, err := SignBytes(k.agent, msg)
		if err != nil {
			t.Fatal(err)
		}
		r, s, ok := parseDERSignature(k.agent.Curve, sig)
		if !ok || s.Cmp(half) > 0 {
			t.Fatalf("signature %d is not canonical low-S DER: %x", i, sig)
		}
		if again, _ := marshalDERSignature(r, s); string(again) != string(sig) {
			t.Fatalf("signature %d is not minimal DER: %x", i, sig)
		}
		if !VerifyBytes(&k.agent.PublicKey, msg, sig) {
			t.Fatalf("signature %d does not verify", i)
		}
	}
}

// The other encodings of a valid signature verify mathematically (the
// standard library accepts them) but VerifyBytes refuses them.
func TestVerifyBytesRefusesOtherEncodings(t *testing.T) {
	k := newKeys(t)
	msg := []byte("one encoding")
	sig, err := SignBytes(k.agent, msg)
	if err != nil {
		t.Fatal(err)
	}
	r, s, ok := parseDERSignature(k.agent.Curve, sig)
	if !ok {
		t.Fatal("own signature not canonical")
	}
	highS, err := marshalDERSignature(r, new(big.Int).Sub(k.agent.Curve.Params().N, s))
	if err != nil {
		t.Fatal(err)
	}
	// Long-form length for a SEQUENCE that fits the short form.
	longForm := append([]byte{0x30, 0x81, sig[1]}, sig[2:]...)
	// A redundant leading zero in r.
	rb := r.Bytes()
	padR := []byte{0x02, byte(len(rb) + 2), 0x00, 0x00}
	padR = append(padR, rb...)
	sb, _ := marshalDERSignature(big.NewInt(1), s) // take s's encoding from here
	sEnc := sb[2+3:]
	padded := append([]byte{0x30, byte(len(padR) + len(sEnc))}, append(padR, sEnc...)...)
	h := sha256.Sum256(msg)
	for name, bad := range map[string][]byte{
		"high-S":        highS,
		"long-form len": longForm,
		"trailing byte": append(append([]byte(nil), sig...), 0),
		"padded r":      padded,
	} {
		if VerifyBytes(&k.agent.PublicKey, msg, bad) {
			t.Errorf("%s: VerifyBytes accepted %x", name, bad)
		}
		if name == "high-S" && !ecdsa.VerifyASN1(&k.agent.PublicKey, h[:], bad) {
			t.Errorf("high-S: the test's signature is not mathematically valid")
		}
	}
	if !VerifyBytes(&k.agent.PublicKey, msg, sig) {
		t.Fatal("the canonical signature does not verify")
	}
}

// flipVerifies decodes a tampered signature string the way ParseAnnounce does
// and reports whether it still verifies over sa's canonical bytes.
func flipVerifies(t *testing.T, sa *SignedAgent, field, s string) bool {
	sig, err := DecodeBase64(s)
	if err != nil {
		return false
	}
	if field == "signature" {
		pub, err := sa.AgentPublicKey()
		if err != nil {
			t.Fatal(err)
		}
		return VerifyBytes(pub, sa.Canonical(), sig)
	}
	pk, err := PeerPublicKey(sa.Agent.PeerID)
	if err != nil {
		t.Fatal(err)
	}
	ok, err := pk.Verify(sa.Canonical(), sig)
	return err == nil && ok
}

// A seed-001 UDP message signed by an implementation that does not
// normalise S (Java's SHA256withECDSA) still verifies; a record does not.
func TestSeed001MessageAcceptsHighS(t *testing.T) {
	k := newKeys(t)
	m := SkillMessage{Type: MsgSkillRegister, AgentID: "a1", SkillID: "s1", Version: "1.0.0", SkillType: SkillTool,
		Endpoint: "http://h:1", Capabilities: []string{"c"}, Timestamp: 1}
	text, err := m.SignedText()
	if err != nil {
		t.Fatal(err)
	}
	sig, err := SignBytes(k.agent, []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	r, s, _ := parseDERSignature(k.agent.Curve, sig)
	high, _ := marshalDERSignature(r, new(big.Int).Sub(k.agent.Curve.Params().N, s))
	for name, sg := range map[string][]byte{"low-S": sig, "high-S": high} {
		m.Signature = base64.StdEncoding.EncodeToString(sg)
		if err := m.Verify(&k.agent.PublicKey, nil); err != nil {
			t.Errorf("%s seed-001 message: %v", name, err)
		}
	}
	if VerifyBytes(&k.agent.PublicKey, []byte(text), high) {
		t.Error("VerifyBytes accepted high S")
	}
}

func TestParseTimestampIsRFC3339Only(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{"2026-03-01T12:00:00Z", true},
		{"2026-03-01T12:00:00.123456789Z", true},
		{"2026-03-01t12:00:00z", true},
		{"2026-03-01T12:00:00+05:30", true},
		{"0000-01-01T00:00:00Z", true},
		{"0000-01-01T0:00:00Z", false}, // one-digit hour: time.Parse accepts it
		{"2026-3-01T12:00:00Z", false},
		{"2026-03-01T12:00:00", false},
		{"2026-03-01 12:00:00Z", false},
		{"2026-03-01T12:00:00.Z", false},
		{"2026-03-01T12:00:00+0530", false},
		{"2026-03-01T24:00:00Z", false},
		{"2026-02-30T12:00:00Z", false},
		{"2026-03-01T12:00:60Z", false},
		{"+026-03-01T12:00:00Z", false},
	} {
		_, err := ParseTimestamp(tc.in)
		if (err == nil) != tc.ok {
			t.Errorf("ParseTimestamp(%q): err=%v, want ok=%v", tc.in, err, tc.ok)
		}
		if err == nil {
			if err := dateTimeSchema(t).Validate(tc.in); err != nil {
				t.Errorf("%q accepted but the schema refuses it: %v", tc.in, err)
			}
		}
	}
}

// dateTimeSchema is the JSON Schema format the record schemas use for
// issued_at, asserted.
func dateTimeSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	if err := c.AddResource("dt.json", map[string]any{"type": "string", "format": "date-time"}); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("dt.json")
	if err != nil {
		t.Fatal(err)
	}
	return sch
}
