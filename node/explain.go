package node

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/agentd/agentd/gossip"
	"github.com/agentd/agentd/internal/journal"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/trust"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Verdicts of an Explanation: the one-word answer to "can this node see
// the agent?".
const (
	ExplainVisible  = "visible"  // live in the view, or answered by the resolver
	ExplainHeld     = "held"     // verified, waiting for its peer to be reached
	ExplainRefused  = "refused"  // heard, and refused (see Refusals)
	ExplainExpired  = "expired"  // known, but silent past its timeout or expired
	ExplainGone     = "gone"     // unregistered (a tombstone holds it)
	ExplainFiltered = "filtered" // visible, but the query's filters exclude it
	ExplainUnknown  = "unknown"  // never heard of
	ExplainFound    = "found"    // a capability query that found agents
	ExplainNotFound = "not_found"
)

// ExplainQuery says what to explain: one agent (AgentID), or a query (the
// filter's capability, skill, text…), or an agent against a query.
type ExplainQuery struct {
	store.Filter
	// LocalOnly keeps the resolver from asking the network.
	LocalOnly bool
	// Timeout bounds the resolver's lookup (default Config.LookupTimeout).
	Timeout time.Duration
}

// Explanation is the answer of Explain.
type Explanation struct {
	Query   ExplainFilter `json:"query"`
	Verdict string        `json:"verdict"`
	// Summary is one sentence for a human.
	Summary string `json:"summary"`
	// Next lists what to do, most useful first.
	Next []string `json:"next"`

	// Of one agent (the query names an agent id):
	AgentID   string           `json:"agent_id,omitempty"`
	Live      *ExplainedLive   `json:"live,omitempty"`
	Held      *ExplainedHeld   `json:"held,omitempty"`
	Cached    *ExplainedCache  `json:"cached,omitempty"`
	Tombstone *store.Tombstone `json:"tombstone,omitempty"`
	// Heard and Refusals come from the node's journal: which transports
	// delivered verified records and beats, and the last refusals.
	Heard    []journal.Heard   `json:"heard,omitempty"`
	Refusals []journal.Verdict `json:"refusals,omitempty"`
	Left     *journal.Left     `json:"left,omitempty"`
	Trust    *ExplainedTrust   `json:"trust,omitempty"`
	// Mismatched lists the query's filters the agent's record does not
	// match ("capability=x").
	Mismatched []string `json:"mismatched,omitempty"`

	// Of a query:
	Interest *ExplainedInterest `json:"interest,omitempty"`
	Resolver *Trace             `json:"resolver,omitempty"`
	// Results are the agents the resolver answered (at most 50).
	Results []ExplainResult `json:"results,omitempty"`
	// ResolverError is the resolver's refusal (DISC_00x: message).
	ResolverError string `json:"resolver_error,omitempty"`
	// RefusedOffering lists agents offering the query's capability whose
	// records this node refused.
	RefusedOffering []journal.Entry `json:"refused_offering,omitempty"`
}

// ExplainFilter is the query as it was understood.
type ExplainFilter struct {
	AgentID    string   `json:"agent_id,omitempty"`
	Capability string   `json:"capability,omitempty"`
	Skill      string   `json:"skill,omitempty"`
	Scene      string   `json:"scene,omitempty"`
	Type       string   `json:"type,omitempty"`
	Tags       []string `json:"tags,omitempty"`
	Tenant     string   `json:"tenant,omitempty"`
	Version    string   `json:"version,omitempty"`
	Text       string   `json:"q,omitempty"`
}

// ExplainedLive is an agent's state in the live view.
type ExplainedLive struct {
	Status record.Status `json:"status"`
	Source store.Source  `json:"source"`
	Local  bool          `json:"local"`
	// Quiet: hosted here beyond the agents this node gossips (its peers'
	// per-peer quota); peers find it through the DHT and the LAN.
	Quiet     bool      `json:"quiet,omitempty"`
	Unbound   bool      `json:"unbound,omitempty"`
	PeerID    string    `json:"peer_id,omitempty"`
	Seq       uint64    `json:"seq"`
	FirstSeen time.Time `json:"first_seen"`
	LastHeard time.Time `json:"last_heard"`
	// Interval is the heartbeat interval the agent stated (after the
	// node's clamp); UnhealthyAt and TimeoutAt are when the seed's rules
	// mark it UNHEALTHY and remove it if nothing more is heard.
	Interval    time.Duration `json:"interval_ns"`
	UnhealthyAt time.Time     `json:"unhealthy_at"`
	TimeoutAt   time.Time     `json:"timeout_at"`
	ExpiresAt   time.Time     `json:"record_expires_at"`
	// PeerConnected says whether this node has a connection to the peer
	// that hosts the agent.
	PeerConnected bool `json:"peer_connected"`
}

