// Package mcpserver is agentd as an MCP server (Model Context Protocol,
// github.com/modelcontextprotocol/go-sdk): the tools an LLM agent calls to
// find other agents by skill and capability and to register its own, over
// stdio (`agentd mcp`, beside a local agent) or the streamable HTTP
// transport at /mcp on the daemon's API.
//
// It is a thin layer over the local API, as the CLI is: every tool is one
// call of package client, so validation, trust, access rules and error
// codes are the API's own. Over stdio the client talks to the running
// daemon; at /mcp the client is wired to the API handler in process, with
// the MCP request's Authorization header, so the same JWT scopes apply
// (discover:read for the read tools, discover:write for register,
// unregister and set_status). A refusal is a tool error whose text starts
// with the seed error code (ErrMalformedPayload, ErrAuth, DISC_002, …) and
// whose structured content is the API's error body.
package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/record"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Backend is the daemon as the tools see it; *client.Client implements it.
type Backend interface {
	Discover(ctx context.Context, q client.Query) ([]client.AgentResult, error)
	List(ctx context.Context) ([]client.AgentResult, error)
	Get(ctx context.Context, agentID string) (*client.AgentResult, error)
	Register(ctx context.Context, a *record.Agent) (*record.SignedAgent, error)
	RegisterSigned(ctx context.Context, sa *record.SignedAgent) (*record.SignedAgent, error)
	Unregister(ctx context.Context, agentID string, reason record.UnregisterReason) error
	SetStatus(ctx context.Context, agentID string, st record.Status) error
	Peers(ctx context.Context) ([]client.Peer, error)
	Explain(ctx context.Context, q client.ExplainQuery) (*client.Explanation, error)
}

var _ Backend = (*client.Client)(nil)

// BackendFor returns the backend a request (a tool call, a resource
// read) uses, from the request's extra information: the same one every
// time over stdio, one carrying the caller's credentials over HTTP.
type BackendFor func(extra *mcp.RequestExtra) (Backend, error)

// Name is the MCP implementation name agentd announces.
const Name = "agentd"

// Watch streams the agent id of every registry event of the daemon
// (registered, updated, status changed, left) until ctx ends; it returns
// when ctx ends or the stream fails. It calls ready once the stream is
// established: from then on no event is missed.
type Watch func(ctx context.Context, ready func(), event func(agentID string)) error

// Server is agentd's MCP server: the tools, and the agent records as
// resources (agentd://agents/{agent_id}) whose subscribers are notified
// on the agent's watch events. Close stops the watch.
type Server struct {
	*mcp.Server
	watch Watch

	ctx    context.Context
	cancel context.CancelFunc
	mu     sync.Mutex
	subs   map[string]int // resource URI → subscriptions
	wg     sync.WaitGroup
	live   bool                 // the watch runs
	ready  chan struct{}        // closed once the first watch stream is established
	last   map[string]time.Time // resource URI → its latest event (bounded)
}

// AgentURIPrefix is the URI of an agent record as a resource, before its
// agent_id.
const AgentURIPrefix = "agentd://agents/"

