package api

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/agentd/agentd/record"
	"github.com/google/uuid"
)

func TestRESTRegisterGetListUnregister(t *testing.T) {
	a := newAPI(t, Config{})
	// An unsigned Announce is signed by the node; its agent_id defaults
	// to the node's own.
	r := mustStatus(t, a.do("POST", "/agents", announceJSON(t, spec("skill-org-feishu", "org-data-read", "user-auth"))), 200)
	if err := record.ValidateSchema(record.SchemaAnnounce, r.body); err != nil {
		t.Fatalf("echo does not validate: %v\n%s", err, r.body)
	}
	sa, _, err := record.ParseAnnounce(r.body)
	if err != nil {
		t.Fatal(err)
	}
	if err := sa.VerifySignatures(); err != nil {
		t.Fatal(err)
	}
	if sa.Agent.AgentID != a.n.id.AgentID || sa.Agent.PeerID != a.n.id.PeerID.String() {
		t.Fatalf("agent %s peer %s", sa.Agent.AgentID, sa.Agent.PeerID)
	}
	if loc := r.header.Get("Location"); loc != "/agents/"+sa.Agent.AgentID {
		t.Fatalf("Location %q", loc)
	}
	// Identical announcements coalesce.
	r2 := mustStatus(t, a.do("POST", "/agents", announceJSON(t, spec("skill-org-feishu", "org-data-read", "user-auth"))), 200)
	sa2, _, _ := record.ParseAnnounce(r2.body)
	if sa2.Agent.Seq != sa.Agent.Seq {
		t.Fatalf("not coalesced: seq %d then %d", sa.Agent.Seq, sa2.Agent.Seq)
	}

	var e AgentEntry
	mustStatus(t, a.do("GET", "/agents/"+sa.Agent.AgentID, nil), 200).json(t, &e)
	if e.Source != "local" || e.Stale || e.Status != record.StatusHealthy || string(e.Agent) != string(sa.Canonical()) {
		t.Fatalf("get: %+v", e)
	}

	var l AgentList
	mustStatus(t, a.do("GET", "/agents?capability=org-data-read&version=%3E%3D1.0.0&tag=tier%3Dcore", nil), 200).json(t, &l)
	if l.Total != 1 || len(l.Agents) != 1 || l.Agents[0].Source != "local" {
		t.Fatalf("list: %+v", l)
	}
	// Every entry is an Announce.
	for _, e := range l.Agents {
		b, _ := json.Marshal(e)
		if err := record.ValidateSchema(record.SchemaAnnounce, b); err != nil {
			t.Fatal(err)
		}
	}
	// Filters that miss answer DISC_002.
	r = mustStatus(t, a.do("GET", "/agents?capability=nothing-here", nil), 404)
	if e := r.apiErr(t); e.Code != record.CodeNoSkillsFound {
		t.Fatalf("miss: %+v", e)
	}
	mustStatus(t, a.do("GET", "/agents?version=%3E%3D2.0.0&capability=org-data-read", nil), 404)
	// Free text over names and descriptions.
	mustStatus(t, a.do("GET", "/agents?q=FEISHU", nil), 200).json(t, &l)
	if l.Total != 1 {
		t.Fatalf("q: %+v", l)
	}

	// Status.
	var sb StatusBody
	mustStatus(t, a.do("PUT", "/agents/"+sa.Agent.AgentID+"/status", `{"status":"DEGRADED"}`), 200).json(t, &sb)
	if sb.Status != record.StatusDegraded {
		t.Fatalf("status %+v", sb)
	}
	mustStatus(t, a.do("GET", "/agents/"+sa.Agent.AgentID, nil), 200).json(t, &e)
	if e.Status != record.StatusDegraded {
		t.Fatalf("status after set: %+v", e)
	}

	// Unregister with a reason.
	var ur UnregisterResult
	mustStatus(t, a.do("DELETE", "/agents/"+sa.Agent.AgentID+"?reason=MAINTENANCE", nil), 200).json(t, &ur)
	if ur.Reason != "MAINTENANCE" || ur.AgentID != sa.Agent.AgentID {
		t.Fatalf("unregister %+v", ur)
	}
	if len(a.n.Locals()) != 0 {
		t.Fatal("still hosted")
	}
	r = mustStatus(t, a.do("DELETE", "/agents/"+sa.Agent.AgentID, nil), 404)
	if e := r.apiErr(t); e.Code != record.CodeNotFound {
		t.Fatalf("second delete: %+v", e)
	}
	// The list without filters is empty, not an error.
	mustStatus(t, a.do("GET", "/agents", nil), 200).json(t, &l)
	if l.Total != 0 || l.Agents == nil {
		t.Fatalf("empty list: %s", mustStatus(t, a.do("GET", "/agents", nil), 200).body)
	}
}

