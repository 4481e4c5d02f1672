package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/agentd/agentd/record"
	"github.com/google/uuid"
	ma "github.com/multiformats/go-multiaddr"
)

// Bounds used by Validate.
const (
	// MinInterval is the shortest periodic interval (broadcast, heartbeat):
	// shorter ones would only burn CPU and bandwidth.
	MinInterval = 10 * time.Millisecond
	// MaxInterval is the longest periodic interval or timeout.
	MaxInterval = 24 * time.Hour
	// MaxCacheTTL is the longest cache lifetime.
	MaxCacheTTL = 7 * 24 * time.Hour
	// MaxRotationGrace is the longest grace period of a retired key.
	MaxRotationGrace = 365 * 24 * time.Hour
	// MaxCacheEntries bounds cache.maxSize.
	MaxCacheEntries = 10_000_000
	// MinJWTSecretBytes is the shortest HS256 secret (RFC 7518 §3.2: at
	// least the size of the hash output).
	MinJWTSecretBytes = 32
	// MaxTextLen bounds free-text values (paths, URLs, keys).
	MaxTextLen = 4096
)

// Valid values of the enumerated settings.
var (
	Policies   = []string{"open", "allowlist", "ca"}
	LogLevels  = []string{"debug", "info", "warn", "error"}
	LogFormats = []string{"text", "json"}
	Scopes     = []string{"interest", "full"}
	DHTModes   = []string{DHTModeAuto, DHTModeServer, DHTModeClient}
	Reachables = []string{ReachabilityAuto, ReachabilityPublic, ReachabilityPrivate}
)

// DHT modes and reachability values.
const (
	DHTModeAuto         = "auto"
	DHTModeServer       = "server"
	DHTModeClient       = "client"
	ReachabilityAuto    = "auto"
	ReachabilityPublic  = "public"
	ReachabilityPrivate = "private"
)

// EffectiveMode is the DHT mode in force: "client" when the older
// clientMode is set, mode otherwise ("auto" when empty).
func (d DHTConfig) EffectiveMode() string {
	switch {
	case d.ClientMode:
		return DHTModeClient
	case d.Mode == "":
		return DHTModeAuto
	}
	return d.Mode
}

func (n NATConfig) validate(v *validator) {
	if n.Reachability != "" {
		v.oneOf("nat.reachability", n.Reachability, Reachables)
	}
	v.list("nat.announce", len(n.Announce), 64)
	for i, s := range n.Announce {
		f := fmt.Sprintf("nat.announce[%d]", i)
		a, err := ma.NewMultiaddr(s)
		if err != nil {
			v.add(f, "%q is not a multiaddr (e.g. /ip4/198.51.100.7/tcp/4777): %v", clip(s), err)
			continue
		}
		if _, err := a.ValueForProtocol(ma.P_P2P); err == nil {
			v.add(f, "%q ends in /p2p/<peer id>; give the address only, the peer id is added to it", clip(s))
		}
	}
	if n.ConnsPerIP < 0 || n.ConnsPerIP > 100_000 {
		v.add("nat.connsPerIP", "%d is out of range (0 = default 64, at most 100000)", n.ConnsPerIP)
	}
	r := n.Relay
	for _, c := range []struct {
		field string
		n     int
	}{
		{"nat.relay.maxReservations", r.MaxReservations},
		{"nat.relay.maxReservationsPerIP", r.MaxReservationsPerIP},
		{"nat.relay.maxCircuits", r.MaxCircuits},
	} {
		if c.n < 0 || c.n > 1_000_000 {
			v.add(c.field, "%d is out of range (0 = default, at most 1000000)", c.n)
		}
	}
	for _, c := range []struct {
		field string
		d     Duration
	}{
		{"nat.relay.reservationTTL", r.ReservationTTL},
		{"nat.relay.connDuration", r.ConnDuration},
	} {
		if c.d < 0 || c.d.D() > MaxInterval {
			v.add(c.field, "%s is out of range (0 = default, at most %s)", c.d, MaxInterval)
		}
	}
	if r.ConnData > 1<<30 {
		v.add("nat.relay.connData", "%s is more than 1 GiB", r.ConnData)
	}
}

// Validate checks every setting against its bounds and returns all the
// problems found, each a *FieldError naming the dotted field, joined with
// errors.Join. It is pure: it does not touch files or the network.
func (c Config) Validate() error {
	v := &validator{}
	c.validate(v)
	return errors.Join(v.errs...)
}

type validator struct{ errs []error }

func (v *validator) add(field, format string, args ...any) {
	v.errs = append(v.errs, fieldErr(field, format, args...))
}

