package api

import (
	"encoding/json"
	"testing"

	"github.com/agentd/agentd/record"
)

// The two skills of seed 001 §7.3, each hosted as an agent.
func seed001Agents(t testing.TB, a *tapi) {
	t.Helper()
	for _, s := range []struct{ id, agentID, name string }{
		{"skill-org-feishu", "4a1e3c2b-0d7f-4b8e-9c61-2f0a5b7d8e91", "Feishu Organization Service"},
		{"skill-org-dingding", "7c2d4e6f-1a3b-4c5d-8e9f-0a1b2c3d4e5f", "Dingding Organization Service"},
	} {
		ag := &record.Agent{
			AgentID: s.agentID, Capabilities: map[string]string{},
			Transport: record.Transport{Type: "https", Endpoint: "https://skillcenter.ooder.net/skills/" + s.id},
			Metadata:  map[string]any{record.MetaDisplayName: s.name, "downloadUrl": "https://skillcenter.ooder.net/api/skills/" + s.id + "/download"},
			Skills: []record.Skill{{SkillID: s.id, Version: "0.7.0", SkillType: record.SkillEnterprise,
				Endpoint:     "https://skillcenter.ooder.net/skills/" + s.id,
				Capabilities: []record.Capability{{ID: "org-data-read"}, {ID: "user-auth"}}, Scenes: []string{"auth"}}},
		}
		mustStatus(t, a.do("POST", "/agents", announceJSON(t, ag)), 200)
	}
}

// The §7.3 response of the seed, entry by entry.
const seed001Response = `{
  "total": 2,
  "skills": [
    {"id": "skill-org-dingding", "name": "Dingding Organization Service", "version": "0.7.0", "type": "enterprise-skill",
     "capabilities": ["org-data-read", "user-auth"], "scenes": ["auth"],
     "endpoint": "https://skillcenter.ooder.net/skills/skill-org-dingding",
     "downloadUrl": "https://skillcenter.ooder.net/api/skills/skill-org-dingding/download"},
    {"id": "skill-org-feishu", "name": "Feishu Organization Service", "version": "0.7.0", "type": "enterprise-skill",
     "capabilities": ["org-data-read", "user-auth"], "scenes": ["auth"],
     "endpoint": "https://skillcenter.ooder.net/skills/skill-org-feishu",
     "downloadUrl": "https://skillcenter.ooder.net/api/skills/skill-org-feishu/download"}
  ]
}`

// skillCore drops agentd's extension members.
func skillCore(t testing.TB, b []byte) []byte {
	t.Helper()
	var l map[string]any
	if err := json.Unmarshal(b, &l); err != nil {
		t.Fatal(err)
	}
	for _, s := range l["skills"].([]any) {
		m := s.(map[string]any)
		delete(m, "agentId")
		delete(m, "status")
		delete(m, "source")
	}
	out, _ := json.Marshal(l)
	return out
}