// ExplainedHeld is a record held until its peer is reached.
type ExplainedHeld struct {
	PeerID string    `json:"peer_id"`
	Since  time.Time `json:"since"`
}

// ExplainedCache is an agent's entry in the cache.
type ExplainedCache struct {
	Source     store.Source `json:"source"`
	Seq        uint64       `json:"seq"`
	ReceivedAt time.Time    `json:"received_at"`
	ExpiresAt  time.Time    `json:"expires_at"`
	Stale      bool         `json:"stale"`
}

// ExplainedTrust is what the trust policy says of the agent now.
type ExplainedTrust struct {
	Policy      trust.Policy `json:"policy"`
	Allowed     bool         `json:"allowed"`
	KeyPinned   bool         `json:"key_pinned"`
	Certificate bool         `json:"certificate,omitempty"` // its record carries one
}

// ExplainedInterest is how a scoped node covers the query's capability.
type ExplainedInterest struct {
	Scope string `json:"scope"`
	// Shard is the capability's shard topic; Covered says whether the
	// live view answers for the capability by itself.
	Shard   string `json:"shard,omitempty"`
	Covered bool   `json:"covered"`
}

// ExplainResult is one agent a traced lookup answered.
type ExplainResult struct {
	AgentID   string        `json:"agent_id"`
	AgentName string        `json:"agent_name"`
	Source    store.Source  `json:"source"`
	Status    record.Status `json:"status,omitempty"`
	Stale     bool          `json:"stale,omitempty"`
	Age       time.Duration `json:"age_ns"`
}

// maxExplainResults bounds Explanation.Results.
const maxExplainResults = 50

// Explain answers why an agent is or is not visible on this node, or how
// a query is resolved here: what the live view, the cache and the journal
// hold, the trust policy's view of it, whether the query's filters match
// it, the resolver's path, and what to do next.
func (n *Node) Explain(ctx context.Context, q ExplainQuery) (*Explanation, error) {
	f := q.Filter
	if f.AgentID != "" {
		if err := record.ValidateAgentID(f.AgentID); err != nil {
			return nil, &record.FieldError{Field: "agent_id", Reason: err.Error()}
		}
	}
	if _, err := f.Compile(); err != nil {
		return nil, err
	}
	ex := &Explanation{Query: ExplainFilter{AgentID: f.AgentID, Capability: f.Capability, Skill: f.Skill, Scene: f.Scene, Type: f.Type,
		Tags: f.Tags, Tenant: f.Tenant, Version: f.Version, Text: f.Text}, Next: []string{}}
	var rec *record.SignedAgent
	if f.AgentID != "" {
		rec = n.explainAgent(ctx, ex, f.AgentID)
	}
	// A query beyond the agent id runs the resolver, traced.
	hasQuery := f.Narrows()
	if hasQuery && rec != nil {
		ex.Mismatched = mismatches(f, &rec.Agent)
	}
	if hasQuery || f.AgentID == "" {
		n.explainQuery(ctx, ex, q)
	}
	n.explainVerdict(ex, rec, hasQuery)
	return ex, nil
}

// explainAgent fills what the node holds about one agent and returns its
// best record (live or cached), nil when there is none.
func (n *Node) explainAgent(ctx context.Context, ex *Explanation, id string) *record.SignedAgent {
	ex.AgentID = id
	var rec *record.SignedAgent
	if a, ok := n.view.Get(id); ok {
		rec = a.Record
		l := &ExplainedLive{Status: a.Status, Source: a.Source, Local: a.Local, Quiet: a.Quiet, Unbound: a.Record.Unbound(), PeerID: a.Record.Agent.PeerID,
			Seq: a.Record.Agent.Seq, FirstSeen: a.FirstSeen, LastHeard: a.LastHeard, Interval: a.Interval,
			ExpiresAt: a.Record.Agent.ExpiresAt()}
		l.UnhealthyAt, l.TimeoutAt = n.view.Deadlines(a)
		if a.Local {
			l.PeerConnected = true
		} else if p, err := peer.Decode(l.PeerID); err == nil {
			l.PeerConnected = n.host.Network().Connectedness(p) == network.Connected
		}
		ex.Live = l
	}
	if p, since, ok := n.view.Held(id); ok {
		ex.Held = &ExplainedHeld{PeerID: p, Since: since}
	}
	if e, err := n.st.Get(ctx, id); err == nil {
		ex.Cached = &ExplainedCache{Source: e.Source, Seq: e.Record.Agent.Seq, ReceivedAt: e.ReceivedAt, ExpiresAt: e.ExpiresAt, Stale: e.Stale}
		if rec == nil {
			rec = e.Record
		}
	}
	if t, ok, err := n.st.GetTombstone(ctx, id); err == nil && ok {
		ex.Tombstone = &t
	}
	if e, ok := n.jrnl.Get(id); ok {
		ex.Heard, ex.Refusals, ex.Left = e.Heard, e.Refusals, e.Left
	}
	tr := &ExplainedTrust{Policy: n.ver.Policy(), Allowed: n.ver.Allowed(id)}
	_, tr.KeyPinned = n.ver.AgentKey(id)
	if rec != nil {
		tr.Certificate = rec.Agent.Certificate != ""
	}
	ex.Trust = tr
	return rec
}

