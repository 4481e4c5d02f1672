// Package p2p builds the libp2p host agentd runs on: Ed25519 identity, TCP
// and QUIC transports, NAT traversal (NAT: AutoNAT, port mapping, circuit
// relay v2, AutoRelay, DCUtR hole punching) and a resource manager
// configured for private networks where many agents share one IP address.
//
// go-libp2p's default resource manager allows 8 connections and 0.2 new
// connections per second (burst 16) per remote IPv4 /32 (IPv6 /56), except
// loopback. On a LAN where many agents run behind one address (containers on
// one host, a NAT) that limit refuses most dials and leaves DHT routing
// tables nearly empty. agentd therefore exempts the private, link-local and
// CGNAT prefixes (RFC 1918, RFC 6598, RFC 4193, fe80::/10, loopback) and any
// prefixes the operator adds, and raises the transient (handshake) limits so
// a bootstrap node survives a burst of joins. A public address may hold
// Config.ConnsPerIP connections (default 64, libp2p's is 8): on the internet
// that address is often a NAT with a whole office behind it.
package p2p

import (
	"context"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/host/autorelay"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"
	"github.com/libp2p/go-libp2p/p2p/net/connmgr"
	"github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/relay"
	"github.com/libp2p/go-libp2p/x/rate"
	ma "github.com/multiformats/go-multiaddr"
	"github.com/prometheus/client_golang/prometheus"
)

// DefaultPort is agentd's libp2p port (TCP and QUIC). It is not IPFS's 4001,
// so an agentd and an IPFS node can share a machine.
const DefaultPort = 4777

// DefaultListen are the listen addresses used when none are configured.
var DefaultListen = []string{
	fmt.Sprintf("/ip4/0.0.0.0/tcp/%d", DefaultPort),
	fmt.Sprintf("/ip4/0.0.0.0/udp/%d/quic-v1", DefaultPort),
	fmt.Sprintf("/ip6/::/tcp/%d", DefaultPort),
	fmt.Sprintf("/ip6/::/udp/%d/quic-v1", DefaultPort),
}

// PrivatePrefixes are exempt from the per-IP connection limits.
var PrivatePrefixes = []netip.Prefix{
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("::1/128"),
	netip.MustParsePrefix("fc00::/7"),
	netip.MustParsePrefix("fe80::/10"),
}

// Config configures a host.
type Config struct {
	// Key is the peer key (Ed25519).
	Key crypto.PrivKey
	// Listen are multiaddrs to listen on; nil means DefaultListen. An empty
	// non-nil slice listens nowhere (dial-only).
	Listen []string
	// ExtraPrefixes are added to PrivatePrefixes (e.g. a public /24 that
	// hosts many agents).
	ExtraPrefixes []netip.Prefix
	// LowWater / HighWater bound the connection manager (default
	// DefaultLowWater / DefaultHighWater).
	LowWater, HighWater int
	// GracePeriod is how long a new connection is exempt from trimming
	// (default DefaultConnGrace).
	GracePeriod time.Duration
	// TransientInbound / SystemInbound raise the resource manager's
	// inbound connection limits (default 512 / 2048).
	TransientInbound, SystemInbound int
	// ConnsPerIP bounds the connections from one public IPv4 address (or
	// IPv6 /56), and the burst of new ones (sustained: one per second);
	// default DefaultConnsPerIP. go-libp2p's default, 8 and 0.2/s, refuses
	// the ninth agent behind one NAT (measured: TestManyAgentsBehindOneNAT).
	ConnsPerIP int
	// DisableMetrics turns libp2p's own Prometheus metrics off (simnet,
	// tests: they would share the global registry).
	DisableMetrics bool
	// Registerer, when set, receives libp2p's own metrics (swarm, relay
	// service, hole punching, AutoNAT, identify) instead of Prometheus'
	// global registry; DisableMetrics wins over it.
	Registerer prometheus.Registerer
	// UserAgent is sent in identify.
	UserAgent string
	// NAT configures NAT traversal; the zero value turns all of it off
	// (tests, simnet). The daemon uses DefaultNAT.
	NAT NAT
}

// Reachability values of NAT.Reachability.
const (
	ReachabilityAuto    = "auto"    // AutoNAT decides (the default)
	ReachabilityPublic  = "public"  // the operator knows the node is dialable
	ReachabilityPrivate = "private" // the operator knows it is not
)

