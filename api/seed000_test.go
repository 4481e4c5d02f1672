package api

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/testutil"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/trust"
	"github.com/coder/websocket"
	"github.com/google/uuid"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// A seed-000 agent without agentd's peer binding registers with a node in
// registry mode, over REST and over the WebSocket binding: verified by its
// agent signature, answered marked unbound, valid against the schemas,
// refreshed by re-announcing, never forwarded.
func TestSeed000AgentWithoutPeerBinding(t *testing.T) {
	d := loadOpenAPI(t)
	a := newAPI(t, Config{JWTSecret: testSecret, ServeRegistry: true})
	write := bearer(hsToken(t, testSecret, claims(ScopeWrite, time.Hour)))
	id := uuid.NewString()
	ag := testutil.NewSeed000Agent(t, id, "metrics")
	body := ag.Announce(t, true)

	// Auth comes before the body: without a token 401, even for a body
	// that is wrong in other ways.
	if e := mustStatus(t, a.do("POST", "/agents", body), 401).apiErr(t); e.Code != record.CodeAuth {
		t.Fatalf("%+v", e)
	}
	bad := map[string]any{"protocol_version": "v1.0", "signature": "AAAA", "agent": map[string]any{"agent_id": "not-a-uuid"}}
	if e := mustStatus(t, a.do("POST", "/agents", bad), 401).apiErr(t); e.Code != record.CodeAuth {
		t.Fatalf("%+v", e)
	}
	mustStatus(t, a.do("POST", "/agents", bad, write), 400)
	mustStatus(t, a.do("POST", "/agents", body, bearer(hsToken(t, testSecret, claims(ScopeRead, time.Hour)))), 403)

	var e AgentEntry
	mustStatus(t, a.do("POST", "/agents", body, write), 200).json(t, &e)
	if e.Source != "registry" || !e.Unbound || e.PeerSignature != "" {
		t.Fatalf("%+v", e)
	}
	// The answer carries the agent object as signed and the low-S twin of
	// the signature, which verifies for the same key.
	sa, err := record.FromAnnounceUnbound(record.Announce{ProtocolVersion: e.ProtocolVersion, Agent: e.Agent, Signature: e.Signature})
	if err != nil || !sa.Unbound() {
		t.Fatalf("%v %+v", err, sa)
	}
	if err := sa.VerifySignatures(); err != nil {
		t.Fatalf("answer does not verify: %v", err)
	}
	held, ok := a.n.View().Get(id)
	if !ok {
		t.Fatal("not in the live view")
	}
	seq := held.Record.Agent.Seq

	r := mustStatus(t, a.do("GET", "/agents?capability=metrics", nil), 200)
	var l AgentList
	r.json(t, &l)
	if l.Total != 1 || !l.Agents[0].Unbound || l.Agents[0].Source != "registry" {
		t.Fatalf("%s", r.body)
	}
	s, _ := d.responseSchema(t, "/agents", "GET", 200, "application/json")
	validateBody(t, s, r.body)
	if err := record.ValidateSchema(record.SchemaAgent, l.Agents[0].Agent); err != nil {
		t.Fatalf("agent object does not validate against agent.json: %v", err)
	}

	// Re-announcing the same object (a new signature) refreshes it: the
	// record held does not change.
	mustStatus(t, a.do("POST", "/agents", ag.Announce(t, false), write), 200)
	if h, _ := a.n.View().Get(id); h.Record.Agent.Seq != seq {
		t.Fatalf("re-announcement replaced the record: seq %d -> %d", seq, h.Record.Agent.Seq)
	}
	// A changed object replaces it.
	ag.Agent["capabilities"] = map[string]any{"metrics": "2.1"}
	mustStatus(t, a.do("POST", "/agents", ag.Announce(t, false), write), 200)
	if h, _ := a.n.View().Get(id); h.Record.Agent.Capabilities["metrics"] != "2.1" {
		t.Fatalf("%+v", h.Record.Agent.Capabilities)
	}
	// Never forwarded: gossip's sync answers leave it out.
	for _, lr := range a.n.View().LiveRecords(100, nil) {
		if lr.Record.Agent.AgentID == id {
			t.Fatal("an unbound record is offered to peers")
		}
	}

	// Another key for the same agent_id is refused (the first key is
	// pinned), and so is a tampered object.
	thief := testutil.NewSeed000Agent(t, id, "metrics")
	mustStatus(t, a.do("POST", "/agents", thief.Announce(t, false), write), 409)
	var m map[string]any
	_ = json.Unmarshal(ag.Announce(t, false), &m)
	m["agent"].(map[string]any)["agent_name"] = "other"
	if e := mustStatus(t, a.do("POST", "/agents", m, write), 400).apiErr(t); e.Field != "signature" {
		t.Fatalf("%+v", e)
	}
	// A peer_signature without peer_id is malformed.
	_ = json.Unmarshal(ag.Announce(t, false), &m)
	m["peer_signature"] = m["signature"]
	if e := mustStatus(t, a.do("POST", "/agents", m, write), 400).apiErr(t); e.Field != "peer_id" {
		t.Fatalf("%+v", e)
	}

	// Over the agent-discovery WebSocket, with the token of the upgrade.
	ws := testutil.NewSeed000Agent(t, uuid.NewString(), "ws-metrics")
	w := a.dialWS(t, Subprotocol, http.Header{"Authorization": {"Bearer " + hsToken(t, testSecret, claims(ScopeRead+" "+ScopeWrite, time.Hour))}})
	w.send(websocket.MessageBinary, append([]byte{MsgAnnounce}, ws.Announce(t, true)...))
	if _, b := w.read(); b[0] != MsgAnnounce {
		t.Fatalf("%s", b)
	}
	mustStatus(t, a.do("GET", "/agents?capability=ws-metrics", nil), 200).json(t, &l)
	if l.Total != 1 || !l.Agents[0].Unbound {
		t.Fatalf("%+v", l)
	}

	// A node that is not a registry says what to do instead.
	b := newAPI(t, Config{})
	if e := mustStatus(t, b.do("POST", "/agents", body), 403).apiErr(t); e.Field != "agent.peer_id" || e.Code != record.CodeForbidden {
		t.Fatalf("%+v", e)
	}
}

