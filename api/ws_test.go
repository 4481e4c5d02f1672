package api

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/view"
	"github.com/coder/websocket"
)

type wsClient struct {
	t testing.TB
	c *websocket.Conn
}

func (a *tapi) dialWS(t testing.TB, subprotocol string, header http.Header) *wsClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	opts := &websocket.DialOptions{HTTPHeader: header}
	if subprotocol != "" {
		opts.Subprotocols = []string{subprotocol}
	}
	c, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(a.url, "http")+"/ws", opts)
	if err != nil {
		t.Fatalf("dial: %v (%v)", err, resp)
	}
	if c.Subprotocol() != subprotocol {
		t.Fatalf("subprotocol %q, want %q", c.Subprotocol(), subprotocol)
	}
	c.SetReadLimit(record.MaxWSFrameBytes + 1)
	t.Cleanup(func() { _ = c.CloseNow() })
	return &wsClient{t: t, c: c}
}

func (w *wsClient) send(typ websocket.MessageType, b []byte) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.c.Write(ctx, typ, b); err != nil {
		w.t.Fatalf("write: %v", err)
	}
}

func (w *wsClient) sendText(s string) { w.send(websocket.MessageText, []byte(s)) }

func (w *wsClient) read() (websocket.MessageType, []byte) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	typ, b, err := w.c.Read(ctx)
	if err != nil {
		w.t.Fatalf("read: %v", err)
	}
	return typ, b
}

// readJSON reads a text frame of the given type (skipping event frames
// unless asked for them).
func (w *wsClient) readJSON(wantType string) map[string]any {
	w.t.Helper()
	for {
		typ, b := w.read()
		if typ != websocket.MessageText {
			w.t.Fatalf("binary frame % x while waiting for %s", b[:min(len(b), 8)], wantType)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			w.t.Fatal(err)
		}
		if m["type"] == wantType {
			return m
		}
		if m["type"] == WSTypeEvent && wantType != WSTypeEvent {
			continue
		}
		w.t.Fatalf("frame %s, want type %s", b, wantType)
	}
}

func jsonEqual(t testing.TB, got, want []byte) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatal(err)
	}
	gb, _ := json.Marshal(g)
	wb, _ := json.Marshal(w)
	if !bytes.Equal(gb, wb) {
		t.Fatalf("got  %s\nwant %s", gb, wb)
	}
}

// Seed 003: register → registered, list → agents with registered_at.
func TestWSSeed003Flow(t *testing.T) {
	a := newAPI(t, Config{})
	w := a.dialWS(t, "", nil)
	w.send(websocket.MessageText, seedFile(t, "003-register.json"))
	_, b := w.read()
	jsonEqual(t, b, seedFile(t, "003-registered.json"))
	if _, err := record.ParseWSFrame(b); err != nil {
		t.Fatal(err)
	}

	w.send(websocket.MessageText, seedFile(t, "003-list.json"))
	_, b = w.read()
	f, err := record.ParseWSFrame(b)
	if err != nil {
		t.Fatalf("agents frame: %v\n%s", err, b)
	}
	agents := f.(*record.WSAgents)
	if len(agents.Agents) != 1 {
		t.Fatalf("%s", b)
	}
	// The seed's example with our registered_at is what we answered.
	var want map[string]any
	_ = json.Unmarshal(seedFile(t, "003-agents.json"), &want)
	want["agents"].([]any)[0].(map[string]any)["registered_at"] = agents.Agents[0].RegisteredAt
	wb, _ := json.Marshal(want)
	jsonEqual(t, b, wb)
	at, _ := time.Parse(time.RFC3339, agents.Agents[0].RegisteredAt)
	if time.Since(at) > time.Minute || time.Since(at) < -time.Second {
		t.Fatalf("registered_at %s", agents.Agents[0].RegisteredAt)
	}

	// Same id again is an update; capabilities (extension) are listed.
	w.sendText(`{"type":"register","id":"agent-1","name":"Code Assistant","endpoint":"http://127.0.0.1:3001","capabilities":["code","search"]}`)
	w.readJSON(record.WSTypeRegistered)
	w.sendText(`{"type":"list","capability":"search"}`)
	_, b = w.read()
	agents = mustFrame[*record.WSAgents](t, b)
	if len(agents.Agents) != 1 || agents.Agents[0].Endpoint != "http://127.0.0.1:3001" || len(agents.Agents[0].Capabilities) != 2 {
		t.Fatalf("%s", b)
	}
	// The same agent is visible on the other surfaces.
	id := record.ExternalAgentID(record.WSNamespace, "agent-1")
	mustStatus(t, a.do("GET", "/agents/"+id, nil), 200)

	w.sendText(`{"type":"ping","id":"agent-1"}`)
	jsonEqual(t, mustRead(w), []byte(`{"type":"pong","id":"agent-1"}`))
	w.sendText(`{"type":"heartbeat"}`)
	jsonEqual(t, mustRead(w), []byte(`{"type":"pong"}`))
	w.sendText(`{"type":"unregister","id":"agent-1"}`)
	jsonEqual(t, mustRead(w), []byte(`{"type":"unregistered","id":"agent-1"}`))
	mustStatus(t, a.do("GET", "/agents/"+id+"?local_only=true", nil), 404)

	// Bad frames get error frames and the connection stays usable.
	for _, bad := range []struct{ frame, field string }{
		{`{"type":"register","id":"","name":"x"}`, "id"},
		{`{"type":"register","id":"a"}`, "name"},
		{`{"type":"bogus"}`, "type"},
		{`{"id":"a"}`, "type"},
		{`{"type":"agents","agents":[]}`, "type"},
		{`{"type":"list","capability":"no spaces"}`, "capability"},
		{`{"type":"watch","types":["registry.nope"]}`, "types[0]"},
		{`{"type":"watch","Capability":"x"}`, "Capability"},
		{`not json`, ""},
		{"{\"type\":\"list\",\"x\":\"\xff\"}", ""},
	} {
		w.sendText(bad.frame)
		m := w.readJSON(record.WSTypeError)
		if m["code"] != record.CodeMalformedPayload || (bad.field != "" && m["field"] != bad.field) {
			t.Errorf("%s: %v", bad.frame, m)
		}
	}
	w.send(websocket.MessageBinary, []byte{0x02})
	if m := w.readJSON(record.WSTypeError); !strings.Contains(m["message"].(string), Subprotocol) {
		t.Fatalf("%v", m)
	}
	w.send(websocket.MessageText, seedFile(t, "003-list.json"))
	w.readJSON(record.WSTypeAgents)
}

