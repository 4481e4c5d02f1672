package record

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"unicode/utf8"

	"github.com/Masterminds/semver/v3"
)

// AgentCard is the seed-002 agent_card (§2): the JSON an RTFS agent
// registers with a discovery registry (rtfs.registry.register) and that
// rtfs.registry.discover returns.
type AgentCard struct {
	AgentID         string            `json:"agent_id"`
	AgentProfileURI string            `json:"agent_profile_uri,omitempty"`
	Name            string            `json:"name"`
	Version         string            `json:"version,omitempty"`
	Description     string            `json:"description,omitempty"`
	Capabilities    []CardCapability  `json:"capabilities"`
	Communication   CardCommunication `json:"communication"`
	DiscoveryTags   []string          `json:"discovery_tags,omitempty"`
	Metadata        map[string]any    `json:"metadata,omitempty"`
}

// CardCapability is one capability of an agent_card.
type CardCapability struct {
	CapabilityID    string     `json:"capability_id"`
	Description     string     `json:"description,omitempty"`
	InputSchemaRef  *SchemaRef `json:"input_schema_ref,omitempty"`
	OutputSchemaRef *SchemaRef `json:"output_schema_ref,omitempty"`
}

// SchemaRef is an agent_card schema reference: the seed allows a
// "reference or inline schema", so it is either a URI (a JSON string) or an
// inline JSON Schema (an object or a boolean).
type SchemaRef struct {
	URI    string
	Inline json.RawMessage
}

// MarshalJSON writes the URI as a string, or the inline schema.
func (r SchemaRef) MarshalJSON() ([]byte, error) {
	if len(r.Inline) > 0 {
		return r.Inline, nil
	}
	return json.Marshal(r.URI)
}

// UnmarshalJSON reads a string as a URI and anything else as an inline
// schema (Validate refuses what is not an object or a boolean, naming the
// member).
func (r *SchemaRef) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		*r = SchemaRef{}
		return json.Unmarshal(b, &r.URI)
	}
	*r = SchemaRef{Inline: append(json.RawMessage(nil), b...)}
	return nil
}

// schema returns the JSON Schema the reference stands for: the inline
// schema, or {"$ref": URI}.
func (r *SchemaRef) schema() json.RawMessage {
	if r == nil {
		return nil
	}
	if len(r.Inline) > 0 {
		return r.Inline
	}
	b, _ := json.Marshal(map[string]string{"$ref": r.URI})
	return b
}

// schemaRefOf is the inverse of schema: {"$ref": "x"} alone becomes the URI
// "x", any other schema is inline.
func schemaRefOf(raw json.RawMessage) *SchemaRef {
	if len(raw) == 0 {
		return nil
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) == nil && len(m) == 1 {
		var uri string
		if ref, ok := m["$ref"]; ok && json.Unmarshal(ref, &uri) == nil {
			return &SchemaRef{URI: uri}
		}
	}
	return &SchemaRef{Inline: raw}
}

// CardCommunication says how an agent_card's agent is reached.
type CardCommunication struct {
	Protocols []string       `json:"protocols,omitempty"`
	Endpoints []CardEndpoint `json:"endpoints"`
}

// CardEndpoint is one endpoint of an agent_card.
type CardEndpoint struct {
	Protocol string         `json:"protocol"`
	URI      string         `json:"uri"`
	Details  map[string]any `json:"details,omitempty"`
}

// Metadata keys the agent_card mapping adds to the agent record; a card may
// not use them in its own metadata.
const (
	MetaAgentProfileURI = "agent_profile_uri"
	MetaCommunication   = "communication"
	// MetaSkillType, when a card's metadata holds a valid skill type, is the
	// type of the skill the card's capabilities form (default tool-skill).
	MetaSkillType = "skill_type"
)

// CardNamespace is the ExternalAgentID namespace of agent_card ids.
const CardNamespace = "rtfs"

const (
	maxCardEndpoints = 16
	maxCardProtocols = 16
)

var cardReservedMeta = []string{MetaExternalID, MetaDisplayName, MetaAgentProfileURI, MetaCommunication}

