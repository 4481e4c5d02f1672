package client

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// ExplainQuery names what to explain: an agent (AgentID), a query (the
// filters of Query), or an agent against a query.
type ExplainQuery struct {
	AgentID string
	Query
	// Timeout bounds the daemon's resolver lookup (0: its default).
	Timeout time.Duration
}

// Explanation is the daemon's GET /explain answer (docs/operations.md,
// "Why can't I see agent X?").
type Explanation struct {
	Verdict string   `json:"verdict"`
	Summary string   `json:"summary"`
	Next    []string `json:"next"`
	AgentID string   `json:"agent_id,omitempty"`
	Live    *struct {
		Status        string        `json:"status"`
		Source        string        `json:"source"`
		Local         bool          `json:"local"`
		PeerID        string        `json:"peer_id"`
		Seq           uint64        `json:"seq"`
		LastHeard     time.Time     `json:"last_heard"`
		Interval      time.Duration `json:"interval_ns"`
		UnhealthyAt   time.Time     `json:"unhealthy_at"`
		TimeoutAt     time.Time     `json:"timeout_at"`
		PeerConnected bool          `json:"peer_connected"`
	} `json:"live,omitempty"`
	Held *struct {
		PeerID string    `json:"peer_id"`
		Since  time.Time `json:"since"`
	} `json:"held,omitempty"`
	Cached *struct {
		Source     string    `json:"source"`
		Seq        uint64    `json:"seq"`
		ReceivedAt time.Time `json:"received_at"`
		ExpiresAt  time.Time `json:"expires_at"`
		Stale      bool      `json:"stale"`
	} `json:"cached,omitempty"`
	Tombstone *struct {
		Seq    uint64    `json:"seq"`
		Reason string    `json:"reason"`
		At     time.Time `json:"at"`
	} `json:"tombstone,omitempty"`
	Heard []struct {
		Transport string    `json:"transport"`
		Kind      string    `json:"kind"`
		First     time.Time `json:"first"`
		Last      time.Time `json:"last"`
		Count     uint64    `json:"count"`
		LastSeq   uint64    `json:"last_seq"`
	} `json:"heard,omitempty"`
	Refusals []ExplainVerdict `json:"refusals,omitempty"`
	Left     *struct {
		At     time.Time `json:"at"`
		Reason string    `json:"reason"`
	} `json:"left,omitempty"`
	Trust *struct {
		Policy      string `json:"policy"`
		Allowed     bool   `json:"allowed"`
		KeyPinned   bool   `json:"key_pinned"`
		Certificate bool   `json:"certificate"`
	} `json:"trust,omitempty"`
	Mismatched []string `json:"mismatched,omitempty"`
	Interest   *struct {
		Scope   string `json:"scope"`
		Shard   string `json:"shard"`
		Covered bool   `json:"covered"`
	} `json:"interest,omitempty"`
	Resolver *struct {
		Steps []struct {
			Name  string        `json:"name"`
			Took  time.Duration `json:"took_ns"`
			Found int           `json:"found"`
			Error string        `json:"error"`
			Note  string        `json:"note"`
		} `json:"steps"`
		AnsweredBy string        `json:"answered_by"`
		Took       time.Duration `json:"took_ns"`
	} `json:"resolver,omitempty"`
	Results []struct {
		AgentID   string        `json:"agent_id"`
		AgentName string        `json:"agent_name"`
		Source    string        `json:"source"`
		Status    string        `json:"status"`
		Stale     bool          `json:"stale"`
		Age       time.Duration `json:"age_ns"`
	} `json:"results,omitempty"`
	ResolverError   string `json:"resolver_error,omitempty"`
	RefusedOffering []struct {
		AgentID  string           `json:"agent_id"`
		Refusals []ExplainVerdict `json:"refusals"`
	} `json:"refused_offering,omitempty"`

	raw json.RawMessage
}

// ExplainVerdict is one refusal of the daemon's journal.
type ExplainVerdict struct {
	At        time.Time `json:"at"`
	Transport string    `json:"transport"`
	Kind      string    `json:"kind"`
	Seq       uint64    `json:"seq"`
	PeerID    string    `json:"peer_id"`
	Reason    string    `json:"reason"`
	Detail    string    `json:"detail"`
	Count     uint64    `json:"count"`
}

// Explain asks the daemon why an agent is or is not visible to it, or how
// it resolves a query.
func (c *Client) Explain(ctx context.Context, q ExplainQuery) (*Explanation, error) {
	v := q.values()
	v.Del("limit")
	v.Del("include_stale")
	if q.AgentID != "" {
		v.Set("agent_id", q.AgentID)
	}
	if q.Timeout > 0 {
		v.Set("timeout_ms", strconv.FormatInt(q.Timeout.Milliseconds(), 10))
	}
	var raw json.RawMessage
	if err := c.do(ctx, "GET", "/explain", v, nil, &raw); err != nil {
		return nil, err
	}
	ex := &Explanation{raw: raw}
	if err := json.Unmarshal(raw, ex); err != nil {
		return nil, fmt.Errorf("GET /explain: the answer does not decode: %w", err)
	}
	return ex, nil
}

// JSON returns the daemon's answer as it sent it.
func (e *Explanation) JSON() json.RawMessage { return e.raw }
