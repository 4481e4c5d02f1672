package record

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestLoadAgentFileForms(t *testing.T) {
	k := newKeys(t)
	sa := signedSample(t, k)
	card := readSeed(t, "002-agent-card.json")
	spec, err := ParseAgentSpec([]byte(minimalSpec))
	if err != nil {
		t.Fatal(err)
	}
	specJSON, _ := spec.MarshalYAMLDoc()
	cases := []struct {
		name string
		data []byte
		want string // agent_name of the result
	}{
		{"agent.json", sa.Canonical(), "data-processor"},
		{"announce.json", sa.MarshalAnnounce(), "data-processor"},
		{"card.json", card, "data-processor-agent"},
		{"spec.json", specJSON, "search-agent"},
		{"spec.yaml", []byte(minimalSpec), "search-agent"},
		{"spec.YML", []byte(minimalSpec), "search-agent"},
		{"spec", []byte(minimalSpec), "search-agent"},
		{"agent", append([]byte("\n  "), sa.Canonical()...), "data-processor"},
		{"-", sa.MarshalAnnounce(), "data-processor"},
		{"bom.json", append([]byte("\xef\xbb\xbf"), sa.Canonical()...), "data-processor"},
		{"bom", append([]byte("\xef\xbb\xbf"), sa.Canonical()...), "data-processor"},
	}
	for _, c := range cases {
		a, err := LoadAgentFile(c.name, c.data)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if a.AgentName != c.want {
			t.Errorf("%s: agent_name %q, want %q", c.name, a.AgentName, c.want)
		}
		if err := a.ValidateContent(); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	// A loaded signed record is the record.
	a, _ := LoadAgentFile("announce.json", sa.MarshalAnnounce())
	if canon(t, a) != string(sa.Canonical()) {
		t.Error("announce file gives another agent")
	}
}

func TestLoadAgentFileErrors(t *testing.T) {
	k := newKeys(t)
	sa := signedSample(t, k)
	noCaps := strings.Replace(string(sa.Canonical()), `"capabilities":{"metrics":"2.0","org-data-read":"0.7.0","user-auth":"1.0.0","web-search":"1.0.0"},`, "", 1)
	if noCaps == string(sa.Canonical()) {
		t.Fatalf("fixture: capabilities not found in %s", sa.Canonical())
	}
	v2 := strings.Replace(string(sa.MarshalAnnounce()), `"v1.0"`, `"v2.0"`, 1)
	cases := []struct {
		name, file, data string
		line             int
		field            string
		is               error
	}{
		{"yaml unknown field", "a.yaml", minimalSpec + "colour: x\n", 8, "colour", ErrMalformed},
		{"json syntax", "a.json", "{\n\"agent_id\": 1,\n,}", 3, "", ErrMalformed},
		{"json not object", "a.json", "[1]", 0, "", ErrMalformed},
		{"agent without capabilities", "a.json", noCaps, 0, "capabilities", ErrMalformed},
		{"announce agent without capabilities", "a.json", `{"protocol_version":"v1.0","agent":` + noCaps + `}`, 0, "agent.capabilities", ErrMalformed},
		{"announce bad uuid", "a.json", `{"protocol_version":"v1.0","agent":` + strings.Replace(string(sa.Canonical()), testAgentID, "not-a-uuid", 1) + `}`, 0, "agent.agent_id", ErrMalformed},
		{"announce v2", "a.json", v2, 0, "", ErrUnsupportedVersion},
		{"duplicate member", "a.json", `{"agent_id":"a","agent_id":"b"}`, 0, "", ErrMalformed},
		{"card error", "c.json", `{"agent_id":"x","name":"n","communication":{"endpoints":[]}}`, 0, "communication.endpoints", ErrMalformed},
		{"too large", "a.yaml", strings.Repeat("#", MaxAgentFileBytes+1), 0, "", ErrTooLarge},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := LoadAgentFile(c.file, []byte(c.data))
			if !errors.Is(err, c.is) {
				t.Fatalf("%v, want %v", err, c.is)
			}
			var se *SourceError
			if !errors.As(err, &se) || se.File != c.file || se.Line != c.line {
				t.Fatalf("error %v does not locate %s:%d", err, c.file, c.line)
			}
			if !strings.HasPrefix(err.Error(), c.file) {
				t.Errorf("message %q does not start with the file name", err)
			}
			if c.field != "" {
				wantField(t, err, c.field)
			}
		})
	}
}

