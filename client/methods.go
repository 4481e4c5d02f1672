package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/agentd/agentd/record"
)

// AgentResult is one agent of an answer: the Announce of its record and
// where the answer came from.
type AgentResult struct {
	// Announce is the wire form (agent object and signatures).
	Announce record.Announce
	// Agent is the decoded agent object.
	Agent record.Agent
	// Source is where the answer came from: local, gossip, lan, dht,
	// skillcenter, registry or cache.
	Source string
	// Age is how long ago the answer was last confirmed.
	Age time.Duration
	// Stale marks an expired cache entry.
	Stale bool
	// Status is the agent's health, when known.
	Status record.Status
	// Unbound marks a record without peer binding (a seed-000 agent that
	// signs alone; see record.SignedAgent.Unbound).
	Unbound bool
}

type wireEntry struct {
	ProtocolVersion string          `json:"protocol_version"`
	Agent           json.RawMessage `json:"agent"`
	Signature       string          `json:"signature,omitempty"`
	PeerSignature   string          `json:"peer_signature,omitempty"`
	Source          string          `json:"source"`
	AgeMS           int64           `json:"age_ms"`
	Stale           bool            `json:"stale"`
	Status          record.Status   `json:"status,omitempty"`
	Unbound         bool            `json:"unbound,omitempty"`
}

// UnmarshalJSON decodes an entry of the API.
func (r *AgentResult) UnmarshalJSON(b []byte) error {
	var w wireEntry
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	// The agent object is signed: refuse JSON that is not I-JSON (a
	// duplicate member, invalid UTF-8), which readers could disagree on.
	if _, err := record.CanonicalizeJSON(w.Agent); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	var a record.Agent
	if err := record.DecodeAgent(w.Agent, &a); err != nil {
		return err
	}
	*r = AgentResult{
		Announce: record.Announce{ProtocolVersion: w.ProtocolVersion, Agent: w.Agent, Signature: w.Signature, PeerSignature: w.PeerSignature},
		Agent:    a, Source: w.Source, Age: time.Duration(w.AgeMS) * time.Millisecond, Stale: w.Stale, Status: w.Status, Unbound: w.Unbound,
	}
	return nil
}

// MarshalJSON writes the entry as the API does.
func (r AgentResult) MarshalJSON() ([]byte, error) {
	return json.Marshal(wireEntry{ProtocolVersion: r.Announce.ProtocolVersion, Agent: r.Announce.Agent, Signature: r.Announce.Signature,
		PeerSignature: r.Announce.PeerSignature, Source: r.Source, AgeMS: r.Age.Milliseconds(), Stale: r.Stale, Status: r.Status, Unbound: r.Unbound})
}

// Signed returns the signed record of the entry (its signatures are not
// verified here: use SignedAgent.VerifySignatures or a trust.Verifier).
func (r *AgentResult) Signed() (*record.SignedAgent, error) {
	return record.FromAnnounceUnbound(r.Announce)
}

// Query is a discovery query (GET /agents). Empty fields match anything;
// all given fields must match.
type Query struct {
	Capability string
	Skill      string
	Scene      string
	Type       string
	Tags       []string
	Tenant     string
	// Version is a semver constraint such as ">=1.2.0 <2.0.0".
	Version string
	// Text is free text over names, descriptions, ids and tags.
	Text  string
	Limit int
	// IncludeStale returns expired cache entries too, marked Stale.
	IncludeStale bool
	// LocalOnly answers from the daemon's view and cache only.
	LocalOnly bool
}

// Filtered reports whether q selects by anything: a capability, skill,
// scene, type, tag, tenant, version range or text.
func (q Query) Filtered() bool {
	return q.Capability != "" || q.Skill != "" || q.Scene != "" || q.Type != "" || len(q.Tags) > 0 ||
		q.Tenant != "" || q.Version != "" || q.Text != ""
}

