package api

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/agentd/agentd/node"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/trust"
	"github.com/agentd/agentd/view"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Limits of the REST queries.
const (
	// DefaultLimit is the number of agents GET /agents returns when no
	// limit is given; MaxLimit is the largest limit accepted.
	DefaultLimit = 100
	MaxLimit     = 1000
)

// AgentEntry is one agent in a REST answer: the seed-000 Announce of its
// record (protocol_version, agent, signature, peer_signature) plus where
// the answer came from (source: local, gossip, lan, dht, skillcenter,
// registry, cache), how old it is (age_ms), whether it is a stale cache
// entry, and the agent's status when known. Entries of catalog answers
// that carry no signature have none.
type AgentEntry struct {
	ProtocolVersion string          `json:"protocol_version"`
	Agent           json.RawMessage `json:"agent"`
	Signature       string          `json:"signature,omitempty"`
	PeerSignature   string          `json:"peer_signature,omitempty"`
	Source          string          `json:"source"`
	AgeMS           int64           `json:"age_ms"`
	Stale           bool            `json:"stale"`
	Status          record.Status   `json:"status,omitempty"`
	// Unbound marks a record without peer binding: a seed-000 agent that
	// signed its agent object alone and registered with this node as a
	// registry or announced itself on the LAN (docs/trust.md).
	Unbound bool `json:"unbound,omitempty"`

	// rec, when Agent is empty, is the record whose canonical bytes and
	// signatures appendJSON writes: a compact record's bytes and the
	// base64 of the signatures are encoded straight into the answer.
	rec *record.SignedAgent
}

// AgentList is the answer of GET /agents.
type AgentList struct {
	Agents []AgentEntry `json:"agents"`
	// Total is the number of entries in Agents.
	Total int `json:"total"`
}

func entryOf(r node.Result) (AgentEntry, error) {
	e := AgentEntry{ProtocolVersion: record.ProtocolVersion, Source: string(r.Source), AgeMS: r.Age.Milliseconds(), Stale: r.Stale, Status: r.Status}
	if sa := r.Record; sa != nil {
		if sa.ProtocolVersion != "" {
			e.ProtocolVersion = sa.ProtocolVersion
		}
		e.rec, e.Unbound = sa, sa.Unbound()
		return e, nil
	}
	if r.Agent == nil {
		return e, errors.New("result without agent")
	}
	canon, err := record.Canonicalize(r.Agent)
	if err != nil {
		return e, err
	}
	e.Agent = canon
	return e, nil
}

func hostedEntry(sa *record.SignedAgent, src store.Source, st record.Status) AgentEntry {
	a := sa.Announce()
	return AgentEntry{ProtocolVersion: a.ProtocolVersion, Agent: a.Agent, Signature: a.Signature, PeerSignature: a.PeerSignature,
		Source: string(src), Status: st, Unbound: sa.Unbound()}
}

// ---- POST /agents ----

func (s *Server) handleRegister(w http.ResponseWriter, r *http.Request) error {
	body, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	sa, hosted, err := s.registerMessage(r.Context(), body, r)
	if err != nil {
		return err
	}
	id := sa.Agent.AgentID
	src, st := store.SourceRegistry, record.Status("")
	if hosted {
		if err := s.setLifetime(id, lifetimePermanent, nil, 0); err != nil {
			return err
		}
		src = store.SourceLocal
	}
	if a, ok := s.n.View().Get(id); ok {
		st = a.Status
	}
	w.Header().Set("Location", "/agents/"+id)
	writeJSON(w, http.StatusOK, hostedEntry(sa, src, st))
	return nil
}

