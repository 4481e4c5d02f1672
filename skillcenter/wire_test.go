package skillcenter

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/store"
)

// seed001Answer is the §7.3 example of seed 001, verbatim.
const seed001Answer = `{
  "total": 2,
  "skills": [
    {
      "id": "skill-org-feishu",
      "name": "Feishu Organization Service",
      "version": "0.7.0",
      "type": "enterprise-skill",
      "capabilities": ["org-data-read", "user-auth"],
      "scenes": ["auth"],
      "endpoint": "https://skillcenter.ooder.net/skills/skill-org-feishu",
      "downloadUrl": "https://skillcenter.ooder.net/api/skills/skill-org-feishu/download"
    },
    {
      "id": "skill-org-dingding",
      "name": "Dingding Organization Service",
      "version": "0.7.0",
      "type": "enterprise-skill",
      "capabilities": ["org-data-read", "user-auth"],
      "scenes": ["auth"],
      "endpoint": "https://skillcenter.ooder.net/skills/skill-org-dingding",
      "downloadUrl": "https://skillcenter.ooder.net/api/skills/skill-org-dingding/download"
    }
  ]
}`

func TestDecodeSeed001Answer(t *testing.T) {
	l, err := DecodeSkillList([]byte(seed001Answer))
	if err != nil {
		t.Fatal(err)
	}
	if l.Total != 2 || len(l.Skills) != 2 {
		t.Fatalf("total %d, %d skills", l.Total, len(l.Skills))
	}
	want := Skill{
		ID: "skill-org-feishu", Name: "Feishu Organization Service", Version: "0.7.0", Type: "enterprise-skill",
		Capabilities: []string{"org-data-read", "user-auth"}, Scenes: []string{"auth"},
		Endpoint:    "https://skillcenter.ooder.net/skills/skill-org-feishu",
		DownloadURL: "https://skillcenter.ooder.net/api/skills/skill-org-feishu/download",
	}
	if !reflect.DeepEqual(l.Skills[0], want) {
		t.Fatalf("skill 0 = %+v\nwant %+v", l.Skills[0], want)
	}
	for _, s := range l.Skills {
		if err := s.Validate(); err != nil {
			t.Errorf("%s: %v", s.ID, err)
		}
	}
}

// TestDecodeAgentdAnswer reads the shape agentd's API emits (api/skills.go):
// agentId, status and source extensions, no downloadUrl.
func TestDecodeAgentdAnswer(t *testing.T) {
	b := `{"total":1,"skills":[{"id":"tool-x","name":"test-agent","version":"1.2.0","type":"tool-skill","capabilities":["cap-a"],"scenes":[],"endpoint":"10.0.0.9:8080","agentId":"3cde1b52-1fc2-4f7b-8d8c-5e3e6f5c9c1d","status":"DEGRADED","source":"gossip"}]}`
	l, err := DecodeSkillList([]byte(b))
	if err != nil {
		t.Fatal(err)
	}
	s := l.Skills[0]
	if s.AgentID != "3cde1b52-1fc2-4f7b-8d8c-5e3e6f5c9c1d" || s.Status != "DEGRADED" || s.Source != "gossip" || s.DownloadURL != "" {
		t.Fatalf("extensions lost: %+v", s)
	}
	a, err := s.Agent("http://127.0.0.1:4778")
	if err != nil {
		t.Fatal(err)
	}
	if a.Skills[0].Status != record.StatusDegraded || a.Transport.Type != "tcp" || a.Skills[0].Endpoint != "10.0.0.9:8080" {
		t.Fatalf("mapped agent: %+v", a)
	}
}

func TestDecodeSkillListRefuses(t *testing.T) {
	big := `{"skills":[` + strings.Repeat(`{"id":"a"},`, MaxSkillsPerAnswer) + `{"id":"a"}]}`
	for _, c := range []struct {
		name, in, field string
	}{
		{"not an object", `[]`, ""},
		{"null", `null`, ""},
		{"garbage after", `{"skills":[]} x`, ""},
		{"negative total", `{"total":-1,"skills":[]}`, "total"},
		{"total not a number", `{"total":"2","skills":[]}`, "total"},
		{"skill not an object", `{"skills":[1]}`, "skills[0]"},
		{"missing id", `{"skills":[{"name":"x"}]}`, "skills[0].id"},
		{"control character", `{"skills":[{"id":"a\u0001"}]}`, "skills[0].id"},
		{"long name", `{"skills":[{"id":"a","name":"` + strings.Repeat("n", 300) + `"}]}`, "skills[0].name"},
		{"capabilities not strings", `{"skills":[{"id":"a","capabilities":[1]}]}`, "skills[0].capabilities"},
		{"too many scenes", `{"skills":[{"id":"a","scenes":[` + strings.Repeat(`"s",`, 16) + `"s"]}]}`, "skills[0].scenes"},
		{"bad package digest", `{"skills":[{"id":"a","package":{"file":"f","sha256":"xyz","size":1}}]}`, "skills[0].package.sha256"},
		{"package path", `{"skills":[{"id":"a","package":{"file":"../etc/passwd","sha256":"` + strings.Repeat("0", 64) + `","size":1}}]}`, "skills[0].package.file"},
		{"manifest duplicate members", `{"skills":[{"id":"a","manifest":{"id":"a","id":"b"}}]}`, "skills[0].manifest"},
		{"too many skills", big, "skills"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := DecodeSkillList([]byte(c.in))
			if err == nil {
				t.Fatal("accepted")
			}
			if got := record.FieldOf(err); got != c.field {
				t.Fatalf("field %q, want %q (%v)", got, c.field, err)
			}
		})
	}
	if _, err := DecodeSkillList(make([]byte, MaxResponseBytes+1)); !errors.Is(err, ErrResponseTooLarge) {
		t.Fatalf("oversize: %v", err)
	}
}

