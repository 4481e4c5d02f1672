package lan

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/agentd/agentd/config"
	"github.com/agentd/agentd/record"
)

// Defaults of Config (seed 001 §5.1, seed 000 §3.1).
const (
	DefaultGroup             = "224.0.0.1"
	DefaultPort              = 54321
	DefaultInterval          = 5 * time.Second
	DefaultTimeout           = 30 * time.Second
	DefaultMDNSTTL           = 10 * time.Second
	DefaultServiceType       = "_agentsc._tcp"
	DefaultLibp2pServiceName = "_agentd._udp"
	DefaultRetryInterval     = 30 * time.Second
	DefaultDiscoverTimeout   = time.Second
	DefaultRatePerSource     = 100
	DefaultRateBurst         = 200
	DefaultWorkers           = 4
	DefaultQueueSize         = 128
	DefaultMaxClockSkew      = 5 * time.Minute
	DefaultGoodbyeGrace      = time.Second
	DefaultUnknownBackoff    = 10 * time.Second
	// SKILL_DISCOVER answers: at most this many bytes per second across all
	// requesters (burst DefaultAnswerBurst), and one answer identical to
	// one multicast within DefaultAnswerRepeatWindow is not sent again.
	DefaultAnswerBytesPerSec  = 16 << 10
	DefaultAnswerBurst        = 64 << 10
	DefaultAnswerRepeatWindow = time.Second
	// mDNS runs on the RFC 6762 group and port; they are not configurable.
	mdnsGroup = "224.0.0.251"
	mdnsPort  = 5353
)

// Config configures LAN discovery. Zero values take the defaults above;
// UDP.Enabled and MDNS.Enabled are taken as given (config.Default turns
// both on).
type Config struct {
	// UDP is the seed-001 multicast protocol: enabled, multicastGroup,
	// port, broadcastInterval (heartbeats; registrations go out every
	// max(interval, timeout/2) and at once on a change), timeout (how long
	// a silent agent or foreign skill stays in the LAN tables) and
	// hmacKey (accept the seed's HMAC-signed messages of other
	// implementations).
	UDP config.UDPConfig
	// MDNS is DNS-SD on mDNS: enabled and ttl of the records published.
	// The switch also covers libp2p's mDNS peer discovery.
	MDNS config.MDNSConfig
	// Interface is the network interface for both mechanisms; "" means
	// every up, multicast-capable interface with an IPv4 address.
	Interface string
	// ServiceType is the DNS-SD service type (default "_agentsc._tcp").
	ServiceType string
	// Libp2pServiceName is the service name of libp2p's mDNS peer
	// discovery (default "_agentd._udp"; libp2p's own "_p2p._udp" would
	// find every IPFS node on the LAN).
	Libp2pServiceName string
	// RetryInterval is how often an unavailable mechanism is retried and
	// how often the interfaces are re-read (default 30 s).
	RetryInterval time.Duration
	// DiscoverTimeout bounds how long Discover collects
	// SKILL_DISCOVER_RESPONSEs (default 1 s; the caller's context also
	// bounds it).
	DiscoverTimeout time.Duration

	// RatePerSource and RateBurst bound the datagrams accepted per source
	// IP address and second, per mechanism (default 100/s, burst 200).
	RatePerSource float64
	RateBurst     int
	// AnswerBytesPerSec and AnswerBurst bound the bytes this node
	// multicasts in SKILL_DISCOVER_RESPONSEs, over all requesters (default
	// 16 KiB/s, burst 64 KiB): a request's source address can be spoofed,
	// so a per-source bound alone does not bound the traffic one sender
	// can cause. AnswerRepeatWindow (default 1 s) suppresses an answer
	// identical to one multicast within the window: every member of the
	// group, the requester included, has just received it.
	AnswerBytesPerSec  float64
	AnswerBurst        int
	AnswerRepeatWindow time.Duration
	// Workers and QueueSize size the pool that resolves unknown agents
	// and fetches records (default 4 workers, 128 queued jobs; a job that
	// finds the queue full is dropped and counted).
	Workers   int
	QueueSize int
	// MaxClockSkew bounds how far a signed datagram's timestamp may be
	// from the local clock (default 5 min): older ones are replays.
	MaxClockSkew time.Duration
	// GoodbyeGrace is how long an mDNS goodbye waits before the instance
	// is removed, so that a re-announcement can cancel it (RFC 6762
	// §10.1; default 1 s).
	GoodbyeGrace time.Duration
	// UnknownBackoff is the longest an agent whose record could not be
	// obtained is not tried again (default 10 s); the first failure waits
	// about a second, and each further one twice as long.
	UnknownBackoff time.Duration
	// Port is the port published in the SRV record; 0 takes the libp2p
	// host's TCP port.
	Port int
	// RequesterID is the {requesterId} of the SKILL_DISCOVERs this node
	// sends; "" takes the identity's agent id.
	RequesterID string
}

// FromConfig builds a Config from the daemon configuration.
func FromConfig(d config.DiscoveryConfig) Config {
	return Config{UDP: d.UDP, MDNS: d.MDNS, Interface: d.Interface}
}

