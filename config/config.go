// Package config is agentd's configuration: one Config struct with
// documented fields and defaults, loaded from a YAML file (the seed-001
// configuration reference, §13.2, is a valid file), overridden by AGENTD_*
// environment variables and then by command-line flags.
package config

import (
	"time"
)

// Duration is a time.Duration that reads from YAML as an integer number of
// milliseconds (the seed-001 convention, e.g. `broadcastInterval: 5000`) or
// as a Go duration string ("5s", "1m30s").
type Duration time.Duration

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// Config is the whole configuration of a node.
type Config struct {
	// DataDir holds the keys, the agent_id and the Badger files.
	DataDir string `yaml:"dataDir" json:"dataDir"`
	// Listen are the libp2p listen multiaddrs.
	Listen []string `yaml:"listen" json:"listen"`
	// API is the local HTTP API.
	API APIConfig `yaml:"api" json:"api"`
	// Discovery is the seed-001 discovery section (udp, dht, skillCenter,
	// healthCheck) plus agentd's mdns section.
	Discovery DiscoveryConfig `yaml:"discovery" json:"discovery"`
	// Cache is the seed-001 §11.1 cache section.
	Cache CacheConfig `yaml:"cache" json:"cache"`
	// Storage configures the database in DataDir.
	Storage StorageConfig `yaml:"storage" json:"storage"`
	// Trust is the trust policy and certificate store.
	Trust TrustConfig `yaml:"trust" json:"trust"`
	// Registry is the seed-000 registry fallback.
	Registry RegistryConfig `yaml:"registry" json:"registry"`
	// Log configures logging.
	Log LogConfig `yaml:"log" json:"log"`
	// NAT configures NAT traversal (agentd's addition; docs/nat.md).
	NAT NATConfig `yaml:"nat" json:"nat"`
	// Connections bounds the connections a node keeps open (agentd's
	// addition; docs/operations.md, "Connections").
	Connections ConnectionsConfig `yaml:"connections" json:"connections"`
}

// ConnectionsConfig is go-libp2p's connection manager: once a node holds
// HighWater connections it closes the least valuable ones older than
// GracePeriod until LowWater of them remain. Never closed, and not counted
// in LowWater: GossipSub's mesh peers, kad-dht's nearest buckets and the
// peers of the live view (64 at most).
type ConnectionsConfig struct {
	LowWater    int      `yaml:"lowWater" json:"lowWater"`
	HighWater   int      `yaml:"highWater" json:"highWater"`
	GracePeriod Duration `yaml:"gracePeriod" json:"gracePeriod"`
}

// NATConfig is how a node behind a NAT stays reachable: go-libp2p's AutoNAT,
// port mapping, circuit relay v2, AutoRelay and DCUtR hole punching.
type NATConfig struct {
	// Reachability is "auto" (AutoNAT decides; the default), "public" (the
	// operator knows the node is dialable at its addresses) or "private".
	// `agentd bootstrap` takes "auto" as "public".
	Reachability string `yaml:"reachability" json:"reachability"`
	// PortMapping asks the gateway for a port mapping (UPnP IGD, NAT-PMP).
	PortMapping bool `yaml:"portMapping" json:"portMapping"`
	// HolePunching upgrades relayed connections to direct ones (DCUtR).
	HolePunching bool `yaml:"holePunching" json:"holePunching"`
	// AutoRelay reserves a slot on a relay (the bootstrap nodes first)
	// while the node is not known to be public, and advertises it.
	AutoRelay bool `yaml:"autoRelay" json:"autoRelay"`
	// Announce are the multiaddrs to advertise instead of the detected
	// ones, for an operator with a known public address.
	Announce []string `yaml:"announce" json:"announce"`
	// Relay is the circuit relay v2 service this node offers others
	// (always on for `agentd bootstrap`).
	Relay RelayConfig `yaml:"relay" json:"relay"`
	// ConnsPerIP bounds the connections one public IPv4 address (IPv6 /56)
	// may hold to this node, and the burst of new ones (default 64;
	// go-libp2p's own default of 8 refuses the ninth agent behind one NAT).
	ConnsPerIP int `yaml:"connsPerIP" json:"connsPerIP"`
}