func (c Config) validate(v *validator) {
	if strings.TrimSpace(c.DataDir) == "" {
		v.add("dataDir", "is required (default %s)", Default().DataDir)
	} else {
		v.text("dataDir", c.DataDir)
	}
	v.list("listen", len(c.Listen), 64)
	for i, s := range c.Listen {
		f := fmt.Sprintf("listen[%d]", i)
		if _, err := ma.NewMultiaddr(s); err != nil {
			v.add(f, "%q is not a multiaddr (e.g. /ip4/0.0.0.0/tcp/4777): %v", clip(s), err)
		}
	}
	c.API.validate(v)
	c.Discovery.validate(v)
	c.Cache.validate(v)
	if c.Storage.MinFree > MaxMinFree {
		v.add("storage.minFree", "%s is more than %s", c.Storage.MinFree, MaxMinFree)
	}
	c.Trust.validate(v)
	c.Registry.validate(v)
	c.Log.validate(v)
	c.NAT.validate(v)
	c.Connections.validate(v)
}

func (c ConnectionsConfig) validate(v *validator) {
	switch {
	case c.LowWater < 0 || c.LowWater > 100_000:
		v.add("connections.lowWater", "%d is out of range (0 = default 16, at most 100000)", c.LowWater)
	case c.HighWater < 0 || c.HighWater > 100_000:
		v.add("connections.highWater", "%d is out of range (0 = default 64, at most 100000)", c.HighWater)
	case c.LowWater > 0 && c.HighWater > 0 && c.HighWater <= c.LowWater:
		v.add("connections.highWater", "%d must be above connections.lowWater (%d)", c.HighWater, c.LowWater)
	}
	if g := c.GracePeriod.D(); g != 0 && (g < time.Second || g > time.Hour) {
		v.add("connections.gracePeriod", "%s is out of range (0 = default 3s; 1s-1h)", c.GracePeriod)
	}
}

func (a APIConfig) validate(v *validator) {
	auth := a.JWTSecret != "" || a.JWTPublicKey != ""
	if a.JWTSecret != "" && len(a.JWTSecret) < MinJWTSecretBytes {
		v.add("api.jwtSecret", "is %d bytes; an HS256 secret needs at least %d", len(a.JWTSecret), MinJWTSecretBytes)
	}
	v.text("api.jwtSecret", a.JWTSecret)
	v.text("api.jwtPublicKey", a.JWTPublicKey)
	host, port, err := net.SplitHostPort(a.Addr)
	if err != nil {
		v.add("api.addr", "%q is not host:port (e.g. 127.0.0.1:4778)", clip(a.Addr))
	} else {
		if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
			v.add("api.addr", "port %q is not a port (0-65535; 0 picks a free one)", clip(port))
		}
		loopback := host == "localhost"
		if !loopback {
			ip, err := netip.ParseAddr(host)
			switch {
			case host == "":
				// all interfaces: not loopback
			case err != nil:
				v.add("api.addr", "host %q must be an IP address or localhost", clip(host))
				return
			default:
				loopback = ip.IsLoopback()
			}
		}
		if !loopback && !auth {
			v.add("api.addr", "%s is not a loopback address; the API registers and removes agents, so serving it beyond this machine needs auth (set api.jwtSecret or api.jwtPublicKey)", a.Addr)
		}
	}
	if a.RequireAuthOnLoopback && !auth {
		v.add("api.requireAuthOnLoopback", "needs api.jwtSecret or api.jwtPublicKey")
	}
	if a.ServeRegistry && !auth {
		v.add("api.serveRegistry", "needs api.jwtSecret or api.jwtPublicKey (registry clients must authenticate)")
	}
	if a.AgentCard != "" && a.AgentCard != "self" {
		if err := record.ValidateAgentID(a.AgentCard); err != nil {
			v.add("api.agentCard", "must be \"self\" or the agent_id of a hosted agent: %v", err)
		}
	}
}