// NAT configures go-libp2p's NAT traversal (docs/nat.md). go-libp2p
// v0.51.0 facts this relies on:
//   - AutoNAT v1's client runs on every host unless reachability is
//     forced; it asks peers that run the AutoNAT service to dial it back and
//     emits EvtLocalReachabilityChanged, which AutoRelay, the relay service
//     and kad-dht's auto mode follow.
//   - The relay service (circuit v2 hop) starts only while the host is
//     public, so a bootstrap node whose operator knows it is public sets
//     Reachability "public".
//   - Streams over a relayed connection must be asked for with
//     network.WithAllowLimitedConn; without it NewStream waits for hole
//     punching (DCUtR) to give a direct connection.
//   - Hole punching uses observed addresses seen by a single peer (its
//     HolePunchAddrs), while host.Addrs() advertises an observed address
//     only after 4 distinct observers (observedaddrs.ActivationThresh).
type NAT struct {
	// Reachability is ReachabilityAuto (or ""), ReachabilityPublic or
	// ReachabilityPrivate.
	Reachability string
	// PortMapping asks the gateway for a port mapping (UPnP IGD, NAT-PMP).
	PortMapping bool
	// HolePunching turns DCUtR on: a relayed connection is upgraded to a
	// direct one when both sides' NATs allow it.
	HolePunching bool
	// AutoRelay reserves a slot on a relay while the node is private (or
	// its reachability unknown) and advertises the circuit addresses.
	AutoRelay bool
	// Relays are relay candidates tried first (the bootstrap nodes);
	// connected peers that speak circuit v2's hop protocol follow.
	Relays func() []peer.AddrInfo
	// RelayService serves circuit relay v2 to other peers (while public),
	// within RelayResources (zero fields take circuit v2's defaults).
	RelayService   bool
	RelayResources relay.Resources
	// NATService answers other peers' AutoNAT dial-back requests.
	NATService bool
	// Announce, when set, are the addresses advertised instead of the
	// detected ones (an operator's known public addresses).
	Announce []ma.Multiaddr
}

// DefaultNAT is the daemon's NAT traversal: AutoNAT, port mapping, hole
// punching and AutoRelay on, the AutoNAT service on, no relay service.
func DefaultNAT() NAT {
	return NAT{Reachability: ReachabilityAuto, PortMapping: true, HolePunching: true, AutoRelay: true, NATService: true}
}

// RelayResources fills the zero fields of r with circuit v2's defaults.
func RelayResources(r relay.Resources) relay.Resources {
	def := relay.DefaultResources()
	if r.Limit == nil {
		r.Limit = def.Limit
	} else {
		l := *r.Limit
		if l.Duration == 0 {
			l.Duration = def.Limit.Duration
		}
		if l.Data == 0 {
			l.Data = def.Limit.Data
		}
		r.Limit = &l
	}
	if r.ReservationTTL == 0 {
		r.ReservationTTL = def.ReservationTTL
	}
	if r.MaxReservations == 0 {
		r.MaxReservations = def.MaxReservations
	}
	if r.MaxCircuits == 0 {
		r.MaxCircuits = def.MaxCircuits
	}
	if r.BufferSize == 0 {
		r.BufferSize = def.BufferSize
	}
	if r.MaxReservationsPerIP == 0 {
		r.MaxReservationsPerIP = def.MaxReservationsPerIP
	}
	if r.MaxReservationsPerASN == 0 {
		r.MaxReservationsPerASN = def.MaxReservationsPerASN
	}
	return r
}

// natOptions maps NAT onto go-libp2p options.
func natOptions(n NAT, self func() host.Host) ([]libp2p.Option, error) {
	var opts []libp2p.Option
	switch n.Reachability {
	case "", ReachabilityAuto:
	case ReachabilityPublic:
		opts = append(opts, libp2p.ForceReachabilityPublic())
	case ReachabilityPrivate:
		opts = append(opts, libp2p.ForceReachabilityPrivate())
	default:
		return nil, fmt.Errorf("p2p: reachability %q: want %q, %q or %q", n.Reachability, ReachabilityAuto, ReachabilityPublic, ReachabilityPrivate)
	}
	if n.PortMapping {
		opts = append(opts, libp2p.NATPortMap())
	}
	if n.HolePunching {
		opts = append(opts, libp2p.EnableHolePunching())
	}
	if n.NATService {
		opts = append(opts, libp2p.EnableNATService())
	}
	if n.RelayService {
		opts = append(opts, libp2p.EnableRelayService(relay.WithResources(RelayResources(n.RelayResources))))
	}
	if n.AutoRelay {
		// One candidate is enough to start (a small network may have a
		// single relay), and the boot delay no longer than AutoNAT's
		// first verdict: the defaults wait for 4 candidates or 3 min.
		opts = append(opts, libp2p.EnableAutoRelayWithPeerSource(relaySource(n.Relays, self),
			autorelay.WithMinCandidates(1), autorelay.WithBootDelay(10*time.Second),
			autorelay.WithBackoff(30*time.Second)))
	}
	if len(n.Announce) > 0 {
		announce := slices.Clone(n.Announce)
		opts = append(opts, libp2p.AddrsFactory(func([]ma.Multiaddr) []ma.Multiaddr { return slices.Clone(announce) }))
	}
	return opts, nil
}