// RelayConfig bounds the circuit relay v2 service. Zero values take
// go-libp2p's defaults (given in brackets); agentd's defaults, where they
// differ, follow "default".
type RelayConfig struct {
	// Enabled serves the relay on `agentd run` too (while public).
	Enabled bool `yaml:"enabled" json:"enabled"`
	// MaxReservations is the number of peers holding a slot [128; default 1024].
	MaxReservations int `yaml:"maxReservations" json:"maxReservations"`
	// MaxReservationsPerIP bounds slots per IP address [8; default 64]:
	// agents behind one NAT share an address.
	MaxReservationsPerIP int `yaml:"maxReservationsPerIP" json:"maxReservationsPerIP"`
	// MaxCircuits is the number of relayed connections per peer [16].
	MaxCircuits int `yaml:"maxCircuits" json:"maxCircuits"`
	// ReservationTTL is how long a slot lasts before it must be renewed [1h].
	ReservationTTL Duration `yaml:"reservationTTL" json:"reservationTTL"`
	// ConnDuration and ConnData end one relayed connection [2m, 128KiB each way].
	ConnDuration Duration `yaml:"connDuration" json:"connDuration"`
	ConnData     ByteSize `yaml:"connData" json:"connData"`
}

// APIConfig configures the local API.
type APIConfig struct {
	// Addr is host:port; loopback by default.
	Addr string `yaml:"addr" json:"addr"`
	// JWTSecret (HS256) or JWTPublicKey (ES256 PEM file) enable bearer auth;
	// required when Addr is not loopback.
	JWTSecret    string `yaml:"jwtSecret" json:"jwtSecret"`
	JWTPublicKey string `yaml:"jwtPublicKey" json:"jwtPublicKey"`
	// RequireAuthOnLoopback turns auth on for loopback clients too.
	RequireAuthOnLoopback bool `yaml:"requireAuthOnLoopback" json:"requireAuthOnLoopback"`
	// ServeRegistry lets this node act as a seed-000 registry for agents
	// that cannot run P2P (auth required).
	ServeRegistry bool `yaml:"serveRegistry" json:"serveRegistry"`
	// AgentCard names the hosted agent whose A2A Agent Card is served at
	// /.well-known/agent-card.json: an agent id, or "self" for the node's
	// own; empty serves none.
	AgentCard string `yaml:"agentCard" json:"agentCard"`
}

// DiscoveryConfig is the seed-001 `discovery:` section.
type DiscoveryConfig struct {
	UDP         UDPConfig         `yaml:"udp" json:"udp"`
	MDNS        MDNSConfig        `yaml:"mdns" json:"mdns"`
	DHT         DHTConfig         `yaml:"dht" json:"dht"`
	SkillCenter SkillCenterConfig `yaml:"skillCenter" json:"skillCenter"`
	HealthCheck HealthCheckConfig `yaml:"healthCheck" json:"healthCheck"`
	// Interface is the network interface for LAN discovery ("" = all
	// multicast-capable interfaces).
	Interface string `yaml:"interface" json:"interface"`
	// Scope is what the node hears of the network (agentd's addition):
	// "interest" — only the agents of the capabilities it hosts, queries
	// (for 10 minutes after the last query) and watches, on their shard
	// topics; "full" — every agent, on the announce topic. Empty means
	// "full" for a node that serves the registry (api.serveRegistry) and
	// "interest" otherwise. See docs/scaling.md.
	Scope string `yaml:"scope" json:"scope"`
}

// UDPConfig is seed 001 §5.1.
type UDPConfig struct {
	Enabled           bool     `yaml:"enabled" json:"enabled"`
	MulticastGroup    string   `yaml:"multicastGroup" json:"multicastGroup"`
	Port              int      `yaml:"port" json:"port"`
	BroadcastInterval Duration `yaml:"broadcastInterval" json:"broadcastInterval"`
	Timeout           Duration `yaml:"timeout" json:"timeout"`
	// HMACKey, when set, makes agentd accept the seed's HMAC-signed
	// messages from peers that share the key.
	HMACKey string `yaml:"hmacKey" json:"hmacKey"`
}

