package record

import (
	"crypto/ecdsa"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
)

func TestSkillMessageSeedExamples(t *testing.T) {
	b, err := os.ReadFile("testdata/seeds/001-messages.txt")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 5 {
		t.Fatalf("want the 5 message examples of seed 001, got %d", len(lines))
	}
	for _, line := range lines {
		m, err := ParseSkillMessage(line)
		if err != nil {
			t.Fatalf("seed example %q: %v", line, err)
		}
		got, err := m.Format()
		if err != nil {
			t.Fatalf("format %q: %v", line, err)
		}
		if got != line {
			t.Errorf("Format(Parse(x)) != x:\n got %s\nwant %s", got, line)
		}
		if m.Type.Signed() {
			// Placeholder signatures parse but never verify.
			if err := m.Verify(nil, []byte("k")); !errors.Is(err, ErrBadSignature) {
				t.Errorf("%s: placeholder signature: got %v, want ErrBadSignature", m.Type, err)
			}
		}
	}

	reg, _ := ParseSkillMessage(lines[0])
	want := &SkillMessage{Type: MsgSkillRegister, AgentID: "agent-001", SkillID: "skill-org-feishu", Version: "0.7.0",
		SkillType: SkillEnterprise, Endpoint: "192.168.1.100:8080", Capabilities: []string{"org-data-read", "user-auth"},
		Scenes: []string{"auth"}, Timestamp: 1707868800000, Signature: "a1b2c3d4e5f6..."}
	if !reflect.DeepEqual(reg, want) {
		t.Errorf("register parsed as %+v, want %+v", reg, want)
	}
	resp, _ := ParseSkillMessage(lines[2])
	if resp.AgentID != "agent-002" || len(resp.Skills) != 2 || resp.Skills[1].SkillID != "skill-org-dingding" ||
		resp.Skills[1].Endpoint != "192.168.1.101:8080" || resp.Timestamp != 1707868800000 {
		t.Errorf("discover response parsed as %+v", resp)
	}
	disc, _ := ParseSkillMessage(lines[1])
	if !reflect.DeepEqual(disc.CapabilityFilter, []string{"org-data-read"}) || !reflect.DeepEqual(disc.TypeFilter, []SkillType{SkillEnterprise}) {
		t.Errorf("discover parsed as %+v", disc)
	}
	hb, _ := ParseSkillMessage(lines[4])
	if hb.Status != StatusHealthy || hb.Timestamp != 1707868805000 || hb.SignatureKind() != SigECDSA {
		t.Errorf("heartbeat parsed as %+v", hb)
	}
}