func (d DiscoveryConfig) validate(v *validator) {
	u := d.UDP
	if ip, err := netip.ParseAddr(u.MulticastGroup); err != nil || !ip.Is4() || !ip.IsMulticast() {
		v.add("discovery.udp.multicastGroup", "%q is not an IPv4 multicast address (224.0.0.0/4)", clip(u.MulticastGroup))
	}
	v.port("discovery.udp.port", u.Port)
	v.interval("discovery.udp.broadcastInterval", u.BroadcastInterval)
	v.interval("discovery.udp.timeout", u.Timeout)
	if u.Timeout > 0 && u.Timeout < u.BroadcastInterval {
		v.add("discovery.udp.timeout", "%s is shorter than discovery.udp.broadcastInterval %s", u.Timeout, u.BroadcastInterval)
	}
	v.text("discovery.udp.hmacKey", u.HMACKey)

	if t := d.MDNS.TTL.D(); t < time.Second || t > MaxInterval {
		v.add("discovery.mdns.ttl", "%s is out of range (1s-%s; DNS TTLs count whole seconds)", d.MDNS.TTL, MaxInterval)
	}

	h := d.DHT
	if h.ValuePutRate <= 0 || h.ValuePutRate > 10000 {
		v.add("discovery.dht.valuePutRate", "%d is out of range (1-10000 puts a second)", h.ValuePutRate)
	}
	if h.ReplicationFactor < 1 || h.ReplicationFactor > 100 {
		v.add("discovery.dht.replicationFactor", "%d is out of range (1-100)", h.ReplicationFactor)
	}
	if h.Mode != "" {
		v.oneOf("discovery.dht.mode", h.Mode, DHTModes)
	}
	v.list("discovery.dht.bootstrapNodes", len(h.BootstrapNodes), 256)
	for i, b := range h.BootstrapNodes {
		b.validate(v, fmt.Sprintf("discovery.dht.bootstrapNodes[%d]", i))
	}

	s := d.SkillCenter
	if s.Enabled && s.URL == "" {
		v.add("discovery.skillCenter.url", "is required when discovery.skillCenter.enabled is true")
	}
	if s.URL != "" {
		v.url("discovery.skillCenter.url", s.URL)
	}
	if t := s.Timeout.D(); t <= 0 || t > 10*time.Minute {
		v.add("discovery.skillCenter.timeout", "%s is out of range (more than 0, at most 10m)", s.Timeout)
	}
	if t := s.Cache.TTL.D(); s.Cache.Enabled && (t <= 0 || t > MaxCacheTTL) {
		v.add("discovery.skillCenter.cache.ttl", "%s is out of range (more than 0, at most %s)", s.Cache.TTL, MaxCacheTTL)
	}

	hc := d.HealthCheck
	v.interval("discovery.healthCheck.heartbeatInterval", hc.HeartbeatInterval)
	v.interval("discovery.healthCheck.timeout", hc.Timeout)
	if hc.Timeout > 0 && hc.Timeout < hc.HeartbeatInterval {
		v.add("discovery.healthCheck.timeout", "%s is shorter than discovery.healthCheck.heartbeatInterval %s", hc.Timeout, hc.HeartbeatInterval)
	}
	if hc.RetryCount < 0 || hc.RetryCount > 100 {
		v.add("discovery.healthCheck.retryCount", "%d is out of range (0-100)", hc.RetryCount)
	}
	if hc.UnhealthyThreshold < 1 || hc.UnhealthyThreshold > 100 {
		v.add("discovery.healthCheck.unhealthyThreshold", "%d is out of range (1-100 missed heartbeats)", hc.UnhealthyThreshold)
	}
	if hc.GossipBeatEvery < 1 || hc.GossipBeatEvery > DefaultGossipBeatEvery {
		v.add("discovery.healthCheck.gossipBeatEvery", "%d is out of range (1-%d: one heartbeat in N on gossip)", hc.GossipBeatEvery, DefaultGossipBeatEvery)
	}

	if d.Scope != "" {
		v.oneOf("discovery.scope", d.Scope, Scopes)
	}
	if d.Interface != "" {
		if len(d.Interface) > 15 || strings.ContainsFunc(d.Interface, func(r rune) bool {
			return r == '/' || unicode.IsSpace(r) || !unicode.IsPrint(r)
		}) {
			v.add("discovery.interface", "%q is not a network interface name (at most 15 printable characters, no '/' or spaces)", clip(d.Interface))
		}
	}
}

func (b BootstrapNode) validate(v *validator, f string) {
	if b.Multiaddr != "" {
		if b.Host != "" || b.Port != 0 {
			v.add(f, "give either multiaddr or host and port, not both")
			return
		}
		if _, err := b.Addr(); err != nil && !errors.Is(err, ErrNoPeerID) {
			v.add(f+".multiaddr", "%v", err)
		}
	} else {
		if b.Host == "" {
			v.add(f+".host", "is required (or give multiaddr)")
		} else if len(b.Host) > 253 || strings.ContainsAny(b.Host, "/ \t") {
			v.add(f+".host", "%q is not a host name or IP address", clip(b.Host))
		}
		v.port(f+".port", b.Port)
	}
	if b.PeerID != "" {
		if _, err := decodePeerID(b.PeerID); err != nil {
			v.add(f+".peerId", "%q is not a libp2p peer id: %v", clip(b.PeerID), err)
		}
	}
}

