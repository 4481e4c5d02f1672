package gossip

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/trust"
	pb "github.com/libp2p/go-libp2p-pubsub/pb"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

var goldenFiles = []struct {
	file string
	kind Kind
}{
	{"announce.json", KindAnnounce},
	{"heartbeat.json", KindHeartbeat},
	{"status.json", KindStatus},
	{"unregister.json", KindUnregister},
}

// writeGolden signs a fresh record and beats and writes them.
func writeGolden(t *testing.T) {
	id, err := trust.Generate()
	if err != nil {
		t.Fatal(err)
	}
	sa := signAgent(t, id, 7, "auth")
	beat := func(seq uint64, st record.Status, reason record.UnregisterReason) *record.SignedBeat {
		sb, err := record.SignBeat(record.Beat{AgentID: id.AgentID, PeerID: id.PeerID.String(), Seq: seq, Status: st,
			Reason: reason, Timestamp: time.Now().UnixMilli(), IntervalMS: 5000}, id.AgentKey)
		if err != nil {
			t.Fatal(err)
		}
		return sb
	}
	out := map[string][]byte{}
	var err2 error
	out["announce.json"], err2 = EncodeAnnounce(sa)
	if err2 != nil {
		t.Fatal(err2)
	}
	out["heartbeat.json"], _ = EncodeBeat(KindHeartbeat, beat(8, record.StatusHealthy, ""))
	out["status.json"], _ = EncodeBeat(KindStatus, beat(9, record.StatusDegraded, ""))
	out["unregister.json"], _ = EncodeBeat(KindUnregister, beat(10, "", record.ReasonMaintenance))
	if err := os.MkdirAll(filepath.Join("testdata", "golden"), 0o755); err != nil {
		t.Fatal(err)
	}
	for f, b := range out {
		if err := os.WriteFile(filepath.Join("testdata", "golden", f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func readGolden(t *testing.T, f string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "golden", f))
	if err != nil {
		t.Fatalf("golden file (regenerate with go test -run TestGolden -update): %v", err)
	}
	return b
}

// TestGolden pins the wire format: the golden messages decode, their
// signatures verify, and encoding the decoded message gives the same bytes.
func TestGolden(t *testing.T) {
	if *update {
		writeGolden(t)
	}
	ann, err := Decode(readGolden(t, "announce.json"), 0)
	if err != nil {
		t.Fatalf("announce: %v", err)
	}
	if err := ann.Agent.VerifySignatures(); err != nil {
		t.Fatalf("announce signatures: %v", err)
	}
	key, err := ann.Agent.AgentPublicKey()
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range goldenFiles {
		t.Run(g.file, func(t *testing.T) {
			b := readGolden(t, g.file)
			m, err := Decode(b, 0)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if m.Kind != g.kind || m.Version != record.ProtocolVersion || m.NewerMinor {
				t.Fatalf("decoded kind %q version %q newer %v", m.Kind, m.Version, m.NewerMinor)
			}
			if IsBeat(g.kind) {
				if err := m.Beat.Verify(key); err != nil {
					t.Fatalf("beat signature: %v", err)
				}
				if m.Beat.Beat.AgentID != ann.Agent.Agent.AgentID || m.Beat.Beat.PeerID != ann.Agent.Agent.PeerID {
					t.Fatalf("beat names %s/%s", m.Beat.Beat.AgentID, m.Beat.Beat.PeerID)
				}
			}
			enc, err := m.Encode()
			if err != nil {
				t.Fatalf("encode: %v", err)
			}
			if !bytes.Equal(enc, b) {
				t.Fatalf("re-encoding changed the bytes:\n got %s\nwant %s", enc, b)
			}
			var top map[string]json.RawMessage
			if err := json.Unmarshal(b, &top); err != nil {
				t.Fatal(err)
			}
			member := "beat"
			if g.kind == KindAnnounce {
				member = "announce"
			}
			if len(top) != 3 || string(top["type"]) != `"`+g.kind+`"` || string(top["protocol_version"]) != `"v1.0"` || top[member] == nil {
				t.Fatalf("envelope members %v", keys(top))
			}
		})
	}
}

func keys(m map[string]json.RawMessage) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestDecodeErrors(t *testing.T) {
	ann := string(readGolden(t, "announce.json"))
	hb := string(readGolden(t, "heartbeat.json"))
	cases := []struct {
		name   string
		in     string
		reason trust.Reason
		field  string
	}{
		{"too large", `{"protocol_version":"v1.0","type":"announce","x":"` + strings.Repeat("a", record.MaxMessageBytes) + `"}`, trust.ReasonTooLarge, ""},
		{"not json", `{"protocol_version":`, trust.ReasonMalformed, ""},
		{"array", `[1,2]`, trust.ReasonMalformed, "message"},
		{"duplicate member", `{"protocol_version":"v1.0","protocol_version":"v1.0","type":"announce"}`, trust.ReasonMalformed, ""},
		{"no version", `{"type":"announce"}`, trust.ReasonMalformed, "protocol_version"},
		{"numeric version", `{"protocol_version":1,"type":"announce"}`, trust.ReasonMalformed, "protocol_version"},
		{"bad version", `{"protocol_version":"1.0","type":"announce"}`, trust.ReasonMalformed, "protocol_version"},
		{"major 2", `{"protocol_version":"v2.0","type":"announce"}`, trust.ReasonVersion, ""},
		{"major 0", `{"protocol_version":"v0.9","type":"heartbeat"}`, trust.ReasonVersion, ""},
		{"no type", `{"protocol_version":"v1.0"}`, trust.ReasonMalformed, "type"},
		{"unknown type", `{"protocol_version":"v1.0","type":"query"}`, trust.ReasonMalformed, "type"},
		{"type not string", `{"protocol_version":"v1.0","type":7}`, trust.ReasonMalformed, "type"},
		{"announce missing", `{"protocol_version":"v1.0","type":"announce"}`, trust.ReasonMalformed, "announce"},
		{"beat missing", `{"protocol_version":"v1.0","type":"heartbeat"}`, trust.ReasonMalformed, "beat"},
		{"announce with beat", strings.Replace(ann, `"type":"announce"`, `"type":"announce","beat":{"beat":{},"signature":""}`, 1), trust.ReasonMalformed, "beat"},
		{"heartbeat with announce", strings.Replace(hb, `"type":"heartbeat"`, `"type":"heartbeat","announce":{}`, 1), trust.ReasonMalformed, "announce"},
		{"heartbeat as unregister (no reason)", strings.Replace(hb, `"type":"heartbeat"`, `"type":"unregister"`, 1), trust.ReasonMalformed, "beat.reason"},
		{"announce of a newer major inside", strings.Replace(ann, `"announce":{"protocol_version":"v1.0"`, `"announce":{"protocol_version":"v3.0"`, 1), trust.ReasonVersion, ""},
		{"agent not an object", `{"protocol_version":"v1.0","type":"announce","announce":{"agent":"x"}}`, trust.ReasonMalformed, ""},
		{"member name case (envelope)", strings.Replace(hb, `"type":"heartbeat"`, `"type":"heartbeat","Type":"announce"`, 1), trust.ReasonMalformed, "Type"},
		{"member name case (version)", `{"Protocol_Version":"v1.0","type":"heartbeat"}`, trust.ReasonMalformed, "protocol_version"},
		{"member name case (announce)", strings.Replace(ann, `"agent":`, `"Agent":`, 1), trust.ReasonMalformed, "announce.Agent"},
		{"member name case (beat)", strings.Replace(hb, `"signature":`, `"SIGNATURE":`, 1), trust.ReasonMalformed, "beat.SIGNATURE"},
		{"member name case (beat fields)", strings.Replace(hb, `"seq":`, `"Seq":`, 1), trust.ReasonMalformed, ""},
		{"beat over 4 KiB", strings.Replace(hb, `"signature":"`, `"pad":"`+strings.Repeat("p", record.MaxBeatBytes)+`","signature":"`, 1), trust.ReasonTooLarge, ""},
		{"bad base64 signature", strings.Replace(hb, `"signature":"`, `"signature":"!!`, 1), trust.ReasonMalformed, "signature"},
		{"resend on a heartbeat", strings.Replace(hb, `"type":"heartbeat"`, `"type":"heartbeat","resend":1`, 1), trust.ReasonMalformed, "resend"},
		{"resend above MaxResend", strings.Replace(ann, `"type":"announce"`, `"type":"announce","resend":9`, 1), trust.ReasonMalformed, "resend"},
		{"negative resend", strings.Replace(ann, `"type":"announce"`, `"type":"announce","resend":-1`, 1), trust.ReasonMalformed, "resend"},
		{"fractional resend", strings.Replace(ann, `"type":"announce"`, `"type":"announce","resend":1.5`, 1), trust.ReasonMalformed, "resend"},
		{"resend as a string", strings.Replace(ann, `"type":"announce"`, `"type":"announce","resend":"1"`, 1), trust.ReasonMalformed, "resend"},
		{"member name case (resend)", strings.Replace(ann, `"type":"announce"`, `"type":"announce","Resend":1`, 1), trust.ReasonMalformed, "Resend"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, err := Decode([]byte(c.in), 0)
			if err == nil {
				t.Fatalf("Decode accepted it: %+v", m)
			}
			if r := trust.ReasonOf(err); r != c.reason {
				t.Fatalf("reason %q (%v), want %q", r, err, c.reason)
			}
			if c.field != "" && record.FieldOf(err) != c.field {
				t.Fatalf("field %q (%v), want %q", record.FieldOf(err), err, c.field)
			}
		})
	}
	// A smaller limit applies.
	if _, err := Decode([]byte(ann), 100); !errors.Is(err, record.ErrTooLarge) {
		t.Fatalf("Decode with a 100-byte limit: %v", err)
	}
	// A resend decodes as the announcement it repeats, with its counter;
	// 0 and null are no resend.
	for in, want := range map[string]int{
		strings.Replace(ann, `"type":"announce"`, `"type":"announce","resend":3`, 1):    3,
		strings.Replace(ann, `"type":"announce"`, `"type":"announce","resend":0`, 1):    0,
		strings.Replace(ann, `"type":"announce"`, `"type":"announce","resend":null`, 1): 0,
	} {
		m, err := Decode([]byte(in), 0)
		if err != nil || m.Kind != KindAnnounce || m.Agent == nil || m.Resend != want {
			t.Fatalf("%s: %+v, %v; want an announcement with resend %d", in[:80], m, err, want)
		}
	}
	// A newer minor version is accepted and flagged; unknown members are ignored.
	newer := strings.Replace(ann, `{"protocol_version":"v1.0","type"`, `{"protocol_version":"v1.7","later":[1,2],"type"`, 1)
	m, err := Decode([]byte(newer), 0)
	if err != nil || !m.NewerMinor || m.Version != "v1.7" {
		t.Fatalf("newer minor: %+v, %v", m, err)
	}
}

func TestEncodeRejects(t *testing.T) {
	hb, err := Decode(readGolden(t, "heartbeat.json"), 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := EncodeBeat(KindAnnounce, hb.Beat); err == nil {
		t.Fatal("EncodeBeat accepted kind announce")
	}
	if _, err := EncodeBeat(KindUnregister, hb.Beat); record.FieldOf(err) != "beat.reason" {
		t.Fatalf("unregister without reason: %v", err)
	}
	if _, err := EncodeBeat(KindHeartbeat, nil); err == nil {
		t.Fatal("EncodeBeat accepted nil")
	}
	if _, err := EncodeAnnounce(&record.SignedAgent{}); err == nil {
		t.Fatal("EncodeAnnounce accepted an empty record")
	}
	if _, err := EncodeAnnounce(nil); !errors.Is(err, record.ErrMalformed) {
		t.Fatalf("EncodeAnnounce(nil) = %v, want ErrMalformed", err)
	}
}

func TestMessageID(t *testing.T) {
	topic, other := AnnounceTopic, SceneTopic("auth")
	m := &pb.Message{Topic: &topic, From: []byte("author-a"), Data: []byte(`{"x":1}`), Seqno: []byte{1}}
	id := MessageID(m)
	if len(id) != 43 || strings.ContainsAny(id, "+/=") {
		t.Fatalf("id %q is not unpadded base64url of 32 bytes", id)
	}
	// The documented formula, spelled out: every node must compute it alike.
	pre := append([]byte{byte(len(topic))}, topic...)
	pre = append(append(pre, byte(len("author-a"))), "author-a"...)
	sum := sha256.Sum256(append(pre, `{"x":1}`...))
	if want := base64.RawURLEncoding.EncodeToString(sum[:]); id != want {
		t.Fatalf("MessageID = %s, the documented formula gives %s", id, want)
	}
	same := &pb.Message{Topic: &topic, From: []byte("author-a"), Data: []byte(`{"x":1}`), Seqno: []byte{2}}
	if MessageID(same) != id {
		t.Fatal("the pubsub seqno changed the content id")
	}
	for name, v := range map[string]*pb.Message{
		"topic":  {Topic: &other, From: []byte("author-a"), Data: []byte(`{"x":1}`)},
		"author": {Topic: &topic, From: []byte("author-b"), Data: []byte(`{"x":1}`)},
		"data":   {Topic: &topic, From: []byte("author-a"), Data: []byte(`{"x":2}`)},
		// length prefixes keep the fields apart
		"shifted": {Topic: &topic, From: []byte("author-a{"), Data: []byte(`"x":1}`)},
	} {
		if MessageID(v) == id {
			t.Errorf("changing the %s kept the id", name)
		}
	}
}

func TestSceneTopic(t *testing.T) {
	for _, c := range []struct {
		name, topic string
	}{
		{"auth", "/agentd/scene/auth/1.0.0"},
		{"org.data-v2", "/agentd/scene/org.data-v2/1.0.0"},
		{"", ""},
		{"with space", ""},
		{"a;b", ""},
		{strings.Repeat("x", record.MaxIDLen+1), ""},
	} {
		if got := SceneTopic(c.name); got != c.topic {
			t.Errorf("SceneTopic(%q) = %q, want %q", c.name, got, c.topic)
		}
		if c.topic == "" {
			continue
		}
		if name, ok := SceneOfTopic(c.topic); !ok || name != c.name {
			t.Errorf("SceneOfTopic(%q) = %q, %v", c.topic, name, ok)
		}
		if !topicRe.MatchString(c.topic) {
			t.Errorf("subscription filter refuses %q", c.topic)
		}
	}
	for _, bad := range []string{AnnounceTopic, "/agentd/scene//1.0.0", "/agentd/scene/auth/2.0.0", "/other/scene/auth/1.0.0"} {
		if _, ok := SceneOfTopic(bad); ok {
			t.Errorf("SceneOfTopic(%q) accepted it", bad)
		}
	}
	if !topicRe.MatchString(AnnounceTopic) || topicRe.MatchString("/ipfs/announce/1.0.0") {
		t.Error("subscription filter")
	}
}

func TestSyncCodec(t *testing.T) {
	if r, err := decodeSyncRequest([]byte(`{"protocol_version":"v1.0","limit":5}`)); err != nil || r.Limit != 5 {
		t.Fatalf("request: %+v, %v", r, err)
	}
	for in, reason := range map[string]trust.Reason{
		`{"protocol_version":"v1.0","Limit":5}`:                                                          trust.ReasonMalformed,
		`{"protocol_version":"v1.0","limit":-1}`:                                                         trust.ReasonMalformed,
		`{"protocol_version":"v1.0","limit":10001}`:                                                      trust.ReasonMalformed,
		`{"protocol_version":"v1.0","limit":"5"}`:                                                        trust.ReasonMalformed,
		`{"protocol_version":"v2.0","limit":5}`:                                                          trust.ReasonVersion,
		`{"limit":5}`:                                                                                    trust.ReasonMalformed,
		`{"protocol_version":"v1.0","limit":1,"limit":2}`:                                                trust.ReasonMalformed,
		`{"protocol_version":"v1.0","pad":"` + strings.Repeat("x", 11000) + `"}`:                         trust.ReasonTooLarge,
		`{"protocol_version":"v1.0","limit":5,"shards":["00ab","XYZ1"]}`:                                 trust.ReasonMalformed,
		`{"protocol_version":"v1.0","limit":5,"shards":"00ab"}`:                                          trust.ReasonMalformed,
		`{"protocol_version":"v1.0","limit":5,"Shards":["00ab"]}`:                                        trust.ReasonMalformed,
		`{"protocol_version":"v1.0","limit":5,"shards":[` + strings.Repeat(`"00ab",`, 1024) + `"00ab"]}`: trust.ReasonMalformed,
	} {
		if _, err := decodeSyncRequest([]byte(in)); trust.ReasonOf(err) != reason {
			t.Errorf("request %.60s: %v, want %s", in, err, reason)
		}
	}
	ann := readGolden(t, "announce.json")
	var env struct {
		Announce json.RawMessage `json:"announce"`
	}
	if err := json.Unmarshal(ann, &env); err != nil {
		t.Fatal(err)
	}
	rec := string(env.Announce)
	const h3 = `"heard":[{"age_ms":0,"interval_ms":0},{"age_ms":1,"interval_ms":1},{"age_ms":2,"interval_ms":2}]`
	recs, bad, err := decodeSyncResponse([]byte(`{"protocol_version":"v1.0","records":[{"agent":{}},`+rec+`,`+strings.Replace(rec, `"agent":`, `"AGENT":`, 1)+`],`+h3+`}`), 3, nil)
	if err != nil || len(recs) != 1 || bad != 2 {
		t.Fatalf("response: %d records, %d bad, %v", len(recs), bad, err)
	}
	if want := (Heard{Age: time.Millisecond, Interval: time.Millisecond}); recs[0].Heard != want {
		t.Fatalf("heard %+v: an entry must stay with its record when another is dropped, want %+v", recs[0].Heard, want)
	}
	if _, _, err := decodeSyncResponse([]byte(`{"protocol_version":"v1.0","records":[`+rec+`,`+rec+`],"heard":[{"age_ms":0,"interval_ms":0},{"age_ms":0,"interval_ms":0}]}`), 1, nil); err == nil {
		t.Fatal("more records than asked for were accepted")
	}
	if _, _, err := decodeSyncResponse([]byte(`{"protocol_version":"v1.0","records":[],"heard":[],"error":{"code":"ErrRateLimited","message":"x"}}`), 1, nil); !errors.Is(err, ErrSyncRefused) {
		t.Fatalf("error answer: %v", err)
	}
	for _, heard := range []string{
		``, // missing: a joiner would not know how old the evidence is
		`,"heard":[]`,
		`,"heard":[{"age_ms":0,"interval_ms":0},{"age_ms":0,"interval_ms":0}]`,
		`,"heard":[{"age_ms":-1,"interval_ms":0}]`,
		`,"heard":[{"age_ms":86400001,"interval_ms":0}]`,
		`,"heard":[{"age_ms":0}]`,
		`,"heard":[{"age_ms":1.5,"interval_ms":0}]`,
		`,"heard":[{"Age_ms":0,"interval_ms":0}]`,
		`,"heard":[7]`,
	} {
		if _, _, err := decodeSyncResponse([]byte(`{"protocol_version":"v1.0","records":[`+rec+`]`+heard+`}`), 1, nil); trust.ReasonOf(err) != trust.ReasonMalformed {
			t.Errorf("heard %q: %v, want a malformed answer", heard, err)
		}
	}
	if _, _, err := decodeSyncResponse(make([]byte, syncAnswerBound(1)+1), 1, nil); !errors.Is(err, record.ErrTooLarge) {
		t.Fatalf("oversize answer: %v", err)
	}
}
