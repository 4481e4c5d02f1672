package record

import (
	"bytes"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
)

// canonicalSamples are agent objects in canonical form that decodeCanonical
// reads itself: every member it knows, escapes, non-ASCII text, and the
// members it hands to jsonv2 (metadata, key_rotation, schemas, hints).
func canonicalSamples(t testing.TB) [][]byte {
	k := newKeys(t)
	full := benchAgent(k)
	full.Capabilities = map[string]string{"agent.ping": "1.0.0", "zeta": "2", "é": "ü"}
	full.Description = "quotes \" and \\ back\tslash, line\nbreak, \u0001 control, é, 😀, \u2028"
	full.Certificate = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
	full.TenantScope = "tenant-a"
	full.Skills[0].Scenes = []string{}
	full.Skills[1].Status = StatusDegraded
	full.KeyRotation = &KeyRotation{AgentID: full.AgentID, OldKey: "old", NewKey: "new", IssuedAt: "2026-03-01T12:00:00Z", Signature: "c2ln"}
	full.Metadata = map[string]any{"n": 1.5, "list": []any{"a", true, nil}, "obj": map[string]any{}}
	small := &Agent{AgentName: "word-other", Description: "six words", Tags: []string{"tag"},
		Capabilities: map[string]string{}, Transport: Transport{Type: "http", Endpoint: "http://127.0.0.1:9042"},
		Skills: []Skill{{SkillID: "s7", Version: "1.0.0", SkillType: SkillTool, Capabilities: []Capability{{ID: "cap.42", Version: "1.0.0"}}}}}
	small.Fill(testAgentID, k.peerID, k.pubPEM, 1, testNow, time.Hour)
	empty := &Agent{AgentID: testAgentID, Capabilities: map[string]string{}, Skills: []Skill{{SkillID: "s", Capabilities: []Capability{}}}, Tags: []string{}}
	var out [][]byte
	for _, a := range []*Agent{full, small, empty, sampleAgent(k)} {
		b, err := Canonicalize(a)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// checkCanonical fails unless decodeCanonical, when it reads b, decodes it
// as jsonv2.Unmarshal does, and unless the record it makes, once interned,
// keeps nothing of b. It reports whether decodeCanonical read b.
func checkCanonical(t *testing.T, b []byte) bool {
	t.Helper()
	own := bytes.Clone(b)
	var got Agent
	if !decodeCanonical(own, &got) {
		if !reflect.DeepEqual(got, Agent{}) {
			t.Fatalf("refused, but left a partial agent: %#v", got)
		}
		return false
	}
	var want Agent
	if err := jsonv2.Unmarshal(b, &want); err != nil {
		t.Fatalf("read what jsonv2 refuses (%v):\n%s", err, b)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded differently from jsonv2:\n%#v\n%#v\n%s", got, want, b)
	}
	got.intern()
	want.intern()
	clear(own)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("the interned record still points into the bytes it was read from:\n%#v\n%#v\n%s", got, want, b)
	}
	return true
}

// TestDecodeCanonical: canonical records take the fast path and agree with
// jsonv2; what the fast path does not read falls back, and FromStored
// still decodes it.
func TestDecodeCanonical(t *testing.T) {
	for i, b := range canonicalSamples(t) {
		if !checkCanonical(t, b) {
			t.Fatalf("sample %d: canonical record not read by decodeCanonical:\n%s", i, b)
		}
	}
	for _, b := range []string{
		`{"agent_name":"x","agent_id":"a"}`,                        // order
		`{"agent_id":"a","agent_id":"b"}`,                          // twice
		`{"agent_id":"a","unknown":1}`,                             // unknown member
		`{"agent_id":null}`,                                        // null
		`{"capabilities":null}`,                                    // null
		`{"agent_id": "a"}`,                                        // whitespace
		`{"agent_id":"a"} `,                                        // trailing
		`{"agent_id":"\ud83d\ude00"}`,                              // surrogates
		`{"agent_\u0069d":"a"}`,                                    // escaped name
		`{"seq":1.0}`,                                              // fraction
		`{"seq":-1}`,                                               // sign
		`{"seq":01}`,                                               // leading zero
		`{"seq":1234567890123456789}`,                              // 19 digits
		`{"capabilities":{"b":"1","a":"2"}}`,                       // key order
		`{"capabilities":{"a":"1","a":"2"}}`,                       // key twice
		`{"agent_id":"a` + "\xff" + `"}`,                           // invalid UTF-8
		`{"agent_id":"a` + "\n" + `"}`,                             // raw control
		`{"metadata":{"a":1,"a":2}}`,                               // handed over, refused there
		`{"skills":[{"capabilities":[{"confidence_hint":null}]}]}`, // null
		`{"transport":{"type":"x","endpoint":"y"}}`,                // order
	} {
		if checkCanonical(t, []byte(b)) {
			t.Errorf("read by decodeCanonical: %s", b)
		}
		// FromStored decodes it as it did before, or refuses it.
		got, err := FromStored(ProtocolVersion, []byte(b), "", "")
		var want Agent
		if werr := jsonv2.Unmarshal([]byte(b), &want); werr == nil && err == nil {
			want.intern()
			if !reflect.DeepEqual(got.Agent, want) {
				t.Errorf("FromStored decoded %s differently from jsonv2", b)
			}
		}
	}
}

// FuzzDecodeCanonical: whatever decodeCanonical reads, jsonv2 reads the
// same, and the interned record keeps none of the input's memory.
func FuzzDecodeCanonical(f *testing.F) {
	for _, b := range canonicalSamples(f) {
		f.Add(b)
	}
	f.Add([]byte(`{"agent_id":"a","tags":[],"skills":[]}`))
	f.Add([]byte(`{"skills":[{"capabilities":[{"input_schema":{"a":[1,{"b":"]"}]},"output_schema":"x"}]}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		checkCanonical(t, b)
	})
}

// BenchmarkDecodeCanonical: the fast path against jsonv2.Unmarshal, on the
// benchmark's typical record and on the bench-scale one.
func BenchmarkDecodeCanonical(b *testing.B) {
	samples := canonicalSamples(b)
	for _, s := range []struct {
		name string
		b    []byte
	}{{"typical", samples[0]}, {"small", samples[1]}} {
		b.Run(s.name+"/fast", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var a Agent
				if !decodeCanonical(s.b, &a) {
					b.Fatal("not read")
				}
			}
		})
		b.Run(s.name+"/jsonv2", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var a Agent
				if err := jsonv2.Unmarshal(s.b, &a); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestCanonicalFieldOrder: decodeCanonical's tables hold every member of
// their type (its json tags), in canonical order, each once.
func TestCanonicalFieldOrder(t *testing.T) {
	check := func(typ reflect.Type, names []string) {
		t.Helper()
		var want []string
		for f := range typ.Fields() {
			want = append(want, strings.Split(f.Tag.Get("json"), ",")[0])
		}
		slices.Sort(want)
		if !slices.Equal(names, want) {
			t.Errorf("%s: table %q, members %q", typ.Name(), names, want)
		}
	}
	check(reflect.TypeFor[Agent](), fieldNames(agentFields))
	check(reflect.TypeFor[Skill](), fieldNames(skillFields))
	check(reflect.TypeFor[Capability](), fieldNames(capabilityFields))
	check(reflect.TypeFor[Transport](), fieldNames(transportFields))
}

func fieldNames[T any](fields []field[T]) []string {
	var out []string
	for _, f := range fields {
		out = append(out, f.name)
	}
	return out
}
