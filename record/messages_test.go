package record

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestVersionNegotiation(t *testing.T) {
	cases := []struct {
		v     string
		newer bool
		err   error // nil, ErrUnsupportedVersion or ErrMalformed
	}{
		{"v1.0", false, nil},
		{"v1.3", true, nil},
		{"v1.10", true, nil},
		{"v2.0", false, ErrUnsupportedVersion},
		{"v0.9", false, ErrUnsupportedVersion},
		{"1.0", false, ErrMalformed},
		{"v1", false, ErrMalformed},
		{"v1.0.0", false, ErrMalformed},
		{"V1.0", false, ErrMalformed},
		{"", false, ErrMalformed},
		{"v1.0 ", false, ErrMalformed},
		{"v99999.0", false, ErrMalformed},
	}
	k := newKeys(t)
	msg := string(signedSample(t, k).MarshalAnnounce())
	for _, c := range cases {
		newer, err := CheckVersion(c.v)
		if !errors.Is(err, c.err) { // errors.Is(nil, nil) holds
			t.Errorf("CheckVersion(%q) = %v, want %v", c.v, err, c.err)
		}
		if newer != c.newer {
			t.Errorf("CheckVersion(%q) newer = %v", c.v, newer)
		}
		if errors.Is(c.err, ErrMalformed) {
			wantField(t, err, "protocol_version")
		}
		// The same rules apply to every message.
		doc := strings.Replace(msg, `"protocol_version":"v1.0"`, `"protocol_version":"`+c.v+`"`, 1)
		sa, newer, err := ParseAnnounce([]byte(doc))
		if (err == nil) != (c.err == nil) || (c.err != nil && !errors.Is(err, c.err)) || newer != c.newer {
			t.Errorf("ParseAnnounce with %q: %v, newer %v", c.v, err, newer)
		}
		if err == nil && sa.ProtocolVersion != c.v {
			t.Errorf("version %q kept as %q", c.v, sa.ProtocolVersion)
		}
		q := `{"protocol_version":"` + c.v + `","query":{"capability":"metrics"}}`
		if _, newer, err := ParseQuery([]byte(q)); (err == nil) != (c.err == nil) || newer != c.newer {
			t.Errorf("ParseQuery with %q: %v", c.v, err)
		}
	}
}

func TestQuery(t *testing.T) {
	q := Query{ProtocolVersion: ProtocolVersion, AgentID: "requester",
		Query: QueryBody{Capability: "org-data-read", Skill: "skill-org-feishu", Scene: "auth", Type: "enterprise-skill",
			Tags: []string{"tier=core"}, Tenant: "acme", Version: ">=0.7.0 <1.0.0", Text: "feishu", Limit: 10, AgentID: testAgentID}}
	b, err := json.Marshal(q)
	if err != nil {
		t.Fatal(err)
	}
	if err := ValidateSchema(SchemaQuery, b); err != nil {
		t.Fatal(err)
	}
	back, newer, err := ParseQuery(b)
	if err != nil || newer || !reflect.DeepEqual(*back, q) {
		t.Fatalf("%v %+v", err, back)
	}
	// By skill only: capability is sent empty (the seed schema requires
	// the member).
	bySkill, _ := json.Marshal(Query{ProtocolVersion: ProtocolVersion, Query: QueryBody{Skill: "s"}})
	if !strings.Contains(string(bySkill), `"capability":""`) {
		t.Fatalf("%s", bySkill)
	}
	if err := ValidateSchema(SchemaQuery, bySkill); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ParseQuery(bySkill); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ doc, field string }{
		{`{"protocol_version":"v1.0"}`, "query"},
		{`{"protocol_version":"v1.0","query":null}`, "query"},
		{`{"protocol_version":"v1.0","query":{}}`, "query.capability"},
		{`{"protocol_version":"v1.0","query":{"capability":"a b"}}`, "query.capability"},
		{`{"protocol_version":"v1.0","query":{"capability":"c","agent_id":"x"}}`, "query.agent_id"},
		{`{"protocol_version":"v1.0","query":{"capability":"c","limit":1001}}`, "query.limit"},
		{`{"protocol_version":"v1.0","query":{"capability":"c","scene":"*"}}`, "query.scene"},
		{`{"protocol_version":"v1.0","query":{"capability":"c","type":"x"}}`, "query.type"},
		{`{"protocol_version":"v1.0","query":{"capability":"c","version":"~>>1"}}`, "query.version"},
		{`{"protocol_version":"v1.0","query":{"capability":"c","tags":[""]}}`, "query.tags[0]"},
		{`{"protocol_version":"v1.0","query":{"capability":"c","q":"a\u0000"}}`, "query.q"},
		{`{"protocol_version":"v1.0","query":{"capability":"c","Skill":"s"}}`, "query.Skill"},
	} {
		_, _, err := ParseQuery([]byte(c.doc))
		wantField(t, err, c.field)
	}
}

func TestResponse(t *testing.T) {
	k := newKeys(t)
	sa := signedSample(t, k)
	for _, matched := range []bool{true, false} {
		b, err := json.Marshal(NewResponse(sa, matched))
		if err != nil {
			t.Fatal(err)
		}
		if err := ValidateSchema(SchemaResponse, b); err != nil {
			t.Fatal(err)
		}
		back, m, err := ParseResponse(b)
		if err != nil || m != matched {
			t.Fatalf("%v %v", err, m)
		}
		if err := back.VerifySignatures(); err != nil {
			t.Fatal(err)
		}
	}
	_, _, err := ParseResponse([]byte(`{"protocol_version":"v2.0","agent":{},"matched":true}`))
	if !errors.Is(err, ErrUnsupportedVersion) {
		t.Fatalf("v2.0 response: %v", err)
	}
}

func TestWireBeat(t *testing.T) {
	k := newKeys(t)
	b := Beat{AgentID: testAgentID, PeerID: k.peerID, Seq: 3, Status: StatusDegraded, Timestamp: testNow.UnixMilli(), IntervalMS: 5000}
	sb, err := SignBeat(b, k.agent)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(sb.Wire())
	back, err := DecodeWireBeat(raw)
	if err != nil || back.Beat != b {
		t.Fatalf("%v %+v", err, back)
	}
	if err := back.Verify(&k.agent.PublicKey); err != nil {
		t.Fatal(err)
	}
	other := newKeys(t)
	if err := back.Verify(&other.agent.PublicKey); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("wrong key: %v", err)
	}
	for _, c := range []struct{ doc, field string }{
		{`{"signature":"AAAA"}`, "beat"},
		{`{"beat":{"agent_id":"x"},"signature":"AAAA"}`, "agent_id"},
		{strings.Replace(string(raw), `"seq":3`, `"seq":0`, 1), "seq"},
		{strings.Replace(string(raw), `"status":"DEGRADED"`, `"status":"SLEEPY"`, 1), "status"},
		{strings.Replace(string(raw), `"seq":3`, `"Seq":3`, 1), "beat.Seq"},
		{strings.Replace(string(raw), `"signature":"`, `"signature":"!`, 1), "signature"},
	} {
		_, err := DecodeWireBeat([]byte(c.doc))
		wantField(t, err, c.field)
	}
	if _, err := DecodeWireBeat(make([]byte, MaxBeatBytes+1)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversize: %v", err)
	}
}
