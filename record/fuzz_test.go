package record

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// One fuzz target per parser. Each asserts, beyond "no panic", that an
// accepted input re-encodes to something the parser accepts again with the
// same value (or the same canonical bytes). The seed corpora are checked in
// under testdata/fuzz/<Target>; regenerate them with
//
//	go test ./record -run TestFuzzCorpus -write-fuzz-corpus

func FuzzParseAnnounce(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		sa, newer, err := ParseAnnounce(data)
		if err != nil {
			return
		}
		msg := sa.MarshalAnnounce()
		sa2, newer2, err := ParseAnnounce(msg)
		if err != nil {
			t.Fatalf("re-encoded announce refused: %v\n%s", err, msg)
		}
		if !bytes.Equal(sa.Canonical(), sa2.Canonical()) || !bytes.Equal(sa.Signature, sa2.Signature) ||
			!bytes.Equal(sa.PeerSignature, sa2.PeerSignature) || sa.ProtocolVersion != sa2.ProtocolVersion || newer != newer2 {
			t.Fatalf("announce changed on a round trip")
		}
		if err := ValidateSchema(SchemaAnnounce, msg); err != nil {
			t.Fatalf("accepted announce does not conform to the schema: %v\n%s", err, msg)
		}
		if c, _ := Canonicalize(sa.Agent); len(c) == 0 {
			t.Fatal("accepted agent does not canonicalize")
		}
	})
}

// FuzzParseAnnounceUnbound: what the unbound parser accepts is either a
// bound record that ParseAnnounce accepts identically, or an unbound one
// (no peer_id, no peer_signature) that round-trips, conforms to the
// Announce schema, and stamps into a record with seq, issued_at and
// ttl_seconds whose canonical bytes and signature validity are unchanged.
func FuzzParseAnnounceUnbound(f *testing.F) {
	f.Add(unboundAnnounce(f, true))
	f.Add(unboundAnnounce(f, false))
	f.Fuzz(func(t *testing.T, data []byte) {
		sa, _, err := ParseAnnounceUnbound(data)
		if IsSignedAnnounce(data) && !IsAnnounce(data) {
			t.Fatal("a signed Announce that is not an Announce")
		}
		if err != nil {
			return
		}
		if !IsSignedAnnounce(data) {
			// agentd register and register_agent would load it as an agent
			// description and sign it anew instead of sending it as signed.
			t.Fatal("an Announce the parser accepts is not recognised as signed")
		}
		if !sa.Unbound() {
			strict, _, err := ParseAnnounce(data)
			if err != nil || !bytes.Equal(strict.Canonical(), sa.Canonical()) || !bytes.Equal(strict.PeerSignature, sa.PeerSignature) {
				t.Fatalf("a bound record the strict parser refuses (%v)", err)
			}
			return
		}
		if len(sa.PeerSignature) > 0 {
			t.Fatal("unbound record with a peer signature")
		}
		msg := sa.MarshalAnnounce()
		again, _, err := ParseAnnounceUnbound(msg)
		if err != nil || !bytes.Equal(again.Canonical(), sa.Canonical()) || !bytes.Equal(again.Signature, sa.Signature) {
			t.Fatalf("re-encoded unbound announce: %v\n%s", err, msg)
		}
		if err := ValidateSchema(SchemaAnnounce, msg); err != nil {
			t.Fatalf("accepted announce does not conform to the schema: %v\n%s", err, msg)
		}
		pub, err := ParsePublicKeyPEM(sa.Agent.PublicKey)
		if err != nil {
			t.Fatalf("accepted public key does not parse: %v", err)
		}
		before := verifyBytesAnyS(pub, sa.Canonical(), sa.Signature)
		st, err := sa.StampUnbound(time.Unix(1_700_000_000, 0), time.Hour)
		if err != nil {
			return // a signature that is not DER, say: VerifySignatures refuses it too
		}
		if !bytes.Equal(st.Canonical(), sa.Canonical()) || st.Agent.Seq == 0 || st.Agent.IssuedAt == "" || st.Agent.TTLSeconds <= 0 {
			t.Fatalf("stamped: %+v", st.Agent)
		}
		if after := st.VerifySignatures() == nil; after != before {
			t.Fatalf("the stamped record verifies %v, the signature (either S) %v", after, before)
		}
	})
}

