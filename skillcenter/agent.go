package skillcenter

import (
	"slices"
	"strings"
	"time"

	"github.com/agentd/agentd/record"
)

// Namespace is the record.ExternalAgentID namespace of catalog entries:
// the agent standing for catalog skill S has agent_id
// ExternalAgentID("skillcenter", S).
const Namespace = "skillcenter"

// Metadata keys of the agents that stand for catalog skills.
const (
	// MetaCatalog holds the base URL of the catalog the entry came from.
	MetaCatalog = "skillcenter"
	// MetaDownloadURL holds the skill's downloadUrl (agentd's API serves it
	// back as the skill's downloadUrl).
	MetaDownloadURL = "downloadUrl"
)

// Match is one catalog answer for the resolver: the agent standing for a
// catalog skill, the skill itself, and how fresh the answer is.
type Match struct {
	// Agent is the catalog entry as an agent object (see Skill.Agent). It
	// carries no key and no signature.
	Agent *record.Agent
	// Skill is the catalog entry.
	Skill Skill
	// Stale marks an expired cache entry served because the catalog could
	// not be asked.
	Stale bool
	// Age is how long ago the catalog gave this answer.
	Age time.Duration
}

// Agent maps a catalog skill to the agent object the resolver returns: one
// agent with one skill.
//
//   - agent_id: record.ExternalAgentID("skillcenter", id); the skill id is
//     kept in metadata.external_id;
//   - agent_name: the skill id as a DNS label; metadata.display_name: the
//     skill's name; description: its description;
//   - transport: http for an http(s) endpoint, ws for ws(s), tcp
//     otherwise, with the endpoint as given;
//   - skills: the skill (id, version, type, capabilities, scenes, the
//     endpoint when it fits a seed-001 field, status when valid);
//   - tags: the keywords; capabilities: filled from the skill;
//   - metadata.skillcenter: catalogURL; metadata.downloadUrl: downloadUrl.
//
// The agent has no public_key, peer_id, seq, issued_at or ttl_seconds: it
// passes record.Agent.ValidateContent, not Validate. It fails when the
// skill does not pass Skill.Validate.
func (s *Skill) Agent(catalogURL string) (*record.Agent, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	sk := record.Skill{SkillID: s.ID, Version: s.Version, SkillType: record.SkillType(s.Type), Scenes: slices.Clone(s.Scenes)}
	if len(sk.Scenes) == 0 {
		sk.Scenes = nil
	}
	for _, c := range s.Capabilities {
		sk.Capabilities = append(sk.Capabilities, record.Capability{ID: c})
	}
	if !strings.ContainsAny(s.Endpoint, ";|,") {
		sk.Endpoint = s.Endpoint
	}
	if st := record.Status(s.Status); st.Valid() {
		sk.Status = st
	}
	a := &record.Agent{
		AgentID:     record.ExternalAgentID(Namespace, s.ID),
		AgentName:   record.DNSLabel(s.ID),
		Description: s.Description,
		Transport:   record.Transport{Type: transportOf(s.Endpoint), Endpoint: s.Endpoint},
		Skills:      []record.Skill{sk},
		Metadata:    map[string]any{record.MetaExternalID: s.ID},
	}
	if s.Name != "" {
		a.Metadata[record.MetaDisplayName] = s.Name
	}
	if catalogURL != "" {
		a.Metadata[MetaCatalog] = catalogURL
	}
	if s.DownloadURL != "" {
		a.Metadata[MetaDownloadURL] = s.DownloadURL
	}
	for _, k := range s.Keywords {
		if k != "" && !slices.Contains(a.Tags, k) {
			a.Tags = append(a.Tags, k)
		}
	}
	a.SyncCapabilities()
	if err := a.ValidateContent(); err != nil {
		return nil, err
	}
	return a, nil
}
