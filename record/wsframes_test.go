package record

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestWSFramesSeed(t *testing.T) {
	f, err := ParseWSFrame(readSeed(t, "003-register.json"))
	if err != nil {
		t.Fatal(err)
	}
	reg, ok := f.(*WSRegister)
	if !ok || !reflect.DeepEqual(*reg, WSRegister{ID: "agent-1", Name: "Code Assistant", Endpoint: "http://127.0.0.1:3000"}) {
		t.Fatalf("register %#v", f)
	}
	a, err := reg.ToAgent()
	if err != nil {
		t.Fatal(err)
	}
	if a.AgentID != "2d444068-d369-4238-8c5a-bb3ed26dbb17" || a.Metadata[MetaExternalID] != "agent-1" ||
		a.AgentName != "code-assistant" || a.Description != "Code Assistant" ||
		a.Transport != (Transport{Type: "http", Endpoint: "http://127.0.0.1:3000"}) {
		t.Fatalf("agent %+v", a)
	}
	reg2 := &WSRegister{ID: testAgentID, Name: "!!!", Capabilities: []string{"code", "search"}}
	a, err = reg2.ToAgent()
	if err != nil {
		t.Fatal(err)
	}
	if a.AgentID != testAgentID || a.Metadata != nil || a.AgentName != DNSLabel(testAgentID) || a.Transport.Type != "ws" ||
		!reflect.DeepEqual(a.Capabilities, map[string]string{"code": "", "search": ""}) {
		t.Fatalf("agent %+v", a)
	}
	if tr := transportFor("10.0.0.1:80"); tr != (Transport{Type: "tcp", Endpoint: "10.0.0.1:80"}) {
		t.Fatalf("transport %+v", tr)
	}

	f, err = ParseWSFrame(readSeed(t, "003-agents.json"))
	if err != nil {
		t.Fatal(err)
	}
	if ag := f.(*WSAgents); len(ag.Agents) != 1 || ag.Agents[0].RegisteredAt != "2025-01-31T12:00:00Z" {
		t.Fatalf("agents %+v", ag)
	}
	// An agent registered over the socket is listed as it registered.
	a, _ = reg.ToAgent()
	w := WSAgentFromAgent(a, time.Date(2025, 1, 31, 12, 0, 0, 0, time.UTC))
	if !reflect.DeepEqual(w, f.(*WSAgents).Agents[0]) {
		t.Fatalf("listed as %+v, want %+v", w, f.(*WSAgents).Agents[0])
	}
}

func TestWSFramesRoundTrip(t *testing.T) {
	frames := []WSFrame{
		&WSRegister{ID: "agent-1", Name: "Code Assistant", Endpoint: "http://127.0.0.1:3000", Capabilities: []string{"code"}},
		&WSRegister{ID: "a", Name: "n"},
		&WSRegistered{ID: "agent-1"},
		&WSList{},
		&WSList{Capability: "code"},
		&WSAgents{Agents: []WSAgent{}},
		&WSAgents{Agents: []WSAgent{{ID: "x", Name: "y", RegisteredAt: "2025-01-31T12:00:00.5+01:00", Capabilities: []string{"c"}}}},
		&WSUnregister{ID: "a"},
		&WSUnregistered{ID: "a"},
		&WSPing{},
		&WSPing{ID: "a"},
		&WSPong{},
		&WSError{Code: CodeMalformedPayload, Message: "name: is required", Field: "name"},
	}
	for _, f := range frames {
		b, err := MarshalWSFrame(f)
		if err != nil {
			t.Fatalf("%#v: %v", f, err)
		}
		if !strings.HasPrefix(string(b), `{"type":"`+f.FrameType()+`"`) {
			t.Errorf("frame %s does not start with its type", b)
		}
		g, err := ParseWSFrame(b)
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if !reflect.DeepEqual(g, f) {
			t.Errorf("round trip of %s: got %#v", b, g)
		}
	}
	if b, _ := MarshalWSFrame(&WSList{}); string(b) != `{"type":"list"}` {
		t.Errorf("list is %s", b)
	}
	if _, err := MarshalWSFrame(nil); err == nil {
		t.Error("nil frame marshalled")
	}
	var nilReg *WSRegister
	if _, err := MarshalWSFrame(nilReg); err == nil {
		t.Error("nil *WSRegister marshalled")
	}
}

func TestWSFramesRejects(t *testing.T) {
	cases := []struct{ doc, field string }{
		{`{}`, "type"},
		{`{"type":7}`, "type"},
		{`{"type":"subscribe"}`, "type"},
		{`{"type":"register","name":"n"}`, "id"},
		{`{"type":"register","id":"a"}`, "name"},
		{`{"type":"register","id":"a","name":"n\u0000"}`, "name"},
		{`{"type":"register","id":"a","name":"n","capabilities":["a b"]}`, "capabilities[0]"},
		{`{"type":"register","id":"a","name":"n","ID":"b"}`, "ID"},
		{`{"type":"registered"}`, "id"},
		{`{"type":"list","capability":"*"}`, "capability"},
		{`{"type":"agents"}`, "agents"},
		{`{"type":"agents","agents":[{"id":"a","name":"n","registered_at":"yesterday"}]}`, "agents[0].registered_at"},
		{`{"type":"agents","agents":[{"id":"a","name":"n"}]}`, "agents[0].registered_at"},
		{`{"type":"agents","agents":[{"id":"a","registered_at":"2025-01-31T12:00:00Z"}]}`, "agents[0].name"},
		{`{"type":"error","message":"m"}`, "code"},
		{`[]`, ""},
		{`{"type":"list","type":"register"}`, ""},
		// Issue 12 item 6: encoding/json read "Type" as "type".
		{`{"Type":"register","id":"a","name":"n"}`, "Type"},
		{`{"TYPE":"list"}`, "TYPE"},
		{`{"type":"list","Type":"register"}`, "Type"},
		{`{"type":"agents","agents":[{"id":"a","name":"n","registered_at":"2025-01-31T1:00:00Z"}]}`, "agents[0].registered_at"},
	}
	for _, c := range cases {
		_, err := ParseWSFrame([]byte(c.doc))
		if err == nil {
			t.Errorf("%s accepted", c.doc)
			continue
		}
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v does not wrap ErrMalformed", c.doc, err)
		}
		if c.field != "" && FieldOf(err) != c.field {
			t.Errorf("%s: error names %q, want %q (%v)", c.doc, FieldOf(err), c.field, err)
		}
	}
	big := `{"type":"list","x":"` + strings.Repeat("a", MaxWSFrameBytes) + `"}`
	if _, err := ParseWSFrame([]byte(big)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("oversize frame: %v", err)
	}
}