func TestSkillMessageRoundTrip(t *testing.T) {
	msgs := []SkillMessage{
		{Type: MsgSkillRegister, AgentID: testAgentID, SkillID: "s", Version: "1.0.0-rc.1+b5", SkillType: SkillTool,
			Capabilities: []string{"c"}, Timestamp: 0},
		{Type: MsgSkillRegisterAck, AgentID: "agent-001", Ack: AckDuplicate, Message: "already: registered; twice", Timestamp: 1},
		{Type: MsgSkillRegisterAck, AgentID: "agent-001", Ack: AckSuccess, Timestamp: 1},
		{Type: MsgSkillUnregister, AgentID: "agent-001", SkillID: "s", Reason: ReasonUpgrade, Timestamp: 9223372036854775807},
		{Type: MsgSkillDiscover, AgentID: "agent-002", Timestamp: 5},
		{Type: MsgSkillDiscover, AgentID: "agent-002", CapabilityFilter: []string{"a", "b"}, SceneFilter: []string{"s"},
			TypeFilter: []SkillType{SkillTool, SkillIntegration}, Timestamp: 5},
		{Type: MsgSkillDiscoverResponse, AgentID: "agent-002", Timestamp: 5},
		{Type: MsgSkillDiscoverResponse, AgentID: "agent-002", Timestamp: 5, Skills: []SkillEntry{
			{SkillID: "x", Version: "1.0.0", Capabilities: []string{"c"}}}},
		{Type: MsgSkillHeartbeat, AgentID: "a", SkillID: "s", Status: StatusDegraded, Timestamp: 5, Signature: strings.Repeat("ab", 32)},
		{Type: MsgSkillStatus, AgentID: "a", SkillID: "s", Status: StatusMaintenance, Timestamp: 5},
	}
	for _, m := range msgs {
		line, err := m.Format()
		if err != nil {
			t.Fatalf("%+v: %v", m, err)
		}
		back, err := ParseSkillMessage(line)
		if err != nil {
			t.Fatalf("parse %q: %v", line, err)
		}
		if !reflect.DeepEqual(*back, m) {
			t.Errorf("round trip of %q:\n got %+v\nwant %+v", line, *back, m)
		}
		if back2, err := ParseSkillMessage(line + "\r\n"); err != nil || !reflect.DeepEqual(back2, back) {
			t.Errorf("trailing CRLF: %v", err)
		}
	}
	if line, _ := msgs[6].Format(); line != "SKILL_DISCOVER_RESPONSE:agent-002;;5" {
		t.Errorf("empty response is %q", line)
	}
	if line, _ := msgs[9].Format(); line != "SKILL_STATUS:a;s;MAINTENANCE;5;" {
		t.Errorf("unsigned status is %q", line)
	}
}

func TestSkillMessageRejects(t *testing.T) {
	reg := "SKILL_REGISTER:agent-001;skill-org-feishu;0.7.0;enterprise-skill;192.168.1.100:8080;org-data-read,user-auth;auth;1707868800000;sig"
	cases := []struct {
		name, line, field string
	}{
		{"no type separator", "SKILL_REGISTER", "type"},
		{"unknown type", "SKILL_JOIN:a;b", "type"},
		{"lower-case type", strings.Replace(reg, "SKILL_REGISTER", "skill_register", 1), "type"},
		{"too few fields", "SKILL_HEARTBEAT:a;s;HEALTHY;5", "payload"},
		{"too many fields", reg + ";extra;more", "payload"},
		{"discover with signature", "SKILL_DISCOVER:agent-002;a;b;tool-skill;5;sig", "payload"},
		{"bad skill type", strings.Replace(reg, "enterprise-skill", "plugin-skill", 1), "skillType"},
		{"bad semver", strings.Replace(reg, "0.7.0", "0.7", 1), "version"},
		{"empty agent id", strings.Replace(reg, "agent-001", "", 1), "agentId"},
		{"agent id with space", strings.Replace(reg, "agent-001", "agent 001", 1), "agentId"},
		{"no capabilities", strings.Replace(reg, "org-data-read,user-auth", "", 1), "capabilities"},
		{"empty capability", strings.Replace(reg, "org-data-read,user-auth", "org-data-read,,user-auth", 1), "capabilities[1]"},
		{"wildcard capability", strings.Replace(reg, "user-auth", "*", 1), "capabilities[1]"},
		{"trailing comma", strings.Replace(reg, ";auth;", ";auth,;", 1), "scenes[1]"},
		{"endpoint with pipe", strings.Replace(reg, "192.168.1.100:8080", "a|b", 1), "endpoint"},
		{"leading zero timestamp", strings.Replace(reg, "1707868800000", "01707868800000", 1), "timestamp"},
		{"negative timestamp", strings.Replace(reg, "1707868800000", "-1", 1), "timestamp"},
		{"huge timestamp", strings.Replace(reg, "1707868800000", "99999999999999999999", 1), "timestamp"},
		{"signature with space", strings.Replace(reg, ";sig", ";s g", 1), "signature"},
		{"control character", strings.Replace(reg, "auth;", "au\x00th;", 1), "message"},
		{"tab", strings.Replace(reg, "auth;", "au\tth;", 1), "message"},
		{"invalid utf-8", strings.Replace(reg, "auth;", "au\xffth;", 1), "message"},
		{"bad health status", "SKILL_HEARTBEAT:a;s;OK;5;", "status"},
		{"ack status", "SKILL_REGISTER_ACK:a;OK;msg;5", "status"},
		{"ack too short", "SKILL_REGISTER_ACK:a;SUCCESS;5", "payload"},
		{"bad reason", "SKILL_UNREGISTER:a;s;BORED;5;", "reason"},
		{"bad type filter", "SKILL_DISCOVER:r;;;x-skill;5", "typeFilter[0]"},
		{"entry with 4 fields", "SKILL_DISCOVER_RESPONSE:r;s|1.0.0|e|c;5", "skills[0]"},
		{"entry bad version", "SKILL_DISCOVER_RESPONSE:r;s|1|e|c|;5", "skills[0].version"},
		{"entry no capability", "SKILL_DISCOVER_RESPONSE:r;s|1.0.0|e||;5", "skills[0].capabilities"},
		{"response missing timestamp", "SKILL_DISCOVER_RESPONSE:r;5", "payload"},
		{"response empty entry", "SKILL_DISCOVER_RESPONSE:r;s|1.0.0|e|c|;;5", "skills[1]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseSkillMessage(c.line)
			wantField(t, err, c.field)
			if !errors.Is(err, ErrMalformed) {
				t.Errorf("error %v does not wrap ErrMalformed", err)
			}
		})
	}
	long := "SKILL_REGISTER_ACK:a;SUCCESS;" + strings.Repeat("x", MaxSkillLineBytes) + ";5"
	if _, err := ParseSkillMessage(long); !errors.Is(err, ErrTooLarge) {
		t.Errorf("oversize line: %v, want ErrTooLarge", err)
	}
	many := "SKILL_DISCOVER_RESPONSE:r;" + strings.Repeat("s|1.0.0||c|;", MaxDiscoverSkills+1) + "5"
	_, err := ParseSkillMessage(many)
	wantField(t, err, "skills")
}

