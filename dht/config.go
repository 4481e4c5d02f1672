package dht

import (
	"fmt"
	"time"

	"github.com/agentd/agentd/record"
	kaddht "github.com/libp2p/go-libp2p-kad-dht"
	"github.com/libp2p/go-libp2p/core/peer"
	"golang.org/x/time/rate"
)

// Protocol identifiers and the value namespace. They are the wire contract.
const (
	ProtocolPrefix = "/agentd"              // kad protocol /agentd/kad/1.0.0
	RecordProtocol = "/agentd/record/1.0.0" // record fetch stream protocol
	ValueNamespace = "agentd"               // DHT value keys /agentd/<peer-id> and /agentd/<agent-id>
)

// KadProtocol is the Kademlia protocol id agentd speaks.
const KadProtocol = ProtocolPrefix + "/kad/1.0.0"

// LookupConcurrency is Kademlia's α: how many peers a lookup queries at
// once (kad-dht's Concurrency). kad-dht's default is 10, for the IPFS
// network where many routing-table entries cannot be dialled; agentd uses
// the Kademlia paper's 3. A lookup ends once the 3 closest peers it heard
// of answered, so the 7 extra queries of each round mostly reach peers
// that are not needed, and each is a connection that then lives through
// the connection manager's grace period. Measured in simnet (250 nodes,
// 30 s of churn, docs/simnet.md "Memory, fourth step"): 28 % fewer DHT
// messages and 15 % less CPU for the whole run, with lookups answered by
// the DHT as fast within the run-to-run spread (p50 216 → 229 ms).
const LookupConcurrency = 3

// Defaults. Every node of a network should use the same ProvideValidity
// and ValueMaxAge: they are the lifetimes the servers apply to records
// they store for others.
const (
	// DefaultProvideValidity is how long a server keeps a provider record.
	// kad-dht's default is 48 h, which would keep a dead agent
	// "discoverable" for two days.
	DefaultProvideValidity = 10 * time.Minute
	// DefaultReprovideInterval is below a third of the validity, so a
	// record survives two missed reprovides.
	DefaultReprovideInterval = 3 * time.Minute
	// DefaultValueMaxAge is how long a server keeps a DHT value after it
	// last received it. A value is a record, which carries its own expiry
	// (issued_at + ttl_seconds, 1 h by default) that every reader checks;
	// the max age only has to outlast the owner's puts. It was 10 min
	// with a 3 min republish: a node hosting 10 000 agents then put 55
	// values a second without end (capped at 50/s), 8 % of a core with a
	// single peer to put to (docs/performance.md, "The DHT's upkeep").
	DefaultValueMaxAge = 3 * time.Hour
	// DefaultRepublishInterval is a third of DefaultValueMaxAge: a value a
	// round skipped (put less than an interval before it) is put by the
	// next, and if that put fails, its retries (within ReprovideInterval)
	// still have most of an interval. It is longer than the three
	// quarters of its TTL after which a hosted record is signed again (and
	// its new seq put at once: 45 min at the default TTL), so a round finds
	// nothing left to put for records with the default TTL.
	DefaultRepublishInterval = time.Hour
	// DefaultQueryTimeout bounds a whole Find or GetRecord.
	DefaultQueryTimeout = 10 * time.Second
	// DefaultFetchTimeout bounds one record fetch (dial included).
	DefaultFetchTimeout = 5 * time.Second
	// DefaultProvideTimeout bounds the provide of one key or the put of one
	// value (lookup plus stores).
	DefaultProvideTimeout = 30 * time.Second
	// DefaultMaxStoredValues bounds the DHT values a node stores for
	// others (kad-dht keeps them in memory, about 2 KB each with the map's
	// own cost: 200 MB at most). An honest network of A agents on N servers
	// puts about 20·A/N on each: 100 000 is 5 000 agents per server.
	DefaultMaxStoredValues = 100_000
	// DefaultMaxProviders is how many providers one Find considers.
	DefaultMaxProviders = 20
	// DefaultMaxConcurrentFetch bounds outgoing fetches of the node.
	DefaultMaxConcurrentFetch = 8
	// DefaultServeRateLimit is the sustained rate of record-fetch streams
	// one remote peer may open (per second), with DefaultServeBurst.
	DefaultServeRateLimit = rate.Limit(2)
	// DefaultServeBurst is the burst of the per-peer serve limiter.
	DefaultServeBurst = 10
	// DefaultServeMaxConcurrent bounds record-fetch streams served at once.
	DefaultServeMaxConcurrent = 64
	// DefaultServeTimeout bounds one served stream, request read and
	// response write together (slow clients are reset).
	DefaultServeTimeout = 5 * time.Second
	// DefaultRetryInterval is the first retry delay after a provide or put
	// that reached no remote peer; it doubles up to the reprovide interval.
	DefaultRetryInterval = 5 * time.Second
	// DefaultValuePutRate paces the puts of hosted records' values (each a
	// lookup and up to 20 stores), per second, with DefaultValuePutBurst:
	// new and changed records first, then the republish round. A node
	// keeps DefaultValuePutRate × ValueMaxAge values alive (540 000 at the
	// defaults); beyond that a value may lapse between two puts.
	DefaultValuePutRate  = rate.Limit(50)
	DefaultValuePutBurst = 10
	// maxPutsInFlight bounds the value puts running at once.
	maxPutsInFlight = 32
)