func (c *Config) defaults() {
	if c.UDP.MulticastGroup == "" {
		c.UDP.MulticastGroup = DefaultGroup
	}
	if c.UDP.Port == 0 {
		c.UDP.Port = DefaultPort
	}
	if c.UDP.BroadcastInterval <= 0 {
		c.UDP.BroadcastInterval = config.Duration(DefaultInterval)
	}
	if c.UDP.Timeout <= 0 {
		c.UDP.Timeout = config.Duration(DefaultTimeout)
	}
	if c.MDNS.TTL <= 0 {
		c.MDNS.TTL = config.Duration(DefaultMDNSTTL)
	}
	if c.ServiceType == "" {
		c.ServiceType = DefaultServiceType
	}
	if c.Libp2pServiceName == "" {
		c.Libp2pServiceName = DefaultLibp2pServiceName
	}
	if c.RetryInterval <= 0 {
		c.RetryInterval = DefaultRetryInterval
	}
	if c.DiscoverTimeout <= 0 {
		c.DiscoverTimeout = DefaultDiscoverTimeout
	}
	if c.RatePerSource <= 0 {
		c.RatePerSource = DefaultRatePerSource
	}
	if c.RateBurst <= 0 {
		c.RateBurst = DefaultRateBurst
	}
	if c.AnswerBytesPerSec <= 0 {
		c.AnswerBytesPerSec = DefaultAnswerBytesPerSec
	}
	if c.AnswerBurst <= 0 {
		c.AnswerBurst = DefaultAnswerBurst
	}
	if c.AnswerRepeatWindow <= 0 {
		c.AnswerRepeatWindow = DefaultAnswerRepeatWindow
	}
	if c.Workers <= 0 {
		c.Workers = DefaultWorkers
	}
	if c.QueueSize <= 0 {
		c.QueueSize = DefaultQueueSize
	}
	if c.MaxClockSkew <= 0 {
		c.MaxClockSkew = DefaultMaxClockSkew
	}
	if c.GoodbyeGrace <= 0 {
		c.GoodbyeGrace = DefaultGoodbyeGrace
	}
	if c.UnknownBackoff <= 0 {
		c.UnknownBackoff = DefaultUnknownBackoff
	}
}

// validate checks the configuration after defaults, naming the field.
func (c *Config) validate() (udpGroup netip.AddrPort, err error) {
	g, perr := netip.ParseAddr(c.UDP.MulticastGroup)
	if perr != nil || !g.Is4() || !g.IsMulticast() {
		return netip.AddrPort{}, fmt.Errorf("lan: discovery.udp.multicastGroup %q is not an IPv4 multicast address", c.UDP.MulticastGroup)
	}
	if c.UDP.Port < 1 || c.UDP.Port > 65535 {
		return netip.AddrPort{}, fmt.Errorf("lan: discovery.udp.port %d is out of range 1-65535", c.UDP.Port)
	}
	if c.UDP.Port == mdnsPort {
		return netip.AddrPort{}, fmt.Errorf("lan: discovery.udp.port %d is the mDNS port", c.UDP.Port)
	}
	if c.UDP.Timeout.D() < c.UDP.BroadcastInterval.D() {
		return netip.AddrPort{}, fmt.Errorf("lan: discovery.udp.timeout %s is shorter than discovery.udp.broadcastInterval %s", c.UDP.Timeout, c.UDP.BroadcastInterval)
	}
	if t := c.MDNS.TTL.D(); t < time.Second || t > time.Hour {
		return netip.AddrPort{}, fmt.Errorf("lan: discovery.mdns.ttl %s is out of range 1s-1h", c.MDNS.TTL)
	}
	if err := checkServiceType(c.ServiceType); err != nil {
		return netip.AddrPort{}, fmt.Errorf("lan: service type: %w", err)
	}
	if err := checkServiceType(c.Libp2pServiceName); err != nil {
		return netip.AddrPort{}, fmt.Errorf("lan: libp2p service name: %w", err)
	}
	if c.Port < 0 || c.Port > 65535 {
		return netip.AddrPort{}, fmt.Errorf("lan: port %d is out of range 0-65535", c.Port)
	}
	if c.RequesterID != "" && !record.ValidIdent(c.RequesterID) {
		return netip.AddrPort{}, fmt.Errorf("lan: requester id %q is not a valid seed-001 identifier", c.RequesterID)
	}
	return netip.AddrPortFrom(g, uint16(c.UDP.Port)), nil
}

// checkServiceType checks a DNS-SD service type "_name._tcp" or
// "_name._udp" (RFC 6763 §7: the name is 1-15 letters, digits and
// hyphens).
func checkServiceType(s string) error {
	name, proto, ok := strings.Cut(s, ".")
	if !ok || (proto != "_tcp" && proto != "_udp") {
		return fmt.Errorf("%q is not _name._tcp or _name._udp", s)
	}
	if len(name) < 2 || len(name) > 16 || name[0] != '_' {
		return fmt.Errorf("%q: the service name must be '_' and 1-15 characters", s)
	}
	for _, r := range name[1:] {
		if (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (r < '0' || r > '9') && r != '-' {
			return fmt.Errorf("%q: the service name may hold only letters, digits and '-'", s)
		}
	}
	return nil
}
