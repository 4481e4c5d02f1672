package view

import (
	"slices"
	"time"

	"github.com/agentd/agentd/record"
)

// Provider is one way to get a capability: an agent's skill that offers it.
type Provider struct {
	Capability   string           `json:"capability"`
	AgentID      string           `json:"agent_id"`
	AgentName    string           `json:"agent_name,omitempty"`
	PeerID       string           `json:"peer_id"`
	SkillID      string           `json:"skill_id,omitempty"`
	SkillType    record.SkillType `json:"skill_type,omitempty"`
	SkillVersion string           `json:"skill_version,omitempty"`
	Version      string           `json:"version,omitempty"` // the capability's version
	Description  string           `json:"description,omitempty"`
	Endpoint     string           `json:"endpoint,omitempty"`
	Transport    record.Transport `json:"transport"`
	Scenes       []string         `json:"scenes,omitempty"`
	Status       record.Status    `json:"status"`
	Confidence   float64          `json:"confidence_hint"`
}

// projection is the capability registry of seed 004 §4.3: capability →
// providers. It is guarded by the view's mutex.
//
// It holds a reference to each providing record, not the providers
// themselves: a Provider is ~270 bytes of fields that all point into the
// record, so a lookup builds them from the record (providersOf) instead
// of the projection keeping one per capability of every agent (at 100 000
// records that was 10 % of the live heap; docs/performance.md, "Memory
// per record").
type projection struct {
	byCap map[string]map[string]provRef // capability → agent id → record
	text  *textIndex                    // free-text index (its own lock)
}

// provRef is an agent in the projection: its record and its effective
// status (a provider's status is the worse of it and its skill's).
type provRef struct {
	sa     *record.SignedAgent
	status record.Status
}

func newProjection() projection {
	return projection{byCap: map[string]map[string]provRef{}, text: newTextIndex()}
}

// providersOf appends to out the providers of capability c in sa: one per
// skill that offers c, or, when no skill does, one for the agent's
// top-level capabilities entry.
func providersOf(out []Provider, sa *record.SignedAgent, c string, status record.Status) []Provider {
	a := &sa.Agent
	covered := false
	for _, s := range a.Skills {
		for i := range s.Capabilities {
			cp := &s.Capabilities[i]
			if cp.ID != c {
				continue
			}
			out = append(out, Provider{
				Capability: cp.ID, AgentID: a.AgentID, AgentName: a.AgentName, PeerID: a.PeerID,
				SkillID: s.SkillID, SkillType: s.SkillType, SkillVersion: s.Version, Version: cp.Version,
				Description: cp.Description, Endpoint: s.Endpoint, Transport: a.Transport,
				Scenes: s.Scenes, Confidence: cp.Confidence(), Status: worse(status, s.Status),
			})
			covered = true
		}
	}
	if ver, ok := a.Capabilities[c]; ok && !covered {
		out = append(out, Provider{Capability: c, AgentID: a.AgentID, AgentName: a.AgentName, PeerID: a.PeerID,
			Version: ver, Endpoint: a.Transport.Endpoint, Transport: a.Transport, Status: worse(status, "")})
	}
	return out
}

// worse returns the worse of an agent status and a skill status.
func worse(agent, skill record.Status) record.Status {
	if agent == "" {
		agent = record.StatusHealthy
	}
	if skill != "" && skill.Rank() > agent.Rank() {
		return skill
	}
	return agent
}

