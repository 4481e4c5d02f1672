// Package store keeps agentd's state in Badger v4: the durable local
// registrations, the cache of remote records (native TTL, bounded size,
// secondary indexes), tombstones of unregistered agents, the peer address
// book, the key pins of the trust package and the per-agent sequence
// counters. Open with Dir == "" for the in-memory mode used by tests and
// simnet. On disk, records live in Badger's value log and the LSM tree holds
// keys and small values; the store collects the value log's garbage itself.
// Durable writes (local registrations, leases, statuses) are made durable by
// the store's registration journal, one synced file beside Badger's, which
// Open replays after a crash (journal.go).
package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"time"

	"github.com/Masterminds/semver/v3"
	"github.com/agentd/agentd/metrics"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/trust"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// Source says where a record came from. Every discovery result carries one.
type Source string

// Sources of records.
const (
	SourceLocal       Source = "local"       // registered on this node
	SourceGossip      Source = "gossip"      // received over GossipSub
	SourceLAN         Source = "lan"         // mDNS or UDP multicast
	SourceDHT         Source = "dht"         // fetched from a DHT provider
	SourceSkillCenter Source = "skillcenter" // SkillCenter catalog
	SourceRegistry    Source = "registry"    // a seed-000 registry (POST /agents)
	SourceCache       Source = "cache"       // an expired entry served from the cache
)

// Sentinel errors.
var (
	// ErrNotFound is returned when no entry exists for the key.
	ErrNotFound = errors.New("not found")
	// ErrOlder is returned by Put when the store already holds a record
	// with a higher seq for the agent (the put is ignored).
	ErrOlder = errors.New("record is older than the stored one")
	// ErrTombstoned is returned by Put when the agent was unregistered with
	// a seq at least as high as the record's.
	ErrTombstoned = errors.New("agent was unregistered")
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("store closed")
)

// Entry is a cached remote record with where and when it was learnt.
type Entry struct {
	Record     *record.SignedAgent
	Source     Source
	ReceivedAt time.Time
	// ExpiresAt is when the entry stops being fresh: the earlier of the
	// record's issued_at+ttl and ReceivedAt+cache TTL (or a later time set
	// by Touch while the agent is known alive).
	ExpiresAt time.Time
	// Stale is set on read when ExpiresAt has passed; such entries are
	// only returned with Filter.IncludeStale, inside the grace window.
	Stale bool
}

// Age is how long ago the entry was received.
func (e Entry) Age(now time.Time) time.Duration { return now.Sub(e.ReceivedAt) }

// Filter selects cached entries. Empty fields match everything; all given
// fields must match (AND).
type Filter struct {
	AgentID    string
	Capability string
	Skill      string
	Scene      string
	Type       string // skill type
	Tags       []string
	Tenant     string
	// Version is a semver constraint (Masterminds syntax, e.g. ">=1.2.0 <2").
	// It applies to the matching skill's version when Skill or Capability
	// is given, otherwise to the agent's version or any skill's version.
	Version string
	// Text is a case-insensitive substring over names, descriptions, ids.
	Text         string
	Limit        int
	IncludeStale bool
	// Sources, when non-empty, restricts entries to these sources.
	Sources []Source
}

// Narrows reports whether f selects by anything but the agent id: a
// capability, skill, scene, type, tag, tenant, version range or text.
func (f Filter) Narrows() bool {
	return f.Capability != "" || f.Skill != "" || f.Scene != "" || f.Type != "" || len(f.Tags) > 0 ||
		f.Tenant != "" || f.Version != "" || f.Text != ""
}

// Tombstone remembers that an agent unregistered, so a late replay of an
// older record or beat does not bring it back.
type Tombstone struct {
	AgentID string                  `json:"agent_id"`
	Seq     uint64                  `json:"seq"`
	Reason  record.UnregisterReason `json:"reason"`
	At      time.Time               `json:"at"`
}

// PeerRecord is an entry of the peer address book used to re-bootstrap.
type PeerRecord struct {
	ID       peer.ID        `json:"id"`
	Addrs    []ma.Multiaddr `json:"-"`
	LastSeen time.Time      `json:"last_seen"`
}

