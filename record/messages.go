package record

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"github.com/Masterminds/semver/v3"
)

// ProtocolVersion is the version agentd speaks and emits (seed 000 §8.1).
const ProtocolVersion = "v1.0"

// Supported protocol version numbers.
const (
	SupportedMajor = 1
	SupportedMinor = 0
)

// ParseVersion splits "v{major}.{minor}".
func ParseVersion(v string) (major, minor int, err error) {
	// ^v(\d{1,4})\.(\d{1,4})$ written out (TestMatchersAgreeWithRegexps):
	// every record decoded checks its version.
	num := func(s string) (int, bool) {
		if len(s) == 0 || len(s) > 4 {
			return 0, false
		}
		n := 0
		for i := 0; i < len(s); i++ {
			if s[i] < '0' || s[i] > '9' {
				return 0, false
			}
			n = n*10 + int(s[i]-'0')
		}
		return n, true
	}
	var ok1, ok2 bool
	if rest, found := strings.CutPrefix(v, "v"); found {
		if a, b, dot := strings.Cut(rest, "."); dot {
			major, ok1 = num(a)
			minor, ok2 = num(b)
		}
	}
	if !ok1 || !ok2 {
		return 0, 0, fieldErr("protocol_version", "%q is not of the form v{major}.{minor}", trunc(v))
	}
	return major, minor, nil
}

// CheckVersion applies the negotiation rules of seed 000 §8.1: a message of an
// unsupported major version is refused with ErrUnsupportedVersion (receivers
// ignore it; request/response surfaces answer with the version they
// support); a higher minor version of our major is accepted, and newerMinor
// tells the caller to log a warning.
func CheckVersion(v string) (newerMinor bool, err error) {
	major, minor, err := ParseVersion(v)
	if err != nil {
		return false, err
	}
	if major != SupportedMajor {
		return false, fmt.Errorf("%w: %s (this node speaks %s)", ErrUnsupportedVersion, v, ProtocolVersion)
	}
	return minor > SupportedMinor, nil
}

// QueryBody is the "query" member of a seed-000 Query message. capability is
// required by the seed schema; the other members are agentd extensions that
// narrow the match and are ignored by peers that do not know them.
type QueryBody struct {
	Capability string   `json:"capability"`
	AgentID    string   `json:"agent_id,omitempty"`
	Skill      string   `json:"skill,omitempty"`
	Scene      string   `json:"scene,omitempty"`
	Type       string   `json:"type,omitempty"`
	Tags       []string `json:"tags,omitempty"`
	Tenant     string   `json:"tenant,omitempty"`
	Version    string   `json:"version,omitempty"` // semver constraint
	Text       string   `json:"q,omitempty"`
	Limit      int      `json:"limit,omitempty"`
}

// Query is the seed-000 Query message (§4.1.2).
type Query struct {
	ProtocolVersion string    `json:"protocol_version"`
	Query           QueryBody `json:"query"`
	AgentID         string    `json:"agent_id,omitempty"` // the requester, optional
}

// Validate checks the query fields.
func (q *Query) Validate() error {
	if _, err := CheckVersion(q.ProtocolVersion); err != nil {
		return err
	}
	b := q.Query
	if b.Capability != "" && !ValidIdent(b.Capability) {
		return fieldErr("query.capability", "%q is not a valid capability id", trunc(b.Capability))
	}
	if b.Skill != "" && !ValidIdent(b.Skill) {
		return fieldErr("query.skill", "%q is not a valid skill id", trunc(b.Skill))
	}
	if b.AgentID != "" {
		if err := ValidateAgentID(b.AgentID); err != nil {
			return fieldErr("query.agent_id", "%v", err)
		}
	}
	if b.Scene != "" && !ValidIdent(b.Scene) {
		return fieldErr("query.scene", "%q is not a valid scene id", trunc(b.Scene))
	}
	if b.Type != "" && !SkillType(b.Type).Valid() {
		return fieldErr("query.type", "%q is not one of enterprise-skill, tool-skill, integration-skill", trunc(b.Type))
	}
	if len(b.Tags) > MaxTags {
		return fieldErr("query.tags", "has %d tags, more than %d", len(b.Tags), MaxTags)
	}
	for i, t := range b.Tags {
		if t == "" || len(t) > MaxIDLen || !Printable(t) {
			return fieldErr(fmt.Sprintf("query.tags[%d]", i), "must be 1-%d printable bytes", MaxIDLen)
		}
	}
	if b.Tenant != "" && !ValidIdent(b.Tenant) {
		return fieldErr("query.tenant", "must be an identifier of at most %d bytes", MaxIDLen)
	}
	if b.Version != "" {
		if len(b.Version) > MaxShortTextLen {
			return fieldErr("query.version", "is longer than %d bytes", MaxShortTextLen)
		}
		if _, err := semver.NewConstraint(b.Version); err != nil {
			return fieldErr("query.version", "%q is not a semantic version constraint: %v", trunc(b.Version), err)
		}
	}
	if q.AgentID != "" && (len(q.AgentID) > MaxIDLen || !Printable(q.AgentID)) {
		return fieldErr("agent_id", "must be 1-%d printable bytes", MaxIDLen)
	}
	if b.Limit < 0 || b.Limit > 1000 {
		return fieldErr("query.limit", "must be between 0 and 1000")
	}
	if len(b.Text) > MaxShortTextLen || !Printable(b.Text) {
		return fieldErr("query.q", "is longer than %d bytes", MaxShortTextLen)
	}
	return nil
}

