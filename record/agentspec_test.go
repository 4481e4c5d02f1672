package record

import (
	"errors"
	"strings"
	"testing"
	"time"
)

const minimalSpec = `agent_type: search-agent
version: "1.0.0"
endpoint: http://10.0.0.5:8080/mcp
capabilities:
  - name: web.search
    description: search the web
    confidence_hint: 0.8
`

func TestAgentSpecErrorsNameLineAndField(t *testing.T) {
	cases := []struct {
		name, doc string
		line      int
		field     string
	}{
		{"unknown field", minimalSpec + "colour: blue\n", 8, "colour"},
		{"unknown nested field", strings.Replace(minimalSpec, "    confidence_hint: 0.8\n", "    confidence_hint: 0.8\n    weight: 3\n", 1), 8, "capabilities[0].weight"},
		{"repeated member", minimalSpec + "version: 2.0.0\n", 8, "version"},
		{"integer expected", minimalSpec + "max_retries: many\n", 8, "max_retries"},
		{"negative retries", minimalSpec + "max_retries: -1\n", 8, "max_retries"},
		{"timeout too small", minimalSpec + "task_timeout_ms: 999\n", 8, "task_timeout_ms"},
		{"concurrency zero", minimalSpec + "max_concurrent_tasks: 0\n", 8, "max_concurrent_tasks"},
		{"reflection rounds", minimalSpec + "reflection_config:\n  max_rounds: 6\n", 9, "reflection_config.max_rounds"},
		{"reflection unknown", minimalSpec + "reflection_config:\n  rounds: 2\n", 9, "reflection_config.rounds"},
		{"pattern", minimalSpec + "supported_patterns: [coordinator_managed, gossip]\n", 8, "supported_patterns[1]"},
		{"confidence above 1", strings.Replace(minimalSpec, "0.8", "1.1", 1), 7, "capabilities[0].confidence_hint"},
		{"confidence below 0", strings.Replace(minimalSpec, "0.8", "-0.1", 1), 7, "capabilities[0].confidence_hint"},
		{"confidence NaN", strings.Replace(minimalSpec, "0.8", ".nan", 1), 7, "capabilities[0].confidence_hint"},
		{"confidence string", strings.Replace(minimalSpec, "0.8", "high", 1), 7, "capabilities[0].confidence_hint"},
		{"capability without name", strings.Replace(minimalSpec, "  - name: web.search\n    description", "  - description", 1), 5, "capabilities[0].name"},
		{"capability name with space", strings.Replace(minimalSpec, "web.search", "web search", 1), 5, "capabilities[0].name"},
		{"bad semver", strings.Replace(minimalSpec, `"1.0.0"`, `"1.0"`, 1), 2, "version"},
		{"no version", strings.Replace(minimalSpec, "version: \"1.0.0\"\n", "", 1), 0, "version"},
		{"deregistered", minimalSpec + "status: deregistered\n", 8, "status"},
		{"unknown status", minimalSpec + "status: sleeping\n", 8, "status"},
		{"tag key with =", minimalSpec + "tags:\n  a=b: c\n", 9, "tags.a=b"},
		{"tag not a string", minimalSpec + "tags:\n  a: [1]\n", 9, "tags.a"},
		{"no transport", strings.Replace(minimalSpec, "endpoint: http://10.0.0.5:8080/mcp\n", "", 1), 0, "nats_subject"},
		{"bad skill type", minimalSpec + "skill_type: plugin\n", 8, "skill_type"},
		{"bad agent id", minimalSpec + "agent_id: 6ba7b810-9dad-11d1-80b4-00c04fd430c8\n", 8, "agent_id"},
		{"bad registered_at", minimalSpec + "registered_at: last tuesday\n", 8, "registered_at"},
		{"no capabilities", "agent_type: a\nversion: 1.0.0\nendpoint: x:1\n", 0, "capabilities"},
		{"capabilities not a list", "agent_type: a\nversion: 1.0.0\nendpoint: x:1\ncapabilities: {name: x}\n", 4, "capabilities"},
		{"alias", minimalSpec + "evaluators: &e [a]\ntools: *e\n", 9, "tools"},
		{"skill duplicates agent_type", minimalSpec + "skills:\n  - skill_id: search-agent\n    version: 1.0.0\n    skill_type: tool-skill\n    capabilities: [{id: x}]\n", 9, "skills[0].skill_id"},
		{"skill bad type", minimalSpec + "skills:\n  - skill_id: s2\n    version: 1.0.0\n    skill_type: x\n    capabilities: [{id: x}]\n", 11, "skills[0].skill_type"},
		{"skill unknown member", minimalSpec + "skills:\n  - skill_id: s2\n    kind: x\n", 10, "skills[0].kind"},
		{"yaml syntax", minimalSpec + "tools: [a, b\n", -1, ""},
		{"not a mapping", "- a\n- b\n", 1, ""},
		{"empty", "", 0, ""},
		{"two documents", minimalSpec + "---\nagent_type: b\n", 8, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseAgentSpec([]byte(c.doc))
			if err == nil {
				t.Fatal("accepted")
			}
			if !errors.Is(err, ErrMalformed) {
				t.Errorf("%v does not wrap ErrMalformed", err)
			}
			if c.field != "" && FieldOf(err) != c.field {
				t.Errorf("error names %q, want %q (%v)", FieldOf(err), c.field, err)
			}
			var se *SourceError
			line := 0
			if errors.As(err, &se) {
				line = se.Line
			}
			if c.line == -1 && line > 0 {
				return // yaml's own syntax error: any line it names
			}
			if line != c.line {
				t.Errorf("error at line %d, want %d (%v)", line, c.line, err)
			}
		})
	}
}