// FuzzParseStoredAnnounce: whatever ParseAnnounce accepts, written as the
// store writes it (MarshalAnnounce), the stored-record fast path reads back
// identically; and on any input the fast path never panics nor accepts an
// agent object that fails validation.
func FuzzParseStoredAnnounce(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		if sa, err := ParseStoredAnnounce(data); err == nil {
			if err := sa.validate(sa.Unbound()); err != nil {
				t.Fatalf("fast path accepted an invalid agent: %v", err)
			}
		}
		sa, _, err := ParseAnnounce(data)
		if err != nil {
			return
		}
		msg := sa.MarshalAnnounce()
		st, err := ParseStoredAnnounce(msg)
		if err != nil {
			t.Fatalf("stored form refused by the fast path: %v\n%s", err, msg)
		}
		if !bytes.Equal(sa.Canonical(), st.Canonical()) || !bytes.Equal(sa.Signature, st.Signature) ||
			!bytes.Equal(sa.PeerSignature, st.PeerSignature) || sa.ProtocolVersion != st.ProtocolVersion {
			t.Fatal("fast path read a different record")
		}
		c1, _ := Canonicalize(&sa.Agent)
		c2, _ := Canonicalize(&st.Agent)
		if !bytes.Equal(c1, c2) {
			t.Fatalf("fast path decoded a different agent:\n%s\n%s", c1, c2)
		}
	})
}

func FuzzParseQuery(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		q, _, err := ParseQuery(data)
		if err != nil {
			return
		}
		b, err := json.Marshal(q)
		if err != nil {
			t.Fatal(err)
		}
		q2, _, err := ParseQuery(b)
		if err != nil {
			t.Fatalf("re-encoded query refused: %v\n%s", err, b)
		}
		if !reflect.DeepEqual(q, q2) {
			t.Fatalf("query changed on a round trip: %+v / %+v", q, q2)
		}
		if err := ValidateSchema(SchemaQuery, b); err != nil {
			t.Fatalf("accepted query does not conform to the schema: %v\n%s", err, b)
		}
	})
}

func FuzzParseResponse(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		sa, matched, err := ParseResponse(data)
		if err != nil {
			return
		}
		b, err := json.Marshal(NewResponse(sa, matched))
		if err != nil {
			t.Fatal(err)
		}
		sa2, matched2, err := ParseResponse(b)
		if err != nil {
			t.Fatalf("re-encoded response refused: %v\n%s", err, b)
		}
		if matched != matched2 || !bytes.Equal(sa.Canonical(), sa2.Canonical()) || !bytes.Equal(sa.Signature, sa2.Signature) {
			t.Fatal("response changed on a round trip")
		}
		if err := ValidateSchema(SchemaResponse, b); err != nil {
			t.Fatalf("accepted response does not conform to the schema: %v\n%s", err, b)
		}
	})
}

func FuzzParseWireBeat(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		sb, err := DecodeWireBeat(data)
		if err != nil {
			return
		}
		b, err := json.Marshal(sb.Wire())
		if err != nil {
			t.Fatal(err)
		}
		sb2, err := DecodeWireBeat(b)
		if err != nil {
			t.Fatalf("re-encoded beat refused: %v\n%s", err, b)
		}
		if sb.Beat != sb2.Beat || !bytes.Equal(sb.Canonical, sb2.Canonical) || !bytes.Equal(sb.Signature, sb2.Signature) {
			t.Fatal("beat changed on a round trip")
		}
		// The canonical bytes are what was signed, unknown members
		// included; they need not equal the canonical form of the struct.
		if err := sb.Beat.Validate(); err != nil {
			t.Fatalf("accepted beat is invalid: %v", err)
		}
	})
}