// ParseAgentCard decodes and validates an agent_card.
func ParseAgentCard(b []byte) (*AgentCard, error) {
	if len(b) > MaxMessageBytes {
		return nil, fmt.Errorf("%w: agent_card is %d bytes, limit %d", ErrTooLarge, len(b), MaxMessageBytes)
	}
	if _, err := CanonicalizeJSON(b); err != nil {
		return nil, err
	}
	var c AgentCard
	if err := checkMemberCase(b, reflect.TypeOf(c), ""); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, jsonFieldErr("", err)
	}
	if c.Capabilities == nil {
		c.Capabilities = []CardCapability{} // absent or null: no capabilities
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// Validate checks the card, naming the offending field.
func (c *AgentCard) Validate() error {
	if c.AgentID == "" {
		return fieldErr("agent_id", "is required")
	}
	if len(c.AgentID) > MaxIDLen || !Printable(c.AgentID) {
		return fieldErr("agent_id", "must be 1-%d printable bytes", MaxIDLen)
	}
	if len(c.AgentProfileURI) > MaxEndpointLen || !Printable(c.AgentProfileURI) {
		return fieldErr("agent_profile_uri", "must be printable and at most %d bytes", MaxEndpointLen)
	}
	if c.Name == "" {
		return fieldErr("name", "is required")
	}
	if len(c.Name) > MaxShortTextLen || !Printable(c.Name) {
		return fieldErr("name", "must be printable and at most %d bytes", MaxShortTextLen)
	}
	if c.Version != "" {
		if len(c.Version) > MaxShortTextLen {
			return fieldErr("version", "is longer than %d bytes", MaxShortTextLen)
		}
		if _, err := semver.StrictNewVersion(c.Version); err != nil {
			return fieldErr("version", "%q is not a semantic version (MAJOR.MINOR.PATCH): %v", trunc(c.Version), err)
		}
	}
	if len(c.Description) > MaxTextLen || !printableText(c.Description) {
		return fieldErr("description", "must be valid UTF-8 of at most %d bytes", MaxTextLen)
	}
	if len(c.Capabilities) > MaxCapabilitiesPer {
		return fieldErr("capabilities", "has %d capabilities, more than %d", len(c.Capabilities), MaxCapabilitiesPer)
	}
	seen := map[string]bool{}
	for i, cp := range c.Capabilities {
		path := fmt.Sprintf("capabilities[%d]", i)
		if !ValidIdent(cp.CapabilityID) {
			return fieldErr(path+".capability_id", "%q must match %s and be 1-%d bytes", trunc(cp.CapabilityID), identRe, MaxIDLen)
		}
		if seen[cp.CapabilityID] {
			return fieldErr(path+".capability_id", "duplicate capability %q", cp.CapabilityID)
		}
		seen[cp.CapabilityID] = true
		if len(cp.Description) > MaxTextLen || !printableText(cp.Description) {
			return fieldErr(path+".description", "must be valid UTF-8 of at most %d bytes", MaxTextLen)
		}
		for name, r := range map[string]*SchemaRef{"input_schema_ref": cp.InputSchemaRef, "output_schema_ref": cp.OutputSchemaRef} {
			if r == nil {
				continue
			}
			if len(r.Inline) > 0 {
				if err := validateSchema(path+"."+name, r.Inline); err != nil {
					return err
				}
				if string(r.Inline) == "null" {
					return fieldErr(path+"."+name, "must be a schema reference (string) or an inline schema (object)")
				}
				continue
			}
			if r.URI == "" || len(r.URI) > MaxEndpointLen || !Printable(r.URI) {
				return fieldErr(path+"."+name, "must be a printable reference of 1-%d bytes", MaxEndpointLen)
			}
		}
	}
	if len(c.Communication.Protocols) > maxCardProtocols {
		return fieldErr("communication.protocols", "has %d entries, more than %d", len(c.Communication.Protocols), maxCardProtocols)
	}
	for i, p := range c.Communication.Protocols {
		if len(p) > 32 || !identMatch(p) {
			return fieldErr(fmt.Sprintf("communication.protocols[%d]", i), "must be a short identifier such as http or grpc")
		}
	}
	if len(c.Communication.Endpoints) == 0 {
		return fieldErr("communication.endpoints", "at least one endpoint is required")
	}
	if len(c.Communication.Endpoints) > maxCardEndpoints {
		return fieldErr("communication.endpoints", "has %d entries, more than %d", len(c.Communication.Endpoints), maxCardEndpoints)
	}
	for i, e := range c.Communication.Endpoints {
		path := fmt.Sprintf("communication.endpoints[%d]", i)
		if len(e.Protocol) > 32 || !identMatch(e.Protocol) {
			return fieldErr(path+".protocol", "must be a short identifier such as http or grpc")
		}
		if e.URI == "" || len(e.URI) > MaxEndpointLen || !Printable(e.URI) {
			return fieldErr(path+".uri", "must be printable and 1-%d bytes", MaxEndpointLen)
		}
	}
	if len(c.DiscoveryTags) > MaxTags {
		return fieldErr("discovery_tags", "has %d tags, more than %d", len(c.DiscoveryTags), MaxTags)
	}
	for i, t := range c.DiscoveryTags {
		if t == "" || len(t) > MaxIDLen || !Printable(t) {
			return fieldErr(fmt.Sprintf("discovery_tags[%d]", i), "must be 1-%d printable bytes", MaxIDLen)
		}
	}
	if len(c.Metadata) > MaxMetadataKeys-len(cardReservedMeta) {
		return fieldErr("metadata", "has %d keys, more than %d", len(c.Metadata), MaxMetadataKeys-len(cardReservedMeta))
	}
	for _, k := range cardReservedMeta {
		if _, ok := c.Metadata[k]; ok {
			return fieldErr("metadata."+k, "is reserved for the agent_card mapping")
		}
	}
	return validateMetadata(c.Metadata)
}

// ToAgent converts the card into an unsigned agent record (the signer fills
// the identity fields, see Fill). The mapping:
//
//   - agent_id: kept when it is a UUIDv4, else ExternalAgentID("rtfs", id)
//     with the card's id in metadata.external_id;
//   - name: metadata.display_name, and agent_name = DNSLabel(name);
//   - version, description: the record's version and description;
//   - capabilities: one skill whose skill_id is the agent_name (or "agent"
//     when the name gives no label), version the card's version, type
//     metadata.skill_type when that is a skill type, else tool-skill, and
//     endpoint the first endpoint's uri when the text form can carry it;
//     each capability keeps its id and description, a schema reference
//     "x" becomes the schema {"$ref": "x"} and an inline schema stays inline;
//   - communication: the first endpoint is the transport (type = protocol,
//     endpoint = uri) and the whole object is kept in metadata.communication;
//   - agent_profile_uri: metadata.agent_profile_uri;
//   - discovery_tags: tags; metadata: kept.
func (c *AgentCard) ToAgent() (*Agent, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	id, external := agentIDFor(CardNamespace, c.AgentID)
	a := &Agent{
		AgentID:      id,
		AgentName:    DNSLabel(c.Name),
		Capabilities: map[string]string{},
		Transport:    Transport{Type: c.Communication.Endpoints[0].Protocol, Endpoint: c.Communication.Endpoints[0].URI},
		Description:  c.Description,
		Version:      c.Version,
		Tags:         slices.Clone(c.DiscoveryTags),
	}
	meta, err := jsonValue(c.Metadata)
	if err != nil {
		return nil, fieldErr("metadata", "%v", err)
	}
	a.Metadata, _ = meta.(map[string]any)
	if a.Metadata == nil {
		a.Metadata = map[string]any{}
	}
	if external {
		a.Metadata[MetaExternalID] = c.AgentID
	}
	a.Metadata[MetaDisplayName] = c.Name
	if c.AgentProfileURI != "" {
		a.Metadata[MetaAgentProfileURI] = c.AgentProfileURI
	}
	comm, err := jsonValue(c.Communication)
	if err != nil {
		return nil, fieldErr("communication", "%v", err)
	}
	a.Metadata[MetaCommunication] = comm
	if len(c.Capabilities) > 0 {
		skillID := a.AgentName
		if skillID == "" {
			skillID = "agent"
		}
		version := c.Version
		if version == "" {
			version = "0.0.0"
		}
		st := SkillTool
		if t, ok := c.Metadata[MetaSkillType].(string); ok && SkillType(t).Valid() {
			st = SkillType(t)
		}
		s := Skill{SkillID: skillID, Version: version, SkillType: st}
		if ep := c.Communication.Endpoints[0].URI; checkTextEndpoint("", ep) == nil {
			s.Endpoint = ep
		}
		for _, cp := range c.Capabilities {
			s.Capabilities = append(s.Capabilities, Capability{
				ID:           cp.CapabilityID,
				Description:  cp.Description,
				InputSchema:  cp.InputSchemaRef.schema(),
				OutputSchema: cp.OutputSchemaRef.schema(),
			})
		}
		a.Skills = []Skill{s}
	}
	a.SyncCapabilities()
	if err := a.ValidateContent(); err != nil {
		return nil, err
	}
	return a, nil
}

// CardFromAgent converts an agent record into an agent_card, inverting
// AgentCard.ToAgent for records that came from a card: agent_id is
// metadata.external_id when set, name metadata.display_name (else the
// agent_name, else the agent_id), communication metadata.communication
// (else the transport as the one endpoint). The capabilities are those of
// every skill in order, then the agent-level capabilities no skill has.
func CardFromAgent(a *Agent) *AgentCard {
	c := &AgentCard{
		AgentID:       a.AgentID,
		Name:          a.AgentName,
		Version:       a.Version,
		Description:   a.Description,
		DiscoveryTags: slices.Clone(a.Tags),
		Capabilities:  []CardCapability{},
	}
	if s, ok := a.Metadata[MetaExternalID].(string); ok && s != "" {
		c.AgentID = s
	}
	if s, ok := a.Metadata[MetaDisplayName].(string); ok && s != "" {
		c.Name = s
	}
	if c.Name == "" {
		c.Name = a.AgentID
	}
	if s, ok := a.Metadata[MetaAgentProfileURI].(string); ok {
		c.AgentProfileURI = s
	}
	if v, ok := a.Metadata[MetaCommunication]; ok {
		if b, err := json.Marshal(v); err == nil {
			var comm CardCommunication
			if json.Unmarshal(b, &comm) == nil && len(comm.Endpoints) > 0 {
				c.Communication = comm
			}
		}
	}
	if len(c.Communication.Endpoints) == 0 {
		c.Communication = CardCommunication{
			Protocols: []string{a.Transport.Type},
			Endpoints: []CardEndpoint{{Protocol: a.Transport.Type, URI: a.Transport.Endpoint}},
		}
	}
	seen := map[string]bool{}
	for _, s := range a.Skills {
		for _, cp := range s.Capabilities {
			if seen[cp.ID] {
				continue
			}
			seen[cp.ID] = true
			c.Capabilities = append(c.Capabilities, CardCapability{
				CapabilityID:    cp.ID,
				Description:     cp.Description,
				InputSchemaRef:  schemaRefOf(cp.InputSchema),
				OutputSchemaRef: schemaRefOf(cp.OutputSchema),
			})
		}
	}
	var rest []string
	for k := range a.Capabilities {
		if !seen[k] {
			rest = append(rest, k)
		}
	}
	slices.Sort(rest)
	for _, k := range rest {
		c.Capabilities = append(c.Capabilities, CardCapability{CapabilityID: k})
	}
	for k, v := range a.Metadata {
		if slices.Contains(cardReservedMeta, k) {
			continue
		}
		if c.Metadata == nil {
			c.Metadata = map[string]any{}
		}
		c.Metadata[k] = v
	}
	return c
}

// jsonValue returns v as the generic JSON value encoding/json would decode
// from its encoding (map[string]any, []any, float64, string, bool, nil), so
// that a record built in process equals the same record after a round trip.
func jsonValue(v any) (any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// printableText is printable but also allows tab, newline and carriage
// return (for descriptions).
func printableText(s string) bool {
	for _, r := range s {
		if (r < 0x20 && r != '\t' && r != '\n' && r != '\r') || r == 0x7f {
			return false
		}
	}
	return utf8.ValidString(s)
}