// ParseQuery parses and validates a Query message. The seed schema requires
// query.capability; agentd also accepts a query by skill or agent_id only.
func ParseQuery(b []byte) (*Query, bool, error) {
	if len(b) > MaxMessageBytes {
		return nil, false, fmt.Errorf("%w: query is %d bytes, limit %d", ErrTooLarge, len(b), MaxMessageBytes)
	}
	if _, err := CanonicalizeJSON(b); err != nil {
		return nil, false, err
	}
	var q Query
	if err := checkMemberCase(b, reflect.TypeOf(q), ""); err != nil {
		return nil, false, err
	}
	if err := json.Unmarshal(b, &q); err != nil {
		return nil, false, jsonFieldErr("", err)
	}
	var probe struct {
		Query json.RawMessage `json:"query"`
	}
	_ = json.Unmarshal(b, &probe)
	if len(probe.Query) == 0 || string(probe.Query) == "null" {
		return nil, false, fieldErr("query", "is required")
	}
	newer, err := CheckVersion(q.ProtocolVersion)
	if err != nil {
		return nil, false, err
	}
	if len(q.Query.Tags) == 0 {
		q.Query.Tags = nil // [] and absent are the same query
	}
	if q.Query.Capability == "" && q.Query.Skill == "" && q.Query.AgentID == "" {
		return nil, false, fieldErr("query.capability", "is required (or give query.skill or query.agent_id)")
	}
	if err := q.Validate(); err != nil {
		return nil, false, err
	}
	return &q, newer, nil
}

// Response is the seed-000 Response message (§4.1.3), extended with the
// signatures of the agent object so the receiver can verify it.
type Response struct {
	ProtocolVersion string          `json:"protocol_version"`
	Agent           json.RawMessage `json:"agent"`
	Matched         bool            `json:"matched"`
	Signature       string          `json:"signature,omitempty"`
	PeerSignature   string          `json:"peer_signature,omitempty"`
}

// NewResponse builds the Response carrying sa.
func NewResponse(sa *SignedAgent, matched bool) Response {
	a := sa.Announce()
	return Response{ProtocolVersion: ProtocolVersion, Agent: a.Agent, Matched: matched, Signature: a.Signature, PeerSignature: a.PeerSignature}
}

// ParseResponse parses a Response message into its signed agent. An
// answer may carry a registry's record without peer binding, so an
// unbound agent object is accepted (see ParseAnnounceUnbound).
func ParseResponse(b []byte) (*SignedAgent, bool, error) {
	if len(b) > MaxMessageBytes {
		return nil, false, fmt.Errorf("%w: response is %d bytes, limit %d", ErrTooLarge, len(b), MaxMessageBytes)
	}
	canon, err := CanonicalizeJSON(b)
	if err != nil {
		return nil, false, err
	}
	var r Response
	if err := checkMemberCase(canon, reflect.TypeOf(r), ""); err != nil {
		return nil, false, err
	}
	if err := json.Unmarshal(canon, &r); err != nil {
		return nil, false, jsonFieldErr("", err)
	}
	if _, err := CheckVersion(r.ProtocolVersion); err != nil {
		return nil, false, err
	}
	sa, err := fromAnnounce(Announce{ProtocolVersion: r.ProtocolVersion, Agent: r.Agent, Signature: r.Signature, PeerSignature: r.PeerSignature}, true, true)
	if err != nil {
		return nil, false, err
	}
	return sa, r.Matched, nil
}