func TestSkillMessageValidateUnusedFields(t *testing.T) {
	cases := []struct {
		m     SkillMessage
		field string
	}{
		{SkillMessage{Type: MsgSkillDiscover, AgentID: "a", Capabilities: []string{"c"}}, "capabilities"},
		{SkillMessage{Type: MsgSkillHeartbeat, AgentID: "a", SkillID: "s", Status: StatusHealthy, Reason: ReasonError}, "reason"},
		{SkillMessage{Type: MsgSkillHeartbeat, AgentID: "a", SkillID: "s", Ack: AckSuccess}, "status"},
		{SkillMessage{Type: MsgSkillRegisterAck, AgentID: "a", Ack: AckSuccess, Signature: "x"}, "signature"},
		{SkillMessage{Type: MsgSkillRegisterAck, AgentID: "a", Ack: AckSuccess, Status: StatusHealthy}, "status"},
		{SkillMessage{Type: MsgSkillStatus, AgentID: "a", SkillID: "s", Status: StatusHealthy, Timestamp: -1}, "timestamp"},
	}
	for _, c := range cases {
		_, err := c.m.Format()
		wantField(t, err, c.field)
	}
}

func TestSkillMessageSignVerify(t *testing.T) {
	k := newKeys(t)
	other := newKeys(t)
	shared := []byte("lan-shared-secret")
	base := SkillMessage{Type: MsgSkillRegister, AgentID: testAgentID, SkillID: "skill-org-feishu", Version: "0.7.0",
		SkillType: SkillEnterprise, Endpoint: "192.168.1.100:8080", Capabilities: []string{"org-data-read", "user-auth"},
		Scenes: []string{"auth"}, Timestamp: 1707868800000}

	for _, scheme := range []string{"ecdsa", "hmac"} {
		t.Run(scheme, func(t *testing.T) {
			m := base
			var err error
			if scheme == "ecdsa" {
				err = m.SignECDSA(k.agent)
			} else {
				err = m.SignHMAC(shared)
			}
			if err != nil {
				t.Fatal(err)
			}
			wantKind := map[string]SkillSigKind{"ecdsa": SigECDSA, "hmac": SigHMAC}[scheme]
			if m.SignatureKind() != wantKind {
				t.Fatalf("signature %q is kind %v, want %v", m.Signature, m.SignatureKind(), wantKind)
			}
			line, err := m.Format()
			if err != nil {
				t.Fatal(err)
			}
			text, _ := m.SignedText()
			if line != text+";"+m.Signature {
				t.Fatalf("signed text %q is not the line %q without its signature", text, line)
			}
			got, err := ParseSkillMessage(line)
			if err != nil {
				t.Fatal(err)
			}
			if err := got.Verify(&k.agent.PublicKey, shared); err != nil {
				t.Fatalf("verify: %v", err)
			}
			// Wrong key.
			if err := got.Verify(&other.agent.PublicKey, []byte("other")); !errors.Is(err, ErrBadSignature) {
				t.Errorf("wrong key: %v", err)
			}
			// Key of the other scheme only.
			if scheme == "ecdsa" {
				err = got.Verify(nil, shared)
			} else {
				err = got.Verify(&k.agent.PublicKey, nil)
			}
			if !errors.Is(err, ErrBadSignature) {
				t.Errorf("missing key for the signature's scheme: %v", err)
			}
			// Every single-character change of the signed part breaks it,
			// unless the change makes the message unparseable.
			sigStart := len(text)
			for i := 0; i < sigStart; i++ {
				b := []byte(line)
				b[i] ^= 0x01
				tm, err := ParseSkillMessage(string(b))
				if err != nil {
					continue
				}
				if err := tm.Verify(&k.agent.PublicKey, shared); err == nil {
					t.Fatalf("tampered byte %d (%q) still verifies", i, string(b))
				}
			}
		})
	}

	unsigned := base
	if err := unsigned.Verify(&k.agent.PublicKey, shared); !errors.Is(err, ErrUnsigned) {
		t.Errorf("unsigned: %v, want ErrUnsigned", err)
	}
	disc := SkillMessage{Type: MsgSkillDiscover, AgentID: "a"}
	if err := disc.SignECDSA(k.agent); !errors.Is(err, ErrUnsigned) {
		t.Errorf("signing a discover: %v, want ErrUnsigned", err)
	}
	if err := base.SignHMAC(nil); err == nil {
		t.Error("HMAC with an empty key succeeded")
	}
	var nilKey *ecdsa.PublicKey
	hb := SkillMessage{Type: MsgSkillHeartbeat, AgentID: "a", SkillID: "s", Status: StatusHealthy, Timestamp: 1, Signature: "!!"}
	if _, err := hb.Format(); err == nil {
		t.Error("signature with characters outside base64/hex accepted")
	}
	hb.Signature = "AAAA"
	if err := hb.Verify(nilKey, nil); !errors.Is(err, ErrBadSignature) {
		t.Errorf("no key: %v", err)
	}
}