func TestAgentSpecMapping(t *testing.T) {
	doc := minimalSpec + `agent_id: ` + testAgentID + `
agent_name: web
skill_type: integration-skill
scenes: [research]
status: draining
tenant_scope: acme
tags: {tier: core}
owner_team: search
registered_at: "2026-01-01T00:00:00"
last_heartbeat: null
skills:
  - skill_id: skill-org-feishu
    version: 0.7.0
    skill_type: enterprise-skill
    capabilities:
      - id: org-data-read
        input_schema: {type: object}
  - skill_id: skill-b
    version: 1.0.0
    skill_type: tool-skill
    status: DEGRADED
    capabilities: [{id: b}]
`
	s, err := ParseAgentSpec([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.ToAgent()
	if err != nil {
		t.Fatal(err)
	}
	if a.AgentID != testAgentID || a.AgentName != "web" || a.TenantScope != "acme" || a.Transport != (Transport{Type: "http", Endpoint: "http://10.0.0.5:8080/mcp"}) {
		t.Fatalf("agent %+v", a)
	}
	if len(a.Skills) != 3 {
		t.Fatalf("skills %+v", a.Skills)
	}
	d := a.Skills[0]
	if d.SkillID != "search-agent" || d.SkillType != SkillIntegration || d.Status != StatusMaintenance || d.Endpoint != "http://10.0.0.5:8080/mcp" ||
		d.Scenes[0] != "research" || *d.Capabilities[0].ConfidenceHint != 0.8 {
		t.Fatalf("derived skill %+v", d)
	}
	if a.Skills[1].Status != StatusMaintenance || a.Skills[2].Status != StatusDegraded {
		t.Fatalf("listed skills' status %s %s", a.Skills[1].Status, a.Skills[2].Status)
	}
	if string(a.Skills[1].Capabilities[0].InputSchema) != `{"type":"object"}` {
		t.Fatalf("schema %s", a.Skills[1].Capabilities[0].InputSchema)
	}
	if a.Metadata["status"] != "draining" || a.Metadata["owner_team"] != "search" || a.Metadata["registered_at"] != "2026-01-01T00:00:00" {
		t.Fatalf("metadata %v", a.Metadata)
	}
	if _, ok := a.Metadata["last_heartbeat"]; ok {
		t.Fatal("null last_heartbeat kept")
	}
	if a.Tags[0] != "tier=core" {
		t.Fatalf("tags %v", a.Tags)
	}
	k := newKeys(t)
	a.Fill("", k.peerID, k.pubPEM, 1, testNow, time.Hour)
	if _, err := Sign(a, k.agent, k.peer); err != nil {
		t.Fatal(err)
	}

	// A spec with skills only.
	only := "agent_type: a\nversion: 1.0.0\nnats_subject: tasks.a\nskills: [{skill_id: s, version: 1.0.0, skill_type: tool-skill, capabilities: [{id: c}]}]\n"
	s, err = ParseAgentSpec([]byte(only))
	if err != nil {
		t.Fatal(err)
	}
	a, err = s.ToAgent()
	if err != nil || len(a.Skills) != 1 || a.Skills[0].SkillID != "s" || a.Skills[0].Status != "" {
		t.Fatalf("%v %+v", err, a)
	}
}

// The spec re-encodes (MarshalYAMLDoc) to a document that parses to the
// same spec and the same record.
func TestAgentSpecReencode(t *testing.T) {
	for _, name := range []string{"004-product-search-agent.yaml", "004-coordinator-agent.yaml"} {
		s, err := ParseAgentSpec(readSeed(t, name))
		if err != nil {
			t.Fatal(err)
		}
		doc, err := s.MarshalYAMLDoc()
		if err != nil {
			t.Fatal(err)
		}
		s2, err := ParseAgentSpec(doc)
		if err != nil {
			t.Fatalf("re-encoded spec does not parse: %v\n%s", err, doc)
		}
		if canon(t, s) != canon(t, s2) {
			t.Fatalf("re-encoded spec differs:\n%s\n%s", canon(t, s), canon(t, s2))
		}
		a1, err1 := s.ToAgent()
		a2, err2 := s2.ToAgent()
		if err1 != nil || err2 != nil || canon(t, a1) != canon(t, a2) {
			t.Fatalf("records differ: %v %v", err1, err2)
		}
		if *s.MaxConcurrentTasks < 10 || s.TenantScope != nil {
			t.Fatalf("spec %+v", s)
		}
	}
}
