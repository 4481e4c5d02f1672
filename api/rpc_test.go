package api

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/record"
)

// seedFile reads an example of the design documents kept by package record.
func seedFile(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "record", "testdata", "seeds", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type rpcResp struct {
	JSONRPC string          `json:"jsonrpc"`
	Result  json.RawMessage `json:"result"`
	Error   *RPCError       `json:"error"`
	ID      json.RawMessage `json:"id"`
}

func (a *tapi) rpc(t testing.TB, body any) rpcResp {
	t.Helper()
	r := mustStatus(t, a.do("POST", "/rpc", body), 200)
	var out rpcResp
	r.json(t, &out)
	if out.JSONRPC != "2.0" {
		t.Fatalf("jsonrpc %q in %s", out.JSONRPC, r.body)
	}
	if (out.Error == nil) == (out.Result == nil) {
		t.Fatalf("exactly one of result and error must be set: %s", r.body)
	}
	return out
}

func call(id any, method string, params any) map[string]any {
	m := map[string]any{"jsonrpc": "2.0", "method": method, "params": params}
	if id != nil {
		m["id"] = id
	}
	return m
}

func TestRPCSeed002Flow(t *testing.T) {
	a := newAPI(t, Config{})
	card := json.RawMessage(seedFile(t, "002-agent-card.json"))
	before := time.Now()
	resp := a.rpc(t, call("req-001", MethodRegister, map[string]any{"agent_card": card, "endpoint_url": "http://agent.example.com/rtfs", "ttl_seconds": 3600}))
	if resp.Error != nil {
		t.Fatalf("register: %+v", resp.Error)
	}
	if string(resp.ID) != `"req-001"` {
		t.Fatalf("id %s", resp.ID)
	}
	var rr RegisterResult
	if err := json.Unmarshal(resp.Result, &rr); err != nil {
		t.Fatal(err)
	}
	exp, err := time.Parse(time.RFC3339, rr.ExpiresAt)
	if err != nil || rr.Status != "registered" || rr.AgentID != "unique-agent-identifier-123" {
		t.Fatalf("result %+v (%v)", rr, err)
	}
	if exp.Before(before.Add(3599*time.Second)) || exp.After(time.Now().Add(3601*time.Second)) {
		t.Fatalf("expires_at %s is not now + 3600 s", rr.ExpiresAt)
	}
	if until, ok := a.n.LeaseOf(rr.AgentUUID); !ok || until.Sub(exp).Abs() > time.Second {
		t.Fatalf("lease %v %v", until, ok)
	}

	want, err := record.ParseAgentCard(card)
	if err != nil {
		t.Fatal(err)
	}
	queries := []map[string]any{
		{"capability_id": "csv_processing"},
		{"agent_id": "unique-agent-identifier-123"},
		{"discovery_tags": []string{"data-processing", "images"}},
		{"discovery_query": map[string]any{"text_search": "analyzes datasets"}},
		{"discovery_query": map[string]any{"owner": "DataTeam"}},
		{"version_constraint": ">=1.2.0 <2.0.0", "limit": 10},
		{"capability_id": "image_resizing", "discovery_tags": []string{"images"}, "version_constraint": "^1.2"},
	}
	for _, q := range queries {
		resp := a.rpc(t, call("req-002", MethodDiscover, q))
		if resp.Error != nil {
			t.Fatalf("discover %v: %+v", q, resp.Error)
		}
		var dr struct {
			Agents []json.RawMessage `json:"agents"`
		}
		if err := json.Unmarshal(resp.Result, &dr); err != nil || len(dr.Agents) != 1 {
			t.Fatalf("discover %v: %s", q, resp.Result)
		}
		got, err := record.ParseAgentCard(dr.Agents[0])
		if err != nil {
			t.Fatalf("returned card does not parse: %v", err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("discover %v returned\n%+v\nwant the registered card\n%+v", q, got, want)
		}
	}
	// No match is an empty list, not an error.
	for _, q := range []map[string]any{
		{"capability_id": "nothing"},
		{"discovery_query": map[string]any{"owner": "OtherTeam"}},
		{"version_constraint": ">=2.0.0"},
		{"discovery_tags": []string{"data-processing", "absent"}},
	} {
		resp := a.rpc(t, call(2, MethodDiscover, q))
		if resp.Error != nil || string(resp.Result) != `{"agents":[]}` {
			t.Fatalf("discover %v: %s %+v", q, resp.Result, resp.Error)
		}
	}

	// Heartbeat renews the lease.
	resp = a.rpc(t, call(3, MethodHeartbeat, map[string]any{"agent_id": "unique-agent-identifier-123", "ttl_seconds": 60, "status": "DEGRADED"}))
	var hb HeartbeatResult
	if resp.Error != nil || json.Unmarshal(resp.Result, &hb) != nil || hb.Health != record.StatusDegraded {
		t.Fatalf("heartbeat %s %+v", resp.Result, resp.Error)
	}
	if until, _ := a.n.LeaseOf(rr.AgentUUID); until.After(time.Now().Add(61 * time.Second)) {
		t.Fatalf("lease not renewed to 60 s: %v", until)
	}

	// Deregister, then again.
	resp = a.rpc(t, call(4, MethodDeregister, map[string]any{"agent_id": "unique-agent-identifier-123"}))
	if resp.Error != nil || !strings.Contains(string(resp.Result), `"deregistered"`) {
		t.Fatalf("deregister %s %+v", resp.Result, resp.Error)
	}
	resp = a.rpc(t, call(5, MethodDeregister, map[string]any{"agent_id": "unique-agent-identifier-123"}))
	if resp.Error == nil || resp.Error.Code != RPCNotFound || resp.Error.Data.Field != "agent_id" {
		t.Fatalf("second deregister %+v", resp.Error)
	}
	resp = a.rpc(t, call(6, MethodHeartbeat, map[string]any{"agent_id": "unique-agent-identifier-123"}))
	if resp.Error == nil || resp.Error.Code != RPCNotFound {
		t.Fatalf("heartbeat after deregister %+v", resp.Error)
	}
}

func TestRPCTTLExpires(t *testing.T) {
	a := newAPI(t, Config{})
	var card map[string]any
	_ = json.Unmarshal(seedFile(t, "002-agent-card.json"), &card)
	resp := a.rpc(t, call(1, MethodRegister, map[string]any{"agent_card": card, "ttl_seconds": 1}))
	if resp.Error != nil {
		t.Fatal(resp.Error)
	}
	var rr RegisterResult
	_ = json.Unmarshal(resp.Result, &rr)
	if _, ok := a.n.View().Get(rr.AgentUUID); !ok {
		t.Fatal("not registered")
	}
	waitFor(t, 5*time.Second, "the registration to expire", func() bool {
		_, ok := a.n.View().Get(rr.AgentUUID)
		return !ok
	})
	resp = a.rpc(t, call(2, MethodDiscover, map[string]any{"capability_id": "csv_processing"}))
	if string(resp.Result) != `{"agents":[]}` {
		t.Fatalf("expired agent still found: %s", resp.Result)
	}
}

func TestRPCBatchAndErrors(t *testing.T) {
	a := newAPI(t, Config{})
	card := json.RawMessage(seedFile(t, "002-agent-card.json"))
	batch := []any{
		call("a", MethodRegister, map[string]any{"agent_card": card}),
		call(nil, MethodHeartbeat, map[string]any{"agent_id": "unique-agent-identifier-123"}), // notification
		call("b", MethodDiscover, map[string]any{"capability_id": "csv_processing"}),
		call("c", "rtfs.registry.nope", map[string]any{}),
		map[string]any{"jsonrpc": "1.0", "method": MethodDiscover, "id": "d"},
		call("e", MethodDiscover, []any{"csv_processing"}),
		42,
	}
	r := mustStatus(t, a.do("POST", "/rpc", batch), 200)
	var out []rpcResp
	r.json(t, &out)
	if len(out) != 6 {
		t.Fatalf("%d responses, want 6 (the notification gets none): %s", len(out), r.body)
	}
	byID := map[string]rpcResp{}
	for _, o := range out {
		byID[string(o.ID)] = o
	}
	if byID[`"a"`].Error != nil || byID[`"b"`].Error != nil || !strings.Contains(string(byID[`"b"`].Result), "csv_processing") {
		t.Fatalf("a/b: %s", r.body)
	}
	for id, code := range map[string]int{`"c"`: RPCMethodNotFound, `"d"`: RPCInvalidRequest, `"e"`: RPCInvalidParams, "null": RPCInvalidRequest} {
		if e := byID[id].Error; e == nil || e.Code != code {
			t.Errorf("%s: %+v, want code %d", id, e, code)
		}
	}

	cases := []struct {
		name  string
		body  string
		code  int
		field string
	}{
		{"parse error", `{"jsonrpc":"2.0","method":`, RPCParseError, ""},
		{"bad utf-8", "{\"jsonrpc\":\"2.0\",\"method\":\"\xff\",\"id\":1}", RPCParseError, ""},
		{"duplicate key", `{"jsonrpc":"2.0","jsonrpc":"2.0","method":"x","id":1}`, RPCParseError, ""},
		{"empty batch", `[]`, RPCInvalidRequest, ""},
		{"no method", `{"jsonrpc":"2.0","id":1}`, RPCInvalidRequest, "method"},
		{"object id", `{"jsonrpc":"2.0","method":"x","id":{}}`, RPCInvalidRequest, "id"},
		{"missing card", `{"jsonrpc":"2.0","method":"rtfs.registry.register","params":{},"id":1}`, RPCInvalidParams, "agent_card"},
		{"unknown param", `{"jsonrpc":"2.0","method":"rtfs.registry.discover","params":{"capability":"x"},"id":1}`, RPCInvalidParams, "capability"},
		{"wrong type", `{"jsonrpc":"2.0","method":"rtfs.registry.discover","params":{"limit":"ten"},"id":1}`, RPCInvalidParams, "limit"},
		{"ttl", `{"jsonrpc":"2.0","method":"rtfs.registry.register","params":{"agent_card":{},"ttl_seconds":0},"id":1}`, RPCInvalidParams, "ttl_seconds"},
		{"bad constraint", `{"jsonrpc":"2.0","method":"rtfs.registry.discover","params":{"version_constraint":"!!bad"},"id":1}`, RPCInvalidParams, "version_constraint"},
		// Seed 002's error example: a failed registration is -32001 and
		// names the field.
		{"card without name", `{"jsonrpc":"2.0","method":"rtfs.registry.register","params":{"agent_card":{"agent_id":"a-1","capabilities":[],"communication":{"endpoints":[{"protocol":"http","uri":"http://x"}]}}},"id":"req-001"}`, RPCRegistrationFailed, "agent_card.name"},
		{"card without endpoints", `{"jsonrpc":"2.0","method":"rtfs.registry.register","params":{"agent_card":{"agent_id":"a-1","name":"A"}},"id":"req-001"}`, RPCRegistrationFailed, "agent_card.communication.endpoints"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp := a.rpc(t, tc.body)
			if resp.Error == nil || resp.Error.Code != tc.code {
				t.Fatalf("%+v, want code %d", resp.Error, tc.code)
			}
			if tc.field != "" && (resp.Error.Data == nil || resp.Error.Data.Field != tc.field || !strings.Contains(resp.Error.Message, strings.TrimPrefix(tc.field, "agent_card."))) {
				t.Fatalf("error %+v %+v does not name %s", resp.Error, resp.Error.Data, tc.field)
			}
		})
	}
	// A batch of notifications only is answered with 204.
	mustStatus(t, a.do("POST", "/rpc", []any{call(nil, MethodDiscover, map[string]any{})}), 204)
}
