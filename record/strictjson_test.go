package record

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// The member-name walk: names that differ from a field's only in case are
// refused at any depth, with the path of the member; with known, members
// the type does not have are refused too; what is not JSON, or not of the
// expected shape, is left to json.Unmarshal.
func TestCheckMembers(t *testing.T) {
	at := reflect.TypeOf(Agent{})
	for _, c := range []struct {
		name, doc string
		known     bool
		field     string // "" = no error
	}{
		{"exact names", `{"agent_id":"a","skills":[{"skill_id":"s","capabilities":[{"id":"c"}]}],"metadata":{"Any":1}}`, false, ""},
		{"top level", `{"Agent_ID":"a"}`, false, "Agent_ID"},
		{"in an array of structs", `{"skills":[{"skill_id":"s"},{"skill_id":"t","capabilities":[{"id":"c"},{"ID":"d"}]}]}`, false, "skills[1].capabilities[1].ID"},
		{"in a nested struct", `{"transport":{"Endpoint":"x"}}`, false, "transport.Endpoint"},
		{"maps take anything", `{"metadata":{"Agent_ID":{"X":1}},"capabilities":{"A":"b"}}`, true, ""},
		{"unknown ignored", `{"nickname":"x","skills":[{"extra":[1,{"a":2}]}]}`, false, ""},
		{"unknown refused when known", `{"skills":[{"skill_id":"s","extra":1}]}`, true, "skills[0].extra"},
		{"wrong shapes are json's to report", `{"skills":{"Skill_ID":1},"transport":"x","key_rotation":null}`, false, ""},
		{"not JSON", `{"Agent_ID":"a",`, false, ""},
		{"not JSON after the error", `{"Agent_ID":"a"} x`, false, ""},
		{"escaped names", `{"agent\u005fid":"a","AGENT\u005fID":"b"}`, false, "AGENT_ID"},
	} {
		err := CheckKnownMembers([]byte(c.doc), at, "agent")
		if !c.known {
			err = checkMemberCase([]byte(c.doc), at, "agent")
		}
		var fe *FieldError
		switch {
		case c.field == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.field != "" && !errors.As(err, &fe):
			t.Errorf("%s: err = %v, want a field error", c.name, err)
		case c.field != "" && fe.Field != "agent."+c.field:
			t.Errorf("%s: field %q, want %q", c.name, fe.Field, "agent."+c.field)
		}
	}
}

// BenchmarkCheckKnownMembers walks a valid registration's members: no path
// strings are built unless a member is refused.
func BenchmarkCheckKnownMembers(b *testing.B) {
	doc := []byte(`{"agent_id":"a","agent_name":"n","description":"d","skills":[` +
		`{"skill_id":"s1","version":"1.0.0","capabilities":[{"id":"c1","version":"1.0.0"},{"id":"c2","version":"1.0.0"}]},` +
		`{"skill_id":"s2","version":"1.0.0","capabilities":[{"id":"c3","version":"1.0.0"}]}],` +
		`"transport":{"type":"http","endpoint":"http://x"},"metadata":{"k":"v"}}`)
	at := reflect.TypeOf(Agent{})
	b.ReportAllocs()
	for b.Loop() {
		if err := CheckKnownMembers(doc, at, "agent"); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzCheckMembers: any input is walked without a panic, the same way
// twice, and a refused member is named under the root path given.
func FuzzCheckMembers(f *testing.F) {
	for _, s := range []string{
		`{"agent_id":"a","skills":[{"skill_id":"s","capabilities":[{"id":"c"},{"ID":"d"}]}]}`,
		`{"agent\u005fid":"a","AGENT\u005fID":"b"}`,
		`{"skills":[{"skill_id":"s","extra":1}]}`,
		`{"transport":{"Endpoint":"x"}}`,
		`{"skills":{"Skill_ID":1}}`,
		`[`, `{"a":`, `{"\ud800":1}`,
	} {
		f.Add([]byte(s), true)
	}
	at := reflect.TypeOf(Agent{})
	f.Fuzz(func(t *testing.T, doc []byte, known bool) {
		check := func() error {
			if known {
				return CheckKnownMembers(doc, at, "agent")
			}
			return checkMemberCase(doc, at, "agent")
		}
		err := check()
		if again := check(); (err == nil) != (again == nil) || (err != nil && err.Error() != again.Error()) {
			t.Fatalf("two walks disagree: %v, then %v", err, again)
		}
		var fe *FieldError
		if errors.As(err, &fe) && fe.Field != "agent" && !strings.HasPrefix(fe.Field, "agent.") {
			t.Fatalf("field %q is not under the root path", fe.Field)
		}
	})
}
