// Package p2p builds the libp2p host agentd runs on: Ed25519 identity, TCP
// and QUIC transports, and a resource manager configured for private
// networks where many agents share one IP address.
//
// go-libp2p's default resource manager allows 8 connections and 0.2 new
// connections per second (burst 16) per remote IPv4 /32 (IPv6 /56), except
// loopback. On a LAN where many agents run behind one address (containers on
// one host, a NAT) that limit refuses most dials and leaves DHT routing
// tables nearly empty. agentd therefore exempts the private, link-local and
// CGNAT prefixes (RFC 1918, RFC 6598, RFC 4193, fe80::/10, loopback) and any
// prefixes the operator adds, and raises the transient (handshake) limits so
// a bootstrap node survives a burst of joins. Public addresses keep
// libp2p's per-subnet defaults.
package p2p

import (
	"fmt"
	"math"
	"net/netip"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"
	"github.com/libp2p/go-libp2p/p2p/net/connmgr"
	"github.com/libp2p/go-libp2p/x/rate"
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
	// LowWater / HighWater bound the connection manager (default 160/192).
	LowWater, HighWater int
	// TransientInbound / SystemInbound raise the resource manager's
	// inbound connection limits (default 512 / 2048).
	TransientInbound, SystemInbound int
	// DisableMetrics turns libp2p's own Prometheus metrics off (simnet,
	// tests: they would share the global registry).
	DisableMetrics bool
	// UserAgent is sent in identify.
	UserAgent string
}

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
	limiter := &rate.Limiter{
		NetworkPrefixLimits: rl,
		GlobalLimit:         rate.Limit{},
		SubnetRateLimiter: rate.SubnetLimiter{
			IPv4SubnetLimits: []rate.SubnetLimit{{PrefixLength: 32, Limit: rate.Limit{RPS: 0.2, Burst: 16}}},
			IPv6SubnetLimits: []rate.SubnetLimit{
				{PrefixLength: 56, Limit: rate.Limit{RPS: 0.2, Burst: 16}},
				{PrefixLength: 48, Limit: rate.Limit{RPS: 0.5, Burst: 80}},
			},
		},
	}
	return rcmgr.NewResourceManager(rcmgr.NewFixedLimiter(limits),
		rcmgr.WithNetworkPrefixLimit(v4, v6),
		rcmgr.WithConnRateLimiters(limiter),
		rcmgr.WithMetricsDisabled())
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
	low, high := cfg.LowWater, cfg.HighWater
	if low == 0 {
		low = 160
	}
	if high == 0 {
		high = 192
	}
	cm, err := connmgr.NewConnManager(low, high)
	if err != nil {
		return nil, fmt.Errorf("connection manager: %w", err)
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
	if cfg.DisableMetrics {
		opts = append(opts, libp2p.DisableMetrics())
	}
	if cfg.UserAgent != "" {
		opts = append(opts, libp2p.UserAgent(cfg.UserAgent))
	}
	h, err := libp2p.New(opts...)
	if err != nil {
		_ = rm.Close()
		return nil, fmt.Errorf("libp2p host: %w", err)
	}
	return h, nil
}
