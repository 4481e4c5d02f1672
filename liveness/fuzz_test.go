package liveness

import (
	"bytes"
	"testing"
)

const fuzzPeer = "12D3KooWD3eckifWpRn9wQpMG9R9hX3sD158z7EqHWmweQAJU5SA"

// FuzzDecodeClaim: any input is refused with an error or yields a claim
// that encodes back to an equivalent one.
func FuzzDecodeClaim(f *testing.F) {
	f.Add([]byte(`{"protocol_version":"v1.0","type":"peer_down","peer_id":"` + fuzzPeer + `","at":"2026-11-25T17:00:00.123Z"}`))
	f.Add([]byte(`{"protocol_version":"v1.1","type":"peer_up","peer_id":"x","at":"x"}`))
	f.Add([]byte(`{"protocol_version":"v1.0","type":"peer_down","peer_id":"` + fuzzPeer + `","PEER_ID":"x","at":"2026-11-25T17:00:00Z"}`))
	f.Add([]byte(`{"protocol_version":"v1.0","type":"peer_down","peer_id":"` + fuzzPeer + `","peer_id":"x","at":"2026-11-25T17:00:00Z"}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := DecodeClaim(b)
		if err != nil {
			if c != nil {
				t.Fatal("a claim and an error")
			}
			return
		}
		if len(b) > MaxClaimBytes {
			t.Fatalf("accepted %d bytes", len(b))
		}
		if c.Peer.Validate() != nil {
			t.Fatalf("invalid peer %q", c.Peer)
		}
		again, err := EncodeClaim(c.Peer, c.At)
		if err != nil {
			t.Fatal(err)
		}
		c2, err := DecodeClaim(again)
		if err != nil || c2.Peer != c.Peer || !c2.At.Equal(c.At) {
			t.Fatalf("round trip %s: %+v, %v", again, c2, err)
		}
	})
}

// FuzzDecodeProbe: requests and answers never panic, and what a request
// decodes to is a valid peer id.
func FuzzDecodeProbe(f *testing.F) {
	f.Add([]byte(`{"protocol_version":"v1.0","peer_id":"` + fuzzPeer + `"}`))
	f.Add([]byte(`{"protocol_version":"v1.0","reachable":true}`))
	f.Add([]byte(`{"protocol_version":"v1.0","reachable":false,"error":{"code":"ErrRateLimited","message":"x"}}`))
	f.Add([]byte(`{"protocol_version":"v1.0","Reachable":true}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if p, err := DecodeProbeRequest(b); err == nil {
			if p.Validate() != nil || len(b) > MaxProbeFrame {
				t.Fatalf("accepted %q as %q", b, p)
			}
		}
		if ok, err := DecodeProbeAnswer(b); err != nil && ok {
			t.Fatal("reachable and an error")
		}
		// A frame reader never reads past its limit.
		var buf bytes.Buffer
		if err := writeFrame(&buf, b); err != nil {
			t.Fatal(err)
		}
	})
}