// explainQuery runs the resolver for the query, traced.
func (n *Node) explainQuery(ctx context.Context, ex *Explanation, q ExplainQuery) {
	f := q.Filter
	if f.Capability != "" {
		in := &ExplainedInterest{Scope: n.cfg.Scope, Covered: n.covers(f.Capability)}
		if n.Scoped() {
			in.Shard = gossip.ShardTopic(record.Shard(f.Capability))
		} else {
			in.Scope = ScopeFull
		}
		ex.Interest = in
		ex.RefusedOffering = n.jrnl.Offering(f.Capability, 20)
	}
	rq := Query{Filter: f, LocalOnly: q.LocalOnly, Timeout: q.Timeout}
	rq.Limit = 0 // every match: the agent asked about may be past a page
	res, tr, err := n.DiscoverTrace(ctx, rq)
	ex.Resolver = tr
	if err != nil {
		ex.ResolverError = err.Error()
	}
	ex.Results = []ExplainResult{}
	for _, r := range res {
		if len(ex.Results) >= maxExplainResults {
			break
		}
		ex.Results = append(ex.Results, ExplainResult{AgentID: r.Agent.AgentID, AgentName: r.Agent.AgentName, Source: r.Source, Status: r.Status, Stale: r.Stale, Age: r.Age})
	}
}

// mismatches lists the filters of f (other than the agent id) that a
// does not match, each tested alone.
func mismatches(f store.Filter, a *record.Agent) []string {
	var out []string
	try := func(name, value string, g store.Filter) {
		if mm, err := g.Compile(); err == nil && !mm.Matches(a) {
			out = append(out, name+"="+value)
		}
	}
	if f.Capability != "" {
		try("capability", f.Capability, store.Filter{Capability: f.Capability})
	}
	if f.Skill != "" {
		try("skill", f.Skill, store.Filter{Skill: f.Skill})
	}
	if f.Scene != "" {
		try("scene", f.Scene, store.Filter{Scene: f.Scene})
	}
	if f.Type != "" {
		try("type", f.Type, store.Filter{Type: f.Type})
	}
	for _, t := range f.Tags {
		try("tag", t, store.Filter{Tags: []string{t}})
	}
	if f.Tenant != "" {
		try("tenant", f.Tenant, store.Filter{Tenant: f.Tenant})
	}
	if f.Version != "" {
		// The constraint applies to the matching skill when one is named.
		try("version", f.Version, store.Filter{Version: f.Version, Skill: f.Skill, Capability: f.Capability})
	}
	if f.Text != "" {
		try("q", f.Text, store.Filter{Text: f.Text})
	}
	return out
}

