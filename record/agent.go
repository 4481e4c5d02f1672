package record

import (
	"encoding/json"
	"maps"
	"slices"
	"time"
)

// SkillType is the seed-001 classification of a skill.
type SkillType string

// The three skill types of seed 001 §2.1.
const (
	SkillEnterprise  SkillType = "enterprise-skill"
	SkillTool        SkillType = "tool-skill"
	SkillIntegration SkillType = "integration-skill"
)

// Valid reports whether t is one of the seed-001 skill types.
func (t SkillType) Valid() bool {
	switch t {
	case SkillEnterprise, SkillTool, SkillIntegration:
		return true
	}
	return false
}

// Status is the health of a skill or agent (seed 001 §8.1).
type Status string

// Health states, best first.
const (
	StatusHealthy     Status = "HEALTHY"
	StatusDegraded    Status = "DEGRADED"
	StatusUnhealthy   Status = "UNHEALTHY"
	StatusMaintenance Status = "MAINTENANCE"
)

// Valid reports whether s is one of the seed-001 health states.
func (s Status) Valid() bool {
	switch s {
	case StatusHealthy, StatusDegraded, StatusUnhealthy, StatusMaintenance:
		return true
	}
	return false
}

// Rank orders statuses for routing: lower is better. Unknown sorts last.
func (s Status) Rank() int {
	switch s {
	case StatusHealthy, "":
		return 0
	case StatusDegraded:
		return 1
	case StatusMaintenance:
		return 2
	case StatusUnhealthy:
		return 3
	}
	return 4
}

// Transport says how an agent is reached (seed 000 §2).
type Transport struct {
	Type     string `json:"type"`
	Endpoint string `json:"endpoint"`
}

// Capability is one discrete ability of a skill (seed 001 skills, seed 004
// AgentCapability).
type Capability struct {
	ID             string          `json:"id"`
	Version        string          `json:"version,omitempty"`
	Description    string          `json:"description,omitempty"`
	InputSchema    json.RawMessage `json:"input_schema,omitempty"`
	OutputSchema   json.RawMessage `json:"output_schema,omitempty"`
	ConfidenceHint *float64        `json:"confidence_hint,omitempty"`
}

// Confidence returns the confidence hint, or 0 when none is set.
func (c Capability) Confidence() float64 {
	if c.ConfidenceHint == nil {
		return 0
	}
	return *c.ConfidenceHint
}

// Skill is a seed-001 skill offered by an agent.
type Skill struct {
	SkillID      string       `json:"skill_id"`
	Version      string       `json:"version"`
	SkillType    SkillType    `json:"skill_type"`
	Endpoint     string       `json:"endpoint,omitempty"`
	Capabilities []Capability `json:"capabilities"`
	Scenes       []string     `json:"scenes,omitempty"`
	Status       Status       `json:"status,omitempty"`
}

// Capability returns the capability with the given id, if the skill has it.
func (s *Skill) Capability(id string) (Capability, bool) {
	for _, c := range s.Capabilities {
		if c.ID == id {
			return c, true
		}
	}
	return Capability{}, false
}

// CapabilityIDs returns the ids of the skill's capabilities in order.
func (s *Skill) CapabilityIDs() []string {
	ids := make([]string, len(s.Capabilities))
	for i, c := range s.Capabilities {
		ids[i] = c.ID
	}
	return ids
}

// Agent is the agent object of seed 000 §2, extended with the fields agentd
// needs to carry skills, liveness and the peer binding. It is the one data
// model every transport carries; the signatures cover its RFC 8785 canonical
// form.
type Agent struct {
	AgentID      string            `json:"agent_id"`
	AgentName    string            `json:"agent_name,omitempty"`
	Capabilities map[string]string `json:"capabilities"`
	PublicKey    string            `json:"public_key,omitempty"`
	Certificate  string            `json:"certificate,omitempty"`
	Transport    Transport         `json:"transport"`
	Metadata     map[string]any    `json:"metadata,omitempty"`

	PeerID      string   `json:"peer_id,omitempty"`
	Description string   `json:"description,omitempty"`
	Version     string   `json:"version,omitempty"`
	Skills      []Skill  `json:"skills,omitempty"`
	Tags        []string `json:"tags,omitempty"`
	TenantScope string   `json:"tenant_scope,omitempty"`
	Seq         uint64   `json:"seq,omitempty"`
	IssuedAt    string   `json:"issued_at,omitempty"`
	TTLSeconds  int64    `json:"ttl_seconds,omitempty"`

	// KeyRotation, when set, is the statement by the agent's previous key
	// that public_key replaces it (rotation.go); its new_key must be
	// public_key's key.
	KeyRotation *KeyRotation `json:"key_rotation,omitempty"`
}