// registerMessage registers what a client sent as an Announce (seed 000
// §4.1.1) or a bare agent object. A signed Announce naming this node's
// peer is hosted with the client's signature (the node co-signs); one
// naming another peer is accepted only in registry mode. An unsigned one
// is filled and signed with the node's keys. hosted is false for registry
// entries. r, when set, supplies the bearer token registry mode needs.
func (s *Server) registerMessage(ctx context.Context, body []byte, r *http.Request) (*record.SignedAgent, bool, error) {
	if len(body) > record.MaxMessageBytes {
		return nil, false, newError(http.StatusRequestEntityTooLarge, record.CodeRequestTooLarge, "",
			"an Announce is at most %d bytes; this one is %d", record.MaxMessageBytes, len(body))
	}
	canon, err := record.CanonicalizeJSON(body)
	if err != nil {
		return nil, false, badRequest("", "the body is not valid JSON (I-JSON: UTF-8, no duplicate member names): %s", innerReason(err))
	}
	var members map[string]json.RawMessage
	if json.Unmarshal(canon, &members) != nil || members == nil {
		return nil, false, badRequest("", "the body must be a JSON object: an Announce {\"protocol_version\",\"agent\",…} or an agent object")
	}
	rawAgent, isAnnounce := members["agent"]
	if !isAnnounce && record.IsA2ACard(members) {
		// An A2A Agent Card (0.3 or 1.0): mapped onto a record, the card
		// kept whole in metadata.a2a_card (docs/protocol.md).
		a, err := record.A2ACardToAgent(canon)
		if err != nil {
			return nil, false, err
		}
		sa, err := s.n.Register(ctx, a)
		return sa, true, err
	}
	if !isAnnounce {
		if _, ok := members["protocol_version"]; ok {
			return nil, false, badRequest("agent", "is required in an Announce")
		}
		a, err := decodeUnsigned(canon, "")
		if err != nil {
			return nil, false, err
		}
		sa, err := s.n.Register(ctx, a)
		return sa, true, err
	}
	var pv string
	if err := json.Unmarshal(members["protocol_version"], &pv); err != nil || pv == "" {
		return nil, false, badRequest("protocol_version", "is required in an Announce (a string such as %q)", record.ProtocolVersion)
	}
	newer, err := record.CheckVersion(pv)
	if err != nil {
		return nil, false, err
	}
	if newer {
		s.warnMinor(pv)
	}
	var sig string
	if raw, ok := members["signature"]; ok {
		if err := json.Unmarshal(raw, &sig); err != nil {
			return nil, false, badRequest("signature", "must be a base64 string")
		}
	}
	if sig == "" {
		if _, ok := members["peer_signature"]; ok {
			return nil, false, badRequest("signature", "is required when peer_signature is given")
		}
		// The node builds the Announce it publishes itself: a member of
		// this one it does not know would be dropped, so it is refused.
		if err := record.CheckKnownMembers(canon, reflect.TypeOf(record.Announce{}), ""); err != nil {
			return nil, false, err
		}
		a, err := decodeUnsigned(rawAgent, "agent")
		if err != nil {
			return nil, false, err
		}
		sa, err := s.n.Register(ctx, a)
		return sa, true, err
	}
	// A signed record naming another peer, or none, is a registry
	// registration, which needs a token: in registry mode the token is
	// checked before the record is, so that a client without one learns
	// that first (401), not what else is wrong with its body.
	own := s.n.Identity().PeerID.String()
	var peek struct {
		PeerID any `json:"peer_id"`
	}
	_ = json.Unmarshal(rawAgent, &peek)
	acc, checked := accessOf(ctx), false
	if peek.PeerID != own && s.cfg.ServeRegistry {
		if err := s.registryAccess(&acc, r, peek.PeerID); err != nil {
			return nil, false, err
		}
		checked = true
	}
	sa, _, err := record.ParseAnnounceUnbound(body)
	if err != nil {
		return nil, false, err
	}
	if sa.Agent.PeerID == own {
		hosted, err := s.n.RegisterSigned(ctx, sa)
		return hosted, true, err
	}
	if !checked {
		if err := s.registryAccess(&acc, r, sa.Agent.PeerID); err != nil {
			return nil, false, err
		}
	}
	if sa.Unbound() {
		// A seed-000 agent that signs alone (no peer_id, no
		// peer_signature): verified by its agent signature, kept while it
		// re-announces, never forwarded (docs/trust.md).
		sa, err = s.n.LearnUnbound(sa, store.SourceRegistry)
		if err != nil {
			return nil, false, err
		}
		return sa, false, nil
	}
	if err := s.n.Verifier().VerifyAgent(sa, trust.VerifyOptions{Transport: string(store.SourceRegistry)}); err != nil {
		return nil, false, err
	}
	if err := s.n.View().Learn(sa, store.SourceRegistry, true); err != nil {
		return nil, false, err
	}
	return sa, false, nil
}