func TestSkillsFromAgent(t *testing.T) {
	k := newKeys(t)
	a := sampleAgent(k)
	msgs := SkillsFromAgent(a)
	if len(msgs) != len(a.Skills) {
		t.Fatalf("%d messages for %d skills", len(msgs), len(a.Skills))
	}
	for i, m := range msgs {
		if err := m.SignECDSA(k.agent); err != nil {
			t.Fatal(err)
		}
		line, err := m.Format()
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseSkillMessage(line)
		if err != nil {
			t.Fatal(err)
		}
		if err := got.Verify(&k.agent.PublicKey, nil); err != nil {
			t.Fatal(err)
		}
		s, err := got.Skill()
		if err != nil {
			t.Fatal(err)
		}
		w := a.Skills[i]
		if s.SkillID != w.SkillID || s.Version != w.Version || s.SkillType != w.SkillType ||
			!reflect.DeepEqual(s.CapabilityIDs(), w.CapabilityIDs()) || !reflect.DeepEqual(s.Scenes, w.Scenes) {
			t.Errorf("skill %d: got %+v from %q", i, s, line)
		}
		if got.Timestamp != testNow.UnixMilli() {
			t.Errorf("timestamp %d, want issued_at %d", got.Timestamp, testNow.UnixMilli())
		}
	}
	// The second skill has no endpoint: the agent's transport endpoint is used.
	if msgs[1].Endpoint != a.Transport.Endpoint {
		t.Errorf("endpoint %q, want the transport's %q", msgs[1].Endpoint, a.Transport.Endpoint)
	}
	entries := SkillEntriesFromAgent(a)
	resp, err := PackDiscoverResponse("agent-002", entries, 5)
	if err != nil || len(resp) != 1 || !reflect.DeepEqual(resp[0].Skills, entries) {
		t.Fatalf("pack: %v %+v", err, resp)
	}
}

