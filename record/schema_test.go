package record

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// Everything agentd emits validates against the embedded seed-000 schemas:
// announces and responses of records built every way a record is built,
// their agent objects, and queries.
func TestEmittedMessagesValidate(t *testing.T) {
	k := newKeys(t)
	var agents []*Agent
	agents = append(agents, sampleAgent(k))
	card, err := ParseAgentCard(readSeed(t, "002-agent-card.json"))
	if err != nil {
		t.Fatal(err)
	}
	if a, err := card.ToAgent(); err == nil {
		agents = append(agents, a)
	} else {
		t.Fatal(err)
	}
	if a, err := (&WSRegister{ID: "agent-1", Name: "Code Assistant"}).ToAgent(); err == nil {
		agents = append(agents, a)
	} else {
		t.Fatal(err)
	}
	for _, f := range []string{"004-product-search-agent.yaml", "004-coordinator-agent.yaml"} {
		a, err := LoadAgentFile(f, readSeed(t, f))
		if err != nil {
			t.Fatal(err)
		}
		agents = append(agents, a)
	}
	for i, a := range agents {
		a.Fill(ExternalAgentID("t", a.AgentName), k.peerID, k.pubPEM, uint64(i+1), testNow, time.Hour)
		sa, err := Sign(a, k.agent, k.peer)
		if err != nil {
			t.Fatalf("agent %d: %v", i, err)
		}
		if err := ValidateSchema(SchemaAgent, sa.Canonical()); err != nil {
			t.Errorf("agent %d: %v", i, err)
		}
		if err := ValidateSchema(SchemaAnnounce, sa.MarshalAnnounce()); err != nil {
			t.Errorf("announce %d: %v", i, err)
		}
		resp, _ := json.Marshal(NewResponse(sa, true))
		if err := ValidateSchema(SchemaResponse, resp); err != nil {
			t.Errorf("response %d: %v", i, err)
		}
	}
	for _, q := range []Query{
		{ProtocolVersion: ProtocolVersion, Query: QueryBody{Capability: "c"}},
		{ProtocolVersion: ProtocolVersion, Query: QueryBody{Skill: "s", Type: string(SkillTool), Limit: 5}},
		{ProtocolVersion: ProtocolVersion, Query: QueryBody{AgentID: testAgentID}, AgentID: "me"},
	} {
		b, _ := json.Marshal(q)
		if err := ValidateSchema(SchemaQuery, b); err != nil {
			t.Errorf("%s: %v", b, err)
		}
	}
}

func TestSchemaRejectsAndNamesTheMember(t *testing.T) {
	k := newKeys(t)
	msg := string(signedSample(t, k).MarshalAnnounce())
	cases := []struct{ kind, doc, field string }{
		{SchemaAnnounce, `{"agent":{}}`, "protocol_version"},
		{SchemaAnnounce, strings.Replace(msg, `"v1.0"`, `"1.0"`, 1), "protocol_version"},
		{SchemaAnnounce, strings.Replace(msg, `"enterprise-skill"`, `"plugin-skill"`, 1), "agent.skills[0].skill_type"},
		{SchemaAnnounce, strings.Replace(msg, `"confidence_hint":0.9`, `"confidence_hint":1.5`, 1), "agent.skills[0].capabilities[0].confidence_hint"},
		{SchemaAnnounce, strings.Replace(msg, `"capabilities":{`, `"capabilitiez":{`, 1), "agent.capabilities"},
		{SchemaAnnounce, strings.Replace(msg, `"agent_id":"`+testAgentID+`"`, `"agent_id":"agent-001"`, 1), "agent.agent_id"},
		{SchemaAnnounce, strings.Replace(msg, `"signature":"`, `"signature":"!`, 1), "signature"},
		{SchemaAgent, `{"agent_id":"` + testAgentID + `","capabilities":{},"public_key":"k","transport":{"type":"tcp"}}`, "transport.endpoint"},
		{SchemaAgent, `{"agent_id":"` + testAgentID + `","capabilities":{"a":1},"public_key":"k","transport":{"type":"tcp","endpoint":""}}`, "capabilities.a"},
		{SchemaAgent, `{"agent_id":"` + testAgentID + `","capabilities":{},"public_key":"k","transport":{"type":"tcp","endpoint":""},"seq":0}`, "seq"},
		{SchemaQuery, `{"protocol_version":"v1.0","query":{}}`, "query.capability"},
		{SchemaQuery, `{"protocol_version":"v1.0","query":{"capability":"c","limit":-1}}`, "query.limit"},
		{SchemaResponse, `{"protocol_version":"v1.0","agent":{}}`, "matched"},
		{SchemaResponse, `{"protocol_version":"v1.0","agent":{},"matched":true}`, "agent.agent_id"},
		{SchemaResponse, `[]`, ""},
	}
	for _, c := range cases {
		err := ValidateSchema(c.kind, []byte(c.doc))
		if err == nil {
			t.Errorf("%s schema accepted %.80s", c.kind, c.doc)
			continue
		}
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("%v does not wrap ErrMalformed", err)
		}
		if FieldOf(err) != c.field {
			t.Errorf("%s %.60s: names %q, want %q (%v)", c.kind, c.doc, FieldOf(err), c.field, err)
		}
	}
	// Unknown members are allowed, for forward compatibility.
	extra := msg[:len(msg)-1] + `,"future":{"x":1}}`
	if err := ValidateSchema(SchemaAnnounce, []byte(extra)); err != nil {
		t.Errorf("unknown member: %v", err)
	}
	if err := ValidateSchema("beacon", []byte(`{}`)); !errors.Is(err, ErrUnknownSchema) {
		t.Errorf("unknown kind: %v", err)
	}
	if err := ValidateSchema(SchemaAgent, []byte(`{`)); !errors.Is(err, ErrMalformed) {
		t.Errorf("bad JSON: %v", err)
	}
	if err := ValidateSchema(SchemaAgent, make([]byte, MaxMessageBytes+1)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("oversize: %v", err)
	}
}

// Seed 000 refers to #/definitions/AgentObject without defining it; the
// embedded schemas define it.
func TestSchemaDefinesAgentObject(t *testing.T) {
	for _, kind := range []string{SchemaAnnounce, SchemaResponse} {
		b, err := SchemaJSON(kind)
		if err != nil {
			t.Fatal(err)
		}
		var s struct {
			Definitions map[string]map[string]string `json:"definitions"`
		}
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatal(err)
		}
		if s.Definitions["Agent"]["$ref"] != "#/definitions/AgentObject" || s.Definitions["AgentObject"]["$ref"] != "agent.json" {
			t.Errorf("%s definitions: %v", kind, s.Definitions)
		}
	}
	if _, err := SchemaJSON("nope"); !errors.Is(err, ErrUnknownSchema) {
		t.Error(err)
	}
}