// registryAccess admits a registry registration: a signed record that
// names another peer than this node's (peerID, as the body gave it), or
// none. Registry mode must be on, and the request must carry a
// discover:write token even on an open loopback API (the WebSocket's is
// the one of its upgrade; r is nil there). acc is the request's access,
// replaced by the token's when the request was not authenticated yet.
func (s *Server) registryAccess(acc *access, r *http.Request, peerID any) error {
	if !s.cfg.ServeRegistry {
		p, _ := peerID.(string)
		if p == "" {
			return newError(http.StatusForbidden, record.CodeForbidden, "agent.peer_id",
				"the record has no peer_id; this node hosts only records that name its own peer (%s) and accepts others only in registry mode (api.serveRegistry). To have this node sign and host the agent, send the agent object unsigned",
				s.n.Identity().PeerID)
		}
		return newError(http.StatusForbidden, record.CodeForbidden, "agent.peer_id",
			"the record names peer %s, not this node (%s); this node hosts only its own agents (registry mode is off)", truncate(p), s.n.Identity().PeerID)
	}
	if !acc.authenticated {
		if r == nil {
			return authError("registry registrations need a bearer token")
		}
		a, aerr := s.auth.authenticate(r)
		if aerr != nil {
			return aerr
		}
		*acc = a
	}
	if !acc.scopes[ScopeWrite] {
		return scopeError(ScopeWrite)
	}
	return nil
}

// decodeUnsigned decodes an agent object that the node will fill and sign.
// Unlike a signed record (whose canonical bytes are kept, unknown members
// included), the node re-encodes this one, so a member it does not know
// would silently vanish: it is refused instead.
func decodeUnsigned(raw []byte, prefix string) (*record.Agent, error) {
	a := &record.Agent{}
	err := record.CheckKnownMembers(raw, reflect.TypeOf(a), "agent")
	if err == nil {
		err = record.DecodeAgent(raw, a)
	}
	if err == nil {
		err = a.ValidateContent()
	}
	if err == nil {
		return a, nil
	}
	var fe *record.FieldError
	if errors.As(err, &fe) {
		// CheckKnownMembers names fields under "agent"; the rest are the
		// record's own (agent_id, agent_name: not under "agent").
		f := fe.Field
		if f == "agent" {
			f = ""
		}
		f = strings.TrimPrefix(f, "agent.")
		return nil, &record.FieldError{Field: joinField(prefix, f), Reason: fe.Reason}
	}
	return nil, err
}

// warnMinor logs, once per version, that a client speaks a newer minor
// version (seed 000 §8.1: log a warning and continue).
func (s *Server) warnMinor(pv string) {
	s.mu.Lock()
	seen := s.warned[pv]
	if !seen && len(s.warned) < 64 {
		s.warned[pv] = true
	}
	s.mu.Unlock()
	if !seen {
		s.log.Warn("client speaks a newer minor protocol version; continuing with ours", "version", pv, "supported", record.ProtocolVersion)
	}
}

// ---- lifetimes of hosted registrations ----

type lifetime int

const (
	lifetimePermanent lifetime = iota // until unregistered (REST)
	lifetimeLease                     // ttl_seconds, renewed by heartbeat (JSON-RPC)
	lifetimeSocket                    // bound to a WebSocket connection
	lifetimeGone                      // unregistered
)

// setLifetime records how a hosted registration ends, the latest
// registration surface deciding: REST registrations last until
// unregistered, JSON-RPC ones hold a lease of ttl, WebSocket ones are bound
// to their connection (no lease while it is open).
func (s *Server) setLifetime(agentID string, l lifetime, sess *session, ttl time.Duration) error {
	s.mu.Lock()
	if prev := s.wsBound[agentID]; prev != nil && prev != sess {
		prev.unbindLocked(agentID)
	}
	delete(s.wsBound, agentID)
	delete(s.rpcTTL, agentID)
	switch l {
	case lifetimeLease:
		s.rpcTTL[agentID] = ttl
	case lifetimeSocket:
		s.wsBound[agentID] = sess
		sess.bindLocked(agentID)
	}
	s.mu.Unlock()
	switch l {
	case lifetimePermanent, lifetimeSocket:
		if _, leased := s.n.LeaseOf(agentID); !leased {
			return nil // nothing to clear (and no synced store write)
		}
		if err := s.n.Lease(agentID, time.Time{}); err != nil && !errors.Is(err, node.ErrNotHosted) {
			return err
		}
	case lifetimeLease:
		return s.n.Lease(agentID, time.Now().Add(ttl))
	}
	return nil
}