func FuzzParseSkillMessage(f *testing.F) {
	f.Fuzz(func(t *testing.T, line string) {
		m, err := ParseSkillMessage(line)
		if err != nil {
			return
		}
		out, err := m.Format()
		if err != nil {
			t.Fatalf("accepted message does not format: %v", err)
		}
		want := strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
		if !strings.HasSuffix(line, "\n") {
			want = line
		}
		if out != want {
			t.Fatalf("Format(Parse(x)) != x:\n%q\n%q", out, want)
		}
		m2, err := ParseSkillMessage(out)
		if err != nil || !reflect.DeepEqual(m, m2) {
			t.Fatalf("re-parse: %v", err)
		}
		if m.Type.Signed() {
			text, err := m.SignedText()
			if err != nil || out != text+";"+m.Signature {
				t.Fatalf("signed text %q is not the line without its signature", text)
			}
		}
	})
}

func FuzzAgentCard(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseAgentCard(data)
		if err != nil {
			return
		}
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		c2, err := ParseAgentCard(b)
		if err != nil {
			t.Fatalf("re-encoded card refused: %v\n%s", err, b)
		}
		c1b, _ := Canonicalize(c)
		c2b, _ := Canonicalize(c2)
		if !bytes.Equal(c1b, c2b) {
			t.Fatalf("card changed on a round trip:\n%s\n%s", c1b, c2b)
		}
		a, err := c.ToAgent()
		if err != nil {
			t.Fatalf("valid card does not convert: %v\n%s", err, b)
		}
		back := CardFromAgent(a)
		if err := back.Validate(); err != nil {
			t.Fatalf("card from the converted agent is invalid: %v", err)
		}
		bb, _ := Canonicalize(back)
		if !bytes.Equal(bb, c1b) {
			t.Fatalf("card → agent → card differs:\n%s\n%s", c1b, bb)
		}
	})
}

func FuzzWSFrame(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		fr, err := ParseWSFrame(data)
		if err != nil {
			return
		}
		b, err := MarshalWSFrame(fr)
		if err != nil {
			t.Fatalf("accepted frame does not marshal: %v", err)
		}
		fr2, err := ParseWSFrame(b)
		if err != nil {
			t.Fatalf("re-encoded frame refused: %v\n%s", err, b)
		}
		if !reflect.DeepEqual(fr, fr2) {
			t.Fatalf("frame changed on a round trip: %#v / %#v", fr, fr2)
		}
		if r, ok := fr.(*WSRegister); ok {
			if _, err := r.ToAgent(); err != nil {
				t.Fatalf("valid register does not convert: %v", err)
			}
		}
	})
}

func FuzzAgentSpec(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseAgentSpec(data)
		if err != nil {
			return
		}
		doc, err := s.MarshalYAMLDoc()
		if err != nil {
			t.Fatal(err)
		}
		s2, err := ParseAgentSpec(doc)
		if err != nil {
			t.Fatalf("re-encoded spec refused: %v\n%s", err, doc)
		}
		j1, _ := Canonicalize(s)
		j2, _ := Canonicalize(s2)
		if !bytes.Equal(j1, j2) {
			t.Fatalf("spec changed on a round trip:\n%s\n%s", j1, j2)
		}
		a1, err := s.ToAgent()
		if err != nil {
			t.Fatalf("valid spec does not convert: %v", err)
		}
		a2, err := s2.ToAgent()
		if err != nil {
			t.Fatal(err)
		}
		c1, _ := Canonicalize(a1)
		c2, _ := Canonicalize(a2)
		if !bytes.Equal(c1, c2) {
			t.Fatalf("records differ:\n%s\n%s", c1, c2)
		}
	})
}

var loadFileNames = []string{"agent.yaml", "agent.json", "agent"}

func FuzzLoadAgentFile(f *testing.F) {
	f.Fuzz(func(t *testing.T, which uint8, data []byte) {
		name := loadFileNames[int(which)%len(loadFileNames)]
		a, err := LoadAgentFile(name, data)
		if err != nil {
			if FieldOf(err) == "" && !strings.Contains(err.Error(), name) {
				t.Fatalf("error names neither a field nor the file: %v", err)
			}
			return
		}
		if err := a.ValidateContent(); err != nil {
			t.Fatalf("loaded agent is invalid: %v", err)
		}
		b, err := json.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		a2, err := LoadAgentFile("again.json", b)
		if err != nil {
			t.Fatalf("re-encoded agent refused: %v\n%s", err, b)
		}
		c1, _ := Canonicalize(a)
		c2, _ := Canonicalize(a2)
		if !bytes.Equal(c1, c2) {
			t.Fatalf("agent changed on a round trip:\n%s\n%s", c1, c2)
		}
	})
}

