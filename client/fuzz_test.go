package client_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/record"
)

// FuzzAgentResult decodes arbitrary answer entries: whatever decodes
// encodes back to an entry that decodes to the same result.
func FuzzAgentResult(f *testing.F) {
	f.Add([]byte(`{"protocol_version":"v1.0","agent":{"agent_id":"3cde1b52-1fc2-4f7b-8d8c-5e3e6f5c9c1d","capabilities":{"metrics":"2.0"},"public_key":"","transport":{"type":"tcp","endpoint":"10.0.0.12:9000"},"peer_id":"","seq":1,"issued_at":"","ttl_seconds":0},"signature":"QUJD","peer_signature":"REVG","source":"gossip","age_ms":1234,"stale":false,"status":"HEALTHY"}`))
	f.Add([]byte(`{"protocol_version":"v1.0","agent":{"capabilities":{}},"source":"cache","age_ms":-5,"stale":true}`))
	f.Add([]byte(`{"agent":null}`))
	f.Add([]byte(`{"agent":{"capabilities":null}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var r client.AgentResult
		if err := json.Unmarshal(b, &r); err != nil {
			return
		}
		out, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		var again client.AgentResult
		if err := json.Unmarshal(out, &again); err != nil {
			t.Fatalf("re-decode %s: %v", out, err)
		}
		// encoding/json HTML-escapes the agent object (an equivalent
		// encoding): compare it canonically, everything else exactly.
		c1, err1 := record.CanonicalizeJSON(r.Announce.Agent)
		c2, err2 := record.CanonicalizeJSON(again.Announce.Agent)
		if err1 != nil || err2 != nil || string(c1) != string(c2) {
			t.Fatalf("the agent object changed: %s → %s", r.Announce.Agent, again.Announce.Agent)
		}
		r.Announce.Agent, again.Announce.Agent = nil, nil
		if !reflect.DeepEqual(r, again) {
			t.Fatalf("round trip changed the result:\n%+v\n%+v", r, again)
		}
	})
}