// ---- GET /agents ----

var listParams = []string{"capability", "skill", "scene", "type", "tag", "tenant", "version", "q", "limit", "include_stale", "local_only"}

// agentQuery is a parsed GET /agents query.
type agentQuery struct {
	filter       store.Filter
	includeStale bool
	localOnly    bool
	filtered     bool // some filter was given
}

func parseAgentQuery(raw string) (agentQuery, error) {
	q, err := parseQuery(raw, listParams...)
	if err != nil {
		return agentQuery{}, err
	}
	return parseAgentFilter(q)
}

// parseAgentFilter reads the filters of listParams from parsed parameters.
func parseAgentFilter(q queryParams) (agentQuery, error) {
	var err error
	var aq agentQuery
	f := &aq.filter
	for _, p := range []struct {
		name string
		dst  *string
	}{{"capability", &f.Capability}, {"skill", &f.Skill}, {"scene", &f.Scene}, {"tenant", &f.Tenant}} {
		if *p.dst, err = q.ident(p.name); err != nil {
			return aq, err
		}
	}
	if f.Type, err = q.one("type"); err != nil {
		return aq, err
	}
	if f.Type != "" && !record.SkillType(f.Type).Valid() {
		return aq, badRequest("type", "%q is not one of enterprise-skill, tool-skill, integration-skill", truncate(f.Type))
	}
	tags := q.all("tag")
	if len(tags) > record.MaxTags {
		return aq, badRequest("tag", "is given %d times, more than %d", len(tags), record.MaxTags)
	}
	for _, t := range tags {
		if t == "" || len(t) > record.MaxIDLen {
			return aq, badRequest("tag", "must be 1-%d bytes", record.MaxIDLen)
		}
	}
	f.Tags = tags
	if f.Version, err = q.one("version"); err != nil {
		return aq, err
	}
	if len(f.Version) > record.MaxShortTextLen {
		return aq, badRequest("version", "is longer than %d bytes", record.MaxShortTextLen)
	}
	if f.Text, err = q.one("q"); err != nil {
		return aq, err
	}
	if len(f.Text) > record.MaxShortTextLen {
		return aq, badRequest("q", "is longer than %d bytes", record.MaxShortTextLen)
	}
	if f.Limit, err = q.integer("limit", DefaultLimit, 1, MaxLimit); err != nil {
		return aq, err
	}
	if aq.includeStale, err = q.boolean("include_stale"); err != nil {
		return aq, err
	}
	if aq.localOnly, err = q.boolean("local_only"); err != nil {
		return aq, err
	}
	if _, err := f.Compile(); err != nil {
		return aq, err
	}
	aq.filtered = f.Narrows()
	return aq, nil
}

func (s *Server) handleList(w http.ResponseWriter, r *http.Request) error {
	aq, err := parseAgentQuery(r.URL.RawQuery)
	if err != nil {
		return err
	}
	list, err := s.discover(r.Context(), aq)
	if err != nil {
		return err
	}
	size := 64
	for i := range list.Agents {
		size += max(len(list.Agents[i].Agent), 1024) + 512
	}
	writeRawJSON(w, http.StatusOK, list.appendJSON(make([]byte, 0, size)))
	return nil
}

// discover runs a query through the resolver. Without any filter it lists
// the live view (an empty list is an answer, not an error); with filters a
// miss is DISC_002. Stale cache answers are dropped unless asked for.
func (s *Server) discover(ctx context.Context, aq agentQuery) (AgentList, error) {
	out := AgentList{Agents: []AgentEntry{}}
	res, err := s.n.Discover(ctx, node.Query{Filter: aq.filter, LocalOnly: aq.localOnly || !aq.filtered})
	var de *node.DiscoveryError
	if errors.As(err, &de) && de.Code == record.CodeNoSkillsFound && !aq.filtered {
		return out, nil
	}
	if err != nil {
		return out, err
	}
	stale := 0
	for _, r := range res {
		if r.Stale && !aq.includeStale {
			stale++
			continue
		}
		e, err := entryOf(r)
		if err != nil {
			return out, err
		}
		out.Agents = append(out.Agents, e)
		if len(out.Agents) >= aq.filter.Limit {
			break
		}
	}
	if len(out.Agents) == 0 && aq.filtered {
		return out, &node.DiscoveryError{Code: record.CodeNoSkillsFound,
			Message: "only stale cache entries match; ask again with include_stale=true to see them"}
	}
	out.Total = len(out.Agents)
	return out, nil
}

