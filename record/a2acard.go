package record

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/Masterminds/semver/v3"
	"github.com/a2aproject/a2a-go/a2a"
)

// A2A Agent Cards in (docs/protocol.md, "A2A Agent Cards"): an agent that
// already describes itself with an A2A card registers with it as is. The
// card is read in both shapes in use: A2A 0.3 (url, preferredTransport,
// additionalInterfaces, protocolVersion at the top; the types of
// github.com/a2aproject/a2a-go v0.3.3) and A2A 1.0 (supportedInterfaces of
// {url, protocolBinding, tenant, protocolVersion}).

// MetaA2ACard is the metadata key that carries the original A2A card of
// a record made from one, whole, so that nothing of it is lost and it can
// be answered again as it came.
const MetaA2ACard = "a2a_card"

// a2aCard is an A2A card: a2a-go's 0.3 type plus the 1.0 interfaces.
type a2aCard struct {
	a2a.AgentCard
	SupportedInterfaces []a2aInterface `json:"supportedInterfaces,omitempty"`
}

// a2aInterface is an A2A 1.0 AgentInterface.
type a2aInterface struct {
	URL             string `json:"url"`
	ProtocolBinding string `json:"protocolBinding"`
	Tenant          string `json:"tenant,omitempty"`
	ProtocolVersion string `json:"protocolVersion,omitempty"`
}

// IsA2ACard reports whether a JSON object with these members is an A2A
// Agent Card rather than another agent description: it has name and
// skills, and url (0.3) or supportedInterfaces (1.0), and none of the
// members that mark agentd's own forms (agent_id, agent_type, agent,
// communication).
func IsA2ACard(members map[string]json.RawMessage) bool {
	for _, k := range []string{"agent_id", "agent_type", "agent", "communication", "capabilities_map"} {
		if _, ok := members[k]; ok {
			return false
		}
	}
	_, name := members["name"]
	_, skills := members["skills"]
	_, url := members["url"]
	_, ifaces := members["supportedInterfaces"]
	return name && skills && (url || ifaces)
}

// A2ACardToAgent maps an A2A Agent Card onto an unsigned agent record:
//
//   - agent_name: the card's name as a DNS label; metadata.display_name:
//     the name; description: the description; version: the card's version
//     when it is a semantic version;
//   - transport: the preferred interface — 1.0's first supportedInterfaces
//     entry, or 0.3's url and preferredTransport (default JSONRPC) — with
//     the protocol binding in lower case as the type (jsonrpc, grpc,
//     http+json) and the URL as the endpoint;
//   - skills: one per card skill: skill_id the skill's id, version the
//     card's (0.0.0 when it has none that is semantic), skill_type
//     tool-skill, endpoint the URL when the text form can carry it, and one
//     capability whose id is the skill's id and whose description is the
//     skill's (name, examples and modes stay in the card);
//   - tags: the skills' tags, without duplicates (the first 32);
//   - metadata.a2a_card: the whole card as it came.
//
// The card's skill ids must be identifiers (docs/protocol.md, "Agent
// record"): a skill id with a space or a ';' cannot be a capability id.
func A2ACardToAgent(raw []byte) (*Agent, error) {
	canon, err := CanonicalizeJSON(raw)
	if err != nil {
		return nil, err
	}
	var c a2aCard
	if err := json.Unmarshal(canon, &c); err != nil {
		return nil, jsonFieldErr("", err)
	}
	if strings.TrimSpace(c.Name) == "" {
		return nil, fieldErr("name", "is required in an A2A Agent Card")
	}
	if len(c.Skills) == 0 {
		return nil, fieldErr("skills", "an A2A Agent Card needs at least one skill")
	}
	if len(c.Skills) > MaxSkills {
		return nil, fieldErr("skills", "has %d skills, more than %d", len(c.Skills), MaxSkills)
	}
	var whole map[string]any
	dec := json.NewDecoder(bytes.NewReader(canon))
	dec.UseNumber()
	if err := dec.Decode(&whole); err != nil {
		return nil, jsonFieldErr("", err)
	}
	a := &Agent{
		AgentName:    DNSLabel(c.Name),
		Description:  c.Description,
		Capabilities: map[string]string{},
		Metadata:     map[string]any{MetaDisplayName: c.Name, MetaA2ACard: whole},
	}
	if a.AgentName == "" {
		a.AgentName = "agent"
	}
	version := "0.0.0"
	if v, err := semver.StrictNewVersion(c.Version); err == nil {
		a.Version, version = v.String(), v.String()
	}
	switch {
	case len(c.SupportedInterfaces) > 0:
		i := c.SupportedInterfaces[0]
		a.Transport = Transport{Type: bindingType(i.ProtocolBinding), Endpoint: i.URL}
	case c.URL != "":
		a.Transport = Transport{Type: bindingType(string(c.PreferredTransport)), Endpoint: c.URL}
	default:
		return nil, fieldErr("url", "an A2A Agent Card needs url (A2A 0.3) or supportedInterfaces (A2A 1.0)")
	}
	endpoint := ""
	if checkTextEndpoint("", a.Transport.Endpoint) == nil {
		endpoint = a.Transport.Endpoint
	}
	for i, s := range c.Skills {
		if !ValidIdent(s.ID) {
			return nil, fieldErr(fmt.Sprintf("skills[%d].id", i), "%q must match %s and be 1-%d bytes to be a capability id", trunc(s.ID), identRe, MaxIDLen)
		}
		a.Skills = append(a.Skills, Skill{SkillID: s.ID, Version: version, SkillType: SkillTool, Endpoint: endpoint,
			Capabilities: []Capability{{ID: s.ID, Description: truncText(s.Description, MaxTextLen)}}})
		for _, tag := range s.Tags {
			if tag != "" && len(tag) <= MaxIDLen && Printable(tag) && !slices.Contains(a.Tags, tag) && len(a.Tags) < MaxTags {
				a.Tags = append(a.Tags, tag)
			}
		}
	}
	a.SyncCapabilities()
	if err := a.ValidateContent(); err != nil {
		return nil, err
	}
	return a, nil
}

// bindingType is a transport type for an A2A protocol binding: JSONRPC
// (the default), GRPC, HTTP+JSON, or another binding's name, in lower case.
func bindingType(b string) string {
	if b == "" {
		return "jsonrpc"
	}
	t := strings.ToLower(b)
	if len(t) > 32 || !identRe.MatchString(t) {
		return "a2a"
	}
	return t
}

// truncText cuts s to at most n bytes on a UTF-8 boundary.
func truncText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }
