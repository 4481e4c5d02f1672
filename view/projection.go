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
	skillStatus  record.Status
}

// projection is the capability registry of seed 004 §4.3: capability →
// providers. It is guarded by the view's mutex.
type projection struct {
	byCap map[string]map[string][]Provider // capability → agent id → providers
	text  *textIndex                       // free-text index (its own lock)
}

func newProjection() projection {
	return projection{byCap: map[string]map[string][]Provider{}, text: newTextIndex()}
}

func providersOf(sa *record.SignedAgent, status record.Status) []Provider {
	a := &sa.Agent
	var out []Provider
	covered := map[string]bool{}
	for _, s := range a.Skills {
		for _, c := range s.Capabilities {
			p := Provider{
				Capability: c.ID, AgentID: a.AgentID, AgentName: a.AgentName, PeerID: a.PeerID,
				SkillID: s.SkillID, SkillType: s.SkillType, SkillVersion: s.Version, Version: c.Version,
				Description: c.Description, Endpoint: s.Endpoint, Transport: a.Transport,
				Scenes: s.Scenes, Confidence: c.Confidence(), skillStatus: s.Status,
			}
			p.Status = worse(status, s.Status)
			out = append(out, p)
			covered[c.ID] = true
		}
	}
	for c, ver := range a.Capabilities {
		if covered[c] {
			continue
		}
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
	gone := map[string]bool{}
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
				gone[c] = true
			}
		}
	}
	var added []string
	agentID := ""
	if new != nil {
		agentID = new.Agent.AgentID
		for _, pr := range providersOf(new, status) {
			m := p.byCap[pr.Capability]
			if m == nil {
				m = map[string][]Provider{}
				p.byCap[pr.Capability] = m
				if gone[pr.Capability] {
					delete(gone, pr.Capability)
				} else {
					added = append(added, pr.Capability)
				}
			}
			m[agentID] = append(m[agentID], pr)
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
		ps := p.byCap[c][id]
		for i := range ps {
			ps[i].Status = worse(status, ps[i].skillStatus)
		}
	}
	return nil
}

// lookup returns the providers of a capability ranked for routing (see
// rank).
func (p *projection) lookup(c string) []Provider {
	var out []Provider
	for _, ps := range p.byCap[c] {
		out = append(out, ps...)
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
		func(p Provider) string { return p.PeerID }))
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
