package api

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/record"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

var updateDocs = flag.Bool("update-openapi", false, "copy api/openapi.json to docs/openapi.json")

const docsOpenAPI = "../docs/openapi.json"

// docs/openapi.json is the document the API serves.
func TestOpenAPIDocMatches(t *testing.T) {
	if *updateDocs {
		if err := os.WriteFile(docsOpenAPI, OpenAPI, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(docsOpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, OpenAPI) {
		t.Fatalf("%s differs from api/openapi.json; run go test ./api -run TestOpenAPIDocMatches -update-openapi", filepath.Clean(docsOpenAPI))
	}
	a := newAPI(t, Config{})
	r := mustStatus(t, a.do("GET", "/openapi.json", nil), 200)
	if !bytes.Equal(r.body, OpenAPI) {
		t.Fatal("GET /openapi.json is not the embedded document")
	}
}

// openAPIDoc is the parsed document with a schema compiler over it.
type openAPIDoc struct {
	doc   map[string]any
	c     *jsonschema.Compiler
	cache map[string]*jsonschema.Schema
}

const openAPIBase = "https://agentd.invalid/openapi.json"

type noRemote struct{}

func (noRemote) Load(url string) (any, error) { return nil, fmt.Errorf("no remote schemas: %s", url) }

func loadOpenAPI(t testing.TB) *openAPIDoc {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(OpenAPI))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	c.UseLoader(noRemote{})
	if err := c.AddResource(openAPIBase, doc); err != nil {
		t.Fatal(err)
	}
	for _, k := range record.SchemaKinds() {
		b, err := record.SchemaJSON(k)
		if err != nil {
			t.Fatal(err)
		}
		sd, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		if err := c.AddResource(record.SchemaBaseURI+k+".json", sd); err != nil {
			t.Fatal(err)
		}
	}
	var m map[string]any
	if err := json.Unmarshal(OpenAPI, &m); err != nil {
		t.Fatal(err)
	}
	if m["openapi"] != "3.1.0" {
		t.Fatalf("openapi %v", m["openapi"])
	}
	return &openAPIDoc{doc: m, c: c, cache: map[string]*jsonschema.Schema{}}
}

func ptrEscape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// responseSchema finds the schema of an operation's response, following a
// $ref to components/responses.
func (d *openAPIDoc) responseSchema(t testing.TB, path, method string, status int, ctype string) (*jsonschema.Schema, bool) {
	t.Helper()
	op, ok := d.doc["paths"].(map[string]any)[path].(map[string]any)[strings.ToLower(method)].(map[string]any)
	if !ok {
		return nil, false
	}
	resp, ok := op["responses"].(map[string]any)[strconv.Itoa(status)].(map[string]any)
	if !ok {
		return nil, false
	}
	ptr := "#/paths/" + ptrEscape(path) + "/" + strings.ToLower(method) + "/responses/" + strconv.Itoa(status)
	if ref, ok := resp["$ref"].(string); ok {
		name := strings.TrimPrefix(ref, "#/components/responses/")
		resp = d.doc["components"].(map[string]any)["responses"].(map[string]any)[name].(map[string]any)
		ptr = "#/components/responses/" + name
	}
	content, ok := resp["content"].(map[string]any)
	if !ok {
		return nil, true // a response without a body
	}
	if _, ok := content[ctype]; !ok {
		t.Fatalf("%s %s %d: the document has no %s content", method, path, status, ctype)
	}
	loc := openAPIBase + ptr + "/content/" + ptrEscape(ctype) + "/schema"
	if s, ok := d.cache[loc]; ok {
		return s, true
	}
	s, err := d.c.Compile(loc)
	if err != nil {
		t.Fatalf("compile %s: %v", loc, err)
	}
	d.cache[loc] = s
	return s, true
}

// Every route is documented, and every answer the handlers give in this
// walk through the API is a documented response that validates against
// its schema.
func TestOpenAPIResponsesValidate(t *testing.T) {
	d := loadOpenAPI(t)
	a := newAPI(t, Config{})
	paths := d.doc["paths"].(map[string]any)
	for _, p := range a.s.patterns {
		method, path, _ := strings.Cut(p, " ")
		op, ok := paths[path].(map[string]any)
		if !ok || op[strings.ToLower(method)] == nil {
			t.Errorf("route %s is not in the OpenAPI document", p)
		}
	}
	for path, ops := range paths {
		for method := range ops.(map[string]any) {
			if method == "parameters" {
				continue
			}
			if !containsStr(a.s.patterns, strings.ToUpper(method)+" "+path) {
				t.Errorf("the document describes %s %s, which is not served", method, path)
			}
		}
	}

	b := newAPI(t, Config{Addr: "192.0.2.7:4778", JWTSecret: testSecret})
	readTok := hsToken(t, testSecret, claims(ScopeRead, time.Hour))
	seed001Agents(t, a)
	id := "4a1e3c2b-0d7f-4b8e-9c61-2f0a5b7d8e91"
	mustStatus(t, a.do("POST", "/rpc", call(1, MethodRegister, map[string]any{"agent_card": json.RawMessage(seedFile(t, "002-agent-card.json"))})), 200)
	type step struct {
		api                *tapi
		method, url, route string
		body               any
		opts               []reqOpt
		status             int
	}
	steps := []step{
		{a, "POST", "/agents", "/agents", announceJSON(t, spec("skill-doc", "cap-doc")), nil, 200},
		{a, "POST", "/agents", "/agents", `{"protocol_version":"v9.0","agent":{}}`, nil, 400},
		{a, "POST", "/agents", "/agents", announceJSON(t, spec("s", "c")), []reqOpt{withHeader("Content-Type", "text/plain")}, 415},
		{a, "POST", "/agents", "/agents", `{"agent":{"description":"` + strings.Repeat("y", 70<<10) + `"},"protocol_version":"v1.0"}`, nil, 413},
		{a, "GET", "/agents", "/agents", nil, nil, 200},
		{a, "GET", "/agents?capability=org-data-read&include_stale=true&limit=5", "/agents", nil, nil, 200},
		{a, "GET", "/agents?capability=absent", "/agents", nil, nil, 404},
		{a, "GET", "/agents?limit=-1", "/agents", nil, nil, 400},
		{a, "GET", "/agents", "/agents", nil, []reqOpt{func(r *http.Request) { r.Host = "evil.example" }}, 421},
		{a, "GET", "/agents/" + id, "/agents/{id}", nil, nil, 200},
		{a, "GET", "/agents/2f6b1c8e-7d4a-4e3b-9a5c-1d2e3f4a5b6c?local_only=true", "/agents/{id}", nil, nil, 404},
		{a, "GET", "/agents/nope", "/agents/{id}", nil, nil, 400},
		{a, "PUT", "/agents/" + id + "/status", "/agents/{id}/status", `{"status":"DEGRADED"}`, nil, 200},
		{a, "PUT", "/agents/2f6b1c8e-7d4a-4e3b-9a5c-1d2e3f4a5b6c/status", "/agents/{id}/status", `{"status":"DEGRADED"}`, nil, 404},
		{a, "GET", "/capabilities", "/capabilities", nil, nil, 200},
		{a, "GET", "/peers", "/peers", nil, nil, 200},
		{a, "GET", "/explain?agent_id=" + id, "/explain", nil, nil, 200},
		{a, "GET", "/explain?agent_id=2f6b1c8e-7d4a-4e3b-9a5c-1d2e3f4a5b6c&capability=org-data-read&local_only=true", "/explain", nil, nil, 200},
		{a, "GET", "/explain?capability=org-data-read&local_only=true", "/explain", nil, nil, 200},
		{a, "GET", "/explain", "/explain", nil, nil, 400},
		{a, "GET", "/explain?agent_id=nope", "/explain", nil, nil, 400},
		{a, "GET", "/healthz", "/healthz", nil, nil, 200},
		{a, "GET", "/readyz", "/readyz", nil, nil, 200},
		{a, "GET", "/metrics", "/metrics", nil, nil, 200},
		{a, "GET", "/openapi.json", "/openapi.json", nil, nil, 200},
		{a, "GET", "/schemas/agent.json", "/schemas/{kind}", nil, nil, 200},
		{a, "GET", "/api/skills", "/api/skills", nil, nil, 200},
		{a, "GET", "/api/skills/skill-org-feishu", "/api/skills/{id}", nil, nil, 200},
		{a, "GET", "/api/skills/skill-none", "/api/skills/{id}", nil, nil, 404},
		{a, "POST", "/api/skills/search", "/api/skills/search", `{"capabilities":["org-data-read"]}`, nil, 200},
		{a, "POST", "/rpc", "/rpc", call("x", MethodDiscover, map[string]any{"capability_id": "csv_processing"}), nil, 200},
		{a, "POST", "/rpc", "/rpc", []any{call(1, MethodDiscover, map[string]any{}), call(2, "nope", nil)}, nil, 200},
		{a, "GET", "/ws", "/ws", nil, nil, 426},
		{b, "GET", "/agents", "/agents", nil, nil, 401},
		{b, "POST", "/agents", "/agents", announceJSON(t, spec("s", "c")), []reqOpt{bearer(readTok)}, 403},
		{b, "GET", "/peers", "/peers", nil, []reqOpt{bearer(readTok)}, 200},
		{a, "DELETE", "/agents/" + id + "?reason=UPGRADE", "/agents/{id}", nil, nil, 200},
		{a, "DELETE", "/agents/" + id, "/agents/{id}", nil, nil, 404},
	}
	for _, st := range steps {
		r := st.api.do(st.method, st.url, st.body, st.opts...)
		if r.status != st.status {
			t.Errorf("%s %s: status %d, want %d: %.300s", st.method, st.url, r.status, st.status, r.body)
			continue
		}
		ctype, _, _ := strings.Cut(r.header.Get("Content-Type"), ";")
		if r.status == 200 && st.route == "/metrics" {
			ctype = "text/plain"
		}
		if r.status == 200 && st.route == "/schemas/{kind}" {
			ctype = "application/schema+json"
		}
		s, ok := d.responseSchema(t, st.route, st.method, r.status, ctype)
		if !ok {
			t.Errorf("%s %s answered %d, which the document does not list", st.method, st.route, r.status)
			continue
		}
		if s == nil {
			continue
		}
		var inst any
		if ctype == "text/plain" {
			inst = string(r.body)
		} else if inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(r.body)); err != nil {
			t.Errorf("%s %s: body is not JSON: %v", st.method, st.url, err)
			continue
		} else {
			if err := s.Validate(inst); err != nil {
				t.Errorf("%s %s %d does not validate against the document:\n%v\nbody: %.500s", st.method, st.url, r.status, err, r.body)
			}
			continue
		}
		if err := s.Validate(inst); err != nil {
			t.Errorf("%s %s: %v", st.method, st.url, err)
		}
	}
}