func (q Query) values() url.Values {
	v := url.Values{}
	set := func(k, s string) {
		if s != "" {
			v.Set(k, s)
		}
	}
	set("capability", q.Capability)
	set("skill", q.Skill)
	set("scene", q.Scene)
	set("type", q.Type)
	set("tenant", q.Tenant)
	set("version", q.Version)
	set("q", q.Text)
	for _, t := range q.Tags {
		v.Add("tag", t)
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.IncludeStale {
		v.Set("include_stale", "true")
	}
	if q.LocalOnly {
		v.Set("local_only", "true")
	}
	return v
}

type agentList struct {
	Agents []AgentResult `json:"agents"`
	Total  int           `json:"total"`
}

// Discover finds agents. With filters, no match is an *Error with code
// DISC_002 (see IsNotFound); without any, it lists the live agents.
func (c *Client) Discover(ctx context.Context, q Query) ([]AgentResult, error) {
	var l agentList
	if err := c.do(ctx, "GET", "/agents", q.values(), nil, &l); err != nil {
		return nil, err
	}
	return l.Agents, nil
}

// List returns the live agents the daemon knows (at most 1 000).
func (c *Client) List(ctx context.Context) ([]AgentResult, error) {
	return c.Discover(ctx, Query{Limit: 1000})
}

// Get returns one agent by agent_id.
func (c *Client) Get(ctx context.Context, agentID string) (*AgentResult, error) {
	var r AgentResult
	if err := c.do(ctx, "GET", "/agents/"+url.PathEscape(agentID), nil, nil, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// Register asks the daemon to sign and host an agent: its identity fields
// (agent_id, default the daemon's own; peer_id; public_key; seq;
// issued_at; ttl_seconds) are filled by the daemon. Registering the same
// content again returns the hosted record unchanged.
func (c *Client) Register(ctx context.Context, a *record.Agent) (*record.SignedAgent, error) {
	ab, err := json.Marshal(a)
	if err != nil {
		return nil, fmt.Errorf("encode agent: %w", err)
	}
	body, err := json.Marshal(struct {
		ProtocolVersion string          `json:"protocol_version"`
		Agent           json.RawMessage `json:"agent"`
	}{record.ProtocolVersion, ab})
	if err != nil {
		return nil, err
	}
	return c.announce(ctx, body)
}

// RegisterSigned hosts a record the agent signed with its own key: one
// naming the daemon's peer_id (see Health), which co-signs it; or, with a
// daemon in registry mode and a discover:write token, one naming another
// peer or none (a seed-000 agent's unbound record), which it keeps as a
// registry entry and answers as it is.
func (c *Client) RegisterSigned(ctx context.Context, sa *record.SignedAgent) (*record.SignedAgent, error) {
	return c.announce(ctx, sa.MarshalAnnounce())
}

func (c *Client) announce(ctx context.Context, body []byte) (*record.SignedAgent, error) {
	var raw json.RawMessage
	if err := c.do(ctx, "POST", "/agents", nil, body, &raw); err != nil {
		return nil, err
	}
	// The answer is the record as hosted or learned: a seed-000 agent's
	// registration in registry mode is answered with its unbound record.
	sa, _, err := record.ParseAnnounceUnbound(raw)
	if err != nil {
		return nil, fmt.Errorf("the daemon's answer is not an Announce: %w", err)
	}
	return sa, nil
}

// Unregister stops hosting an agent; reason is SHUTDOWN (the default when
// empty), ERROR, MAINTENANCE or UPGRADE.
func (c *Client) Unregister(ctx context.Context, agentID string, reason record.UnregisterReason) error {
	q := url.Values{}
	if reason != "" {
		q.Set("reason", string(reason))
	}
	return c.do(ctx, "DELETE", "/agents/"+url.PathEscape(agentID), q, nil, nil)
}

// SetStatus sets a hosted agent's health status.
func (c *Client) SetStatus(ctx context.Context, agentID string, st record.Status) error {
	body, err := json.Marshal(map[string]record.Status{"status": st})
	if err != nil {
		return err
	}
	return c.do(ctx, "PUT", "/agents/"+url.PathEscape(agentID)+"/status", nil, body, nil)
}

// Provider is one provider of a capability.
type Provider struct {
	Capability   string           `json:"capability"`
	AgentID      string           `json:"agent_id"`
	AgentName    string           `json:"agent_name,omitempty"`
	PeerID       string           `json:"peer_id"`
	SkillID      string           `json:"skill_id,omitempty"`
	SkillType    record.SkillType `json:"skill_type,omitempty"`
	SkillVersion string           `json:"skill_version,omitempty"`
	Version      string           `json:"version,omitempty"`
	Description  string           `json:"description,omitempty"`
	Endpoint     string           `json:"endpoint,omitempty"`
	Transport    record.Transport `json:"transport"`
	Scenes       []string         `json:"scenes,omitempty"`
	Status       record.Status    `json:"status"`
	Confidence   float64          `json:"confidence_hint"`
}

// Capabilities returns the capability projection: every capability with
// its providers ranked for routing.
func (c *Client) Capabilities(ctx context.Context) (map[string][]Provider, error) {
	var out struct {
		Capabilities map[string][]Provider `json:"capabilities"`
	}
	if err := c.do(ctx, "GET", "/capabilities", nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Capabilities, nil
}

// Peer is a connected libp2p peer.
type Peer struct {
	ID        string   `json:"id"`
	Addrs     []string `json:"addrs"`
	Direction string   `json:"direction"`
	// Connection is "direct" or "relayed" (through a circuit relay).
	Connection string        `json:"connection"`
	Latency    time.Duration `json:"latency_ns"`
	Agents     []string      `json:"agents,omitempty"`
	Protocols  []string      `json:"protocols,omitempty"`
}

// Peers lists the daemon's connected peers.
func (c *Client) Peers(ctx context.Context) ([]Peer, error) {
	var out struct {
		Peers []Peer `json:"peers"`
	}
	if err := c.do(ctx, "GET", "/peers", nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Peers, nil
}

// Health is the daemon's GET /healthz.
type Health struct {
	Status          string            `json:"status"`
	AgentID         string            `json:"agent_id"`
	PeerID          string            `json:"peer_id"`
	Listen          []string          `json:"listen"`
	UptimeSeconds   float64           `json:"uptime_seconds"`
	Version         string            `json:"version"`
	ProtocolVersion string            `json:"protocol_version"`
	Peers           int               `json:"peers"`
	LiveAgents      int               `json:"live_agents"`
	CachedRecords   int               `json:"cached_records"`
	HostedAgents    int               `json:"hosted_agents"`
	Resigning       int               `json:"resigning"` // hosted records still to be re-signed after a restart
	DHTRoutingTable int               `json:"dht_routing_table"`
	Transports      map[string]string `json:"transports"`
	Auth            string            `json:"auth"`
	Reachability    string            `json:"reachability"`
	DHTMode         string            `json:"dht_mode"`
}

// Health reports the daemon's identity and state.
func (c *Client) Health(ctx context.Context) (*Health, error) {
	var h Health
	if err := c.do(ctx, "GET", "/healthz", nil, nil, &h); err != nil {
		return nil, err
	}
	return &h, nil
}