func TestPackDiscoverResponse(t *testing.T) {
	var entries []SkillEntry
	for i := 0; i < 300; i++ {
		entries = append(entries, SkillEntry{SkillID: "skill-" + strings.Repeat("x", i%100), Version: "1.0.0",
			Endpoint: "10.0.0.1:80", Capabilities: []string{"cap-a", "cap-b"}, Scenes: []string{"s"}})
	}
	msgs, err := PackDiscoverResponse("agent-002", entries, 1707868800000)
	if err != nil {
		t.Fatal(err)
	}
	var all []SkillEntry
	for _, m := range msgs {
		line, err := m.Format()
		if err != nil {
			t.Fatalf("packed message does not format: %v", err)
		}
		if len(line) > MaxSkillLineBytes || len(m.Skills) > MaxDiscoverSkills {
			t.Fatalf("packed message of %d bytes, %d skills", len(line), len(m.Skills))
		}
		back, err := ParseSkillMessage(line)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, back.Skills...)
	}
	if !reflect.DeepEqual(all, entries) {
		t.Fatal("packed entries differ from the input")
	}
	if len(msgs) < 5 {
		t.Errorf("300 entries packed into %d messages", len(msgs))
	}
	empty, err := PackDiscoverResponse("agent-002", nil, 1)
	if err != nil || len(empty) != 1 || len(empty[0].Skills) != 0 {
		t.Fatalf("empty: %v %+v", err, empty)
	}
	huge := SkillEntry{SkillID: "s", Version: "1.0.0", Capabilities: make([]string, 64)}
	for i := range huge.Capabilities {
		huge.Capabilities[i] = strings.Repeat("c", 125) + fmt.Sprintf("%03d", i)
	}
	if _, err := PackDiscoverResponse("r", []SkillEntry{huge}, 1); !errors.Is(err, ErrTooLarge) {
		t.Errorf("oversize entry: %v", err)
	}
}