func mustRead(w *wsClient) []byte {
	w.t.Helper()
	_, b := w.read()
	return b
}

func mustFrame[T record.WSFrame](t testing.TB, b []byte) T {
	t.Helper()
	f, err := record.ParseWSFrame(b)
	if err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	v, ok := f.(T)
	if !ok {
		t.Fatalf("frame %s", b)
	}
	return v
}

// Seed 000 §5.3: the agent-discovery subprotocol with type-prefixed
// binary frames.
func TestWSBinaryBinding(t *testing.T) {
	a := newAPI(t, Config{})
	w := a.dialWS(t, Subprotocol, nil)

	w.send(websocket.MessageBinary, append([]byte{MsgAnnounce}, announceJSON(t, spec("skill-bin", "cap-bin"))...))
	typ, b := w.read()
	if typ != websocket.MessageBinary || b[0] != MsgAnnounce {
		t.Fatalf("answer % x", b[:min(8, len(b))])
	}
	if err := record.ValidateSchema(record.SchemaAnnounce, b[1:]); err != nil {
		t.Fatal(err)
	}
	sa, _, err := record.ParseAnnounce(b[1:])
	if err != nil || sa.VerifySignatures() != nil {
		t.Fatalf("announce echo: %v", err)
	}

	q := `{"protocol_version":"v1.0","query":{"capability":"cap-bin"}}`
	if err := record.ValidateSchema(record.SchemaQuery, []byte(q)); err != nil {
		t.Fatal(err)
	}
	w.send(websocket.MessageBinary, append([]byte{MsgQuery}, q...))
	typ, b = w.read()
	if typ != websocket.MessageBinary || b[0] != MsgResponse {
		t.Fatalf("answer %s", b)
	}
	if err := record.ValidateSchema(record.SchemaResponse, b[1:]); err != nil {
		t.Fatal(err)
	}
	got, matched, err := record.ParseResponse(b[1:])
	if err != nil || !matched || got.VerifySignatures() != nil || got.Agent.AgentID != sa.Agent.AgentID {
		t.Fatalf("response: %v %v", err, matched)
	}
	end := w.readJSON(WSTypeQueryEnd)
	if end["count"].(float64) != 1 {
		t.Fatalf("%v", end)
	}

	for _, bad := range []struct {
		frame []byte
		code  string
		field string
	}{
		{append([]byte{MsgQuery}, `{"protocol_version":"v1.0","query":{"capability":"nothing"}}`...), record.CodeNoSkillsFound, ""},
		{append([]byte{MsgQuery}, `{"protocol_version":"v2.0","query":{"capability":"cap-bin"}}`...), record.CodeUnsupportedVersion, "protocol_version"},
		{append([]byte{MsgQuery}, `{"protocol_version":"v1.0","query":{}}`...), record.CodeMalformedPayload, "query.capability"},
		{append([]byte{MsgAnnounce}, `{"protocol_version":"v1.0","agent":{"transport":{"type":"tcp","endpoint":""}}}`...), record.CodeMalformedPayload, "agent.capabilities"},
		{append([]byte{MsgResponse}, `{}`...), record.CodeMalformedPayload, "type"},
		{[]byte{0x09}, record.CodeMalformedPayload, "type"},
		{[]byte{}, record.CodeMalformedPayload, "type"},
	} {
		w.send(websocket.MessageBinary, bad.frame)
		m := w.readJSON(record.WSTypeError)
		if m["code"] != bad.code || (bad.field != "" && m["field"] != bad.field) {
			t.Errorf("% x…: %v", bad.frame[:min(len(bad.frame), 12)], m)
		}
		if bad.code == record.CodeUnsupportedVersion && m["supported"] != "v1.0" {
			t.Errorf("no supported version: %v", m)
		}
	}
	// Text control frames work on the binary binding too.
	w.sendText(`{"type":"ping"}`)
	w.readJSON(record.WSTypePong)
}