// Options configure a store. Zero values take the defaults.
type Options struct {
	// Dir is the Badger directory; "" opens an in-memory store.
	Dir string
	// CacheTTL bounds how long a remote record stays fresh (default 300 s,
	// seed 001 §11.1).
	CacheTTL time.Duration
	// MaxEntries bounds the cache (default 1000); beyond it the entries
	// that expire soonest are evicted.
	MaxEntries int
	// StaleGrace is how long an expired entry is kept to answer as stale
	// (default 1 h).
	StaleGrace time.Duration
	// RefreshBefore is how long before expiry the refresh hook fires
	// (default 60 s).
	RefreshBefore time.Duration
	// TombstoneTTL is how long tombstones are kept (default 24 h).
	TombstoneTTL time.Duration
	// MaxPeers bounds the address book (default 256, least recently seen
	// evicted).
	MaxPeers int
	// Now returns the current time (default time.Now).
	Now func() time.Time
	// MinFreeBytes is the free space kept on the data directory's
	// filesystem: writes fail with ErrNoSpace while less remains (0 means
	// DefaultMinFree, a negative value turns the guard off). In-memory
	// stores have no guard.
	MinFreeBytes int64

	// SweepInterval is how often the store's goroutine drops entries past
	// their grace window and fires the refresh hooks (default 1 s).
	SweepInterval time.Duration
	// Logger receives the store's logs (default slog.Default()).
	Logger *slog.Logger
	// Restore, when set, is loaded into the store before it opens: a
	// Snapshot of another store (Badger's backup format). simnet keeps a
	// stopped node's in-memory store this way until the node restarts.
	Restore io.Reader
	// Metrics, when set, gets the cache gauge (fresh and stale records).
	Metrics *metrics.Metrics

	// journalSegment, when positive, replaces the journal file's size
	// (tests: checkpoints after a few writes).
	journalSegment int64
}

// Store is agentd's state. Every method is safe for concurrent use.
type Store interface {
	// PutLocal durably stores a registration made on this node. It returns
	// only after the write is synced to disk.
	PutLocal(ctx context.Context, sa *record.SignedAgent) error
	// DeleteLocal removes a local registration (synced).
	DeleteLocal(ctx context.Context, agentID string) error
	// Locals lists the local registrations.
	Locals(ctx context.Context) ([]*record.SignedAgent, error)
	// EachLocal calls fn with every local registration, in no order, from
	// the calling goroutine while the rest are decoded. The records are
	// compact where they can be (record.SignedAgent.Compact).
	EachLocal(ctx context.Context, fn func(*record.SignedAgent)) error

	// Put caches a remote record. It returns ErrOlder if a record with a
	// higher seq is stored, ErrTombstoned if a tombstone covers it. An
	// equal seq refreshes ReceivedAt/ExpiresAt/Source.
	Put(ctx context.Context, e Entry) error
	// Get returns the cached entry for an agent (stale or not).
	Get(ctx context.Context, agentID string) (Entry, error)
	// Touch sets a fresh entry's ExpiresAt, clamped to [now, now+CacheTTL]:
	// heartbeats extend it while the agent is alive, and Touch(id, now)
	// makes the entry stale at once when the agent leaves. It returns
	// ErrNotFound for unknown or already stale agents (never revives).
	Touch(ctx context.Context, agentID string, expiresAt time.Time) error
	// Delete removes a cached entry.
	Delete(ctx context.Context, agentID string) error
	// Query returns matching entries, fresh first then stale (when asked),
	// each group ordered by agent id.
	Query(ctx context.Context, f Filter) ([]Entry, error)
	// Len returns the number of cached entries (fresh and stale).
	Len() int

	// PutTombstone records an unregistration and deletes the cached entry
	// if its seq is not newer.
	PutTombstone(ctx context.Context, t Tombstone) error
	// GetTombstone returns the tombstone of an agent.
	GetTombstone(ctx context.Context, agentID string) (Tombstone, bool, error)

	// PutPeer adds or refreshes an address-book entry.
	PutPeer(ctx context.Context, p PeerRecord) error
	// Peers lists the address book, most recently seen first.
	Peers(ctx context.Context) ([]PeerRecord, error)

	// NextSeq returns a new seq for a local agent, strictly greater than
	// any returned before (persisted) and at least the current Unix time in
	// milliseconds, so it stays monotonic even if the data is lost.
	NextSeq(ctx context.Context, agentID string) (uint64, error)

	// PeekSeq returns what NextSeq would, without writing the counter:
	// for a caller that stores a record with the seq next (PutLocal
	// writes the record's seq into the counter in the same transaction)
	// and itself keeps two calls for one agent apart.
	PeekSeq(ctx context.Context, agentID string) (uint64, error)

	// OnRefresh registers a hook called (from the store's own goroutine)
	// once for each fresh entry RefreshBefore its expiry.
	OnRefresh(func(Entry))

	// PutLease durably records when a local registration's lease ends
	// (synced); a zero until removes the lease.
	PutLease(ctx context.Context, agentID string, until time.Time) error
	// Leases returns every recorded lease by agent id.
	Leases(ctx context.Context) (map[string]time.Time, error)

	// PutStatus durably records the status a local agent reported
	// (synced); HEALTHY, the default, removes the entry. DeleteLocal
	// removes it too, so a later registration of the id starts HEALTHY.
	PutStatus(ctx context.Context, agentID string, st record.Status) error
	// Statuses returns every recorded non-default status by agent id.
	Statuses(ctx context.Context) (map[string]record.Status, error)

	trust.PinStore

	// DeferPin holds the pins PutPin gets for agentID in memory until
	// PutLocal of that agent writes the latest of them in its own synced
	// transaction, or until done, which writes what is left. GetPin reads
	// a held pin. For a local registration: its pin then costs no write of
	// its own (on disk with the registration), and a crash before the
	// registration is stored loses both, as neither was acknowledged.
	DeferPin(agentID string) (done func())

	// Close stops background work and closes the database.
	Close() error
}

