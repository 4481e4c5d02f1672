package record

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func canon(t *testing.T, v any) string {
	t.Helper()
	b, err := Canonicalize(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestAgentCardSeedMapping(t *testing.T) {
	c, err := ParseAgentCard(readSeed(t, "002-agent-card.json"))
	if err != nil {
		t.Fatal(err)
	}
	a, err := c.ToAgent()
	if err != nil {
		t.Fatal(err)
	}
	if a.AgentID != "122c52e4-6686-40b1-8f92-37e6b518ee31" || a.Metadata[MetaExternalID] != "unique-agent-identifier-123" {
		t.Fatalf("agent_id %s, metadata %v", a.AgentID, a.Metadata)
	}
	if a.AgentName != "data-processor-agent" || a.Metadata[MetaDisplayName] != "DataProcessorAgent" {
		t.Fatalf("name %q / %v", a.AgentName, a.Metadata[MetaDisplayName])
	}
	if a.Transport != (Transport{Type: "http", Endpoint: "http://agent-host:8080/rtfs"}) {
		t.Fatalf("transport %+v", a.Transport)
	}
	if len(a.Skills) != 1 {
		t.Fatalf("skills %+v", a.Skills)
	}
	s := a.Skills[0]
	if s.SkillID != "data-processor-agent" || s.Version != "1.2.1" || s.SkillType != SkillTool || s.Endpoint != "http://agent-host:8080/rtfs" {
		t.Fatalf("skill %+v", s)
	}
	if string(s.Capabilities[0].InputSchema) != `{"$ref":"schemas/csv_input.json"}` || s.Capabilities[1].ID != "image_resizing" {
		t.Fatalf("capabilities %+v", s.Capabilities)
	}
	if a.Capabilities["csv_processing"] != "1.2.1" || strings.Join(a.Tags, ",") != "data-processing,images,version-1.2" {
		t.Fatalf("map %v tags %v", a.Capabilities, a.Tags)
	}
	if a.Metadata["owner"] != "DataTeam" || a.Metadata[MetaAgentProfileURI] != c.AgentProfileURI {
		t.Fatalf("metadata %v", a.Metadata)
	}
}

// card → agent → signed announce → parsed → card gives the same card.
func TestAgentCardRoundTrip(t *testing.T) {
	k := newKeys(t)
	inline := `{"agent_id":"` + testAgentID + `","name":"x","capabilities":[{"capability_id":"c","input_schema_ref":{"type":"object"},"output_schema_ref":true}],` +
		`"communication":{"endpoints":[{"protocol":"ws","uri":"wss://h/ws"}]},"metadata":{"skill_type":"enterprise-skill","n":1.5}}`
	for _, src := range [][]byte{readSeed(t, "002-agent-card.json"), []byte(inline)} {
		c, err := ParseAgentCard(src)
		if err != nil {
			t.Fatal(err)
		}
		a, err := c.ToAgent()
		if err != nil {
			t.Fatal(err)
		}
		a.Fill(ExternalAgentID("t", "t"), k.peerID, k.pubPEM, 1, testNow, time.Hour)
		sa, err := Sign(a, k.agent, k.peer)
		if err != nil {
			t.Fatal(err)
		}
		back, _, err := ParseAnnounce(sa.MarshalAnnounce())
		if err != nil {
			t.Fatal(err)
		}
		got := CardFromAgent(&back.Agent)
		if canon(t, got) != canon(t, c) {
			t.Errorf("round trip:\n got %s\nwant %s", canon(t, got), canon(t, c))
		}
		if _, err := ParseAgentCard(mustJSON(t, got)); err != nil {
			t.Errorf("reverse card does not parse: %v", err)
		}
	}
	c, _ := ParseAgentCard([]byte(inline))
	a, _ := c.ToAgent()
	if a.AgentID != testAgentID || a.Metadata[MetaExternalID] != nil || a.Skills[0].SkillType != SkillEnterprise {
		t.Fatalf("UUIDv4 card id or skill_type not kept: %+v", a)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestCardFromPlainAgent(t *testing.T) {
	a := sampleAgent(newKeys(t))
	c := CardFromAgent(a)
	if c.AgentID != a.AgentID || c.Name != "data-processor" || c.Communication.Endpoints[0].URI != "10.0.0.12:9000" ||
		c.Communication.Protocols[0] != "tcp" {
		t.Fatalf("card %+v", c)
	}
	var ids []string
	for _, cp := range c.Capabilities {
		ids = append(ids, cp.CapabilityID)
	}
	if strings.Join(ids, ",") != "org-data-read,user-auth,web-search,metrics" {
		t.Fatalf("capabilities %v", ids)
	}
	if c.Capabilities[0].InputSchemaRef == nil || len(c.Capabilities[0].InputSchemaRef.Inline) == 0 {
		t.Fatalf("inline schema lost: %+v", c.Capabilities[0])
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestAgentCardRejects(t *testing.T) {
	base := readSeed(t, "002-agent-card.json")
	edit := func(old, new string) []byte {
		if !bytes.Contains(base, []byte(old)) {
			t.Fatalf("%q not in the example", old)
		}
		return bytes.Replace(base, []byte(old), []byte(new), 1)
	}
	cases := []struct {
		name  string
		doc   []byte
		field string
	}{
		{"no agent_id", edit(`"agent_id": "unique-agent-identifier-123",`, ""), "agent_id"},
		{"no name", edit(`"name": "DataProcessorAgent",`, ""), "name"},
		{"bad version", edit(`"1.2.1"`, `"1.2"`), "version"},
		{"capability id with space", edit(`"csv_processing"`, `"csv processing"`), "capabilities[0].capability_id"},
		{"duplicate capability", edit(`"image_resizing"`, `"csv_processing"`), "capabilities[1].capability_id"},
		{"schema ref number", edit(`"schemas/csv_input.json"`, `42`), "capabilities[0].input_schema_ref"},
		{"empty schema ref", edit(`"schemas/csv_input.json"`, `""`), "capabilities[0].input_schema_ref"},
		{"no endpoints", edit(`"endpoints": [`, `"endpoints": [], "x": [`), "communication.endpoints"},
		{"bad protocol", edit(`"protocol": "grpc"`, `"protocol": "g rpc"`), "communication.endpoints[1].protocol"},
		{"reserved metadata", edit(`"owner": "DataTeam"`, `"external_id": "x"`), "metadata.external_id"},
		{"capabilities not a list", edit(`"capabilities": [`, `"capabilities": {"a":[`), ""},
		{"case-folded member", edit(`"discovery_tags"`, `"Discovery_Tags"`), "Discovery_Tags"},
		{"duplicate member", edit(`"name": "DataProcessorAgent",`, `"name": "a", "name": "b",`), ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseAgentCard(c.doc)
			if err == nil {
				t.Fatal("accepted")
			}
			if !errors.Is(err, ErrMalformed) {
				t.Errorf("%v does not wrap ErrMalformed", err)
			}
			if c.field != "" {
				wantField(t, err, c.field)
			}
		})
	}
	if _, err := ParseAgentCard(bytes.Repeat([]byte(" "), MaxMessageBytes+1)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("oversize: %v", err)
	}
}
