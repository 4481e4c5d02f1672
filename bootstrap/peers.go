// Package bootstrap gets a node into the DHT: the bootstrap list (config
// entries, repeatable --bootstrap flags, a built-in list that is empty until
// public agentd nodes exist), an address book that remembers the DHT peers
// a node was connected to so it can re-bootstrap after a restart without any
// bootstrap node, and the bootstrap-node mode behind `agentd bootstrap`: a
// DHT server with a stable identity and no hosted agent.
//
// Bootstrap entries are DNS-free: a multiaddr with an IP address, a
// transport and the peer id, e.g.
// /ip4/203.0.113.7/tcp/4777/p2p/12D3KooW…. libp2p authenticates the peer id
// on connect, so an entry without one can never be dialed safely and is
// skipped with a warning; names (/dns, /dns4, /dns6, /dnsaddr) would make
// joining depend on a resolver that may be absent, censored or poisoned,
// and are refused.
package bootstrap

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/agentd/agentd/config"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// Builtin is the built-in bootstrap list. It is empty: no public agentd
// bootstrap node exists yet (docs/bootstrap.md says how to host one).
var Builtin = []string{}

// MaxAddrLen bounds one multiaddr string.
const MaxAddrLen = 1024

// Errors of the bootstrap list.
var (
	// ErrNoPeerID is returned for an entry without /p2p/<peer id>.
	ErrNoPeerID = errors.New("bootstrap entry has no /p2p/<peer id>; libp2p authenticates every peer, so it cannot be dialed")
	// ErrDNS is returned for an entry that needs a DNS resolver.
	ErrDNS = errors.New("bootstrap entry uses a DNS name; use an /ip4 or /ip6 address (bootstrap must not depend on DNS)")
	// ErrBadAddr is returned for an entry that is not a usable multiaddr.
	ErrBadAddr = errors.New("bad bootstrap multiaddr")
)

// Warning is an entry that was skipped.
type Warning struct {
	Source string // "flag", "config" or "builtin"
	Entry  string // the entry as given
	Err    error
}

func (w Warning) String() string {
	return fmt.Sprintf("%s bootstrap entry %q skipped: %v", w.Source, w.Entry, w.Err)
}

// ParseAddr parses one bootstrap multiaddr: an /ip4 or /ip6 address, a
// transport, and /p2p/<peer id> at the end.
func ParseAddr(s string) (peer.AddrInfo, error) {
	if len(s) > MaxAddrLen {
		return peer.AddrInfo{}, fmt.Errorf("%w: longer than %d bytes", ErrBadAddr, MaxAddrLen)
	}
	a, err := ma.NewMultiaddr(s)
	if err != nil {
		return peer.AddrInfo{}, fmt.Errorf("%w: %q: %v", ErrBadAddr, clip(s), err)
	}
	return checkAddr(a)
}

func checkAddr(a ma.Multiaddr) (peer.AddrInfo, error) {
	hasIP, hasPort := false, false
	for _, c := range a {
		switch c.Protocol().Code {
		case ma.P_DNS, ma.P_DNS4, ma.P_DNS6, ma.P_DNSADDR:
			return peer.AddrInfo{}, fmt.Errorf("%w: %s", ErrDNS, a)
		case ma.P_IP4, ma.P_IP6:
			hasIP = true
		case ma.P_TCP, ma.P_UDP:
			hasPort = hasIP
		}
	}
	transport, id := peer.SplitAddr(a)
	if id == "" {
		return peer.AddrInfo{}, fmt.Errorf("%w: %s", ErrNoPeerID, a)
	}
	if len(transport) == 0 || !hasIP || !hasPort {
		return peer.AddrInfo{}, fmt.Errorf("%w: %s needs an /ip4 or /ip6 address followed by /tcp or /udp", ErrBadAddr, a)
	}
	return peer.AddrInfo{ID: id, Addrs: []ma.Multiaddr{transport}}, nil
}

// Parse builds the bootstrap list from the flags (first), the config entries
// and the built-in list, merging entries of the same peer. A malformed flag
// is an error (it was just typed); entries without a peer id, or naming a
// DNS host, are skipped and reported as warnings.
func Parse(cfg config.DHTConfig, flags []string) ([]peer.AddrInfo, []Warning, error) {
	var (
		out   []peer.AddrInfo
		warns []Warning
	)
	add := func(ai peer.AddrInfo) {
		i := slices.IndexFunc(out, func(x peer.AddrInfo) bool { return x.ID == ai.ID })
		if i < 0 {
			out = append(out, ai)
			return
		}
		for _, a := range ai.Addrs {
			if !slices.ContainsFunc(out[i].Addrs, a.Equal) {
				out[i].Addrs = append(out[i].Addrs, a)
			}
		}
	}
	for _, f := range flags {
		ai, err := ParseAddr(f)
		if errors.Is(err, ErrNoPeerID) {
			warns = append(warns, Warning{Source: "flag", Entry: f, Err: err})
			continue
		}
		if err != nil {
			return nil, warns, fmt.Errorf("--bootstrap %q: %w", clip(f), err)
		}
		add(ai)
	}
	for i, n := range cfg.BootstrapNodes {
		entry := n.Multiaddr
		if entry == "" {
			entry = fmt.Sprintf("%s:%d", n.Host, n.Port)
		}
		a, err := n.Addr()
		if err != nil {
			if errors.Is(err, config.ErrNoPeerID) {
				err = fmt.Errorf("%w (bootstrapNodes[%d])", ErrNoPeerID, i)
			}
			warns = append(warns, Warning{Source: "config", Entry: entry, Err: err})
			continue
		}
		ai, err := checkAddr(a)
		if err != nil {
			warns = append(warns, Warning{Source: "config", Entry: entry, Err: err})
			continue
		}
		add(ai)
	}
	for _, b := range Builtin {
		ai, err := ParseAddr(b)
		if err != nil {
			warns = append(warns, Warning{Source: "builtin", Entry: b, Err: err})
			continue
		}
		add(ai)
	}
	return out, warns, nil
}

// Peers is Parse with the warnings logged to slog.Default().
func Peers(cfg config.DHTConfig, flags []string) ([]peer.AddrInfo, error) {
	return PeersLog(cfg, flags, slog.Default())
}

// PeersLog is Parse with the warnings logged to log.
func PeersLog(cfg config.DHTConfig, flags []string, log *slog.Logger) ([]peer.AddrInfo, error) {
	peers, warns, err := Parse(cfg, flags)
	for _, w := range warns {
		log.Warn("bootstrap entry skipped", "source", w.Source, "entry", clip(w.Entry), "err", w.Err)
	}
	return peers, err
}

// Multiaddrs returns the full multiaddrs (.../p2p/<id>) of an AddrInfo.
func Multiaddrs(ai peer.AddrInfo) []ma.Multiaddr {
	out, err := peer.AddrInfoToP2pAddrs(&ai)
	if err != nil {
		return nil
	}
	return out
}

func clip(s string) string {
	if len(s) > 120 {
		return s[:120] + "…"
	}
	return s
}