// explainVerdict decides the verdict, the summary and the advice.
func (n *Node) explainVerdict(ex *Explanation, rec *record.SignedAgent, hasQuery bool) {
	next := func(format string, args ...any) { ex.Next = append(ex.Next, fmt.Sprintf(format, args...)) }
	if ex.AgentID == "" {
		n.explainQueryVerdict(ex, next)
		return
	}
	id := ex.AgentID
	inResults := slices.ContainsFunc(ex.Results, func(r ExplainResult) bool { return r.AgentID == id })
	lastRefusal := func() *journal.Verdict {
		if len(ex.Refusals) == 0 {
			return nil
		}
		return &ex.Refusals[len(ex.Refusals)-1]
	}()
	switch {
	case ex.Live != nil && len(ex.Mismatched) > 0:
		ex.Verdict = ExplainFiltered
		ex.Summary = fmt.Sprintf("Agent %s is live here, but the query's filters exclude it: %s.", id, strings.Join(ex.Mismatched, ", "))
		next("drop or correct the filters the record does not match (%s); GET /agents/%s shows its record", strings.Join(ex.Mismatched, ", "), id)
	case ex.Live != nil:
		ex.Verdict = ExplainVisible
		l := ex.Live
		switch {
		case l.Local && l.Quiet:
			ex.Summary = fmt.Sprintf("Agent %s is hosted by this node (status %s) and quiet: the node gossips %d of the agents it hosts, what each peer admits of one peer; peers find this one through the DHT and the LAN, not live on gossip.", id, l.Status, n.cfg.MaxAgentsPerPeer)
		case l.Local:
			ex.Summary = fmt.Sprintf("Agent %s is hosted by this node (status %s).", id, l.Status)
		default:
			ex.Summary = fmt.Sprintf("Agent %s is live here: heard by %s, last heard %s ago, status %s.", id, l.Source, time.Since(l.LastHeard).Round(time.Millisecond), l.Status)
		}
		if hasQuery && !inResults && ex.ResolverError == "" && len(ex.Results) > 0 {
			next("the query answered with other agents first; raise --limit or narrow the query")
		}
		if l.Status == record.StatusUnhealthy {
			next("it missed heartbeats: it is removed at %s unless one arrives; check the agent's node (`agentd peers` shows whether its peer is connected: %v)", l.TimeoutAt.UTC().Format(time.RFC3339), l.PeerConnected)
		}
		if !l.Local && !l.PeerConnected {
			next("this node has no connection to the agent's peer %s; it hears it through other peers", l.PeerID)
		}
	case ex.Held != nil:
		ex.Verdict = ExplainHeld
		ex.Summary = fmt.Sprintf("Agent %s's record is verified but held: its peer %s has not been reached yet (every new peer is dialled once before its agents enter the view).", id, ex.Held.PeerID)
		next("check that peer %s is reachable from this node (its listen addresses, NAT, a relay); `agentd peers` lists the connected ones", ex.Held.PeerID)
	case ex.Tombstone != nil && (ex.Cached == nil || ex.Cached.Seq <= ex.Tombstone.Seq):
		ex.Verdict = ExplainGone
		ex.Summary = fmt.Sprintf("Agent %s unregistered at %s (reason %s); a record older than its seq %d is not accepted.", id, ex.Tombstone.At.UTC().Format(time.RFC3339), ex.Tombstone.Reason, ex.Tombstone.Seq)
		next("if the agent is back, it must announce a record with a seq greater than %d (agentd does this on register)", ex.Tombstone.Seq)
	case lastRefusal != nil && (ex.Left == nil || lastRefusal.At.After(ex.Left.At)) && !inResults:
		ex.Verdict = ExplainRefused
		ex.Summary = fmt.Sprintf("This node refused agent %s's last %s from %s: %s (%s).", id, lastRefusal.Kind, lastRefusal.Transport, lastRefusal.Reason, lastRefusal.Detail)
		adviseRefusal(lastRefusal.Reason, id, next)
	case inResults:
		ex.Verdict = ExplainVisible
		r := ex.Results[slices.IndexFunc(ex.Results, func(r ExplainResult) bool { return r.AgentID == id })]
		ex.Summary = fmt.Sprintf("Agent %s is not in the live view, but the resolver found it (step %s).", id, ex.Resolver.AnsweredBy)
		if r.Stale {
			ex.Summary = fmt.Sprintf("Agent %s is only known from an expired cache entry (served stale).", id)
			ex.Verdict = ExplainExpired
		}
	case ex.Left != nil || ex.Cached != nil:
		ex.Verdict = ExplainExpired
		switch {
		case ex.Left != nil:
			ex.Summary = fmt.Sprintf("Agent %s left the live view at %s (%s).", id, ex.Left.At.UTC().Format(time.RFC3339), leftReason(ex.Left.Reason))
		default:
			ex.Summary = fmt.Sprintf("Agent %s is only in the cache (received %s, fresh until %s): nothing live has been heard of it.", id, ex.Cached.ReceivedAt.UTC().Format(time.RFC3339), ex.Cached.ExpiresAt.UTC().Format(time.RFC3339))
		}
		next("check that the agent's node is running and connected: on that node, `agentd peers` and `agentd explain %s`", id)
		if rec != nil && !rec.Agent.ExpiresAt().After(time.Now()) {
			next("its record expired at %s (issued_at + ttl_seconds); the agent must re-announce", rec.Agent.ExpiresAt().UTC().Format(time.RFC3339))
		}
	default:
		ex.Verdict = ExplainUnknown
		ex.Summary = fmt.Sprintf("This node has never heard of agent %s: no transport delivered a record or a heartbeat of it.", id)
		if len(n.host.Network().Peers()) == 0 {
			next("this node has no peer: check the bootstrap list (`agentd run --bootstrap …`) or LAN discovery (`/readyz` shows each transport)")
		} else {
			next("on the agent's node, check that it is registered (`agentd explain %s` there says visible) and that the two nodes share a peer (`agentd peers`)", id)
		}
		if n.Scoped() {
			next("this node hears only its interest: query one of the agent's capabilities (`agentd discover --capability C`) and it joins the interest")
		}
		if !n.ver.Allowed(id) {
			next("the %s policy does not admit %s: add it to trust.allowList", n.ver.Policy(), id)
		}
	}
}