// MDNSConfig configures mDNS/DNS-SD (seed 000 §3.1).
type MDNSConfig struct {
	Enabled bool     `yaml:"enabled" json:"enabled"`
	TTL     Duration `yaml:"ttl" json:"ttl"`
}

// BootstrapNode is a seed-001 bootstrap entry. host/port are the seed's
// form; agentd needs the peer id too (libp2p authenticates peers), given as
// peerId or inside multiaddr.
type BootstrapNode struct {
	Host      string `yaml:"host" json:"host"`
	Port      int    `yaml:"port" json:"port"`
	PeerID    string `yaml:"peerId" json:"peerId"`
	Multiaddr string `yaml:"multiaddr" json:"multiaddr"`
}

// DHTConfig is seed 001 §13.2 `dht:` plus agentd's knobs.
type DHTConfig struct {
	Enabled           bool            `yaml:"enabled" json:"enabled"`
	BootstrapNodes    []BootstrapNode `yaml:"bootstrapNodes" json:"bootstrapNodes"`
	ReplicationFactor int             `yaml:"replicationFactor" json:"replicationFactor"`
	// Mode is the DHT mode (agentd's addition): "auto" (the default) serves
	// the DHT unless AutoNAT finds the node behind a NAT nobody can dial;
	// "server" always serves it; "client" never does.
	Mode string `yaml:"mode" json:"mode"`
	// ClientMode is the older spelling of mode: client; true wins over mode.
	ClientMode bool `yaml:"clientMode" json:"clientMode"`
	// ValuePutRate paces the puts of hosted records' DHT values, per
	// second (agentd's addition; default 50). A node keeps this many times
	// the DHT's value max age (3 h) values alive in the DHT.
	ValuePutRate int `yaml:"valuePutRate" json:"valuePutRate"`
}

// SkillCenterConfig is seed 001 §13.2 `skillCenter:`.
type SkillCenterConfig struct {
	Enabled bool     `yaml:"enabled" json:"enabled"`
	URL     string   `yaml:"url" json:"url"`
	Timeout Duration `yaml:"timeout" json:"timeout"`
	Cache   struct {
		Enabled bool     `yaml:"enabled" json:"enabled"`
		TTL     Duration `yaml:"ttl" json:"ttl"`
	} `yaml:"cache" json:"cache"`
}

// HealthCheckConfig is seed 001 §8.2.
type HealthCheckConfig struct {
	HeartbeatInterval  Duration `yaml:"heartbeatInterval" json:"heartbeatInterval"`
	Timeout            Duration `yaml:"timeout" json:"timeout"`
	RetryCount         int      `yaml:"retryCount" json:"retryCount"`
	UnhealthyThreshold int      `yaml:"unhealthyThreshold" json:"unhealthyThreshold"`
	// Suspicion turns on early failure detection (agentd's addition,
	// default on): a peer whose connections closed is probed directly and
	// through other peers, and once confirmed unreachable its agents leave
	// at once instead of after the timeout (package liveness).
	Suspicion bool `yaml:"suspicion" json:"suspicion"`
	// GossipBeatEvery is quiet heartbeats (agentd's addition, default 3):
	// a hosted agent's heartbeat goes on gossip in one round of
	// GossipBeatEvery where every peer of the topic serves heartbeat
	// pulls, which fetch the others when late; 1 puts every heartbeat on
	// gossip, as earlier versions did. At most 3, so that a peer that
	// cannot reach this node still hears it within three intervals.
	GossipBeatEvery int `yaml:"gossipBeatEvery" json:"gossipBeatEvery"`
}

// CacheConfig is seed 001 §11.1.
type CacheConfig struct {
	Enabled             bool     `yaml:"enabled" json:"enabled"`
	TTL                 Duration `yaml:"ttl" json:"ttl"`
	MaxSize             int      `yaml:"maxSize" json:"maxSize"`
	RefreshBeforeExpiry Duration `yaml:"refreshBeforeExpiry" json:"refreshBeforeExpiry"`
}

// StorageConfig configures the database.
type StorageConfig struct {
	// MinFree is the free space kept on the data directory's filesystem:
	// while less remains, writes (registrations, status changes, cached
	// records) are refused with HTTP 507 and reads and the network go on.
	// 0 turns the guard off, which lets a full disk crash the daemon.
	MinFree ByteSize `yaml:"minFree" json:"minFree"`
}

