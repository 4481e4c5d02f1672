package api

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"

	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/skillcenter"
	"github.com/agentd/agentd/store"
	"github.com/coder/websocket"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// foreignLAN answers like package lan with one seed-001 skill of another
// implementation, authenticated by the shared HMAC key: an agent object
// without key, peer, seq, issue time or TTL.
type foreignLAN struct{ agent *record.Agent }

func (l foreignLAN) Start(context.Context) error { return nil }
func (l foreignLAN) Close() error                { return nil }
func (l foreignLAN) Discover(_ context.Context, f store.Filter) ([]*record.SignedAgent, []*record.Agent, error) {
	if f.Capability != "" && !l.agent.Offers(f.Skill, f.Capability) {
		return nil, nil, nil
	}
	return nil, []*record.Agent{l.agent}, nil
}
func (l foreignLAN) Available() (bool, string)                                   { return true, "" }
func (l foreignLAN) Refresh()                                                    {}
func (l foreignLAN) Unregister(context.Context, string, record.UnregisterReason) {}
func (l foreignLAN) SetStatus(string, record.Status)                             {}

// fixedCatalog answers every query with one catalog skill.
type fixedCatalog struct{ skill skillcenter.Skill }

func (c fixedCatalog) Resolve(_ context.Context, f store.Filter) ([]skillcenter.Match, error) {
	a, err := c.skill.Agent("http://catalog.invalid")
	if err != nil {
		return nil, err
	}
	if f.Capability != "" && !a.Offers(f.Skill, f.Capability) {
		return nil, nil
	}
	return []skillcenter.Match{{Agent: a, Skill: c.skill}}, nil
}

// Every answer is valid against the published schemas: the OpenAPI
// document's (formats asserted), and each signed agent object against
// agent.json. Entries of sources that carry no signature (the SkillCenter
// step, seed-001 HMAC registrations on the LAN) used to carry seq 0,
// ttl_seconds 0 and issued_at "", which agent.json refuses.
func TestAnswersValidateAgainstSchemas(t *testing.T) {
	d := loadOpenAPI(t)
	foreign := &record.Agent{
		AgentID:   record.ExternalAgentID("seed001", "skill-hr-java"),
		AgentName: "skill-hr-java",
		Metadata:  map[string]any{record.MetaExternalID: "skill-hr-java"},
		Skills: []record.Skill{{SkillID: "skill-hr-java", Version: "1.0.0", SkillType: record.SkillEnterprise,
			Capabilities: []record.Capability{{ID: "hr-read"}}, Status: record.StatusHealthy, Endpoint: "10.0.0.9:8080"}},
		Transport: record.Transport{Type: "tcp", Endpoint: "10.0.0.9:8080"},
	}
	foreign.SyncCapabilities()
	cat := fixedCatalog{skill: skillcenter.Skill{ID: "skill-cat", Name: "Catalog skill", Version: "1.2.0", Type: "enterprise-skill",
		Capabilities: []string{"catalog-read"}, Endpoint: "https://catalog.invalid/skills/skill-cat"}}
	a := newAPIOn(t, newNode(t, nodeOpts{lan: foreignLAN{agent: foreign}, catalog: cat}), Config{})
	mustStatus(t, a.do("POST", "/agents", announceJSON(t, spec("skill-doc", "cap-doc"))), 200)

	list, _ := d.responseSchema(t, "/agents", "GET", 200, "application/json")
	for _, c := range []struct {
		url, source string
		schema      *jsonschema.Schema
		signed      bool
	}{
		{"/agents?capability=cap-doc", "local", list, true},
		{"/agents?capability=hr-read", "lan", list, false},
		{"/agents?capability=catalog-read", "skillcenter", list, false},
	} {
		r := a.do("GET", c.url, nil)
		if r.status != 200 {
			t.Fatalf("GET %s: %d %s", c.url, r.status, r.body)
		}
		inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(r.body))
		if err != nil {
			t.Fatal(err)
		}
		if err := c.schema.Validate(inst); err != nil {
			t.Errorf("GET %s does not validate against the OpenAPI document:\n%v\nbody: %s", c.url, err, r.body)
		}
		var entries []AgentEntry
		if strings.HasPrefix(c.url, "/agents?") {
			var l AgentList
			r.json(t, &l)
			entries = l.Agents
		} else {
			var e AgentEntry
			r.json(t, &e)
			entries = []AgentEntry{e}
		}
		if len(entries) == 0 {
			t.Fatalf("GET %s: no entries", c.url)
		}
		for _, e := range entries {
			if e.Source != c.source || (e.Signature != "") != c.signed {
				t.Errorf("GET %s: source %q signed %v, want %q %v", c.url, e.Source, e.Signature != "", c.source, c.signed)
			}
			var m map[string]any
			if err := json.Unmarshal(e.Agent, &m); err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"seq", "issued_at", "ttl_seconds", "peer_id"} {
				if _, ok := m[k]; ok != c.signed {
					t.Errorf("GET %s: agent member %s present=%v: %s", c.url, k, ok, e.Agent)
				}
			}
			if !c.signed {
				continue
			}
			if err := record.ValidateSchema(record.SchemaAgent, e.Agent); err != nil {
				t.Errorf("GET %s: agent object does not validate against agent.json: %v", c.url, err)
			}
		}
	}
}