// ---- GET /agents/{id} ----

func (s *Server) handleGet(w http.ResponseWriter, r *http.Request) error {
	id, err := pathAgentID(r)
	if err != nil {
		return err
	}
	q, err := parseQuery(r.URL.RawQuery, "local_only")
	if err != nil {
		return err
	}
	local, err := q.boolean("local_only")
	if err != nil {
		return err
	}
	res, err := s.n.GetAgent(r.Context(), id, !local)
	if err != nil {
		return err
	}
	e, err := entryOf(res)
	if err != nil {
		return err
	}
	writeRawJSON(w, http.StatusOK, e.appendJSON(nil))
	return nil
}

func pathAgentID(r *http.Request) (string, error) {
	id := r.PathValue("id")
	if err := record.ValidateAgentID(id); err != nil {
		return "", badRequest("agent_id", "%q is not an agent_id: %v", truncate(id), err)
	}
	return id, nil
}

// ---- DELETE /agents/{id} ----

// UnregisterResult is the answer of DELETE /agents/{id}.
type UnregisterResult struct {
	AgentID string `json:"agent_id"`
	Status  string `json:"status"` // "unregistered"
	Reason  string `json:"reason"`
}

func (s *Server) handleUnregister(w http.ResponseWriter, r *http.Request) error {
	id, err := pathAgentID(r)
	if err != nil {
		return err
	}
	q, err := parseQuery(r.URL.RawQuery, "reason")
	if err != nil {
		return err
	}
	reason, err := q.one("reason")
	if err != nil {
		return err
	}
	if reason == "" {
		reason = string(record.ReasonShutdown)
	}
	if !record.UnregisterReason(reason).Valid() {
		return badRequest("reason", "%q is not one of SHUTDOWN, ERROR, MAINTENANCE, UPGRADE", truncate(reason))
	}
	if err := s.unregister(r.Context(), id, record.UnregisterReason(reason)); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, UnregisterResult{AgentID: id, Status: "unregistered", Reason: reason})
	return nil
}

func (s *Server) unregister(ctx context.Context, id string, reason record.UnregisterReason) error {
	if err := s.n.Unregister(ctx, id, reason); err != nil {
		return err
	}
	s.mu.Lock()
	if prev := s.wsBound[id]; prev != nil {
		prev.unbindLocked(id)
	}
	delete(s.wsBound, id)
	delete(s.rpcTTL, id)
	s.mu.Unlock()
	return nil
}

// ---- PUT /agents/{id}/status ----

// StatusBody is the body of PUT /agents/{id}/status and its answer.
type StatusBody struct {
	AgentID string        `json:"agent_id,omitempty"`
	Status  record.Status `json:"status"`
}

func (s *Server) handleSetStatus(w http.ResponseWriter, r *http.Request) error {
	id, err := pathAgentID(r)
	if err != nil {
		return err
	}
	body, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	var sb struct {
		Status string `json:"status"`
	}
	if err := decodeObject(body, &sb, "", false); err != nil {
		return err
	}
	if sb.Status == "" {
		return badRequest("status", "is required (HEALTHY, DEGRADED, UNHEALTHY or MAINTENANCE)")
	}
	if err := s.n.SetStatus(r.Context(), id, record.Status(sb.Status)); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, StatusBody{AgentID: id, Status: record.Status(sb.Status)})
	return nil
}

// ---- GET /capabilities, /peers ----

// CapabilityList is the answer of GET /capabilities: the capability
// registry projection (seed 004 §4.3), each capability with its providers
// ranked for routing (health, then confidence_hint).
type CapabilityList struct {
	Capabilities map[string][]view.Provider `json:"capabilities"`
	Total        int                        `json:"total"`
}

