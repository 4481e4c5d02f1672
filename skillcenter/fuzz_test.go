package skillcenter

import (
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzParseManifest: a manifest that parses is valid, its canonical form
// parses to the same manifest (and the same canonical bytes), a signature
// that verifies still verifies after the round trip, and its catalog entry
// always stands for a valid agent.
func FuzzParseManifest(f *testing.F) {
	f.Add([]byte(`{"id":"skill-a","version":"1.0.0","type":"tool-skill","capabilities":["c"]}`), false)
	f.Add([]byte("id: skill-a\nversion: 1.0.0\ntype: tool-skill\ncapabilities: [c]\nscenes: [auth]\n"), true)
	f.Add([]byte(`{"id":"a","version":"1.0.0","type":"tool-skill","capabilities":["c"],"package":{"file":"p.tgz","sha256":"`+
		"0000000000000000000000000000000000000000000000000000000000000000"+`","size":0}}`), false)
	f.Fuzz(func(t *testing.T, data []byte, asYAML bool) {
		name := "manifest.json"
		if asYAML {
			name = "manifest.yaml"
		}
		m, err := ParseManifest(name, data)
		if err != nil {
			return
		}
		if err := m.Validate(); err != nil {
			t.Fatalf("parsed but invalid: %v", err)
		}
		m2, err := ParseManifestJSON(m.Canonical())
		if err != nil {
			t.Fatalf("canonical form does not parse: %v\n%s", err, m.Canonical())
		}
		if string(m2.Canonical()) != string(m.Canonical()) {
			t.Fatalf("canonical form not stable:\n%s\n%s", m.Canonical(), m2.Canonical())
		}
		m.canonical, m2.canonical = nil, nil
		if !reflect.DeepEqual(m, m2) {
			t.Fatalf("round trip changed the manifest:\n%+v\n%+v", m, m2)
		}
		m.canonical = m2.Canonical()
		if _, err := m.Verify(Anchors{}); err == nil {
			if _, err := m2.Verify(Anchors{}); err != nil {
				t.Fatalf("signature lost in the round trip: %v", err)
			}
		}
		sk := m.Skill()
		if err := sk.Validate(); err != nil {
			t.Fatalf("valid manifest, invalid skill: %v", err)
		}
		if _, err := sk.Agent("https://mirror.example"); err != nil {
			t.Fatalf("valid manifest, unmappable skill: %v", err)
		}
	})
}

// FuzzDecodeSkillList: an answer that decodes re-encodes to JSON that
// decodes to the same value, and every skill that validates maps to an
// agent.
func FuzzDecodeSkillList(f *testing.F) {
	f.Add([]byte(seed001Answer))
	f.Add([]byte(`{"total":1,"skills":[{"id":"tool-x","name":"n","version":"1.2.0","type":"tool-skill","capabilities":["cap-a"],"scenes":[],"endpoint":"10.0.0.9:8080","agentId":"x","status":"DEGRADED","source":"gossip"}]}`))
	f.Add([]byte(`{"skills":[{"id":"a","keywords":["k"],"package":{"file":"f","sha256":"` + "ab" + `","size":1},"manifest":{"id":"a"}}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		l, err := DecodeSkillList(data)
		if err != nil {
			return
		}
		b, err := json.Marshal(l)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		l2, err := DecodeSkillList(b)
		if err != nil {
			t.Fatalf("re-encoded answer does not decode: %v\n%s", err, b)
		}
		if !reflect.DeepEqual(l, l2) {
			t.Fatalf("round trip changed the answer:\n%+v\n%+v", l, l2)
		}
		for _, s := range l.Skills {
			if s.Validate() != nil {
				continue
			}
			a, err := s.Agent("https://c.example")
			if err != nil {
				t.Fatalf("valid skill %q does not map: %v", s.ID, err)
			}
			if a.Skills[0].SkillID != s.ID {
				t.Fatalf("mapped skill id %q", a.Skills[0].SkillID)
			}
		}
	})
}

// FuzzDecodeSearchRequest: a request the mirror accepts is valid and
// survives a round trip through its JSON.
func FuzzDecodeSearchRequest(f *testing.F) {
	f.Add([]byte(`{"capabilities":["org-data-read","user-auth"],"scenes":["auth"],"types":["enterprise-skill"],"keywords":["feishu"],"version":">=0.7.0"}`))
	f.Add([]byte(`{"limit":2,"offset":1,"other":true}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := DecodeSearchRequest(data)
		if err != nil {
			return
		}
		if err := req.Validate(); err != nil {
			t.Fatalf("accepted an invalid request: %v", err)
		}
		b, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		req2, err := DecodeSearchRequest(b)
		if err != nil || !reflect.DeepEqual(req, req2) {
			t.Fatalf("round trip: %+v %+v %v", req, req2, err)
		}
		if _, err := compileSearch(req); err != nil {
			t.Fatalf("valid request does not compile: %v", err)
		}
	})
}