// TrustConfig configures package trust.
type TrustConfig struct {
	Policy         string   `yaml:"policy" json:"policy"` // open | allowlist | ca
	AllowList      []string `yaml:"allowList" json:"allowList"`
	Roots          []string `yaml:"roots" json:"roots"`                 // PEM files or directories
	Intermediates  []string `yaml:"intermediates" json:"intermediates"` // PEM files or directories
	CRLs           []string `yaml:"crls" json:"crls"`
	RevokedSerials []string `yaml:"revokedSerials" json:"revokedSerials"`
	RotationGrace  Duration `yaml:"rotationGrace" json:"rotationGrace"`
}

// RegistryConfig is the seed-000 registry fallback.
type RegistryConfig struct {
	URL   string `yaml:"url" json:"url"`
	Token string `yaml:"token" json:"token"`
}

// LogConfig configures slog.
type LogConfig struct {
	Level  string `yaml:"level" json:"level"`   // debug | info | warn | error
	Format string `yaml:"format" json:"format"` // text | json
}

// The heartbeat defaults (seed 001: a beat every 5 s, an agent removed
// after 30 s of silence): discovery.healthCheck's, and a node.Config's
// where it leaves them zero.
const (
	DefaultHeartbeatInterval = 5 * time.Second
	DefaultLivenessTimeout   = 30 * time.Second
	// DefaultGossipBeatEvery is discovery.healthCheck.gossipBeatEvery's
	// default and bound (quiet heartbeats, docs/protocol.md).
	DefaultGossipBeatEvery = 3
)

// Default returns the defaults of every setting (the map's defaults table).
func Default() Config {
	c := Config{
		DataDir: "~/.agentd",
		API:     APIConfig{Addr: "127.0.0.1:4778"},
		Log:     LogConfig{Level: "info", Format: "text"},
		Trust:   TrustConfig{Policy: "open", RotationGrace: Duration(24 * time.Hour)},
		Storage: StorageConfig{MinFree: 64 << 20},
		Cache: CacheConfig{
			Enabled: true, TTL: Duration(300 * time.Second), MaxSize: 1000,
			RefreshBeforeExpiry: Duration(60 * time.Second),
		},
	}
	c.Discovery.UDP = UDPConfig{
		Enabled: true, MulticastGroup: "224.0.0.1", Port: 54321,
		BroadcastInterval: Duration(5 * time.Second), Timeout: Duration(30 * time.Second),
	}
	c.Discovery.MDNS = MDNSConfig{Enabled: true, TTL: Duration(10 * time.Second)}
	c.Discovery.DHT = DHTConfig{Enabled: true, ReplicationFactor: 20, Mode: DHTModeAuto, ValuePutRate: 50}
	c.NAT = NATConfig{Reachability: ReachabilityAuto, PortMapping: true, HolePunching: true, AutoRelay: true, ConnsPerIP: 64,
		// go-libp2p's relay defaults (128 slots, 8 per IP) are an IPFS
		// volunteer relay's; a bootstrap node of agentd is the relay of
		// every agent behind a NAT, many of them behind the same one.
		Relay: RelayConfig{MaxReservations: 1024, MaxReservationsPerIP: 64, MaxCircuits: 16,
			ReservationTTL: Duration(time.Hour), ConnDuration: Duration(2 * time.Minute), ConnData: 128 << 10}}
	// package p2p's defaults (TestConnDefaultsMatchConfig there)
	c.Connections = ConnectionsConfig{LowWater: 16, HighWater: 64, GracePeriod: Duration(3 * time.Second)}
	c.Discovery.SkillCenter.Timeout = Duration(10 * time.Second)
	c.Discovery.SkillCenter.Cache.Enabled = true
	c.Discovery.SkillCenter.Cache.TTL = Duration(300 * time.Second)
	c.Discovery.HealthCheck = HealthCheckConfig{
		HeartbeatInterval: Duration(DefaultHeartbeatInterval), Timeout: Duration(DefaultLivenessTimeout),
		RetryCount: 3, UnhealthyThreshold: 3, Suspicion: true, GossipBeatEvery: DefaultGossipBeatEvery,
	}
	return c
}