func (n *Node) explainQueryVerdict(ex *Explanation, next func(string, ...any)) {
	if len(ex.Results) > 0 {
		ex.Verdict = ExplainFound
		ex.Summary = fmt.Sprintf("%d agent(s) found; the %s step answered in %s.", len(ex.Results), ex.Resolver.AnsweredBy, ex.Resolver.Took.Round(time.Microsecond))
		if len(ex.RefusedOffering) > 0 {
			next("%d agent(s) offering the capability were refused here; see refused_offering", len(ex.RefusedOffering))
		}
		return
	}
	ex.Verdict = ExplainNotFound
	ex.Summary = "No agent matches the query: " + ex.ResolverError
	if len(ex.RefusedOffering) > 0 {
		e := ex.RefusedOffering[0]
		r := e.Refusals[len(e.Refusals)-1]
		next("%d agent(s) offering it were refused here, e.g. %s: %s (%s); `agentd explain %s`", len(ex.RefusedOffering), e.AgentID, r.Reason, r.Detail, e.AgentID)
	}
	if len(n.host.Network().Peers()) == 0 {
		next("this node has no peer: check the bootstrap list or LAN discovery (`/readyz` shows each transport)")
	}
	if strings.HasPrefix(ex.ResolverError, record.CodeDiscoveryTimeout) {
		next("the lookup timed out; a longer --timeout lets the DHT finish")
	}
	next("check the spelling of the capability or skill id; `agentd list` lists what this node sees")
}

// adviseRefusal turns a refusal reason into what to do.
func adviseRefusal(reason, id string, next func(string, ...any)) {
	switch trust.Reason(reason) {
	case trust.ReasonBadSignature, trust.ReasonBadPeerSignature, trust.ReasonUnsigned:
		next("the record's signature does not verify: it was changed after signing or signed over other bytes; re-register it from the agent's own node")
	case trust.ReasonKeyMismatch:
		next("agent id %s is pinned to another key here; a new key needs a rotation statement signed by the old one (see docs/trust.md, key rotation)", id)
	case trust.ReasonNotAllowlisted:
		next("the allowlist policy admits only listed agents: add %s to trust.allowList in this node's configuration", id)
	case trust.ReasonRevoked:
		next("its certificate is revoked by a CRL this node loaded; the agent needs a new certificate from its CA")
	case trust.ReasonUnknownIssuer, trust.ReasonNoCertificate, trust.ReasonBadCertificate, trust.ReasonNameMismatch:
		next("the ca policy needs a certificate chain to one of this node's roots: check it with `agentd trust verify`")
	case trust.ReasonExpired:
		next("the record expired (issued_at + ttl_seconds) before it arrived: check the agent's clock and that its node re-announces")
	case trust.ReasonNotYetValid:
		next("the record's issued_at is in the future: the clocks of the two machines disagree by more than the allowed skew")
	case trust.ReasonPeerQuota, "prefix_quota":
		next("its peer or address prefix already has as many agents in this node's view as one may have (max_agents_per_peer)")
	case "peer_down":
		next("its peer was confirmed unreachable; a record signed after that brings it back")
	case "unvetted_expired", "unvetted_author":
		next("its peer was never reached from this node: check reachability (NAT, relays) between the two nodes")
	case "shard_mismatch", "scene_mismatch":
		next("its node published it on a topic its capabilities or scenes do not belong to: a misbehaving or outdated agentd; upgrade it")
	default:
		next("the refusal reason %q is counted in agentd_rejects_total; docs/trust.md lists every reason", reason)
	}
}

func leftReason(r string) string {
	switch {
	case strings.EqualFold(r, "timeout"):
		return "no heartbeat within its timeout"
	case r == "":
		return "no reason given"
	}
	return r
}