// Matcher is a compiled Filter: the one place where the query semantics of
// Filter are defined, used by the store and by the live view alike.
type Matcher struct {
	f          Filter
	constraint *semver.Constraints
}

// Compile checks the filter and compiles its semver constraint. An invalid
// constraint is a *record.FieldError for field "version".
func (f Filter) Compile() (*Matcher, error) {
	m := &Matcher{f: f}
	if f.Version != "" {
		c, err := semver.NewConstraint(f.Version)
		if err != nil {
			return nil, &record.FieldError{Field: "version", Reason: fmt.Sprintf("%q is not a semver constraint: %v", f.Version, err)}
		}
		m.constraint = c
	}
	return m, nil
}

// Filter returns the filter m was compiled from.
func (m *Matcher) Filter() Filter { return m.f }

// Matches reports whether the agent satisfies every field of the filter
// except Limit, IncludeStale and Sources, which are properties of entries
// and result sets.
func (m *Matcher) Matches(a *record.Agent) bool { return m.matches(a, true) }

// MatchesExceptText is Matches without the free-text filter, for a caller
// that found the agent in a text index that applies the same rule
// (record.MatchesText) — the check is most of a text query's cost.
func (m *Matcher) MatchesExceptText(a *record.Agent) bool { return m.matches(a, false) }

func (m *Matcher) matches(a *record.Agent, text bool) bool {
	f := m.f
	if f.AgentID != "" && a.AgentID != f.AgentID {
		return false
	}
	if f.Tenant != "" && a.TenantScope != f.Tenant {
		return false
	}
	for _, t := range f.Tags {
		if !slices.Contains(a.Tags, t) {
			return false
		}
	}
	if text && f.Text != "" && !a.MatchesText(f.Text) {
		return false
	}
	// Skill-level filters must hold on one and the same skill.
	if f.Skill != "" || f.Scene != "" || f.Type != "" || (f.Capability != "" && len(a.Skills) > 0) {
		for i := range a.Skills {
			if m.skillMatches(&a.Skills[i]) {
				return true
			}
		}
		// A seed-000 record may list the capability only in the
		// agent-level map.
		if f.Skill == "" && f.Scene == "" && f.Type == "" && f.Capability != "" {
			if _, ok := a.Capabilities[f.Capability]; ok {
				return m.versionMatches(a.Version)
			}
		}
		return false
	}
	if f.Capability != "" {
		if _, ok := a.Capabilities[f.Capability]; !ok {
			return false
		}
	}
	if m.constraint != nil {
		if m.versionMatches(a.Version) {
			return true
		}
		for i := range a.Skills {
			if m.versionMatches(a.Skills[i].Version) {
				return true
			}
		}
		return false
	}
	return true
}

func (m *Matcher) skillMatches(s *record.Skill) bool {
	f := m.f
	if f.Skill != "" && s.SkillID != f.Skill {
		return false
	}
	if f.Type != "" && string(s.SkillType) != f.Type {
		return false
	}
	if f.Scene != "" && !slices.Contains(s.Scenes, f.Scene) {
		return false
	}
	if f.Capability != "" {
		if _, ok := s.Capability(f.Capability); !ok {
			return false
		}
	}
	return m.versionMatches(s.Version)
}

func (m *Matcher) versionMatches(v string) bool {
	if m.constraint == nil {
		return true
	}
	if v == "" {
		return false
	}
	sv, err := semver.NewVersion(v)
	if err != nil {
		return false
	}
	return m.constraint.Check(sv)
}

// SourceAllowed reports whether an entry from src passes Filter.Sources.
func (m *Matcher) SourceAllowed(src Source) bool {
	return len(m.f.Sources) == 0 || slices.Contains(m.f.Sources, src)
}