func TestRESTRegisterSigned(t *testing.T) {
	a := newAPI(t, Config{})
	id := uuid.NewString()
	sa, body := signedBy(t, a.n, spec("skill-x", "cap-x"), id, 7)
	r := mustStatus(t, a.do("POST", "/agents", body), 200)
	got, _, err := record.ParseAnnounce(r.body)
	if err != nil {
		t.Fatal(err)
	}
	if err := got.VerifySignatures(); err != nil {
		t.Fatalf("co-signed record does not verify: %v", err)
	}
	if string(got.Canonical()) != string(sa.Canonical()) || string(got.Signature) != string(sa.Signature) {
		t.Fatal("the client's signed record was changed")
	}
	// The same seq again coalesces; an older one is refused.
	mustStatus(t, a.do("POST", "/agents", body), 200)
	_, older := signedBy(t, a.n, spec("skill-x", "cap-x"), id, 6)
	r = a.do("POST", "/agents", older)
	if r.status < 400 || r.status >= 500 {
		t.Fatalf("older record: %d %s", r.status, r.body)
	}
	// A record for another peer is refused (registry mode is off).
	other := newNode(t, nodeOpts{})
	_, foreign := signedBy(t, other, spec("skill-y", "cap-y"), uuid.NewString(), 1)
	r = mustStatus(t, a.do("POST", "/agents", foreign), 403)
	if e := r.apiErr(t); e.Code != record.CodeForbidden || e.Field != "agent.peer_id" {
		t.Fatalf("foreign: %+v", e)
	}
	// A tampered signature is a malformed payload naming the field.
	var m map[string]any
	_ = json.Unmarshal(body, &m)
	m["signature"] = "MEUCIQDtampered0000000000000000000000000000000000000000AiB0000000000000000000000000000000000000000000000000000="
	r = mustStatus(t, a.do("POST", "/agents", m), 400)
	if e := r.apiErr(t); e.Code != record.CodeMalformedPayload || e.Field != "signature" {
		t.Fatalf("bad signature: %+v", e)
	}
}

func TestRESTVersionNegotiation(t *testing.T) {
	a := newAPI(t, Config{})
	var m map[string]any
	_ = json.Unmarshal(announceJSON(t, spec("skill-x", "cap-x")), &m)
	m["protocol_version"] = "v2.0"
	r := mustStatus(t, a.do("POST", "/agents", m), 400)
	e := r.apiErr(t)
	if e.Code != record.CodeUnsupportedVersion || e.Supported != "v1.0" || e.Field != "protocol_version" {
		t.Fatalf("v2.0: %+v", e)
	}
	// A newer minor is accepted.
	m["protocol_version"] = "v1.1"
	mustStatus(t, a.do("POST", "/agents", m), 200)
}