// HopProtocol is circuit relay v2's hop protocol, spoken by relays.
const HopProtocol = "/libp2p/circuit/relay/0.2.0/hop"

// relaySource yields relay candidates for AutoRelay: the configured relays
// first, then connected peers that identify says speak the hop protocol.
func relaySource(static func() []peer.AddrInfo, self func() host.Host) autorelay.PeerSource {
	return func(ctx context.Context, num int) <-chan peer.AddrInfo {
		var cands []peer.AddrInfo
		seen := map[peer.ID]bool{}
		add := func(ai peer.AddrInfo) {
			if len(cands) < num && ai.ID != "" && !seen[ai.ID] {
				seen[ai.ID] = true
				cands = append(cands, ai)
			}
		}
		if static != nil {
			for _, ai := range static() {
				add(ai)
			}
		}
		if h := self(); h != nil {
			for _, p := range h.Network().Peers() {
				if ok, err := h.Peerstore().SupportsProtocols(p, HopProtocol); err == nil && len(ok) > 0 {
					add(h.Peerstore().PeerInfo(p))
				}
			}
		}
		out := make(chan peer.AddrInfo, len(cands))
		for _, ai := range cands {
			out <- ai
		}
		close(out)
		return out
	}
}

// DefaultConnsPerIP is Config.ConnsPerIP's default: an office or a home
// behind one NAT runs this many agents before a node refuses the next.
const DefaultConnsPerIP = 64

// ResourceManager returns the resource manager described in the package doc.
func ResourceManager(cfg Config) (network.ResourceManager, error) {
	transient, system := cfg.TransientInbound, cfg.SystemInbound
	if transient == 0 {
		transient = 512
	}
	if system == 0 {
		system = 2048
	}
	scaling := rcmgr.DefaultLimits
	libp2p.SetDefaultServiceLimits(&scaling)
	limits := rcmgr.PartialLimitConfig{
		System: rcmgr.ResourceLimits{
			Conns:        rcmgr.LimitVal(2 * system),
			ConnsInbound: rcmgr.LimitVal(system),
		},
		Transient: rcmgr.ResourceLimits{
			Conns:        rcmgr.LimitVal(2 * transient),
			ConnsInbound: rcmgr.LimitVal(transient),
		},
	}.Build(scaling.AutoScale())

	prefixes := append(append([]netip.Prefix{}, PrivatePrefixes...), cfg.ExtraPrefixes...)
	var v4, v6 []rcmgr.NetworkPrefixLimit
	var rl []rate.PrefixLimit
	for _, p := range prefixes {
		l := rcmgr.NetworkPrefixLimit{Network: p, ConnCount: math.MaxInt}
		if p.Addr().Is4() {
			v4 = append(v4, l)
		} else {
			v6 = append(v6, l)
		}
		rl = append(rl, rate.PrefixLimit{Prefix: p, Limit: rate.Limit{}}) // zero limit = unlimited
	}
	perIP := cfg.ConnsPerIP
	if perIP <= 0 {
		perIP = DefaultConnsPerIP
	}
	limiter := &rate.Limiter{
		NetworkPrefixLimits: rl,
		GlobalLimit:         rate.Limit{},
		SubnetRateLimiter: rate.SubnetLimiter{
			IPv4SubnetLimits: []rate.SubnetLimit{{PrefixLength: 32, Limit: rate.Limit{RPS: 1, Burst: perIP}}},
			IPv6SubnetLimits: []rate.SubnetLimit{
				{PrefixLength: 56, Limit: rate.Limit{RPS: 1, Burst: perIP}},
				{PrefixLength: 48, Limit: rate.Limit{RPS: 2.5, Burst: 4 * perIP}},
			},
		},
	}
	return rcmgr.NewResourceManager(rcmgr.NewFixedLimiter(limits),
		rcmgr.WithNetworkPrefixLimit(v4, v6),
		rcmgr.WithLimitPerSubnet(
			[]rcmgr.ConnLimitPerSubnet{{PrefixLength: 32, ConnCount: perIP}},
			[]rcmgr.ConnLimitPerSubnet{{PrefixLength: 56, ConnCount: perIP}, {PrefixLength: 48, ConnCount: 8 * perIP}}),
		rcmgr.WithConnRateLimiters(limiter),
		rcmgr.WithMetricsDisabled())
}