// Reserved metadata keys (seed 000 §2).
const (
	MetaMCPVersion = "__mcp_version"
	MetaOS         = "__os"
	MetaArch       = "__arch"
)

// Issued returns IssuedAt parsed, or the zero time when it does not parse.
func (a *Agent) Issued() time.Time {
	t, err := ParseTimestamp(a.IssuedAt)
	if err != nil {
		return time.Time{}
	}
	return t
}

// ExpiresAt is the moment the record stops being valid: issued_at + ttl_seconds.
func (a *Agent) ExpiresAt() time.Time {
	return a.Issued().Add(time.Duration(a.TTLSeconds) * time.Second)
}

// Skill returns the skill with the given id.
func (a *Agent) Skill(id string) (*Skill, bool) {
	for i := range a.Skills {
		if a.Skills[i].SkillID == id {
			return &a.Skills[i], true
		}
	}
	return nil, false
}

// Offers reports whether the agent offers the capability (and the skill, when
// skillID is non-empty). An empty capability matches any capability of the
// skill. Agent-level capabilities (the seed-000 map) count for skill-less
// queries.
func (a *Agent) Offers(skillID, capability string) bool {
	if skillID == "" && capability == "" {
		return true
	}
	for i := range a.Skills {
		s := &a.Skills[i]
		if skillID != "" && s.SkillID != skillID {
			continue
		}
		if capability == "" {
			return true
		}
		if _, ok := s.Capability(capability); ok {
			return true
		}
	}
	if skillID == "" {
		_, ok := a.Capabilities[capability]
		return ok
	}
	return false
}

// AllCapabilities returns the sorted set of capability ids the agent offers,
// from its skills and from the agent-level map.
func (a *Agent) AllCapabilities() []string {
	set := map[string]struct{}{}
	for k := range a.Capabilities {
		set[k] = struct{}{}
	}
	for _, s := range a.Skills {
		for _, c := range s.Capabilities {
			set[c.ID] = struct{}{}
		}
	}
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// AllScenes returns the sorted set of scenes of all skills.
func (a *Agent) AllScenes() []string {
	set := map[string]struct{}{}
	for _, s := range a.Skills {
		for _, sc := range s.Scenes {
			set[sc] = struct{}{}
		}
	}
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// SkillTypes returns the sorted set of skill types the agent offers.
func (a *Agent) SkillTypes() []string {
	set := map[string]struct{}{}
	for _, s := range a.Skills {
		set[string(s.SkillType)] = struct{}{}
	}
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// SyncCapabilities fills the seed-000 agent-level capabilities map from the
// skills, so that seed-000 peers that only read the map see every capability.
// Existing entries are kept.
func (a *Agent) SyncCapabilities() {
	copied := false // a decoded record's map may be shared (intern.go): copy before adding
	if a.Capabilities == nil {
		a.Capabilities = map[string]string{}
		copied = true
	}
	for _, s := range a.Skills {
		for _, c := range s.Capabilities {
			if _, ok := a.Capabilities[c.ID]; ok {
				continue
			}
			v := c.Version
			if v == "" {
				v = s.Version
			}
			if !copied {
				a.Capabilities = maps.Clone(a.Capabilities)
				copied = true
			}
			a.Capabilities[c.ID] = v
		}
	}
}

// IssuedAtLayout is the layout Fill writes issued_at in: RFC 3339, UTC,
// millisecond precision.
const IssuedAtLayout = "2006-01-02T15:04:05.000Z07:00"

// Fill sets the identity fields that whoever signs the record owns. agent_id,
// peer_id and public_key are set only when they are empty (a record that
// names them already keeps them, and Sign then checks they are the
// signer's); seq, issued_at (UTC, RFC 3339, millisecond precision) and
// ttl_seconds (ttl truncated to whole seconds) are always set. It finishes
// with SyncCapabilities so the seed-000 capabilities map lists every
// capability of the skills.
func (a *Agent) Fill(agentID, peerID, publicKeyPEM string, seq uint64, now time.Time, ttl time.Duration) {
	if a.AgentID == "" {
		a.AgentID = agentID
	}
	if a.PeerID == "" {
		a.PeerID = peerID
	}
	if a.PublicKey == "" {
		a.PublicKey = publicKeyPEM
	}
	a.Seq = seq
	a.IssuedAt = now.UTC().Format(IssuedAtLayout)
	a.TTLSeconds = int64(ttl / time.Second)
	a.SyncCapabilities()
}