func (c CacheConfig) validate(v *validator) {
	if t := c.TTL.D(); t <= 0 || t > MaxCacheTTL {
		v.add("cache.ttl", "%s is out of range (more than 0, at most %s)", c.TTL, MaxCacheTTL)
	}
	if c.MaxSize < 1 || c.MaxSize > MaxCacheEntries {
		v.add("cache.maxSize", "%d is out of range (1-%d)", c.MaxSize, MaxCacheEntries)
	}
	if c.RefreshBeforeExpiry < 0 {
		v.add("cache.refreshBeforeExpiry", "%s is negative", c.RefreshBeforeExpiry)
	} else if c.TTL > 0 && c.RefreshBeforeExpiry >= c.TTL {
		v.add("cache.refreshBeforeExpiry", "%s is not shorter than cache.ttl %s", c.RefreshBeforeExpiry, c.TTL)
	}
}

func (t TrustConfig) validate(v *validator) {
	v.oneOf("trust.policy", t.Policy, Policies)
	v.list("trust.allowList", len(t.AllowList), MaxListLen)
	for i, id := range t.AllowList {
		if err := checkAgentID(id); err != nil {
			v.add(fmt.Sprintf("trust.allowList[%d]", i), "%v", err)
		}
	}
	if t.Policy == "allowlist" && len(t.AllowList) == 0 {
		v.add("trust.allowList", "is empty, so policy allowlist would admit no agent")
	}
	if t.Policy == "ca" && len(t.Roots) == 0 {
		v.add("trust.roots", "is empty; policy ca needs at least one root certificate")
	}
	for name, list := range map[string][]string{"trust.roots": t.Roots, "trust.intermediates": t.Intermediates, "trust.crls": t.CRLs} {
		for i, p := range list {
			f := fmt.Sprintf("%s[%d]", name, i)
			if strings.TrimSpace(p) == "" {
				v.add(f, "is empty; give a PEM file or a directory")
			}
			v.text(f, p)
		}
	}
	for i, s := range t.RevokedSerials {
		if s == "" || len(s) > 128 || strings.ContainsFunc(s, func(r rune) bool {
			return r != ':' && (r < '0' || r > '9') && (r < 'a' || r > 'f') && (r < 'A' || r > 'F')
		}) {
			v.add(fmt.Sprintf("trust.revokedSerials[%d]", i), "%q is not a certificate serial number in hex (colons allowed)", clip(s))
		}
	}
	if g := t.RotationGrace.D(); g < 0 || g > MaxRotationGrace {
		v.add("trust.rotationGrace", "%s is out of range (0-%s)", t.RotationGrace, MaxRotationGrace)
	}
}

func (r RegistryConfig) validate(v *validator) {
	if r.URL != "" {
		v.url("registry.url", r.URL)
	}
	v.text("registry.token", r.Token)
}

func (l LogConfig) validate(v *validator) {
	v.oneOf("log.level", l.Level, LogLevels)
	v.oneOf("log.format", l.Format, LogFormats)
}

func (v *validator) port(f string, p int) {
	if p < 1 || p > 65535 {
		v.add(f, "%d is not a port (1-65535)", p)
	}
}

func (v *validator) interval(f string, d Duration) {
	if t := d.D(); t < MinInterval || t > MaxInterval {
		v.add(f, "%s is out of range (%s-%s)", d, MinInterval, MaxInterval)
	}
}

func (v *validator) list(f string, n, max int) {
	if n > max {
		v.add(f, "has %d entries; the limit is %d", n, max)
	}
}

func (v *validator) oneOf(f, s string, allowed []string) {
	for _, a := range allowed {
		if s == a {
			return
		}
	}
	v.add(f, "%q is not one of %s", clip(s), strings.Join(allowed, ", "))
}

func (v *validator) text(f, s string) {
	if len(s) > MaxTextLen {
		v.add(f, "is %d bytes; the limit is %d", len(s), MaxTextLen)
	}
}

func (v *validator) url(f, s string) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		v.add(f, "%q is not an http:// or https:// URL", clip(s))
		return
	}
	v.text(f, s)
}

// checkAgentID accepts an RFC 4122 version-4 UUID in canonical form, the
// form of every agent_id (seed 000).
func checkAgentID(id string) error {
	if len(id) != 36 {
		return fmt.Errorf("%q is not a UUID in canonical form (36 characters)", clip(id))
	}
	u, err := uuid.Parse(id)
	if err != nil {
		return fmt.Errorf("%q is not a UUID: %v", id, err)
	}
	if u.Variant() != uuid.RFC4122 || u.Version() != 4 {
		return fmt.Errorf("%q is not an RFC 4122 version-4 UUID (agent ids are UUIDv4)", id)
	}
	return nil
}