// Config configures a DHT. Zero values take the defaults above.
type Config struct {
	// ClientMode makes the node a DHT client: it queries and provides but
	// does not store records for others nor answer Kademlia queries. For
	// hosts that cannot accept connections.
	ClientMode bool
	// AutoMode makes the mode follow the host's reachability on the
	// internet (kad-dht's ModeAutoServer): a server while reachability is
	// unknown or public, a client once AutoNAT reports the node private
	// (behind a NAT nobody can dial through). On a LAN or loopback with no
	// public address AutoNAT never reports private (its servers refuse to
	// dial private addresses), so such networks stay servers as with
	// ModeServer. Ignored when ClientMode is set.
	AutoMode bool
	// AutoClientFirst makes AutoMode a client while reachability is still
	// unknown (kad-dht's ModeAuto): for a node that joins the internet
	// (its bootstrap peers are public), so that a node behind a NAT never
	// enters other nodes' routing tables only to leave them ~15 s later,
	// when AutoNAT finds it private. Leaving relies on an identify push,
	// and go-libp2p drops pushes beyond 10 per /24 in a burst: measured,
	// 6 agents behind one NAT left 5 stale entries in the bootstrap node's
	// table and every lookup then waited out its 10 s timeout.
	AutoClientFirst bool
	// BootstrapPeers are dialed by Start; kad-dht also redials them
	// whenever its routing table empties.
	BootstrapPeers []peer.AddrInfo
	// ProvideValidity is the server-side provider record lifetime
	// (default 10 min).
	ProvideValidity time.Duration
	// ReprovideInterval is how often every provided key is provided again
	// (default 3 min; at most half of ProvideValidity).
	ReprovideInterval time.Duration
	// ValueMaxAge is kad-dht's MaxRecordAge for values (default 3 h).
	ValueMaxAge time.Duration
	// RepublishInterval is how often the republish round puts again the
	// hosted records' values not put within the last interval (default
	// 1 h; at most a third of ValueMaxAge).
	RepublishInterval time.Duration
	// QueryTimeout bounds a whole Find or GetRecord (default 10 s).
	QueryTimeout time.Duration
	// FetchTimeout bounds one record fetch (default 5 s).
	FetchTimeout time.Duration
	// ProvideTimeout bounds providing one key or putting one value
	// (default 30 s).
	ProvideTimeout time.Duration
	// MaxProviders is the number of providers considered per query
	// (default 20).
	MaxProviders int
	// MaxStoredValues bounds the values this node stores for others
	// (default DefaultMaxStoredValues). A PUT_VALUE of a new key beyond it
	// is refused; a stored value may still be replaced.
	MaxStoredValues int
	// MaxConcurrentFetch bounds concurrent outgoing fetches (default 8).
	MaxConcurrentFetch int
	// Live, when set, returns records of peer p that the local live view
	// (gossip) knows to be alive; Find uses them instead of fetching.
	Live func(p peer.ID) []*record.SignedAgent
	// OwnAgentID names the hosted agent whose record is also stored under
	// /agentd/<peer-id>. Empty: the hosted record with the smallest agent id.
	OwnAgentID string
	// ServeRateLimit bounds inbound record-fetch streams per remote peer
	// (default 2/s sustained with a burst of ServeBurst = 10).
	ServeRateLimit rate.Limit
	// ServeBurst is the per-peer burst (default 10).
	ServeBurst int
	// ServeMaxConcurrent bounds record-fetch streams served at once
	// (default 64); streams beyond it are reset.
	ServeMaxConcurrent int
	// ServeTimeout bounds one served stream (default 5 s).
	ServeTimeout time.Duration
	// RetryInterval is the first retry delay after a failed provide or put
	// (default 5 s), doubling up to ReprovideInterval.
	RetryInterval time.Duration
	// ValuePutRate paces the puts of hosted records' values (default 50
	// a second, bursts of ValuePutBurst = 10): new and changed records
	// first, then the republish round, which starts again RepublishInterval
	// after the last one started, or when it ends if it took longer.
	ValuePutRate  rate.Limit
	ValuePutBurst int

	// kadExtra are kad-dht options appended to agentd's (tests: request
	// hooks).
	kadExtra []kaddht.Option
}

