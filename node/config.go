package node

import (
	"context"
	"time"

	"github.com/agentd/agentd/config"
	"github.com/agentd/agentd/dht"
	"github.com/agentd/agentd/gossip"
	"github.com/agentd/agentd/liveness"
	"github.com/agentd/agentd/trust"
	"github.com/agentd/agentd/view"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Config configures a node. Zero values take the defaults of the map.
type Config struct {
	// Listen are libp2p listen multiaddrs, used when Options.Host is nil.
	Listen []string
	// Bootstrap peers to join through (in addition to the address book).
	Bootstrap []peer.AddrInfo
	// ResolveBootstrap, when set, gives the bootstrap peers again each time
	// the node has no peer left and must join anew (a bootstrap list in DNS
	// may have changed); Bootstrap is used until it answers.
	ResolveBootstrap func(context.Context) []peer.AddrInfo
	// HeartbeatInterval is the base heartbeat interval (default 5 s).
	HeartbeatInterval time.Duration
	// HeartbeatMaxRate bounds the heartbeat messages per second on the
	// announce topic, summed over the whole network: each node stretches
	// its interval to max(HeartbeatInterval, liveAgents/HeartbeatMaxRate).
	// Default 100; a negative value keeps the base interval at any size.
	// See docs/scaling.md.
	HeartbeatMaxRate float64
	// GossipBeatEvery makes a hosted agent's heartbeat go on gossip in one
	// round of GossipBeatEvery, on topics whose every known peer serves
	// heartbeat pulls; those peers ask the host for the others when they
	// are late (quiet heartbeats, docs/protocol.md). Default 3 (a beat on
	// gossip every 15 s at the 5 s interval); 1 sends every heartbeat, as
	// earlier versions do; at most 3, so that a peer that cannot reach the
	// host still hears it within the seed's three missed beats.
	GossipBeatEvery int
	// DisableBeatRequests makes the node behave as one of protocol v1.2
	// toward heartbeats on request (docs/protocol.md): it does not list
	// gossip.WantedProtocol, does not ask a host it cannot pull, and its
	// hosts keep one heartbeat in GossipBeatEvery on gossip for everyone.
	// For tests and measurements of mixed versions; off by default.
	DisableBeatRequests bool
	// DisableSyncTrail makes the node behave as one of an earlier version
	// toward trailing shard syncs (gossip.TrailSyncProtocol): it syncs a
	// shard it joins only with its first peers, and announces its hosted
	// agents a second time for peers that joined with it. A node that
	// models v1.2 or earlier (DisableBeatRequests, a gossip configuration
	// with DisableBatches) does too. For tests and measurements of mixed
	// versions; off by default.
	DisableSyncTrail bool
	// MaxAgentsPerPeer bounds the remote agents one peer may have in the
	// live view (default view.DefaultMaxAgentsPerPeer, 256), and the
	// hosted agents this node gossips: the others are quiet
	// (view.Config.MaxAgentsPerPeer).
	MaxAgentsPerPeer int
	// Timeout removes a silent agent from the live view (default 30 s).
	Timeout time.Duration
	// UnhealthyAfter marks an agent UNHEALTHY after this many missed
	// heartbeats (default 3).
	UnhealthyAfter int
	// RecordTTL is the ttl_seconds of records this node signs (default
	// 3600 s, seed 002); records are re-signed and re-announced when a
	// quarter of it is left.
	RecordTTL time.Duration
	// CacheTTL bounds how long a remote record stays fresh (default 300 s).
	CacheTTL time.Duration
	// NoStaleCache turns off the resolver's last step: expired cache
	// entries are never answered (cache.enabled: false).
	NoStaleCache bool
	// LookupTimeout bounds one Discover call (default 10 s).
	LookupTimeout time.Duration
	// LANTimeout bounds the LAN step of a lookup (default 1 s).
	LANTimeout time.Duration
	// UnknownFetchConcurrency bounds fetches triggered by heartbeats of
	// unknown agents (default 4); each agent is fetched at most once per
	// UnknownFetchBackoff (default 5 s).
	UnknownFetchConcurrency int
	UnknownFetchBackoff     time.Duration
	// ShutdownGrace is how long Shutdown waits after publishing the
	// unregister messages, so they leave the node before its connections
	// close (default 500 ms; pubsub queues publishes asynchronously).
	ShutdownGrace time.Duration
	// LeaseCheckInterval is how often expired leases are collected
	// (default 1 s).
	LeaseCheckInterval time.Duration
	// DisableSuspicion turns off early failure detection (package
	// liveness): agents then leave only by the seed's timeout.
	DisableSuspicion bool
	// Liveness tunes early failure detection; its own defaults apply.
	Liveness liveness.Config
	// Scope is ScopeInterest (the default: hear only the agents of this
	// node's interest, on their shard topics) or ScopeFull (hear the
	// whole network on the announce topic). See docs/scaling.md.
	Scope string
	// InterestTTL is how long a queried capability stays in the interest
	// after the last query for it (default 10 min).
	InterestTTL time.Duration
	// InterestCheck is how often query interest expires and shards
	// without peers are looked for again (default 30 s).
	InterestCheck time.Duration
	// DisableDHT / DisableGossip turn a transport off (tests).
	DisableDHT    bool
	DisableGossip bool
	// legacy makes the node behave as one of the previous protocol version
	// (tests of compatibility): announce topic only, no shard topics, sync
	// 1.0.0 only.
	legacy bool
	// DHT and Gossip configure the transports; their own defaults apply.
	DHT    dht.Config
	Gossip *gossip.Config
	// Trust configures the verifier.
	Trust trust.Config
}

// DefaultGossipBeatEvery is Config.GossipBeatEvery's default and bound.
const DefaultGossipBeatEvery = config.DefaultGossipBeatEvery

// EffectiveGossipBeatEvery is what a node runs with when its
// Config.GossipBeatEvery is n: the default for 0, at most the bound.
func EffectiveGossipBeatEvery(n int) int {
	if n <= 0 {
		return DefaultGossipBeatEvery
	}
	return min(n, DefaultGossipBeatEvery)
}

// TrailingSyncs reports whether a node of this configuration makes
// trailing shard syncs (gossip.TrailSyncProtocol, sync 1.2.0): not when it
// models an earlier version — DisableSyncTrail, DisableBeatRequests
// (v1.2), a gossip configuration without batches or trailing syncs, or a
// node of the version before scoped liveness.
func (c Config) TrailingSyncs() bool {
	return !c.DisableSyncTrail && !c.DisableBeatRequests && !c.legacy &&
		(c.Gossip == nil || (!c.Gossip.DisableBatches && !c.Gossip.DisableSyncTrail))
}

func (c *Config) defaults() {
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = config.DefaultHeartbeatInterval
	}
	if c.HeartbeatMaxRate == 0 {
		c.HeartbeatMaxRate = 100
	}
	c.GossipBeatEvery = EffectiveGossipBeatEvery(c.GossipBeatEvery)
	if c.Timeout <= 0 {
		c.Timeout = config.DefaultLivenessTimeout
	}
	if c.UnhealthyAfter <= 0 {
		c.UnhealthyAfter = 3
	}
	if c.RecordTTL <= 0 {
		c.RecordTTL = time.Hour
	}
	if c.MaxAgentsPerPeer <= 0 {
		c.MaxAgentsPerPeer = view.DefaultMaxAgentsPerPeer
	}
	if c.CacheTTL <= 0 {
		c.CacheTTL = 300 * time.Second
	}
	if c.LookupTimeout <= 0 {
		c.LookupTimeout = 10 * time.Second
	}
	if c.LANTimeout <= 0 {
		c.LANTimeout = time.Second
	}
	if c.LeaseCheckInterval <= 0 {
		c.LeaseCheckInterval = time.Second
	}
	if c.ShutdownGrace <= 0 {
		c.ShutdownGrace = 500 * time.Millisecond
	}
	if c.UnknownFetchConcurrency <= 0 {
		c.UnknownFetchConcurrency = 4
	}
	if c.Scope == "" {
		c.Scope = ScopeInterest
	}
	if c.InterestTTL <= 0 {
		c.InterestTTL = 10 * time.Minute
	}
	if c.InterestCheck <= 0 {
		c.InterestCheck = 30 * time.Second
	}
	if c.UnknownFetchBackoff <= 0 {
		c.UnknownFetchBackoff = 5 * time.Second
	}
}