func TestRESTMethodsAndRoutes(t *testing.T) {
	a := newAPI(t, Config{})
	r := mustStatus(t, a.do("PATCH", "/agents", nil), 405)
	if allow := r.header.Get("Allow"); !strings.Contains(allow, "GET") || !strings.Contains(allow, "POST") {
		t.Fatalf("Allow %q", allow)
	}
	if e := r.apiErr(t); e.Code != record.CodeMethodNotAllowed {
		t.Fatalf("%+v", e)
	}
	r = mustStatus(t, a.do("GET", "/nope", nil), 404)
	if e := r.apiErr(t); e.Code != record.CodeNotFound {
		t.Fatalf("%+v", e)
	}
	mustStatus(t, a.do("GET", "/agents/not-a-uuid", nil), 400)
	mustStatus(t, a.do("GET", "/agents?bogus=1", nil), 400)
	mustStatus(t, a.do("GET", "/agents?limit=0", nil), 400)
	mustStatus(t, a.do("GET", "/agents?limit=5&limit=6", nil), 400)
	mustStatus(t, a.do("GET", "/agents?version=%3E%3Dnope", nil), 400)
	mustStatus(t, a.do("GET", "/agents?type=robot", nil), 400)

	var h Health
	mustStatus(t, a.do("GET", "/healthz", nil), 200).json(t, &h)
	if h.Status != "ok" || h.AgentID != a.n.id.AgentID || h.ProtocolVersion != "v1.0" || h.Version != "test" {
		t.Fatalf("health %+v", h)
	}
	var rd Ready
	mustStatus(t, a.do("GET", "/readyz", nil), 200).json(t, &rd)
	if !rd.Ready {
		t.Fatalf("ready %+v", rd)
	}
	mustStatus(t, a.do("GET", "/agents?capability=anything", nil), 404) // a lookup to count
	r = mustStatus(t, a.do("GET", "/metrics", nil), 200)
	for _, want := range []string{`agentd_http_requests_total{code="404",surface="rest"}`, "agentd_peers", `agentd_lookups_total{outcome="miss",source="none"}`, `agentd_validation_rejects_total{reason="ErrMalformedPayload",transport="api"}`} {
		if !strings.Contains(string(r.body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	var pl PeerList
	mustStatus(t, a.do("GET", "/peers", nil), 200).json(t, &pl)
	if pl.Peers == nil {
		t.Fatal("peers is null")
	}
	mustStatus(t, a.do("GET", "/schemas/announce.json", nil), 200)
	mustStatus(t, a.do("GET", "/schemas/nope", nil), 404)
	// DNS rebinding: a non-loopback Host is refused on the loopback API.
	r = mustStatus(t, a.do("GET", "/agents", nil, func(r *http.Request) { r.Host = "evil.example:4778" }), 421)
	if e := r.apiErr(t); e.Code != CodeMisdirected {
		t.Fatalf("%+v", e)
	}
	// A body must be typed JSON (no simple cross-origin POST).
	r = mustStatus(t, a.do("POST", "/agents", announceJSON(t, spec("s", "c")), withHeader("Content-Type", "text/plain")), 415)
	if e := r.apiErr(t); e.Field != "Content-Type" {
		t.Fatalf("%+v", e)
	}
}

func TestRESTCapabilities(t *testing.T) {
	a := newAPI(t, Config{})
	mustStatus(t, a.do("POST", "/agents", announceJSON(t, spec("skill-org-feishu", "org-data-read", "user-auth"))), 200)
	var cl CapabilityList
	mustStatus(t, a.do("GET", "/capabilities", nil), 200).json(t, &cl)
	if cl.Total != 2 || len(cl.Capabilities["org-data-read"]) != 1 || cl.Capabilities["org-data-read"][0].SkillID != "skill-org-feishu" {
		t.Fatalf("%+v", cl)
	}
	mustStatus(t, a.do("GET", "/capabilities?capability=user-auth", nil), 200).json(t, &cl)
	if cl.Total != 1 {
		t.Fatalf("%+v", cl)
	}
	mustStatus(t, a.do("GET", "/capabilities?prefix=org-", nil), 200).json(t, &cl)
	if cl.Total != 1 {
		t.Fatalf("%+v", cl)
	}
}

// The hand-written encoding of entries is the JSON encoding/json writes
// (the agent object is copied as is: its canonical bytes are not
// HTML-escaped, an equivalent encoding).
func TestAgentEntryEncoding(t *testing.T) {
	entries := []AgentEntry{
		{ProtocolVersion: "v1.0", Agent: json.RawMessage(`{"agent_id":"x","capabilities":{"a":"<&>"}}`), Signature: "QUJD+/==", PeerSignature: "REVG", Source: "gossip", AgeMS: 1234, Stale: true, Status: record.StatusDegraded},
		{ProtocolVersion: "v1.0", Agent: json.RawMessage(`{"capabilities":{}}`), Source: "skillcenter"},
		{ProtocolVersion: "v1.0\"\n", Agent: json.RawMessage(`{}`), Source: "é<", AgeMS: -1},
	}
	same := func(got, want []byte) {
		t.Helper()
		var g, w any
		if err := json.Unmarshal(got, &g); err != nil {
			t.Fatalf("%s: %v", got, err)
		}
		_ = json.Unmarshal(want, &w)
		if !reflect.DeepEqual(g, w) {
			t.Errorf("\ngot  %s\nwant %s", got, want)
		}
	}
	for _, e := range entries {
		want, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		same(e.appendJSON(nil), want)
	}
	if got, want := entries[1].appendJSON(nil), must(json.Marshal(entries[1])); string(got) != string(want) {
		t.Errorf("\ngot  %s\nwant %s", got, want)
	}
	l := AgentList{Agents: entries, Total: 3}
	same(l.appendJSON(nil), must(json.Marshal(l)))
	empty := AgentList{Agents: []AgentEntry{}}
	if got, want := empty.appendJSON(nil), must(json.Marshal(empty)); string(got) != string(want) {
		t.Errorf("\ngot  %s\nwant %s", got, want)
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}
