package record

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/a2aproject/a2a-go/a2a"
)

// An A2A 0.3 card built with a2a-go's types, and the same agent as an A2A
// 1.0 card, map onto the same record; the card travels whole.
func TestA2ACardToAgent(t *testing.T) {
	card03 := a2a.AgentCard{
		Name: "Currency Agent", Description: "Converts currencies", Version: "1.2.0", ProtocolVersion: "0.3.0",
		URL: "https://fx.example/a2a", PreferredTransport: a2a.TransportProtocolJSONRPC,
		DefaultInputModes: []string{"text/plain"}, DefaultOutputModes: []string{"application/json"},
		Skills: []a2a.AgentSkill{
			{ID: "convert", Name: "Convert", Description: "Convert an amount between currencies", Tags: []string{"fx", "money"},
				Examples: []string{"100 USD in EUR"}, InputModes: []string{"text/plain"}},
			{ID: "rates", Name: "Rates", Description: "Today's rates", Tags: []string{"fx"}},
		},
	}
	raw03, err := json.Marshal(card03)
	if err != nil {
		t.Fatal(err)
	}
	raw10 := []byte(`{"name":"Currency Agent","description":"Converts currencies","version":"1.2.0",
		"supportedInterfaces":[{"url":"https://fx.example/a2a","protocolBinding":"JSONRPC","protocolVersion":"1.0"},
		                       {"url":"https://fx.example/grpc","protocolBinding":"GRPC","protocolVersion":"1.0"}],
		"capabilities":{"streaming":true},"defaultInputModes":["text/plain"],"defaultOutputModes":["application/json"],
		"skills":[{"id":"convert","name":"Convert","description":"Convert an amount between currencies","tags":["fx","money"],"examples":["100 USD in EUR"]},
		          {"id":"rates","name":"Rates","description":"Today's rates","tags":["fx"]}]}`)
	for name, raw := range map[string][]byte{"0.3": raw03, "1.0": raw10} {
		var m map[string]json.RawMessage
		_ = json.Unmarshal(raw, &m)
		if !IsA2ACard(m) {
			t.Fatalf("%s: not recognised as an A2A card", name)
		}
		a, err := A2ACardToAgent(raw)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if a.AgentName != "currency-agent" || a.Metadata[MetaDisplayName] != "Currency Agent" || a.Version != "1.2.0" ||
			a.Transport != (Transport{Type: "jsonrpc", Endpoint: "https://fx.example/a2a"}) {
			t.Fatalf("%s: %+v", name, a)
		}
		if len(a.Skills) != 2 || a.Skills[0].SkillID != "convert" || a.Skills[0].Capabilities[0].Description != "Convert an amount between currencies" ||
			!a.Offers("", "rates") || strings.Join(a.Tags, ",") != "fx,money" {
			t.Fatalf("%s: skills %+v tags %v", name, a.Skills, a.Tags)
		}
		// Nothing of the card is lost: it is in metadata, whole.
		got, _ := json.Marshal(a.Metadata[MetaA2ACard])
		var want, have any
		_ = json.Unmarshal(raw, &want)
		_ = json.Unmarshal(got, &have)
		if !reflect.DeepEqual(want, have) {
			t.Fatalf("%s: the card in metadata differs:\n%s\n%s", name, got, raw)
		}
		// It loads from a file the same way.
		if b, err := LoadAgentFile("card.json", raw); err != nil || b.AgentName != a.AgentName {
			t.Fatalf("%s: LoadAgentFile: %v", name, err)
		}
	}
	for _, bad := range []struct{ raw, field string }{
		{`{"name":"x","url":"https://a","skills":[{"id":"has space","name":"n","description":"d","tags":[]}]}`, "skills[0].id"},
		{`{"name":"x","url":"https://a","skills":[]}`, "skills"},
		{`{"name":"","url":"https://a","skills":[{"id":"s","name":"n","description":"d","tags":[]}]}`, "name"},
		{`{"name":"x","supportedInterfaces":[],"skills":[{"id":"s","name":"n","description":"d","tags":[]}]}`, "url"},
	} {
		_, err := A2ACardToAgent([]byte(bad.raw))
		var fe *FieldError
		if err == nil || !asFieldError(err, &fe) || fe.Field != bad.field {
			t.Errorf("%s: %v, want a %s error", bad.raw, err, bad.field)
		}
	}
}

func asFieldError(err error, fe **FieldError) bool {
	e, ok := err.(*FieldError)
	if ok {
		*fe = e
	}
	return ok
}