// The layouts agentd gives the messages seed 001 names without one (§2.2,
// §9.2, §10.3) parse back to what Format wrote, and their fields are
// checked.
func TestSkillMessageChallengeSceneAndUnregisterAck(t *testing.T) {
	cert := base64.StdEncoding.EncodeToString([]byte("not really DER, only base64"))
	good := []string{
		"SKILL_REGISTER:agent-001;skill-org-feishu;0.7.0;enterprise-skill;192.168.1.100:8080;org-data-read,user-auth;auth;1707868800000;" + cert + "," + cert + ";MEUCIQD",
		"CHALLENGE:agent-001;skill-org-feishu;0123456789abcdef0123456789abcdef;1707868800001",
		"CHALLENGE_RESPONSE:agent-001;skill-org-feishu;0123456789abcdef0123456789abcdef;1707868800002;MEUCIQD",
		"SKILL_UNREGISTER_ACK:agent-001;skill-org-feishu;SUCCESS;unregistered; bye;1707868800003",
		"SKILL_UNREGISTER_ACK:agent-001;skill-org-feishu;NOT_FOUND;;1707868800003",
		"JOIN_SCENE:agent-001;skill-org-feishu;auth;1707868800004;MEUCIQD",
		"JOIN_SCENE_RESPONSE:agent-001;auth;group-auth;SUCCESS;agent-001|skill-org-feishu|192.168.1.100:8080,agent-002|skill-org-dingding|;1707868800005",
		"JOIN_SCENE_RESPONSE:agent-001;auth;group-auth;NOT_FOUND;;1707868800005",
	}
	for _, line := range good {
		m, err := ParseSkillMessage(line)
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		out, err := m.Format()
		if err != nil || out != line {
			t.Fatalf("Format(Parse(x)) = %q, %v; want %q", out, err, line)
		}
	}
	m, _ := ParseSkillMessage(good[0])
	if len(m.Certificate) != 2 || m.Signature != "MEUCIQD" {
		t.Fatalf("%+v", m)
	}
	if text, _ := m.SignedText(); !strings.HasSuffix(text, ";"+cert+","+cert) {
		t.Fatalf("the signature must cover the certificate: %q", text)
	}
	m, _ = ParseSkillMessage(good[6])
	if len(m.Members) != 2 || m.Members[1] != (SceneMember{AgentID: "agent-002", SkillID: "skill-org-dingding"}) {
		t.Fatalf("%+v", m.Members)
	}
	bad := map[string]string{
		"CHALLENGE:agent-001;skill-org-feishu;0123;1":                                                       "nonce",
		"CHALLENGE:agent-001;skill-org-feishu;0123456789ABCDEF0123456789ABCDEF;1":                           "nonce",
		"JOIN_SCENE_RESPONSE:agent-001;auth;group-auth;SUCCESS;agent-001|skill;1":                           "members[0]",
		"JOIN_SCENE_RESPONSE:agent-001;auth;group-auth;DUPLICATE;;1":                                        "status",
		"SKILL_REGISTER_ACK:agent-001;NOT_FOUND;x;1":                                                        "status",
		"SKILL_UNREGISTER_ACK:agent-001;skill-x;DUPLICATE;x;1":                                              "status",
		"SKILL_REGISTER:agent-001;s;0.7.0;tool-skill;h:1;c;;1;!!!;MEUC":                                     "certificate[0]",
		"JOIN_SCENE:agent-001;skill-org-feishu;no scene;1;MEUC":                                             "sceneId",
		"SKILL_REGISTER:agent-001;s;0.7.0;tool-skill;h:1;c;;1;" + strings.Repeat(cert+",", 5) + cert + ";M": "certificate",
	}
	for line, field := range bad {
		_, err := ParseSkillMessage(line)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != field {
			t.Errorf("%s: %v, want a %s error", line, err, field)
		}
	}
}

// The HMAC example of docs/lan.md ("HMAC-signed messages"), so that
// another implementation can check its own against it.
func TestHMACDocumentedVector(t *testing.T) {
	const line = "SKILL_REGISTER:agent-001;skill-org-feishu;0.7.0;enterprise-skill;192.168.1.100:8080;org-data-read,user-auth;auth;1707868800000"
	m, err := ParseSkillMessage(line + ";6c40a8ad0485de46324fd40f11aedc965684bf4e8f50dec11e8990fc9cbdbea2")
	if err != nil {
		t.Fatal(err)
	}
	if text, _ := m.SignedText(); text != line {
		t.Fatalf("signed text %q", text)
	}
	if err := m.Verify(nil, []byte("s3cret")); err != nil {
		t.Fatalf("the documented HMAC does not verify: %v", err)
	}
}