// update replaces the providers of old by those of new (either may be nil)
// and returns capability.changed events for capabilities that gained their
// first provider or lost their last one.
func (p *projection) update(old, new *record.SignedAgent, status record.Status, now time.Time) []Event {
	p.text.update(old, new)
	var gone map[string]bool
	if old != nil {
		id := old.Agent.AgentID
		for _, c := range old.Agent.AllCapabilities() {
			m := p.byCap[c]
			if m == nil {
				continue
			}
			delete(m, id)
			if len(m) == 0 {
				delete(p.byCap, c)
				if gone == nil {
					gone = map[string]bool{}
				}
				gone[c] = true
			}
		}
	}
	var added []string
	agentID := ""
	if new != nil {
		agentID = new.Agent.AgentID
		for _, c := range new.Agent.AllCapabilities() {
			m := p.byCap[c]
			if m == nil {
				m = map[string]provRef{}
				p.byCap[c] = m
				if gone[c] {
					delete(gone, c)
				} else {
					added = append(added, c)
				}
			}
			m[agentID] = provRef{sa: new, status: status}
		}
	} else if old != nil {
		agentID = old.Agent.AgentID
	}
	var events []Event
	removed := make([]string, 0, len(gone))
	for c := range gone {
		removed = append(removed, c)
	}
	slices.Sort(removed)
	for _, c := range removed {
		events = append(events, Event{Type: EventCapabilityChanged, Time: now, Capability: c, Change: "removed", AgentID: agentID})
	}
	for _, c := range added {
		events = append(events, Event{Type: EventCapabilityChanged, Time: now, Capability: c, Change: "added", AgentID: agentID})
	}
	return events
}

// setStatus updates the status of every provider of an agent.
func (p *projection) setStatus(sa *record.SignedAgent, status record.Status) []Event {
	id := sa.Agent.AgentID
	for _, c := range sa.Agent.AllCapabilities() {
		if m := p.byCap[c]; m != nil {
			if r, ok := m[id]; ok {
				r.status = status
				m[id] = r
			}
		}
	}
	return nil
}

// lookup returns the providers of a capability ranked for routing (see
// rank).
func (p *projection) lookup(c string) []Provider {
	m := p.byCap[c]
	if len(m) == 0 {
		return nil
	}
	out := make([]Provider, 0, len(m))
	for _, r := range m {
		out = providersOf(out, r.sa, c, r.status)
	}
	rank(out)
	return out
}

// rank orders providers: by health, bound records before unbound ones
// (no peer_id), then round-robin across peers (the
// record's peer_id; peers in the order of their best provider), each
// peer's providers by confidence_hint. confidence_hint is a claim the
// agent makes about itself: it orders a peer's own providers and decides
// which peer goes first in a round, but a peer whose agents all claim 1.0
// still gets one place per round (docs/protocol.md, "Ranking").
func rank(ps []Provider) {
	byConfidence(ps)
	copy(ps, roundRobin(ps,
		func(a, b Provider) bool {
			return a.Status.Rank() == b.Status.Rank() && (a.PeerID == "") == (b.PeerID == "")
		},
		func(p Provider) string { return p.PeerID }, 0))
}

func byConfidence(ps []Provider) {
	slices.SortFunc(ps, func(a, b Provider) int {
		if r := a.Status.Rank() - b.Status.Rank(); r != 0 {
			return r
		}
		if (a.PeerID == "") != (b.PeerID == "") {
			// Without peer binding (an unbound record): after the bound.
			if b.PeerID == "" {
				return -1
			}
			return 1
		}
		if a.Confidence != b.Confidence {
			if a.Confidence > b.Confidence {
				return -1
			}
			return 1
		}
		if r := compareStrings(a.AgentID, b.AgentID); r != 0 {
			return r
		}
		return compareStrings(a.SkillID, b.SkillID)
	})
}

// Lookup returns the ranked providers of a capability (seed 004
// `lookup(capability)`): duplicate capabilities are ranked by health, then
// confidence_hint.
func (v *View) Lookup(capability string) []Provider {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.proj.lookup(capability)
}

// Capabilities returns the whole projection: every capability with its
// ranked providers.
func (v *View) Capabilities() map[string][]Provider {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make(map[string][]Provider, len(v.proj.byCap))
	for c := range v.proj.byCap {
		out[c] = v.proj.lookup(c)
	}
	return out
}