// validateBody validates a JSON body against a compiled schema.
func validateBody(t testing.TB, s *jsonschema.Schema, body []byte) {
	t.Helper()
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(inst); err != nil {
		t.Fatalf("does not validate against the OpenAPI document:\n%v\nbody: %s", err, body)
	}
}

// A bound record (an agentd peer hosts the agent) is not replaced by an
// unbound one of the same agent, and an unbound one gives way to a bound
// one whatever the seq it was stamped with.
func TestUnboundAndBoundRecordsOfOneAgent(t *testing.T) {
	a := newAPI(t, Config{JWTSecret: testSecret, ServeRegistry: true})
	write := bearer(hsToken(t, testSecret, claims(ScopeWrite, time.Hour)))
	other := newNode(t, nodeOpts{})
	id := uuid.NewString()
	cid, err := trust.Generate()
	if err != nil {
		t.Fatal(err)
	}
	b := spec("skill-b", "cap-b")
	b.Fill(id, other.id.PeerID.String(), cid.PublicKeyPEM(), 2, time.Now(), time.Hour)
	co, err := record.Sign(b, cid.AgentKey, other.id.PeerKey)
	if err != nil {
		t.Fatal(err)
	}
	ag := testutil.NewSeed000Agent(t, id, "cap-b")
	ag.SetKey(t, cid.AgentKey)

	mustStatus(t, a.do("POST", "/agents", ag.Announce(t, false), write), 200)
	if h, _ := a.n.View().Get(id); !h.Record.Unbound() {
		t.Fatal("want the unbound record")
	}
	mustStatus(t, a.do("POST", "/agents", co.MarshalAnnounce(), write), 200)
	h, _ := a.n.View().Get(id)
	if h.Record.Unbound() || h.Record.Agent.Seq != 2 {
		t.Fatalf("the bound record (seq 2) did not replace the unbound one: %+v", h.Record.Agent)
	}
	if e, err := a.n.Store().Get(t.Context(), id); err != nil || e.Record.Unbound() || e.Source != store.SourceRegistry {
		t.Fatalf("cache: %v %+v", err, e)
	}
	ag.Agent["agent_name"] = "changed"
	if e := mustStatus(t, a.do("POST", "/agents", ag.Announce(t, false), write), 403).apiErr(t); e.Field != "agent.peer_id" {
		t.Fatalf("%+v", e)
	}
}

// An A2A Agent Card (1.0 shape) is registered as it is: POST /agents maps
// its skills onto the record's, keeps the card whole, and the agent is
// found by a skill's capability.
func TestRegisterA2ACard(t *testing.T) {
	a := newAPI(t, Config{})
	card := `{"name":"Currency Agent","description":"Converts currencies","version":"1.2.0",
		"supportedInterfaces":[{"url":"https://fx.example/a2a","protocolBinding":"JSONRPC","protocolVersion":"1.0"}],
		"capabilities":{},"defaultInputModes":["text/plain"],"defaultOutputModes":["application/json"],
		"skills":[{"id":"convert","name":"Convert","description":"Convert an amount","tags":["fx"],"examples":["100 USD in EUR"]}]}`
	var e AgentEntry
	mustStatus(t, a.do("POST", "/agents", card), 200).json(t, &e)
	var ag record.Agent
	if err := json.Unmarshal(e.Agent, &ag); err != nil {
		t.Fatal(err)
	}
	if ag.AgentName != "currency-agent" || ag.Transport.Endpoint != "https://fx.example/a2a" || ag.Metadata[record.MetaA2ACard] == nil {
		t.Fatalf("%+v", ag)
	}
	var l AgentList
	mustStatus(t, a.do("GET", "/agents?capability=convert", nil), 200).json(t, &l)
	if l.Total != 1 || l.Agents[0].Source != "local" {
		t.Fatalf("%+v", l)
	}
	// A card whose skill id cannot be a capability id is refused, naming it.
	bad := strings.Replace(card, `"id":"convert"`, `"id":"convert money"`, 1)
	if e := mustStatus(t, a.do("POST", "/agents", bad), 400).apiErr(t); e.Field != "skills[0].id" {
		t.Fatalf("%+v", e)
	}
}