// Connection manager defaults: once a node has more than DefaultHighWater
// connections, it closes the least valuable (untagged first: DHT lookups'
// leftovers) among those older than DefaultConnGrace and not protected,
// until DefaultLowWater of those remain. GossipSub protects its mesh peers,
// kad-dht the peers of its nearest buckets, and agentd the first 64 peers
// of its live view; protected connections are not counted in the low
// watermark (go-libp2p's BasicConnMgr trims the candidates down to it), so
// a node holds its protected connections plus DefaultLowWater others.
// An agentd node protects some 75 at 250 nodes, already above the high
// watermark: 16 others rather than 32 is 16 connections, 58 goroutines and
// 0.4 MB of stacks less per node in simnet, with the same recall and DHT
// lookup latency (docs/simnet.md, "Memory, fifth step").
//
// The grace period is short because what it shelters is mostly DHT
// lookups' leftovers: a connection a node keeps is protected or tagged
// within a second or two (a GossipSub graft at its next heartbeat, a view
// peer at the next pass of node's 1 s tagger), and one opened for a lookup
// or a provide is done with once its RPC answers. Measured in simnet (250
// nodes, docs/simnet.md "Memory, fourth step"): 3 s instead of 10 s holds
// 122 connections per node instead of 161 and 17.1 MB of RSS per node
// instead of 21.7, with the same recall.
const (
	DefaultLowWater  = 16
	DefaultHighWater = 64
	DefaultConnGrace = 3 * time.Second
)

// ConnManager builds the connection manager of a host; zero values take
// the defaults above.
func ConnManager(low, high int, grace time.Duration) (*connmgr.BasicConnMgr, error) {
	if low == 0 {
		low = DefaultLowWater
	}
	if high == 0 {
		high = DefaultHighWater
	}
	if grace == 0 {
		grace = DefaultConnGrace
	}
	// Trims run every half grace period (go-libp2p's rule), at most every
	// 10 s (its default silence period).
	cm, err := connmgr.NewConnManager(low, high, connmgr.WithGracePeriod(grace), connmgr.WithSilencePeriod(min(grace/2, 10*time.Second)))
	if err != nil {
		return nil, fmt.Errorf("connection manager: %w", err)
	}
	return cm, nil
}

// New builds a libp2p host.
func New(cfg Config) (host.Host, error) {
	if cfg.Key == nil {
		return nil, fmt.Errorf("p2p: a peer key is required")
	}
	rm, err := ResourceManager(cfg)
	if err != nil {
		return nil, fmt.Errorf("resource manager: %w", err)
	}
	cm, err := ConnManager(cfg.LowWater, cfg.HighWater, cfg.GracePeriod)
	if err != nil {
		return nil, err
	}
	listen := cfg.Listen
	if listen == nil {
		listen = DefaultListen
	}
	opts := []libp2p.Option{
		libp2p.Identity(cfg.Key),
		libp2p.ListenAddrStrings(listen...),
		libp2p.ResourceManager(rm),
		libp2p.ConnectionManager(cm),
	}
	if len(listen) == 0 {
		opts = append(opts, libp2p.NoListenAddrs)
	}
	switch {
	case cfg.DisableMetrics:
		opts = append(opts, libp2p.DisableMetrics())
	case cfg.Registerer != nil:
		opts = append(opts, libp2p.PrometheusRegisterer(cfg.Registerer))
	}
	if cfg.UserAgent != "" {
		opts = append(opts, libp2p.UserAgent(cfg.UserAgent))
	}
	var self atomic.Pointer[host.Host]
	nat, err := natOptions(cfg.NAT, func() host.Host {
		if h := self.Load(); h != nil {
			return *h
		}
		return nil
	})
	if err != nil {
		_ = rm.Close()
		return nil, err
	}
	opts = append(opts, nat...)
	h, err := libp2p.New(opts...)
	if err != nil {
		_ = rm.Close()
		return nil, fmt.Errorf("libp2p host: %w", err)
	}
	self.Store(&h)
	return h, nil
}