func (s *Server) handleCapabilities(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r.URL.RawQuery, "capability", "prefix")
	if err != nil {
		return err
	}
	capability, err := q.ident("capability")
	if err != nil {
		return err
	}
	prefix, err := q.one("prefix")
	if err != nil {
		return err
	}
	out := CapabilityList{Capabilities: map[string][]view.Provider{}}
	add := func(c string, ps []view.Provider) {
		if len(ps) > 0 && strings.HasPrefix(c, prefix) {
			out.Capabilities[c] = ps
		}
	}
	if capability != "" {
		add(capability, s.n.Lookup(capability))
	} else {
		for c, ps := range s.n.Capabilities() {
			add(c, ps)
		}
	}
	out.Total = len(out.Capabilities)
	writeJSON(w, http.StatusOK, out)
	return nil
}

// PeerList is the answer of GET /peers.
type PeerList struct {
	Peers []node.PeerInfo `json:"peers"`
	Total int             `json:"total"`
}

func (s *Server) handlePeers(w http.ResponseWriter, r *http.Request) error {
	if _, err := parseQuery(r.URL.RawQuery); err != nil {
		return err
	}
	ps := s.n.Peers()
	if ps == nil {
		ps = []node.PeerInfo{}
	}
	for i := range ps {
		if ps[i].Addrs == nil {
			ps[i].Addrs = []string{}
		}
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].ID < ps[j].ID })
	writeJSON(w, http.StatusOK, PeerList{Peers: ps, Total: len(ps)})
	return nil
}

// ---- health, readiness, metrics ----

// Health is the answer of GET /healthz.
type Health struct {
	Status          string   `json:"status"` // "ok", or "closing" during shutdown
	AgentID         string   `json:"agent_id"`
	PeerID          string   `json:"peer_id"`
	Listen          []string `json:"listen"`
	UptimeSeconds   float64  `json:"uptime_seconds"`
	Version         string   `json:"version"`
	ProtocolVersion string   `json:"protocol_version"`
	Peers           int      `json:"peers"`
	LiveAgents      int      `json:"live_agents"`
	CachedRecords   int      `json:"cached_records"`
	HostedAgents    int      `json:"hosted_agents"`
	// Resigning is how many hosted records wait for their heartbeat slot
	// to be signed and announced again (after a restart); the stored
	// records are served meanwhile.
	Resigning int `json:"resigning"`
	// QuietAgents is how many hosted agents are beyond the most this node
	// gossips (256, what each peer admits of one peer): peers find them
	// through the DHT and the LAN.
	QuietAgents     int               `json:"quiet_agents"`
	DHTRoutingTable int               `json:"dht_routing_table"`
	Transports      map[string]string `json:"transports"`
	Auth            string            `json:"auth"` // "none", "bearer"
	// Reachability is AutoNAT's verdict: "unknown", "public", "private".
	Reachability string `json:"reachability"`
	// DHTMode is "server", "client" or "off".
	DHTMode string `json:"dht_mode"`
}

func (s *Server) health() Health {
	h := s.n.Health()
	st := "ok"
	if s.isClosed() {
		st = "closing"
	}
	auth := "none"
	if s.authAll {
		auth = "bearer"
	}
	listen := h.Addrs
	if listen == nil {
		listen = []string{}
	}
	return Health{
		Status: st, AgentID: h.AgentID, PeerID: h.PeerID, Listen: listen,
		UptimeSeconds: math.Round(time.Since(s.start).Seconds()*1000) / 1000,
		Version:       s.cfg.Version, ProtocolVersion: record.ProtocolVersion,
		Peers: h.Peers, LiveAgents: h.LiveAgents, CachedRecords: h.Cached, HostedAgents: h.Hosted, Resigning: h.Resigning, QuietAgents: h.Quiet,
		DHTRoutingTable: h.DHTTable, Transports: h.Transports, Auth: auth,
		Reachability: h.Reachability, DHTMode: h.DHTMode,
	}
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, s.health())
	return nil
}

// Ready is the answer of GET /readyz.
type Ready struct {
	Ready  bool              `json:"ready"`
	Checks map[string]string `json:"checks"`
}