func (c *Config) setDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.ProvideValidity, DefaultProvideValidity)
	def(&c.ReprovideInterval, DefaultReprovideInterval)
	def(&c.ValueMaxAge, DefaultValueMaxAge)
	def(&c.RepublishInterval, DefaultRepublishInterval)
	def(&c.QueryTimeout, DefaultQueryTimeout)
	def(&c.FetchTimeout, DefaultFetchTimeout)
	def(&c.ProvideTimeout, DefaultProvideTimeout)
	def(&c.ServeTimeout, DefaultServeTimeout)
	def(&c.RetryInterval, DefaultRetryInterval)
	if c.MaxProviders == 0 {
		c.MaxProviders = DefaultMaxProviders
	}
	if c.MaxStoredValues == 0 {
		c.MaxStoredValues = DefaultMaxStoredValues
	}
	if c.MaxConcurrentFetch == 0 {
		c.MaxConcurrentFetch = DefaultMaxConcurrentFetch
	}
	if c.ServeRateLimit == 0 {
		c.ServeRateLimit = DefaultServeRateLimit
	}
	if c.ServeBurst == 0 {
		c.ServeBurst = DefaultServeBurst
	}
	if c.ValuePutRate == 0 {
		c.ValuePutRate = DefaultValuePutRate
	}
	if c.ValuePutBurst == 0 {
		c.ValuePutBurst = DefaultValuePutBurst
	}
	if c.ServeMaxConcurrent == 0 {
		c.ServeMaxConcurrent = DefaultServeMaxConcurrent
	}
}

// validate checks a defaulted config and names the offending field.
func (c *Config) validate() error {
	pos := func(name string, d time.Duration) error {
		if d <= 0 {
			return fmt.Errorf("dht config: %s must be positive, got %v", name, d)
		}
		return nil
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{
		{"ProvideValidity", c.ProvideValidity}, {"ReprovideInterval", c.ReprovideInterval},
		{"ValueMaxAge", c.ValueMaxAge}, {"RepublishInterval", c.RepublishInterval},
		{"QueryTimeout", c.QueryTimeout}, {"FetchTimeout", c.FetchTimeout},
		{"ProvideTimeout", c.ProvideTimeout}, {"ServeTimeout", c.ServeTimeout},
		{"RetryInterval", c.RetryInterval},
	} {
		if err := pos(f.name, f.d); err != nil {
			return err
		}
	}
	if 2*c.ReprovideInterval > c.ProvideValidity {
		return fmt.Errorf("dht config: ReprovideInterval %v must be at most half of ProvideValidity %v, or provider records expire between reprovides", c.ReprovideInterval, c.ProvideValidity)
	}
	if 3*c.RepublishInterval > c.ValueMaxAge {
		return fmt.Errorf("dht config: RepublishInterval %v must be at most a third of ValueMaxAge %v, or values expire between republishes (a round skips a value put less than an interval ago)", c.RepublishInterval, c.ValueMaxAge)
	}
	if c.MaxStoredValues < 1 {
		return fmt.Errorf("dht config: MaxStoredValues must be at least 1, got %d", c.MaxStoredValues)
	}
	if c.MaxProviders < 1 || c.MaxProviders > 1000 {
		return fmt.Errorf("dht config: MaxProviders must be between 1 and 1000, got %d", c.MaxProviders)
	}
	if c.MaxConcurrentFetch < 1 || c.MaxConcurrentFetch > 256 {
		return fmt.Errorf("dht config: MaxConcurrentFetch must be between 1 and 256, got %d", c.MaxConcurrentFetch)
	}
	if c.ServeRateLimit < 0 {
		return fmt.Errorf("dht config: ServeRateLimit must not be negative, got %v", c.ServeRateLimit)
	}
	if c.ServeBurst < 1 {
		return fmt.Errorf("dht config: ServeBurst must be at least 1, got %d", c.ServeBurst)
	}
	if c.ServeMaxConcurrent < 1 {
		return fmt.Errorf("dht config: ServeMaxConcurrent must be at least 1, got %d", c.ServeMaxConcurrent)
	}
	if c.ValuePutRate <= 0 || c.ValuePutBurst < 1 {
		return fmt.Errorf("dht config: ValuePutRate must be positive and ValuePutBurst at least 1, got %v and %d", c.ValuePutRate, c.ValuePutBurst)
	}
	if c.OwnAgentID != "" {
		if err := record.ValidateAgentID(c.OwnAgentID); err != nil {
			return fmt.Errorf("dht config: OwnAgentID: %w", err)
		}
	}
	for i, p := range c.BootstrapPeers {
		if err := p.ID.Validate(); err != nil {
			return fmt.Errorf("dht config: BootstrapPeers[%d]: %w", i, err)
		}
	}
	return nil
}
