package dht

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/trust"
	lprecord "github.com/libp2p/go-libp2p-record"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Errors of the value validator.
var (
	// ErrBadKey is returned for a DHT value key that is not
	// /agentd/<peer-id> or /agentd/<agent-id>, or that does not name the
	// record it holds.
	ErrBadKey = errors.New("bad agentd value key")
	// ErrNoValidValue is returned by Select when no value is valid.
	ErrNoValidValue = errors.New("no valid agentd value")
)

// DefaultClockSkew is how far in the future a value's issued_at may be.
const DefaultClockSkew = 5 * time.Minute

// Validator is the go-libp2p-record validator of the "agentd" namespace.
// The zero value is ready to use.
type Validator struct {
	// Now returns the current time (default time.Now).
	Now func() time.Time
	// ClockSkew is how far in the future issued_at may be (default 5 min).
	ClockSkew time.Duration
	// OnReject, when set, is told of every value Validate refuses: kad-dht
	// validates through it both the values peers PUT here and the values
	// peers answer a GET with, so a forged value is counted either way.
	OnReject func(key string, err error)
	// Verified, when set, remembers values whose Announce parsed and whose
	// signatures verified, so that kad-dht's repeated validation of one PUT
	// (Validate, then Select over the incoming and the stored value) and
	// the republishing of an unchanged record verify each value once. The
	// validity window is checked on every call.
	Verified *VerifiedCache
}

// VerifiedCache is a bounded set of values that parsed and verified,
// keyed by the SHA-256 of their bytes (signature verification is a pure
// function of them). One per node: it is never shared between nodes, so
// simnet measures every node's own work.
type VerifiedCache struct {
	mu sync.Mutex
	m  map[[32]byte]*record.SignedAgent
}

// verifiedMax bounds the cache (cleared when full).
const verifiedMax = 4096

// NewVerifiedCache returns an empty cache.
func NewVerifiedCache() *VerifiedCache {
	return &VerifiedCache{m: map[[32]byte]*record.SignedAgent{}}
}

func (c *VerifiedCache) get(k [32]byte) (*record.SignedAgent, bool) {
	if c == nil {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	sa, ok := c.m[k]
	return sa, ok
}

func (c *VerifiedCache) put(k [32]byte, sa *record.SignedAgent) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= verifiedMax {
		clear(c.m)
	}
	c.m[k] = sa
}

var _ lprecord.Validator = Validator{}

// ValueKey returns the DHT key of a value: "/agentd/" + id, where id is an
// agent id or a peer id in its canonical string form.
func ValueKey(id string) string { return "/" + ValueNamespace + "/" + id }

// ParseValueKey splits a value key. Exactly one of agentID and p is set.
func ParseValueKey(key string) (agentID string, p peer.ID, err error) {
	ns, rest, err := lprecord.SplitKey(key)
	if err != nil || ns != ValueNamespace {
		return "", "", fmt.Errorf("%w: %q is not in namespace /%s/", ErrBadKey, truncate(key), ValueNamespace)
	}
	if record.ValidateAgentID(rest) == nil {
		return rest, "", nil
	}
	id, perr := peer.Decode(rest)
	if perr != nil {
		return "", "", fmt.Errorf("%w: %q is neither an agent id (UUIDv4) nor a peer id", ErrBadKey, truncate(rest))
	}
	if id.String() != rest {
		return "", "", fmt.Errorf("%w: peer id %q is not in canonical form %s", ErrBadKey, truncate(rest), id)
	}
	return "", id, nil
}

// Parse decodes a value and checks everything but the key binding: the
// Announce parses, both signatures verify, and the record is inside its
// validity window.
func (v Validator) Parse(value []byte) (*record.SignedAgent, error) {
	var key [32]byte
	if v.Verified != nil {
		key = sha256.Sum256(value)
	}
	sa, ok := v.Verified.get(key)
	if !ok {
		var err error
		if sa, _, err = record.ParseAnnounce(value); err != nil {
			return nil, err
		}
		if err := sa.VerifySignatures(); err != nil {
			return nil, err
		}
		v.Verified.put(key, sa)
	}
	now := time.Now()
	if v.Now != nil {
		now = v.Now()
	}
	skew := v.ClockSkew
	if skew == 0 {
		skew = DefaultClockSkew
	}
	if sa.Agent.Issued().After(now.Add(skew)) {
		return nil, &record.FieldError{Field: "issued_at", Reason: "is in the future"}
	}
	if !sa.Agent.ExpiresAt().After(now) {
		return nil, &record.FieldError{Field: "ttl_seconds", Reason: "the record has expired"}
	}
	return sa, nil
}

// Validate implements record.Validator: the key must be /agentd/<id> and
// the value a valid, unexpired, doubly signed record whose agent_id or
// peer_id is exactly id.
func (v Validator) Validate(key string, value []byte) error {
	_, err := v.validate(key, value)
	if err != nil && v.OnReject != nil {
		v.OnReject(key, err)
	}
	return err
}

// ValueRejectReason names a refused DHT value for the rejects metric: a
// key that does not match the record is bad_key, the rest are the trust
// reasons (bad_signature, malformed, expired, ...).
func ValueRejectReason(err error) string {
	switch {
	case errors.Is(err, ErrBadKey):
		return "bad_key"
	case record.FieldOf(err) == "ttl_seconds":
		return "expired"
	case record.FieldOf(err) == "issued_at":
		return "future"
	}
	return string(trust.ReasonOf(err))
}

func (v Validator) validate(key string, value []byte) (*record.SignedAgent, error) {
	agentID, p, err := ParseValueKey(key)
	if err != nil {
		return nil, err
	}
	sa, err := v.Parse(value)
	if err != nil {
		return nil, err
	}
	if agentID != "" && sa.Agent.AgentID != agentID {
		return nil, fmt.Errorf("%w: key names agent %s, record is agent %s", ErrBadKey, agentID, sa.Agent.AgentID)
	}
	if p != "" && sa.Agent.PeerID != p.String() {
		return nil, fmt.Errorf("%w: key names peer %s, record names peer %s", ErrBadKey, p, truncate(sa.Agent.PeerID))
	}
	return sa, nil
}

// Select implements record.Validator: the valid value with the highest seq
// wins; among equal seqs the first (lowest index) wins, so kad-dht's
// Select([incoming, existing]) accepts an identical republish and refreshes
// its receive time.
func (v Validator) Select(key string, values [][]byte) (int, error) {
	best, bestSeq := -1, uint64(0)
	for i, val := range values {
		sa, err := v.validate(key, val)
		if err != nil {
			continue
		}
		if best < 0 || sa.Agent.Seq > bestSeq {
			best, bestSeq = i, sa.Agent.Seq
		}
	}
	if best < 0 {
		return 0, fmt.Errorf("%w: none of %d values for %q", ErrNoValidValue, len(values), truncate(key))
	}
	return best, nil
}

func truncate(s string) string { return record.Truncate(s, 80) }