// A file that is not a mapping says so in words, with the path as given
// and no empty field name ("hostname:1: : must be a mapping" before).
func TestLoadAgentFileNotAMapping(t *testing.T) {
	for data, kind := range map[string]string{"vm\n": `the text "vm"`, "- a\n- b\n": "a list"} {
		_, err := LoadAgentFile("/etc/hostname", []byte(data))
		msg := fmt.Sprint(err)
		if !strings.HasPrefix(msg, "/etc/hostname:1: this is not an agent description") || !strings.Contains(msg, kind) || strings.Contains(msg, ": :") {
			t.Errorf("%q: %s", data, msg)
		}
	}
}

// Capabilities written as a list of ids, the way seed 001 writes them, are
// the short form of the capability mapping: in an AgentSpec's
// capabilities and in a skill's.
func TestAgentSpecShortFormCapabilities(t *testing.T) {
	a, err := LoadAgentFile("a.yaml", []byte(`agent_type: hr
version: 1.0.0
endpoint: 10.0.0.9:8080
capabilities: [org-data-read, user-auth]
skills:
  - skill_id: skill-org-feishu
    version: 0.7.0
    skill_type: enterprise-skill
    capabilities: [org-data-read, {id: user-auth, version: "2.0"}]
`))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range a.Skills {
		ids = append(ids, s.SkillID+":"+strings.Join(s.CapabilityIDs(), ","))
	}
	_, hasRead := a.Capabilities["org-data-read"]
	_, hasAuth := a.Capabilities["user-auth"]
	if len(a.Skills) != 2 || !hasRead || !hasAuth {
		t.Fatalf("skills %v capabilities %v", ids, a.Capabilities)
	}
	if sk, _ := a.Skill("skill-org-feishu"); len(sk.Capabilities) != 2 || sk.Capabilities[1].Version != "2.0" {
		t.Fatalf("%+v", sk)
	}
	for _, bad := range []string{"capabilities: [[a]]", "capabilities: [~]"} {
		if _, err := LoadAgentFile("a.yaml", []byte("agent_type: hr\nversion: 1.0.0\nendpoint: h:1\n"+bad+"\n")); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

// IsAnnounce and IsSignedAnnounce tell an Announce, and one with its
// signature, from the agent descriptions a file may hold.
func TestIsSignedAnnounce(t *testing.T) {
	for _, c := range []struct {
		in             string
		announce, sign bool
	}{
		{`{"protocol_version":"v1.0","agent":{},"signature":"AAAA"}`, true, true},
		{"\ufeff \n{\"agent\":{\"agent_id\":\"x\"},\"signature\":\"AAAA\"}", true, true},
		{`{"agent":{},"signature":""}`, true, false},
		{`{"agent":{},"signature":7}`, true, false},
		{`{"agent":{}}`, true, false},
		{`{"agent_type":"x","signature":"AAAA"}`, false, false},
		{`{"agent":{}`, false, false},
		{"agent_type: x\n", false, false},
		{``, false, false},
	} {
		if got := IsAnnounce([]byte(c.in)); got != c.announce {
			t.Errorf("IsAnnounce(%q) = %v", c.in, got)
		}
		if got := IsSignedAnnounce([]byte(c.in)); got != c.sign {
			t.Errorf("IsSignedAnnounce(%q) = %v", c.in, got)
		}
	}
}
