package record

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

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
	if len(t) > 32 || !identMatch(t) {
		return "a2a"
	}
	return t
}

// truncText cuts s to at most n bytes on a UTF-8 boundary.
func truncText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// A2AProtocolVersion is the A2A version of the cards agentd answers: 0.3,
// the version github.com/a2aproject/a2a-go v0.3.3 implements. A2A 1.0
// moved url and preferredTransport into supportedInterfaces; agentd reads
// both shapes but answers in 0.3's, which every A2A client of this
// generation (a2a-go's resolver among them) reads, until the library it
// builds on speaks 1.0.
const A2AProtocolVersion = "0.3.0"

// AgentToA2ACard answers a record as an A2A Agent Card, without
// signatures (SignA2ACard adds one). A record made from a card answers
// that card (metadata.a2a_card), in 0.3's shape: a 1.0 card's first
// supportedInterfaces entry becomes url and preferredTransport, the others
// additionalInterfaces. Any other record is mapped: name the display name
// (else agent_name, else agent_id), url the transport endpoint,
// preferredTransport the transport type when it is an A2A binding (JSONRPC
// otherwise), one card skill per record skill (id, name = skill_id,
// description = its first capability's, tags = its capability ids and
// scenes), modes application/json.
func AgentToA2ACard(a *Agent) (*a2a.AgentCard, error) {
	if orig, ok := a.Metadata[MetaA2ACard]; ok {
		b, err := json.Marshal(orig)
		if err != nil {
			return nil, fmt.Errorf("metadata.%s: %w", MetaA2ACard, err)
		}
		var c a2aCard
		if err := json.Unmarshal(b, &c); err != nil {
			return nil, fmt.Errorf("metadata.%s: %w", MetaA2ACard, err)
		}
		card := c.AgentCard
		if len(c.SupportedInterfaces) > 0 && card.URL == "" {
			card.URL = c.SupportedInterfaces[0].URL
			card.PreferredTransport = a2a.TransportProtocol(c.SupportedInterfaces[0].ProtocolBinding)
			for _, i := range c.SupportedInterfaces[1:] {
				card.AdditionalInterfaces = append(card.AdditionalInterfaces, a2a.AgentInterface{URL: i.URL, Transport: a2a.TransportProtocol(i.ProtocolBinding)})
			}
		}
		if card.ProtocolVersion == "" {
			card.ProtocolVersion = A2AProtocolVersion
		}
		card.Signatures = nil
		fillA2ADefaults(&card)
		return &card, nil
	}
	name, _ := a.Metadata[MetaDisplayName].(string)
	if name == "" {
		name = a.AgentName
	}
	if name == "" {
		name = a.AgentID
	}
	card := &a2a.AgentCard{
		Name: name, Description: a.Description, Version: a.Version, ProtocolVersion: A2AProtocolVersion,
		URL: a.Transport.Endpoint, PreferredTransport: a2a.TransportProtocolJSONRPC,
	}
	switch t := a2a.TransportProtocol(strings.ToUpper(a.Transport.Type)); t {
	case a2a.TransportProtocolJSONRPC, a2a.TransportProtocolGRPC, a2a.TransportProtocolHTTPJSON:
		card.PreferredTransport = t
	}
	if card.Version == "" {
		card.Version = "0.0.0"
	}
	for _, s := range a.Skills {
		sk := a2a.AgentSkill{ID: s.SkillID, Name: s.SkillID, Tags: append(s.CapabilityIDs(), s.Scenes...)}
		if len(s.Capabilities) > 0 {
			sk.Description = s.Capabilities[0].Description
		}
		card.Skills = append(card.Skills, sk)
	}
	if len(card.Skills) == 0 {
		// A seed-000 agent with capabilities only: one skill per capability.
		for _, id := range a.AllCapabilities() {
			card.Skills = append(card.Skills, a2a.AgentSkill{ID: id, Name: id, Description: a.Capabilities[id], Tags: []string{id}})
		}
	}
	fillA2ADefaults(card)
	return card, nil
}

// fillA2ADefaults sets the members an A2A card must have.
func fillA2ADefaults(c *a2a.AgentCard) {
	if c.DefaultInputModes == nil {
		c.DefaultInputModes = []string{"application/json"}
	}
	if c.DefaultOutputModes == nil {
		c.DefaultOutputModes = []string{"application/json"}
	}
	if c.Skills == nil {
		c.Skills = []a2a.AgentSkill{}
	}
	for i := range c.Skills {
		if c.Skills[i].Tags == nil {
			c.Skills[i].Tags = []string{}
		}
	}
}

// A2ACardSigningPayload is what a card signature covers (A2A's card
// signing rules): the RFC 8785 form of the card without its signatures
// member.
func A2ACardSigningPayload(c *a2a.AgentCard) ([]byte, error) {
	u := *c
	u.Signatures = nil
	b, err := json.Marshal(u)
	if err != nil {
		return nil, err
	}
	return CanonicalizeJSON(b)
}

// SignA2ACard replaces the card's signatures with one JWS (RFC 7515) made
// with the agent's ECDSA P-256 key: protected header {"alg":"ES256",
// "kid":kid,"typ":"JOSE"}, detached payload A2ACardSigningPayload, the
// signature R‖S (64 bytes) in base64url. Any JWS library checks it with
// the public key of the agent's record: the signing input is
// protected + "." + base64url(payload).
func SignA2ACard(c *a2a.AgentCard, key *ecdsa.PrivateKey, kid string) error {
	payload, err := A2ACardSigningPayload(c)
	if err != nil {
		return err
	}
	hdr, err := json.Marshal(map[string]string{"alg": "ES256", "kid": kid, "typ": "JOSE"})
	if err != nil {
		return err
	}
	protected := base64.RawURLEncoding.EncodeToString(hdr)
	input := protected + "." + base64.RawURLEncoding.EncodeToString(payload)
	h := sha256.Sum256([]byte(input))
	r, s, err := ecdsa.Sign(rand.Reader, key, h[:])
	if err != nil {
		return fmt.Errorf("sign card: %w", err)
	}
	sig := make([]byte, 64)
	r.FillBytes(sig[:32])
	s.FillBytes(sig[32:])
	c.Signatures = []a2a.AgentCardSignature{{Protected: protected, Signature: base64.RawURLEncoding.EncodeToString(sig)}}
	return nil
}