// A registration made over a WebSocket ends when its connection closes
// and does not come back within the heartbeat window.
func TestWSDisconnectUnregisters(t *testing.T) {
	a := newAPI(t, Config{WSHeartbeat: 300 * time.Millisecond})
	w := a.dialWS(t, "", nil)
	w.sendText(`{"type":"register","id":"agent-1","name":"Code Assistant"}`)
	w.readJSON(record.WSTypeRegistered)
	id := record.ExternalAgentID(record.WSNamespace, "agent-1")
	if _, ok := a.n.LeaseOf(id); ok {
		t.Fatal("a registration bound to an open connection has a lease")
	}
	_ = w.c.Close(websocket.StatusNormalClosure, "bye")
	waitFor(t, 5*time.Second, "the lease set on disconnect", func() bool { _, ok := a.n.LeaseOf(id); return ok })
	waitFor(t, 5*time.Second, "the agent to be unregistered", func() bool {
		_, ok := a.n.View().Get(id)
		return !ok
	})
}

func TestWSReconnectKeepsRegistration(t *testing.T) {
	a := newAPI(t, Config{WSHeartbeat: time.Hour})
	w := a.dialWS(t, "", nil)
	w.sendText(`{"type":"register","id":"agent-1","name":"Code Assistant"}`)
	w.readJSON(record.WSTypeRegistered)
	id := record.ExternalAgentID(record.WSNamespace, "agent-1")
	_ = w.c.Close(websocket.StatusNormalClosure, "bye")
	waitFor(t, 5*time.Second, "the lease set on disconnect", func() bool { _, ok := a.n.LeaseOf(id); return ok })
	w2 := a.dialWS(t, "", nil)
	w2.sendText(`{"type":"register","id":"agent-1","name":"Code Assistant"}`)
	w2.readJSON(record.WSTypeRegistered)
	if until, ok := a.n.LeaseOf(id); ok {
		t.Fatalf("re-registering on a new connection did not clear the lease (%v)", until)
	}
	if _, ok := a.n.View().Get(id); !ok {
		t.Fatal("agent gone")
	}
	// Closing the old connection's successor later leases it again; the
	// first connection's end no longer matters.
	a.s.mu.Lock()
	bound := a.s.wsBound[id]
	a.s.mu.Unlock()
	if bound == nil {
		t.Fatal("not bound to the new connection")
	}
}

// A client that does not answer pings is closed after one heartbeat
// window, and its registration leased.
func TestWSHeartbeatMissCloses(t *testing.T) {
	a := newAPI(t, Config{WSHeartbeat: 100 * time.Millisecond})
	w := a.dialWS(t, "", nil)
	w.sendText(`{"type":"register","id":"silent","name":"Silent"}`)
	// The client never reads, so it never answers the server's pings.
	id := record.ExternalAgentID(record.WSNamespace, "silent")
	waitFor(t, 5*time.Second, "the registration", func() bool { _, ok := a.n.View().Get(id); return ok })
	waitFor(t, 5*time.Second, "the silent client to be closed and its agent leased", func() bool {
		_, ok := a.n.LeaseOf(id)
		return ok
	})
	a.s.mu.Lock()
	n := len(a.s.sessions)
	a.s.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d sessions left", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for {
		if _, _, err := w.c.Read(ctx); err != nil {
			break
		}
	}
}

// A responsive client stays connected across many heartbeats.
func TestWSHeartbeatKeepsLiveClient(t *testing.T) {
	a := newAPI(t, Config{WSHeartbeat: 50 * time.Millisecond})
	var pings atomic.Int32
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(a.url, "http")+"/ws", &websocket.DialOptions{
		OnPingReceived: func(context.Context, []byte) bool { pings.Add(1); return true },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.CloseNow() }()
	w := &wsClient{t: t, c: c}
	for pings.Load() < 5 {
		w.sendText(`{"type":"ping"}`)
		w.readJSON(record.WSTypePong)
	}
	a.s.mu.Lock()
	n := len(a.s.sessions)
	a.s.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d sessions after %d heartbeats, want 1", n, pings.Load())
	}
}

func TestWSWatch(t *testing.T) {
	a := newAPI(t, Config{})
	w := a.dialWS(t, "", nil)
	w.sendText(`{"type":"watch","capability":"cap-w"}`)
	if m := w.readJSON(WSTypeWatching); m["capability"] != "cap-w" {
		t.Fatalf("%v", m)
	}
	other := spec("skill-other", "cap-other")
	other.AgentID = "6f1c7a52-1fc2-4f7b-8d8c-5e3e6f5c9c1d"
	mustStatus(t, a.do("POST", "/agents", announceJSON(t, other)), 200) // filtered out
	mustStatus(t, a.do("POST", "/agents", announceJSON(t, spec("skill-w", "cap-w"))), 200)
	id := a.n.id.AgentID

	ev := w.readEvent(view.EventRegistered)
	if ev.AgentID != id || ev.Record == nil || ev.Source != "local" {
		t.Fatalf("%+v", ev)
	}
	b, _ := json.Marshal(ev.Record)
	if err := record.ValidateSchema(record.SchemaAnnounce, b); err != nil {
		t.Fatal(err)
	}
	w.readEvent(view.EventCapabilityChanged)
	mustStatus(t, a.do("PUT", "/agents/"+id+"/status", `{"status":"MAINTENANCE"}`), 200)
	if ev := w.readEvent(view.EventStatus); ev.Status != record.StatusMaintenance {
		t.Fatalf("%+v", ev)
	}
	mustStatus(t, a.do("DELETE", "/agents/"+id+"?reason=UPGRADE", nil), 200)
	if ev := w.readEvent(view.EventDeregistered); ev.Reason != "UPGRADE" || ev.AgentID != id {
		t.Fatalf("%+v", ev)
	}
	w.sendText(`{"type":"unwatch"}`)
	w.readJSON(WSTypeUnwatched)
}

// readEvent reads event frames until one of the type arrives.
func (w *wsClient) readEvent(typ view.EventType) EventFrame {
	w.t.Helper()
	for {
		_, b := w.read()
		var f EventFrame
		if err := json.Unmarshal(b, &f); err != nil {
			w.t.Fatal(err)
		}
		if f.Type != WSTypeEvent {
			w.t.Fatalf("frame %s while waiting for event %s", b, typ)
		}
		if f.Event == typ {
			return f
		}
		if f.Capabilities != nil && !containsStr(f.Capabilities, "cap-w") && f.Capability != "cap-w" {
			w.t.Fatalf("event outside the filter: %s", b)
		}
	}
}

// Close ends the sessions, waits for them, and leases their agents.
func TestWSServerClose(t *testing.T) {
	a := newAPI(t, Config{WSHeartbeat: time.Hour})
	w := a.dialWS(t, "", nil)
	w.sendText(`{"type":"register","id":"agent-9","name":"Nine"}`)
	w.readJSON(record.WSTypeRegistered)
	w.sendText(`{"type":"watch"}`)
	w.readJSON(WSTypeWatching)
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for {
			if _, _, err := w.c.Read(ctx); err != nil {
				if websocket.CloseStatus(err) != websocket.StatusGoingAway {
					t.Errorf("close status %v", err)
				}
				return
			}
		}
	}()
	if err := a.s.Close(); err != nil {
		t.Fatal(err)
	}
	<-done
	if _, ok := a.n.LeaseOf(record.ExternalAgentID(record.WSNamespace, "agent-9")); !ok {
		t.Fatal("no lease after Close")
	}
	r := mustStatus(t, a.do("GET", "/agents", nil), 503)
	if e := r.apiErr(t); e.Code != record.CodeServiceUnavailable {
		t.Fatalf("%+v", e)
	}
	mustStatus(t, a.do("GET", "/healthz", nil), 200)
	mustStatus(t, a.do("GET", "/readyz", nil), 503)
}

func TestWSUpgradeErrors(t *testing.T) {
	a := newAPI(t, Config{})
	r := mustStatus(t, a.do("GET", "/ws", nil), 426)
	if e := r.apiErr(t); e.Code != record.CodeMalformedPayload {
		t.Fatalf("%+v", e)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(a.url, "http")+"/ws", &websocket.DialOptions{HTTPHeader: http.Header{"Origin": {"http://evil.example"}}})
	if err == nil || resp == nil || resp.StatusCode != 403 {
		t.Fatalf("cross-origin upgrade: %v %v", err, resp)
	}
}
