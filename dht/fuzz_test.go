package dht

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// FuzzReadFrame: whatever the bytes, ReadFrame never returns more than the
// limit, and a frame it accepts is exactly what WriteFrame produces for its
// body (the prefix is canonical).
func FuzzReadFrame(f *testing.F) {
	f.Add([]byte{0x03, 'a', 'b', 'c'})
	f.Add([]byte{0x80, 0x00})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, in []byte) {
		const limit = 64
		body, err := ReadFrame(bytes.NewReader(in), limit)
		if err != nil {
			return
		}
		if len(body) > limit {
			t.Fatalf("body of %d bytes exceeds limit %d", len(body), limit)
		}
		var out bytes.Buffer
		if err := WriteFrame(&out, body); err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(in, out.Bytes()) {
			t.Fatalf("frame %x does not re-encode to the input prefix %x", out.Bytes(), in)
		}
	})
}

// FuzzParseRequest: an accepted request re-encodes to a request that parses
// to the same value and nonce.
func FuzzParseRequest(f *testing.F) {
	f.Add([]byte(`{"protocol_version":"v1.0","nonce":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="}`))
	f.Add([]byte(`{"protocol_version":"v1.2","nonce":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=","agent_id":"6f1c1b8e-3f5a-4b8e-9c1d-2a3b4c5d6e7f","skill":"skill-a","capability":"cap.b"}`))
	f.Add([]byte(`{"protocol_version":"v1.0","nonce":"AAAA","skill":"a b"}`))
	f.Add([]byte(`{"protocol_version":"v1.0","nonce":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=","x":[1,2,{}]}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		r, nonce, err := ParseRequest(in)
		if err != nil {
			return
		}
		if len(nonce) != NonceSize {
			t.Fatalf("nonce of %d bytes accepted", len(nonce))
		}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		r2, nonce2, err := ParseRequest(b)
		if err != nil {
			t.Fatalf("re-encoded request %s refused: %v", b, err)
		}
		if *r2 != *r || !bytes.Equal(nonce, nonce2) {
			t.Fatalf("round trip changed the request: %+v → %+v", r, r2)
		}
	})
}

// FuzzParseResponse: an accepted response re-encodes to a response that
// parses to the same structure.
func FuzzParseResponse(f *testing.F) {
	f.Add([]byte(`{"protocol_version":"v1.0","records":[]}`))
	f.Add([]byte(`{"protocol_version":"v1.0","records":[{"announce":{"agent":{}},"signer":"agent","challenge_signature":"AQID"}]}`))
	f.Add([]byte(`{"protocol_version":"v1.0","records":[],"error":{"code":"ErrRateLimited","message":"later"}}`))
	f.Add([]byte(`{"protocol_version":"v1.0","records":[{"announce":"x","signer":"peer","challenge_signature":""}]}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		r, err := ParseResponse(in)
		if err != nil {
			return
		}
		if len(r.Records) > MaxRecordsPerResponse {
			t.Fatalf("%d records accepted", len(r.Records))
		}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("accepted response does not re-encode: %v", err)
		}
		r2, err := ParseResponse(b)
		if err != nil {
			t.Fatalf("re-encoded response %s refused: %v", b, err)
		}
		if len(r2.Records) != len(r.Records) || !reflect.DeepEqual(r2.Error, r.Error) || r2.ProtocolVersion != r.ProtocolVersion {
			t.Fatalf("round trip changed the response")
		}
		for i := range r.Records {
			a, b := r.Records[i], r2.Records[i]
			if a.Signer != b.Signer || a.ChallengeSignature != b.ChallengeSignature || !jsonEqual(a.Announce, b.Announce) {
				t.Fatalf("record %d changed in the round trip", i)
			}
		}
	})
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// FuzzValidator: Validate and Select never panic; a value Validate accepts
// is selected over itself (ties go to index 0) and over garbage.
func FuzzValidator(f *testing.F) {
	id := mustIdentity(f)
	sa := signedAgent(f, id, 3, skillSpec{"skill-f": {"cap-f"}})
	f.Add(ValueKey(id.AgentID), sa.MarshalAnnounce())
	f.Add(ValueKey(id.PeerID.String()), sa.MarshalAnnounce())
	f.Add("/agentd/x", []byte(`{"protocol_version":"v1.0","agent":{}}`))
	f.Add("/other/"+id.AgentID, []byte("{}"))
	v := Validator{Now: func() time.Time { return time.Now() }}
	f.Fuzz(func(t *testing.T, key string, val []byte) {
		err := v.Validate(key, val)
		i, serr := v.Select(key, [][]byte{[]byte("garbage"), val, val})
		if err != nil {
			if serr == nil {
				t.Fatalf("Select chose index %d among invalid values", i)
			}
			return
		}
		if serr != nil || i != 1 {
			t.Fatalf("valid value not selected: index %d, %v", i, serr)
		}
	})
}