// New returns the MCP server with agentd's tools and resources. watch,
// when not nil, feeds the resource subscriptions; it runs from the first
// subscription until Close.
func New(version string, backend BackendFor, watch Watch) *Server {
	srv := &Server{watch: watch, subs: map[string]int{}, ready: make(chan struct{}), last: map[string]time.Time{}}
	srv.ctx, srv.cancel = context.WithCancel(context.Background())
	opts := &mcp.ServerOptions{
		Instructions: "agentd finds agents (LLM agents, MCP servers, skill services) by skill and capability on a " +
			"peer-to-peer network with no central registry. Use discover_agents to find who offers a capability " +
			"(then call the agent at its endpoint), get_agent for one agent's record, register_agent to announce " +
			"an agent of yours. Agent records are resources at " + AgentURIPrefix + "{agent_id}; subscribe to one " +
			"to hear when it changes or leaves.",
	}
	if watch != nil {
		opts.SubscribeHandler = srv.subscribe
		opts.UnsubscribeHandler = srv.unsubscribe
	}
	s := mcp.NewServer(&mcp.Implementation{Name: Name, Title: "agentd agent discovery", Version: version}, opts)
	srv.Server = s
	t := &tools{backend: backend}
	s.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: AgentURIPrefix + "{agent_id}", Name: "agent",
		Title: "An agent's record", MIMEType: "application/json",
		Description: "One agent as discover_agents answers it (its signed record included), by agent_id."}, t.readAgent)
	mcp.AddTool(s, &mcp.Tool{Name: "discover_agents", Title: "Discover agents",
		Description: "Find agents by capability, skill, scene, skill type, tags, version range or free text. " +
			"Answers from the daemon's live view of the network, then the LAN, the DHT and a SkillCenter catalog. " +
			"Every filter given must match.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(true)}}, t.discover)
	mcp.AddTool(s, &mcp.Tool{Name: "get_agent", Title: "Get an agent",
		Description: "One agent's record by agent_id (a UUID), from the live view or the network.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(true)}}, t.get)
	mcp.AddTool(s, &mcp.Tool{Name: "list_agents", Title: "List the live view",
		Description: "Every agent the daemon currently sees live (its own and the network's, as far as its interest reaches).",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}, t.list)
	mcp.AddTool(s, &mcp.Tool{Name: "register_agent", Title: "Register an agent",
		Description: "Host an agent on this daemon and announce it to the network. spec is the agent's description as " +
			"a file would hold it: AgentSpec YAML (agent_type, version, capabilities, endpoint, …), an agent JSON object, " +
			"a seed-002 agent_card, an A2A Agent Card, or a signed Announce (sent as signed). Registering the same content again changes nothing.",
		Annotations: &mcp.ToolAnnotations{IdempotentHint: true, DestructiveHint: ptr(false)}}, t.register)
	mcp.AddTool(s, &mcp.Tool{Name: "unregister_agent", Title: "Unregister an agent",
		Description: "Stop hosting an agent this daemon hosts; the network is told at once.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), IdempotentHint: true}}, t.unregister)
	mcp.AddTool(s, &mcp.Tool{Name: "set_status", Title: "Set an agent's status",
		Description: "Publish a hosted agent's health: HEALTHY, DEGRADED, UNHEALTHY or MAINTENANCE.",
		Annotations: &mcp.ToolAnnotations{IdempotentHint: true, DestructiveHint: ptr(false)}}, t.setStatus)
	mcp.AddTool(s, &mcp.Tool{Name: "list_peers", Title: "List peers",
		Description: "The daemon's connected peers: address, direct or relayed, latency, the agents they host.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}, t.peers)
	mcp.AddTool(s, &mcp.Tool{Name: "explain_agent", Title: "Why is (or isn't) an agent visible?",
		Description: "Explain why the daemon does or does not see an agent (agent_id), or how it resolves a query (capability, skill, …), " +
			"or whether a query matches an agent (both): a verdict (visible, held, refused, expired, gone, filtered, unknown; found, not_found), " +
			"which transports delivered the agent and when, every refusal with its reason, the resolver's steps with timings, and what to do next.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(true)}}, t.explain)
	return srv
}

// StartWatch starts the watch behind the subscriptions now rather than at
// the first subscription, so that it is established before a client
// subscribes (`agentd mcp`, whose watch is a WebSocket to the daemon).
func (s *Server) StartWatch() {
	if s.watch == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.startLocked()
}

// startLocked starts the watch once. Called with mu held.
func (s *Server) startLocked() {
	if s.live || s.ctx.Err() != nil {
		return
	}
	s.live = true
	s.wg.Add(1)
	go s.run()
}

// Close stops the watch behind the subscriptions and waits for it.
func (s *Server) Close() {
	s.cancel()
	s.wg.Wait()
}

// maxRecent bounds the remembered change times (recheck).
const maxRecent = 4096

// subscribeWait bounds how long a subscription waits for the watch to be
// established.
const subscribeWait = 10 * time.Second

func (s *Server) subscribe(ctx context.Context, req *mcp.SubscribeRequest) error {
	id, ok := strings.CutPrefix(req.Params.URI, AgentURIPrefix)
	if !ok || record.ValidateAgentID(id) != nil {
		return fmt.Errorf("%s: not an agent resource (%s{agent_id})", req.Params.URI, AgentURIPrefix)
	}
	s.mu.Lock()
	if s.ctx.Err() != nil {
		s.mu.Unlock()
		return errors.New("the MCP server is closing")
	}
	s.subs[req.Params.URI]++
	s.startLocked()
	s.mu.Unlock()
	// The subscription counts once the watch runs: a change right after
	// the answer is not missed.
	t := time.NewTimer(subscribeWait)
	defer t.Stop()
	select {
	case <-s.ready:
		s.recheck(req.Params.URI, time.Now().Add(-subscribeLookback))
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return errors.New("the daemon's event stream could not be established; the subscription may miss changes")
	}
}

func (s *Server) unsubscribe(_ context.Context, req *mcp.UnsubscribeRequest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.subs[req.Params.URI] > 1 {
		s.subs[req.Params.URI]--
	} else {
		delete(s.subs, req.Params.URI)
	}
	return nil
}

// recheckDelay is how long after a subscription it is checked whether the
// resource changed meanwhile (recheck).
const recheckDelay = 100 * time.Millisecond

// subscribeLookback is how long before a subscription reaches the server a
// change still counts as possibly unseen by the subscriber (recheck).
const subscribeLookback = 5 * time.Second

// recheck closes two windows. The SDK records a session's subscription
// only after the handler returns, so a change in between would notify no
// one. And a client of the 2026-07-28 protocol subscribes with a
// subscriptions/listen stream that Subscribe opens without waiting for the
// server: a client that subscribes and then changes the agent at once
// (as TestMCPOverStdio does) can change it before the subscription
// reaches this handler — seen on a loaded machine, where the change came
// 5 ms before the subscription and no notification ever did. A moment
// after the subscription, if the resource changed since since (a few
// seconds before the subscription arrived), its subscribers are told
// (a notification only says "read it again"; a needless one is harmless).
func (s *Server) recheck(uri string, since time.Time) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTimer(recheckDelay)
		defer t.Stop()
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		s.mu.Lock()
		changed := !s.last[uri].Before(since)
		s.mu.Unlock()
		if changed {
			_ = s.ResourceUpdated(s.ctx, &mcp.ResourceUpdatedNotificationParams{URI: uri})
		}
	}()
}

// run feeds the subscriptions from the watch until Close, starting the
// watch again (after a pause) when its stream fails.
func (s *Server) run() {
	defer s.wg.Done()
	var once sync.Once
	ready := func() { once.Do(func() { close(s.ready) }) }
	for s.ctx.Err() == nil {
		_ = s.watch(s.ctx, ready, func(agentID string) {
			uri := AgentURIPrefix + agentID
			now := time.Now()
			s.mu.Lock()
			n := s.subs[uri]
			// Every resource's change is remembered, subscribed or not: a
			// subscription on its way may be for it (recheck).
			if len(s.last) >= maxRecent {
				for u, at := range s.last {
					if now.Sub(at) > subscribeLookback {
						delete(s.last, u)
					}
				}
				if len(s.last) >= maxRecent {
					clear(s.last)
				}
			}
			s.last[uri] = now
			s.mu.Unlock()
			if n > 0 {
				_ = s.ResourceUpdated(s.ctx, &mcp.ResourceUpdatedNotificationParams{URI: uri})
			}
		})
		t := time.NewTimer(time.Second)
		select {
		case <-s.ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
}

// readAgent reads agentd://agents/{agent_id}.
func (t *tools) readAgent(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	id, ok := strings.CutPrefix(req.Params.URI, AgentURIPrefix)
	if !ok || record.ValidateAgentID(id) != nil {
		return nil, mcp.ResourceNotFoundError(req.Params.URI)
	}
	b, err := t.backend(req.Extra)
	if err != nil {
		return nil, err
	}
	r, err := b.Get(ctx, id)
	if client.IsNotFound(err) {
		return nil, mcp.ResourceNotFoundError(req.Params.URI)
	}
	if err != nil {
		return nil, toolError(err)
	}
	body, err := json.Marshal(agentOf(*r))
	if err != nil {
		return nil, err
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, MIMEType: "application/json", Text: string(body)}}}, nil
}

func ptr[T any](v T) *T { return &v }

type tools struct{ backend BackendFor }

// Filters are the query filters discover_agents and explain_agent take;
// every one given must match.
type Filters struct {
	Capability string   `json:"capability,omitempty" jsonschema:"a capability id the agent must offer, e.g. product.search"`
	Skill      string   `json:"skill,omitempty" jsonschema:"a skill id the agent must have"`
	Scene      string   `json:"scene,omitempty" jsonschema:"a scene one of its skills must take part in"`
	Type       string   `json:"type,omitempty" jsonschema:"a skill type: enterprise-skill, tool-skill or integration-skill"`
	Tags       []string `json:"tags,omitempty" jsonschema:"tags the agent must carry, e.g. tier=core"`
	Version    string   `json:"version,omitempty" jsonschema:"a semantic version range the agent's version must satisfy, e.g. >=1.2.0 <2.0.0"`
	Text       string   `json:"text,omitempty" jsonschema:"free text: every word must begin a word of the agent's names, descriptions, ids or tags"`
}

// query is the client query of f.
func (f Filters) query() client.Query {
	return client.Query{Capability: f.Capability, Skill: f.Skill, Scene: f.Scene, Type: f.Type, Tags: f.Tags, Version: f.Version, Text: f.Text}
}

// DiscoverInput are the filters of discover_agents.
type DiscoverInput struct {
	Filters
	Limit        int  `json:"limit,omitempty" jsonschema:"at most this many agents (1-1000; default 100)"`
	IncludeStale bool `json:"include_stale,omitempty" jsonschema:"also expired cache entries, marked stale"`
}

// AgentsOutput is a list of agents.
type AgentsOutput struct {
	Agents []Agent `json:"agents"`
	Total  int     `json:"total"`
}

// Agent is one agent of an answer: what a caller needs to reach it, and
// the whole record as signed.
type Agent struct {
	AgentID      string            `json:"agent_id"`
	AgentName    string            `json:"agent_name,omitempty"`
	Description  string            `json:"description,omitempty"`
	Version      string            `json:"version,omitempty"`
	Status       string            `json:"status,omitempty" jsonschema:"HEALTHY, DEGRADED, UNHEALTHY or MAINTENANCE when known"`
	Transport    record.Transport  `json:"transport" jsonschema:"how to reach the agent: type (tcp, http, ws, …) and endpoint"`
	Capabilities map[string]string `json:"capabilities" jsonschema:"capability id to version or description"`
	Skills       []Skill           `json:"skills,omitempty"`
	Tags         []string          `json:"tags,omitempty"`
	Source       string            `json:"source" jsonschema:"where the answer came from: local, gossip, lan, dht, skillcenter, registry or cache"`
	AgeMS        int64             `json:"age_ms" jsonschema:"how long ago the answer was last confirmed, in milliseconds"`
	Stale        bool              `json:"stale,omitempty" jsonschema:"an expired cache entry"`
	Unbound      bool              `json:"unbound,omitempty" jsonschema:"a record without peer binding (a seed-000 agent that signs alone)"`
	Signed       bool              `json:"signed" jsonschema:"the record carries the agent's signature (catalog and LAN HMAC entries do not)"`
	Record       map[string]any    `json:"record" jsonschema:"the seed-000 Announce of the record: protocol_version, agent, signature, peer_signature (the signatures cover the RFC 8785 form of agent)"`
	A2ACard      map[string]any    `json:"a2a_card,omitempty" jsonschema:"the agent as an A2A Agent Card (A2A 0.3; unsigned: GET /agents/{id}/card answers a hosted agent's card signed)"`
}

// Skill is one skill of an agent.
type Skill struct {
	SkillID      string   `json:"skill_id"`
	Version      string   `json:"version"`
	Type         string   `json:"type"`
	Endpoint     string   `json:"endpoint,omitempty"`
	Capabilities []string `json:"capabilities"`
	Scenes       []string `json:"scenes,omitempty"`
	Status       string   `json:"status,omitempty"`
}

func agentOf(r client.AgentResult) Agent {
	a := &r.Agent
	out := Agent{AgentID: a.AgentID, AgentName: a.AgentName, Description: a.Description, Version: a.Version,
		Status: string(r.Status), Transport: a.Transport, Capabilities: a.Capabilities, Tags: a.Tags,
		Source: r.Source, AgeMS: r.Age.Milliseconds(), Stale: r.Stale, Unbound: r.Unbound, Signed: r.Announce.Signature != ""}
	if out.Capabilities == nil {
		out.Capabilities = map[string]string{}
	}
	for i := range a.Skills {
		s := &a.Skills[i]
		out.Skills = append(out.Skills, Skill{SkillID: s.SkillID, Version: s.Version, Type: string(s.SkillType), Endpoint: s.Endpoint,
			Capabilities: s.CapabilityIDs(), Scenes: s.Scenes, Status: string(s.Status)})
	}
	out.Record = announceObject(r.Announce)
	if card, err := record.AgentToA2ACard(a); err == nil {
		out.A2ACard = jsonObject(card)
	}
	return out
}

func agentsOf(rs []client.AgentResult) AgentsOutput {
	out := AgentsOutput{Agents: make([]Agent, 0, len(rs))}
	for _, r := range rs {
		out.Agents = append(out.Agents, agentOf(r))
	}
	out.Total = len(out.Agents)
	return out
}

func (t *tools) discover(ctx context.Context, req *mcp.CallToolRequest, in DiscoverInput) (*mcp.CallToolResult, AgentsOutput, error) {
	return call(t, req, func(b Backend) (AgentsOutput, error) {
		if in.Limit < 0 || in.Limit > 1000 {
			return AgentsOutput{}, &client.Error{Code: record.CodeMalformedPayload, Field: "limit", Message: "limit must be between 1 and 1000"}
		}
		q := in.query()
		q.Limit, q.IncludeStale = in.Limit, in.IncludeStale
		rs, err := b.Discover(ctx, q)
		return agentsOf(rs), err
	})
}

// AgentIDInput names one agent.
type AgentIDInput struct {
	AgentID string `json:"agent_id" jsonschema:"the agent's id, a UUID"`
}

func (t *tools) get(ctx context.Context, req *mcp.CallToolRequest, in AgentIDInput) (*mcp.CallToolResult, Agent, error) {
	return call(t, req, func(b Backend) (Agent, error) {
		if err := record.ValidateAgentID(in.AgentID); err != nil {
			return Agent{}, &client.Error{Code: record.CodeMalformedPayload, Field: "agent_id", Message: err.Error()}
		}
		r, err := b.Get(ctx, in.AgentID)
		if err != nil {
			return Agent{}, err
		}
		return agentOf(*r), nil
	})
}

// NoInput is the input of the tools that take none.
type NoInput struct{}

func (t *tools) list(ctx context.Context, req *mcp.CallToolRequest, _ NoInput) (*mcp.CallToolResult, AgentsOutput, error) {
	return call(t, req, func(b Backend) (AgentsOutput, error) {
		rs, err := b.List(ctx)
		return agentsOf(rs), err
	})
}

// call runs one tool: f with the backend of the request; an error, the
// backend's or f's, is the tool's error.
func call[Out any](t *tools, req *mcp.CallToolRequest, f func(Backend) (Out, error)) (*mcp.CallToolResult, Out, error) {
	var zero Out
	b, err := t.backend(req.Extra)
	if err != nil {
		return nil, zero, toolError(err)
	}
	out, err := f(b)
	if err != nil {
		return nil, zero, toolError(err)
	}
	return nil, out, nil
}

// ExplainInput names an agent, a query, or both.
type ExplainInput struct {
	AgentID string `json:"agent_id,omitempty" jsonschema:"the agent to explain (a UUID)"`
	Filters
	LocalOnly bool `json:"local_only,omitempty" jsonschema:"resolve from the daemon's view and cache only"`
}

// ExplainOutput is the daemon's explanation, abridged for a model.
type ExplainOutput struct {
	Verdict string   `json:"verdict" jsonschema:"visible, held, refused, expired, gone, filtered, unknown (an agent); found, not_found (a query)"`
	Summary string   `json:"summary"`
	Next    []string `json:"next" jsonschema:"what to do, most useful first"`
	Heard   []string `json:"heard,omitempty" jsonschema:"what each transport delivered: transport, kind, count, when last"`
	Refused []string `json:"refused,omitempty" jsonschema:"the last refusals: when, transport, reason, detail"`
	Steps   []string `json:"resolver_steps,omitempty" jsonschema:"the resolver's path: step, duration, agents found"`
	Found   []string `json:"found,omitempty" jsonschema:"agent ids the resolver answered"`
}

func (t *tools) explain(ctx context.Context, req *mcp.CallToolRequest, in ExplainInput) (*mcp.CallToolResult, ExplainOutput, error) {
	return call(t, req, func(b Backend) (ExplainOutput, error) {
		q := client.ExplainQuery{AgentID: in.AgentID, Query: in.query()}
		q.LocalOnly = in.LocalOnly
		ex, err := b.Explain(ctx, q)
		if err != nil {
			return ExplainOutput{}, err
		}
		out := ExplainOutput{Verdict: ex.Verdict, Summary: ex.Summary, Next: ex.Next}
		if out.Next == nil {
			out.Next = []string{}
		}
		for _, h := range ex.Heard {
			out.Heard = append(out.Heard, fmt.Sprintf("%s %s ×%d, last %s", h.Transport, h.Kind, h.Count, h.Last.UTC().Format(time.RFC3339)))
		}
		for _, r := range ex.Refusals {
			out.Refused = append(out.Refused, fmt.Sprintf("%s %s %s: %s (%s)", r.At.UTC().Format(time.RFC3339), r.Transport, r.Kind, r.Reason, r.Detail))
		}
		if ex.Resolver != nil {
			for _, st := range ex.Resolver.Steps {
				line := fmt.Sprintf("%s %s, %d found", st.Name, st.Took.Round(time.Microsecond), st.Found)
				if st.Error != "" {
					line += ": " + st.Error
				}
				out.Steps = append(out.Steps, line)
			}
		}
		for _, r := range ex.Results {
			out.Found = append(out.Found, r.AgentID)
		}
		return out, nil
	})
}

// RegisterInput is an agent description as a file holds it.
type RegisterInput struct {
	Spec string `json:"spec" jsonschema:"the agent description: AgentSpec YAML, an agent JSON object, a seed-002 agent_card, an A2A Agent Card, or a signed Announce"`
}

// RegisterOutput is the record as hosted.
type RegisterOutput struct {
	AgentID      string         `json:"agent_id"`
	AgentName    string         `json:"agent_name,omitempty"`
	Seq          uint64         `json:"seq"`
	Capabilities []string       `json:"capabilities"`
	Record       map[string]any `json:"record" jsonschema:"the signed Announce the daemon hosts"`
}

func (t *tools) register(ctx context.Context, req *mcp.CallToolRequest, in RegisterInput) (*mcp.CallToolResult, RegisterOutput, error) {
	return call(t, req, func(b Backend) (RegisterOutput, error) {
		data := []byte(in.Spec)
		if strings.TrimSpace(in.Spec) == "" {
			return RegisterOutput{}, &client.Error{Code: record.CodeMalformedPayload, Field: "spec", Message: "spec is required: AgentSpec YAML, agent JSON, an agent_card, an A2A Agent Card or a signed Announce"}
		}
		var sa *record.SignedAgent
		if record.IsSignedAnnounce(data) {
			parsed, _, err := record.ParseAnnounceUnbound(data)
			if err != nil {
				return RegisterOutput{}, fieldError("spec", err)
			}
			if sa, err = b.RegisterSigned(ctx, parsed); err != nil {
				return RegisterOutput{}, err
			}
		} else {
			a, err := record.LoadAgentFile("spec", data)
			if err != nil {
				return RegisterOutput{}, fieldError("spec", err)
			}
			if sa, err = b.Register(ctx, a); err != nil {
				return RegisterOutput{}, err
			}
		}
		out := RegisterOutput{AgentID: sa.Agent.AgentID, AgentName: sa.Agent.AgentName, Seq: sa.Agent.Seq,
			Capabilities: sa.Agent.AllCapabilities(), Record: announceObject(sa.Announce())}
		if out.Capabilities == nil {
			out.Capabilities = []string{}
		}
		return out, nil
	})
}

// UnregisterInput names a hosted agent and why it leaves.
type UnregisterInput struct {
	AgentID string `json:"agent_id" jsonschema:"the hosted agent's id"`
	Reason  string `json:"reason,omitempty" jsonschema:"SHUTDOWN (default), ERROR, MAINTENANCE or UPGRADE"`
}

// OKOutput acknowledges a change.
type OKOutput struct {
	AgentID string `json:"agent_id"`
	Done    string `json:"done"`
}

func (t *tools) unregister(ctx context.Context, req *mcp.CallToolRequest, in UnregisterInput) (*mcp.CallToolResult, OKOutput, error) {
	return call(t, req, func(b Backend) (OKOutput, error) {
		reason := record.UnregisterReason(in.Reason)
		if reason == "" {
			reason = record.ReasonShutdown
		}
		if !reason.Valid() {
			return OKOutput{}, &client.Error{Code: record.CodeMalformedPayload, Field: "reason", Message: fmt.Sprintf("%q is not one of SHUTDOWN, ERROR, MAINTENANCE, UPGRADE", in.Reason)}
		}
		if err := record.ValidateAgentID(in.AgentID); err != nil {
			return OKOutput{}, &client.Error{Code: record.CodeMalformedPayload, Field: "agent_id", Message: err.Error()}
		}
		return OKOutput{AgentID: in.AgentID, Done: "unregistered (" + string(reason) + ")"}, b.Unregister(ctx, in.AgentID, reason)
	})
}

// StatusInput sets a hosted agent's status.
type StatusInput struct {
	AgentID string `json:"agent_id" jsonschema:"the hosted agent's id"`
	Status  string `json:"status" jsonschema:"HEALTHY, DEGRADED, UNHEALTHY or MAINTENANCE"`
}

func (t *tools) setStatus(ctx context.Context, req *mcp.CallToolRequest, in StatusInput) (*mcp.CallToolResult, OKOutput, error) {
	return call(t, req, func(b Backend) (OKOutput, error) {
		st := record.Status(in.Status)
		if !st.Valid() {
			return OKOutput{}, &client.Error{Code: record.CodeMalformedPayload, Field: "status", Message: fmt.Sprintf("%q is not one of HEALTHY, DEGRADED, UNHEALTHY, MAINTENANCE", in.Status)}
		}
		if err := record.ValidateAgentID(in.AgentID); err != nil {
			return OKOutput{}, &client.Error{Code: record.CodeMalformedPayload, Field: "agent_id", Message: err.Error()}
		}
		return OKOutput{AgentID: in.AgentID, Done: "status " + in.Status}, b.SetStatus(ctx, in.AgentID, st)
	})
}

// PeersOutput lists the connected peers.
type PeersOutput struct {
	Peers []Peer `json:"peers"`
	Total int    `json:"total"`
}

// Peer is one connected peer.
type Peer struct {
	PeerID     string   `json:"peer_id"`
	Addrs      []string `json:"addrs"`
	Direction  string   `json:"direction"`
	Connection string   `json:"connection" jsonschema:"direct or relayed"`
	LatencyMS  float64  `json:"latency_ms,omitempty"`
	Agents     []string `json:"agents,omitempty"`
}

func (t *tools) peers(ctx context.Context, req *mcp.CallToolRequest, _ NoInput) (*mcp.CallToolResult, PeersOutput, error) {
	return call(t, req, func(b Backend) (PeersOutput, error) {
		ps, err := b.Peers(ctx)
		out := PeersOutput{Peers: make([]Peer, 0, len(ps))}
		for _, p := range ps {
			out.Peers = append(out.Peers, Peer{PeerID: p.ID, Addrs: p.Addrs, Direction: p.Direction, Connection: p.Connection,
				LatencyMS: float64(p.Latency.Microseconds()) / 1000, Agents: p.Agents})
		}
		out.Total = len(out.Peers)
		return out, err
	})
}

// announceObject is an Announce as a JSON object for structured output.
func announceObject(a record.Announce) map[string]any { return jsonObject(a) }

// jsonObject is v as a JSON object for structured output.
func jsonObject(v any) map[string]any {
	b, err := json.Marshal(v)
	if err != nil {
		return map[string]any{}
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return map[string]any{}
	}
	return m
}

// toolError is a refusal as the tool error the SDK makes of a handler's
// error: its text is the API's error, starting with the seed error code
// (ErrMalformedPayload: …, DISC_002: …).
func toolError(err error) error {
	var ce *client.Error
	if errors.As(err, &ce) {
		return ce
	}
	return &client.Error{Code: record.CodeNetworkError, Message: err.Error()}
}

// fieldError turns a record error into the API's ErrMalformedPayload,
// naming the field under prefix.
func fieldError(prefix string, err error) *client.Error {
	e := &client.Error{Code: record.CodeMalformedPayload, Field: prefix, Message: err.Error()}
	var fe *record.FieldError
	if errors.As(err, &fe) && fe.Field != "" {
		e.Field = prefix + "." + fe.Field
	}
	if errors.Is(err, record.ErrUnsupportedVersion) {
		e.Code = record.CodeUnsupportedVersion
	}
	return e
}