// The seed-000 WebSocket binding's Response frames are valid against
// response.json too, for unsigned entries (a catalog's, a LAN HMAC
// registration's) as for signed ones.
func TestWSResponsesValidateAgainstSchema(t *testing.T) {
	cat := fixedCatalog{skill: skillcenter.Skill{ID: "skill-cat", Name: "Catalog skill", Version: "1.2.0", Type: "enterprise-skill",
		Capabilities: []string{"catalog-read"}, Endpoint: "https://catalog.invalid/skills/skill-cat"}}
	a := newAPIOn(t, newNode(t, nodeOpts{catalog: cat}), Config{})
	mustStatus(t, a.do("POST", "/agents", announceJSON(t, spec("skill-doc", "cap-doc"))), 200)
	w := a.dialWS(t, Subprotocol, nil)
	for _, c := range []struct {
		capability string
		signed     bool
	}{{"cap-doc", true}, {"catalog-read", false}} {
		w.send(websocket.MessageBinary, append([]byte{MsgQuery}, `{"protocol_version":"v1.0","query":{"capability":"`+c.capability+`"}}`...))
		_, b := w.read()
		if b[0] != MsgResponse {
			t.Fatalf("%s: answer %s", c.capability, b)
		}
		if err := record.ValidateSchema(record.SchemaResponse, b[1:]); err != nil {
			t.Errorf("%s: Response does not validate against response.json: %v\n%s", c.capability, err, b[1:])
		}
		if signed := bytes.Contains(b, []byte(`"signature"`)); signed != c.signed {
			t.Errorf("%s: signed %v", c.capability, signed)
		}
		w.readJSON(WSTypeQueryEnd)
	}
}

// The document carries its own copy of every record schema (an OpenAPI
// validator cannot fetch a schema by its $id): components/schemas matches
// record/schema/*.json as scripts/openapi-schemas.py copies them.
func TestOpenAPIRecordSchemas(t *testing.T) {
	var doc map[string]any
	if err := json.Unmarshal(OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	have := doc["components"].(map[string]any)["schemas"].(map[string]any)
	names := map[string]string{record.SchemaAgent: "AgentObject", record.SchemaAnnounce: "Announce", record.SchemaQuery: "Query", record.SchemaResponse: "Response"}
	schemas := map[string]map[string]any{}
	for kind := range names {
		b, err := record.SchemaJSON(kind)
		if err != nil {
			t.Fatal(err)
		}
		var s map[string]any
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatal(err)
		}
		schemas[kind] = s
	}
	defsOf := func(kind string) map[string]any {
		d, _ := schemas[kind]["definitions"].(map[string]any)
		return d
	}
	var target func(ref, kind string) string
	target = func(ref, kind string) string {
		ref = strings.TrimPrefix(ref, record.SchemaBaseURI)
		if name, ok := strings.CutPrefix(ref, "#/definitions/"); ok {
			if d, ok := defsOf(kind)[name].(map[string]any); ok && kind != record.SchemaAgent {
				return target(d["$ref"].(string), kind)
			}
			return "#/components/schemas/Agent" + name
		}
		if k, ok := strings.CutSuffix(ref, ".json"); ok && names[k] != "" {
			return "#/components/schemas/" + names[k]
		}
		t.Fatalf("unexpected $ref %q in %s.json", ref, kind)
		return ""
	}
	var rewrite func(v any, kind string) any
	rewrite = func(v any, kind string) any {
		switch v := v.(type) {
		case []any:
			out := make([]any, len(v))
			for i := range v {
				out[i] = rewrite(v[i], kind)
			}
			return out
		case map[string]any:
			out := map[string]any{}
			for k, x := range v {
				if s, ok := x.(string); ok && k == "$ref" {
					out[k] = target(s, kind)
				} else if m, ok := x.(map[string]any); ok && k == "dependencies" {
					out["dependentRequired"] = m // draft-07's array form, 2020-12's name
				} else {
					out[k] = rewrite(x, kind)
				}
			}
			return out
		}
		return v
	}
	want := map[string]any{}
	for kind, name := range names {
		s := map[string]any{}
		for k, v := range schemas[kind] {
			if k != "$schema" && k != "$id" && k != "definitions" {
				s[k] = v
			}
		}
		want[name] = rewrite(s, kind)
	}
	for name, d := range defsOf(record.SchemaAgent) {
		want["Agent"+name] = rewrite(d, record.SchemaAgent)
	}
	for name, w := range want {
		if !reflect.DeepEqual(have[name], w) {
			t.Errorf("components/schemas/%s differs from the record schema it copies: run python3 scripts/openapi-schemas.py", name)
		}
	}
	if s := string(OpenAPI); strings.Contains(strings.ReplaceAll(s, "`"+record.SchemaBaseURI+"<kind>.json`", ""), record.SchemaBaseURI) {
		t.Error("the document refers to a record schema by its $id, which OpenAPI validators cannot fetch")
	}
}

// docs/openapi.json is valid for openapi-spec-validator (the Python tool
// most OpenAPI users check documents with). The machine image has it; CI
// must not pass without running it.
func TestOpenAPISpecValidator(t *testing.T) {
	path, err := exec.LookPath("openapi-spec-validator")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("openapi-spec-validator is not installed; .ci/run should have found it")
		}
		t.Skip("openapi-spec-validator is not installed")
	}
	out, err := exec.Command(path, "../docs/openapi.json").CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("OK")) {
		t.Fatalf("openapi-spec-validator: %v\n%s", err, out)
	}
}