func TestSkillCenterSearch(t *testing.T) {
	a := newAPI(t, Config{})
	seed001Agents(t, a)
	// The §7.2 request verbatim: its keyword narrows to feishu (the
	// seed's example answer lists both skills, which no keyword filter
	// can produce; without the keyword both come back, exactly as §7.3).
	req := `{
  "capabilities": ["org-data-read", "user-auth"],
  "scenes": ["auth"],
  "types": ["enterprise-skill"],
  "keywords": ["feishu"],
  "version": ">=0.7.0"
}`
	var l SkillList
	r := mustStatus(t, a.do("POST", "/api/skills/search", req), 200)
	r.json(t, &l)
	if l.Total != 1 || l.Skills[0].ID != "skill-org-feishu" || l.Skills[0].Status != record.StatusHealthy || l.Skills[0].Source != "local" {
		t.Fatalf("%s", r.body)
	}
	r = mustStatus(t, a.do("POST", "/api/skills/search", `{"capabilities":["org-data-read","user-auth"],"scenes":["auth"],"types":["enterprise-skill"],"version":">=0.7.0","page":1}`), 200)
	jsonEqual(t, skillCore(t, r.body), []byte(seed001Response))
	r = mustStatus(t, a.do("GET", "/api/skills", nil), 200)
	jsonEqual(t, skillCore(t, r.body), []byte(seed001Response))

	var sk Skill
	mustStatus(t, a.do("GET", "/api/skills/skill-org-feishu", nil), 200).json(t, &sk)
	if sk.ID != "skill-org-feishu" || sk.DownloadURL == "" || len(sk.Capabilities) != 2 {
		t.Fatalf("%+v", sk)
	}
	r = mustStatus(t, a.do("GET", "/api/skills/skill-none", nil), 404)
	if e := r.apiErr(t); e.Code != record.CodeNoSkillsFound {
		t.Fatalf("%+v", e)
	}
	for _, q := range []string{
		`{"capabilities":["org-data-read","absent"]}`,
		`{"scenes":["other"]}`,
		`{"types":["tool-skill"]}`,
		`{"keywords":["feishu","dingding"]}`,
		`{"version":">=1.0.0"}`,
	} {
		mustStatus(t, a.do("POST", "/api/skills/search", q), 200).json(t, &l)
		if l.Total != 0 || l.Skills == nil {
			t.Errorf("%s: %+v", q, l)
		}
	}
	mustStatus(t, a.do("POST", "/api/skills/search", `{"keywords":["DINGDING"]}`), 200).json(t, &l)
	if l.Total != 1 || l.Skills[0].ID != "skill-org-dingding" {
		t.Fatalf("%+v", l)
	}
	// limit and offset page the answer as the mirror does; total counts
	// every match.
	var all SkillList
	mustStatus(t, a.do("POST", "/api/skills/search", `{}`), 200).json(t, &all)
	mustStatus(t, a.do("POST", "/api/skills/search", `{"limit":1,"offset":1}`), 200).json(t, &l)
	if all.Total != 2 || l.Total != 2 || len(l.Skills) != 1 || l.Skills[0].ID != all.Skills[1].ID {
		t.Fatalf("page 2 of 1: %+v (all %+v)", l, all)
	}
	mustStatus(t, a.do("POST", "/api/skills/search", `{"offset":5}`), 200).json(t, &l)
	if l.Total != 2 || l.Skills == nil || len(l.Skills) != 0 {
		t.Fatalf("past the end: %+v", l)
	}
	mustStatus(t, a.do("POST", "/api/skills/search", `{"limit":-1}`), 400)
	// When several agents offer a skill, the healthiest stands for it.
	mustStatus(t, a.do("PUT", "/agents/4a1e3c2b-0d7f-4b8e-9c61-2f0a5b7d8e91/status", `{"status":"DEGRADED"}`), 200)
	mustStatus(t, a.do("GET", "/api/skills/skill-org-feishu", nil), 200).json(t, &sk)
	if sk.Status != record.StatusDegraded {
		t.Fatalf("%+v", sk)
	}
	twin := &record.Agent{AgentID: "9e8d7c6b-5a49-4382-9170-6f5e4d3c2b1a", Capabilities: map[string]string{},
		Transport: record.Transport{Type: "tcp", Endpoint: "10.0.0.7:8080"},
		Skills: []record.Skill{{SkillID: "skill-org-feishu", Version: "0.7.0", SkillType: record.SkillEnterprise,
			Capabilities: []record.Capability{{ID: "org-data-read"}}}}}
	mustStatus(t, a.do("POST", "/agents", announceJSON(t, twin)), 200)
	mustStatus(t, a.do("GET", "/api/skills/skill-org-feishu", nil), 200).json(t, &sk)
	if sk.AgentID != twin.AgentID || sk.Status != record.StatusHealthy || sk.Endpoint != "10.0.0.7:8080" {
		t.Fatalf("%+v", sk)
	}
	mustStatus(t, a.do("GET", "/api/skills", nil), 200).json(t, &l)
	if l.Total != 2 {
		t.Fatalf("one entry per skill id: %+v", l)
	}
}