var writeFuzzCorpus = flag.Bool("write-fuzz-corpus", false, "rewrite the seed corpora under testdata/fuzz")

var fuzzTargets = []string{"FuzzParseAnnounce", "FuzzParseQuery", "FuzzParseResponse", "FuzzParseWireBeat",
	"FuzzParseSkillMessage", "FuzzAgentCard", "FuzzWSFrame", "FuzzAgentSpec", "FuzzLoadAgentFile"}

// TestFuzzCorpus checks that every fuzz target has a checked-in seed
// corpus, that every entry is in the "go test fuzz v1" format, and that
// the seeds include inputs the parser accepts (so the round-trip invariant
// is exercised, not only the refusals). With -write-fuzz-corpus it writes
// the seeds.
func TestFuzzCorpus(t *testing.T) {
	if *writeFuzzCorpus {
		writeSeeds(t)
	}
	accept := map[string]func(args []any) bool{
		"FuzzParseAnnounce": func(a []any) bool { _, _, err := ParseAnnounce(a[0].([]byte)); return err == nil },
		"FuzzParseQuery":    func(a []any) bool { _, _, err := ParseQuery(a[0].([]byte)); return err == nil },
		"FuzzParseResponse": func(a []any) bool { _, _, err := ParseResponse(a[0].([]byte)); return err == nil },
		"FuzzParseWireBeat": func(a []any) bool { _, err := DecodeWireBeat(a[0].([]byte)); return err == nil },
		"FuzzParseSkillMessage": func(a []any) bool {
			_, err := ParseSkillMessage(a[0].(string))
			return err == nil
		},
		"FuzzAgentCard": func(a []any) bool { _, err := ParseAgentCard(a[0].([]byte)); return err == nil },
		"FuzzWSFrame":   func(a []any) bool { _, err := ParseWSFrame(a[0].([]byte)); return err == nil },
		"FuzzAgentSpec": func(a []any) bool { _, err := ParseAgentSpec(a[0].([]byte)); return err == nil },
		"FuzzLoadAgentFile": func(a []any) bool {
			_, err := LoadAgentFile(loadFileNames[int(a[0].(uint8))%len(loadFileNames)], a[1].([]byte))
			return err == nil
		},
	}
	for _, target := range fuzzTargets {
		files, err := filepath.Glob(filepath.Join("testdata", "fuzz", target, "*"))
		if err != nil || len(files) == 0 {
			t.Errorf("%s has no checked-in seed corpus (%v)", target, err)
			continue
		}
		accepted := 0
		for _, file := range files {
			args, err := readCorpusFile(file)
			if err != nil {
				t.Errorf("%s: %v", file, err)
				continue
			}
			if accept[target](args) {
				accepted++
			}
		}
		if accepted == 0 {
			t.Errorf("%s: no seed is accepted by the parser", target)
		}
	}
}

// readCorpusFile parses the "go test fuzz v1" format for the value kinds
// the targets use ([]byte, string, uint8).
func readCorpusFile(path string) ([]any, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) < 2 || lines[0] != "go test fuzz v1" {
		return nil, fmt.Errorf("not a go test fuzz v1 file")
	}
	var out []any
	for _, l := range lines[1:] {
		switch {
		case strings.HasPrefix(l, "[]byte(") && strings.HasSuffix(l, ")"):
			s, err := strconv.Unquote(l[len("[]byte(") : len(l)-1])
			if err != nil {
				return nil, fmt.Errorf("%q: %v", l, err)
			}
			out = append(out, []byte(s))
		case strings.HasPrefix(l, "string(") && strings.HasSuffix(l, ")"):
			s, err := strconv.Unquote(l[len("string(") : len(l)-1])
			if err != nil {
				return nil, fmt.Errorf("%q: %v", l, err)
			}
			out = append(out, s)
		case strings.HasPrefix(l, "byte(") && strings.HasSuffix(l, ")"):
			s, err := strconv.Unquote(l[len("byte(") : len(l)-1])
			r, size := utf8.DecodeRuneInString(s)
			if err != nil || size != len(s) || r > 0xff {
				return nil, fmt.Errorf("%q: not a byte", l)
			}
			out = append(out, uint8(r))
		case strings.HasPrefix(l, "uint8(") && strings.HasSuffix(l, ")"):
			n, err := strconv.ParseUint(l[len("uint8("):len(l)-1], 10, 8)
			if err != nil {
				return nil, fmt.Errorf("%q: %v", l, err)
			}
			out = append(out, uint8(n))
		default:
			return nil, fmt.Errorf("unsupported corpus line %q", l)
		}
	}
	return out, nil
}