func TestSkillValidate(t *testing.T) {
	ok := Skill{ID: "s", Version: "1.0.0", Type: "tool-skill", Capabilities: []string{"c"}}
	for _, c := range []struct {
		field string
		mod   func(*Skill)
	}{
		{"id", func(s *Skill) { s.ID = "a/../b" }},
		{"id", func(s *Skill) { s.ID = "has space" }},
		{"version", func(s *Skill) { s.Version = "1.0" }},
		{"type", func(s *Skill) { s.Type = "other-skill" }},
		{"capabilities", func(s *Skill) { s.Capabilities = nil }},
		{"capabilities[1]", func(s *Skill) { s.Capabilities = []string{"c", "c"} }},
		{"scenes[0]", func(s *Skill) { s.Scenes = []string{"a;b"} }},
	} {
		s := ok
		c.mod(&s)
		if err := s.Validate(); record.FieldOf(err) != c.field {
			t.Errorf("want field %s, got %v", c.field, err)
		}
	}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
}

// TestSkillAgent pins the mapping of a catalog skill to an agent.
func TestSkillAgent(t *testing.T) {
	l, err := DecodeSkillList([]byte(seed001Answer))
	if err != nil {
		t.Fatal(err)
	}
	s := l.Skills[0]
	s.Keywords = []string{"feishu", "org"}
	s.Description = "Feishu organisation data"
	a, err := s.Agent("https://skillcenter.ooder.net")
	if err != nil {
		t.Fatal(err)
	}
	got, err := record.Canonicalize(a)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"agent_id":"` + record.ExternalAgentID("skillcenter", "skill-org-feishu") + `","agent_name":"skill-org-feishu",` +
		`"capabilities":{"org-data-read":"0.7.0","user-auth":"0.7.0"},"description":"Feishu organisation data",` +
		`"metadata":{"display_name":"Feishu Organization Service","downloadUrl":"https://skillcenter.ooder.net/api/skills/skill-org-feishu/download",` +
		`"external_id":"skill-org-feishu","skillcenter":"https://skillcenter.ooder.net"},` +
		`"skills":[{"capabilities":[{"id":"org-data-read"},{"id":"user-auth"}],"endpoint":"https://skillcenter.ooder.net/skills/skill-org-feishu",` +
		`"scenes":["auth"],"skill_id":"skill-org-feishu","skill_type":"enterprise-skill","version":"0.7.0"}],"tags":["feishu","org"],` +
		`"transport":{"endpoint":"https://skillcenter.ooder.net/skills/skill-org-feishu","type":"http"}}`
	// No public_key, peer_id, seq, issued_at or ttl_seconds: nobody signed
	// a catalog entry, and those members are absent rather than zero (the
	// agent schema refuses seq 0 and issued_at "").
	if string(got) != want {
		t.Fatalf("agent\n got %s\nwant %s", got, want)
	}
	m, err := store.Filter{Capability: "user-auth", Scene: "auth", Type: "enterprise-skill", Text: "feishu", Version: ">=0.7.0"}.Compile()
	if err != nil {
		t.Fatal(err)
	}
	if !m.Matches(a) {
		t.Fatal("the mapped agent does not match the filter it should")
	}
	// An endpoint the seed-001 text fields cannot carry stays on the
	// transport only.
	s.Endpoint = "https://x.example/a,b"
	a, err = s.Agent("")
	if err != nil {
		t.Fatal(err)
	}
	if a.Skills[0].Endpoint != "" || a.Transport.Endpoint != s.Endpoint {
		t.Fatalf("endpoint with a comma: %+v", a)
	}
	// A skill that cannot stand for an agent skill is refused.
	s.Version = "latest"
	if _, err := s.Agent(""); record.FieldOf(err) != "version" {
		t.Fatalf("bad version: %v", err)
	}
}

func TestSearchRequestValidate(t *testing.T) {
	for _, c := range []struct {
		req   SearchRequest
		field string
	}{
		{SearchRequest{Capabilities: []string{"a b"}}, "capabilities[0]"},
		{SearchRequest{Types: []string{"x"}}, "types[0]"},
		{SearchRequest{Keywords: []string{" "}}, "keywords[0]"},
		{SearchRequest{Version: ">=>"}, "version"},
		{SearchRequest{Limit: -1}, "limit"},
		{SearchRequest{Offset: -1}, "offset"},
	} {
		if err := c.req.Validate(); record.FieldOf(err) != c.field {
			t.Errorf("%+v: want field %s, got %v", c.req, c.field, err)
		}
	}
	seed := SearchRequest{Capabilities: []string{"org-data-read", "user-auth"}, Scenes: []string{"auth"}, Types: []string{"enterprise-skill"}, Keywords: []string{"feishu"}, Version: ">=0.7.0"}
	if err := seed.Validate(); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(seed)
	if string(b) != `{"capabilities":["org-data-read","user-auth"],"scenes":["auth"],"types":["enterprise-skill"],"keywords":["feishu"],"version":"\u003e=0.7.0"}` {
		t.Fatalf("§7.2 request: %s", b)
	}
}