func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) error {
	h := s.n.Health()
	checks := map[string]string{"api": "ok", "node": "ok", "store": "ok"}
	ready := true
	if s.isClosed() {
		checks["api"], ready = "closing", false
	}
	if h.Uptime == "" {
		checks["node"], ready = "not started", false
	}
	if _, _, err := s.n.Store().GetTombstone(r.Context(), "00000000-0000-4000-8000-000000000000"); err != nil {
		checks["store"], ready = "error: "+err.Error(), false
	}
	for k, v := range h.Transports {
		checks[k] = v
	}
	// A full disk refuses writes but the node still answers; it stays ready.
	if sr, ok := s.n.Store().(store.SpaceReporter); ok {
		if sp := sr.Space(); sp.Guarded {
			checks["disk"] = "ok"
			if sp.Full {
				checks["disk"] = fmt.Sprintf("full: %d bytes free, below the %d-byte reserve; writes are refused", sp.Free, sp.Reserve)
			}
		}
	}
	status := http.StatusOK
	if !ready {
		status = http.StatusServiceUnavailable
	}
	writeJSON(w, status, Ready{Ready: ready, Checks: checks})
	return nil
}

func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) error {
	promhttp.HandlerFor(s.m.Registry, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}).ServeHTTP(w, r)
	return nil
}

func (s *Server) handleSchema(w http.ResponseWriter, r *http.Request) error {
	kind := strings.TrimSuffix(r.PathValue("kind"), ".json")
	b, err := record.SchemaJSON(kind)
	if err != nil {
		return newError(http.StatusNotFound, record.CodeNotFound, "kind", "no schema %q (known: %s)", truncate(kind), strings.Join(record.SchemaKinds(), ", "))
	}
	w.Header().Set("Content-Type", "application/schema+json")
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(b)
	return nil
}

// appendJSON appends the entry as encoding/json would write it, without
// re-validating the agent object: it is the record's RFC 8785 canonical
// form, valid and compact already (encoding/json compacts every
// json.RawMessage again, a third of the cost of a cached discover).
func (e *AgentEntry) appendJSON(b []byte) []byte {
	b = append(b, `{"protocol_version":`...)
	b = appendJSONString(b, e.ProtocolVersion)
	b = append(b, `,"agent":`...)
	switch {
	case len(e.Agent) > 0:
		b = append(b, e.Agent...)
	case e.rec != nil:
		b = e.rec.AppendCanonical(b)
	default:
		b = append(b, "null"...)
	}
	switch {
	case e.rec != nil && len(e.Agent) == 0:
		b = appendBase64(b, `,"signature":"`, e.rec.Signature)
		b = appendBase64(b, `,"peer_signature":"`, e.rec.PeerSignature)
	default:
		if e.Signature != "" {
			b = append(b, `,"signature":`...)
			b = appendJSONString(b, e.Signature)
		}
		if e.PeerSignature != "" {
			b = append(b, `,"peer_signature":`...)
			b = appendJSONString(b, e.PeerSignature)
		}
	}
	b = append(b, `,"source":`...)
	b = appendJSONString(b, e.Source)
	b = append(b, `,"age_ms":`...)
	b = strconv.AppendInt(b, e.AgeMS, 10)
	b = append(b, `,"stale":`...)
	b = strconv.AppendBool(b, e.Stale)
	if e.Status != "" {
		b = append(b, `,"status":`...)
		b = appendJSONString(b, string(e.Status))
	}
	if e.Unbound {
		b = append(b, `,"unbound":true`...)
	}
	return append(b, '}')
}

func (l *AgentList) appendJSON(b []byte) []byte {
	b = append(b, `{"agents":[`...)
	for i := range l.Agents {
		if i > 0 {
			b = append(b, ',')
		}
		b = l.Agents[i].appendJSON(b)
	}
	b = append(b, `],"total":`...)
	b = strconv.AppendInt(b, int64(l.Total), 10)
	return append(b, '}')
}

// appendBase64 appends member (its name, colon and opening quote) and the
// base64 of sig, unless sig is empty.
func appendBase64(b []byte, member string, sig []byte) []byte {
	if len(sig) == 0 {
		return b
	}
	b = append(b, member...)
	b = base64.StdEncoding.AppendEncode(b, sig)
	return append(b, '"')
}

// appendJSONString appends s as a JSON string: plain ASCII (protocol
// versions, base64, enum values) is copied, anything else is encoded by
// encoding/json.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// writeRawJSON writes an already encoded JSON body.
func writeRawJSON(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}