func corpusValue(v any) string {
	switch x := v.(type) {
	case []byte:
		return "[]byte(" + strconv.Quote(string(x)) + ")"
	case string:
		return "string(" + strconv.Quote(x) + ")"
	case uint8:
		return "byte(" + strconv.QuoteRune(rune(x)) + ")"
	}
	panic(fmt.Sprintf("corpus value %T", v))
}

func writeSeeds(t *testing.T) {
	k := newKeys(t)
	sa := signedSample(t, k)
	announce := sa.MarshalAnnounce()
	resp, _ := json.Marshal(NewResponse(sa, true))
	beat, err := SignBeat(Beat{AgentID: testAgentID, PeerID: k.peerID, Seq: 9, Status: StatusHealthy, Timestamp: testNow.UnixMilli(), IntervalMS: 5000}, k.agent)
	if err != nil {
		t.Fatal(err)
	}
	beatJSON, _ := json.Marshal(beat.Wire())
	msgs, _ := os.ReadFile("testdata/seeds/001-messages.txt")
	spec1, _ := os.ReadFile("testdata/seeds/004-product-search-agent.yaml")
	spec2, _ := os.ReadFile("testdata/seeds/004-coordinator-agent.yaml")
	card, _ := os.ReadFile("testdata/seeds/002-agent-card.json")
	minimal := []byte(minimalSpec + "skills:\n  - skill_id: s2\n    version: 1.0.0\n    skill_type: tool-skill\n    capabilities: [{id: x, input_schema: {type: object}}]\n")
	q, _ := json.Marshal(Query{ProtocolVersion: "v1.2", Query: QueryBody{Capability: "org-data-read", Skill: "s", Tags: []string{"a"}, Version: ">=1.0.0", Limit: 3}})

	seeds := map[string][][]any{
		"FuzzParseAnnounce": {{announce}, {bytes.Replace(announce, []byte(`"v1.0"`), []byte(`"v1.7"`), 1)},
			{[]byte(`{"protocol_version":"v1.0","agent":{"capabilities":{}}}`)}, {[]byte(`{"protocol_version":"v2.0","agent":{}}`)}},
		"FuzzParseQuery":    {{q}, {[]byte(`{"protocol_version":"v1.0","query":{"capability":"metrics"}}`)}, {[]byte(`{"protocol_version":"v1.0","query":{}}`)}},
		"FuzzParseResponse": {{resp}, {[]byte(`{"protocol_version":"v1.0","agent":{},"matched":false}`)}},
		"FuzzParseWireBeat": {{beatJSON}, {[]byte(`{"beat":{"agent_id":"x"},"signature":""}`)}},
		"FuzzAgentCard":     {{card}, {[]byte(`{"agent_id":"` + testAgentID + `","name":"n","capabilities":[{"capability_id":"c","input_schema_ref":{"type":"object"}}],"communication":{"endpoints":[{"protocol":"ws","uri":"wss://h"}]}}`)}},
		"FuzzWSFrame": {{[]byte(`{"type":"register","id":"agent-1","name":"Code Assistant","endpoint":"http://127.0.0.1:3000"}`)},
			{[]byte(`{"type":"registered","id":"agent-1"}`)}, {[]byte(`{"type":"list"}`)},
			{[]byte(`{"type":"agents","agents":[{"id":"agent-1","name":"Code Assistant","endpoint":"http://127.0.0.1:3000","registered_at":"2025-01-31T12:00:00Z"}]}`)},
			{[]byte(`{"type":"error","code":"ErrMalformedPayload","message":"m","field":"id"}`)}, {[]byte(`{"type":"ping","id":"a"}`)}},
		"FuzzAgentSpec":     {{spec1}, {spec2}, {minimal}, {[]byte("agent_type: a\nversion: 1.0.0\n")}},
		"FuzzLoadAgentFile": {{uint8(0), spec1}, {uint8(1), announce}, {uint8(1), card}, {uint8(2), sa.Canonical}, {uint8(0), minimal}},
	}
	for _, line := range strings.Split(strings.TrimSpace(string(msgs)), "\n") {
		seeds["FuzzParseSkillMessage"] = append(seeds["FuzzParseSkillMessage"], []any{line})
	}
	for _, m := range []SkillMessage{
		{Type: MsgSkillRegisterAck, AgentID: "agent-001", Ack: AckSuccess, Message: "ok; done", Timestamp: 1},
		{Type: MsgSkillUnregister, AgentID: "agent-001", SkillID: "s", Reason: ReasonShutdown, Timestamp: 1, Signature: strings.Repeat("0f", 32)},
		{Type: MsgSkillStatus, AgentID: "agent-001", SkillID: "s", Status: StatusDegraded, Timestamp: 1},
		{Type: MsgSkillDiscoverResponse, AgentID: "agent-002", Timestamp: 1},
	} {
		line, err := m.Format()
		if err != nil {
			t.Fatal(err)
		}
		seeds["FuzzParseSkillMessage"] = append(seeds["FuzzParseSkillMessage"], []any{line})
	}
	for target, list := range seeds {
		dir := filepath.Join("testdata", "fuzz", target)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for i, args := range list {
			var b strings.Builder
			b.WriteString("go test fuzz v1\n")
			for _, a := range args {
				b.WriteString(corpusValue(a) + "\n")
			}
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%02d", i)), []byte(b.String()), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// FuzzA2ACard: an A2A Agent Card that maps is a valid unsigned record that
// carries the card, and nothing panics.
func FuzzA2ACard(f *testing.F) {
	f.Add([]byte(`{"name":"Currency Agent","url":"https://fx.example/a2a","version":"1.2.0","skills":[{"id":"convert","name":"Convert","description":"d","tags":["fx"]}]}`))
	f.Add([]byte(`{"name":"x","supportedInterfaces":[{"url":"https://a","protocolBinding":"GRPC"}],"skills":[{"id":"s","name":"n","description":"","tags":[]}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		a, err := A2ACardToAgent(data)
		if err != nil {
			return
		}
		if err := a.ValidateContent(); err != nil {
			t.Fatalf("mapped record invalid: %v", err)
		}
		if a.Metadata[MetaA2ACard] == nil || len(a.Skills) == 0 {
			t.Fatalf("%+v", a)
		}
		if _, err := Canonicalize(a); err != nil {
			t.Fatalf("mapped record does not canonicalize: %v", err)
		}
	})
}

// FuzzFromStored: the stored-record decoder (encoding/json/v2) accepts
// nothing that encoding/json would read differently — every agent object it
// accepts, encoding/json decodes to the same Agent — and never panics.
func FuzzFromStored(f *testing.F) {
	k := newKeys(f)
	sa := signedSample(f, k)
	f.Add(sa.Canonical())
	f.Add([]byte(`{"agent_id":"a","capabilities":{},"transport":{"type":"http","endpoint":"http://x"},"Agent_ID":"b"}`))
	f.Add([]byte(`{"agent_id":"a","agent_id":"b"}`))
	f.Add([]byte(`{"agent_id":"a\xff","seq":"1","skills":[{"input_schema":{"a": 1 }}]}`))
	f.Fuzz(func(t *testing.T, agent []byte) {
		got, err := FromStored(ProtocolVersion, agent, "", "")
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrTooLarge) {
				t.Fatalf("error without a field or code: %v", err)
			}
			return
		}
		var want Agent
		if err := json.Unmarshal(agent, &want); err != nil {
			t.Fatalf("accepted what encoding/json refuses: %v\n%s", err, agent)
		}
		want.intern()
		if !reflect.DeepEqual(&got.Agent, &want) {
			t.Fatalf("decoded differently from encoding/json:\n%#v\n%#v", got.Agent, want)
		}
	})
}
