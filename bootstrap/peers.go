// Package bootstrap gets a node into the DHT: the bootstrap list (config
// entries, repeatable --bootstrap flags, a built-in list that is empty until
// public agentd nodes exist), an address book that remembers the DHT peers
// a node was connected to so it can re-bootstrap after a restart without any
// bootstrap node, and the bootstrap-node mode behind `agentd bootstrap`: a
// DHT server, circuit relay and AutoNAT server with a stable identity and no
// hosted agent.
//
// A bootstrap entry is a multiaddr in one of these forms:
//
//	/ip4/203.0.113.7/tcp/4777/p2p/12D3KooW…        an address and the peer id
//	/dns4/boot.example.org/tcp/4777/p2p/12D3KooW…   a name for the address (also /dns, /dns6)
//	/dnsaddr/bootstrap.example.org                  TXT records name the peers
//	/dnsaddr/bootstrap.example.org/p2p/12D3KooW…    the same, only this peer's records
//
// libp2p authenticates the peer id on connect, so an address entry without
// one can never be dialed safely and is skipped with a warning. A /dnsaddr
// entry needs none: as libp2p resolves it, the TXT records of
// _dnsaddr.<name> hold "dnsaddr=<multiaddr>" values, each a full address
// with its peer id or another /dnsaddr name (followed to MaxDNSDepth
// levels). An operator can so change the list without a new release. DNS
// names are resolved by List.Resolve when the node joins and whenever it
// must join again; a name that does not resolve is a warning, and the other
// entries and the address book still count.
package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/agentd/agentd/config"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
	madns "github.com/multiformats/go-multiaddr-dns"
)

// Builtin is the built-in bootstrap list. It is empty: no public agentd
// bootstrap node exists yet (docs/bootstrap.md says how to host one).
var Builtin = []string{}

// MaxAddrLen bounds one multiaddr string.
const MaxAddrLen = 1024

// MaxDNSDepth bounds how many /dnsaddr levels Resolve follows.
const MaxDNSDepth = 4

// MaxResolved bounds the addresses one DNS entry resolves to.
const MaxResolved = 100

// MaxDNSLookups bounds the DNS queries one entry may cost: a hostile zone
// could otherwise fan out 100 names per level, 4 levels deep.
const MaxDNSLookups = 32

// Errors of the bootstrap list.
var (
	// ErrNoPeerID is returned for an address entry without /p2p/<peer id>.
	ErrNoPeerID = errors.New("bootstrap entry has no /p2p/<peer id>; libp2p authenticates every peer, so it cannot be dialed (only /dnsaddr entries may leave it out)")
	// ErrBadAddr is returned for an entry that is not a usable multiaddr.
	ErrBadAddr = errors.New("bad bootstrap multiaddr")
	// ErrResolve is returned for a DNS entry that did not resolve to any
	// usable address.
	ErrResolve = errors.New("bootstrap entry did not resolve")
)

// Warning is an entry that was skipped.
type Warning struct {
	Source string // "flag", "config", "builtin" or "dns"
	Entry  string // the entry as given
	Err    error
}

func (w Warning) String() string {
	return fmt.Sprintf("%s bootstrap entry %q skipped: %v", w.Source, w.Entry, w.Err)
}

// List is a parsed bootstrap list.
type List struct {
	// Peers are the entries with a peer id; their addresses may be DNS
	// names (Resolve turns them into IP addresses).
	Peers []peer.AddrInfo
	// Names are /dnsaddr entries without a peer id.
	Names []ma.Multiaddr
}

// Empty reports whether the list has no entry.
func (l List) Empty() bool { return len(l.Peers) == 0 && len(l.Names) == 0 }

// HasDNS reports whether any entry needs a DNS resolver.
func (l List) HasDNS() bool {
	if len(l.Names) > 0 {
		return true
	}
	for _, p := range l.Peers {
		if slices.ContainsFunc(p.Addrs, isDNS) {
			return true
		}
	}
	return false
}

func isDNS(a ma.Multiaddr) bool { return len(a) > 0 && madns.Matches(a[:1]) }

// Resolve returns the list's peers with every DNS name resolved to IP
// addresses through r (nil: the system resolver), entries of one peer
// merged. A name that fails or gives no usable address is a warning; IP
// entries pass as they are, so a dead resolver costs only the DNS entries.
func (l List) Resolve(ctx context.Context, r *madns.Resolver) ([]peer.AddrInfo, []Warning) {
	if r == nil {
		r = madns.DefaultResolver
	}
	var (
		out   []peer.AddrInfo
		warns []Warning
	)
	resolve := func(a ma.Multiaddr) {
		budget := MaxDNSLookups
		addrs, err := resolveDeep(ctx, r, a, MaxDNSDepth, &budget)
		if err != nil {
			warns = append(warns, Warning{Source: "dns", Entry: a.String(), Err: fmt.Errorf("%w: %v", ErrResolve, err)})
			return
		}
		n := 0
		for _, x := range addrs {
			ai, err := checkAddr(x)
			if err != nil || isDNS(ai.Addrs[0]) {
				continue // a TXT value that is not a usable address
			}
			out = merge(out, ai)
			n++
		}
		if n == 0 {
			warns = append(warns, Warning{Source: "dns", Entry: a.String(), Err: fmt.Errorf("%w: no address with an IP, a port and a peer id among %d answers", ErrResolve, len(addrs))})
		}
	}
	for _, p := range l.Peers {
		for _, a := range p.Addrs {
			if !isDNS(a) {
				out = merge(out, peer.AddrInfo{ID: p.ID, Addrs: []ma.Multiaddr{a}})
				continue
			}
			full := Multiaddrs(peer.AddrInfo{ID: p.ID, Addrs: []ma.Multiaddr{a}})
			if len(full) == 1 {
				resolve(full[0])
			}
		}
	}
	for _, a := range l.Names {
		resolve(a)
	}
	return out, warns
}

// resolveDeep resolves DNS components until none is left, following at
// most depth levels, making at most *budget queries and keeping at most
// MaxResolved addresses.
func resolveDeep(ctx context.Context, r *madns.Resolver, a ma.Multiaddr, depth int, budget *int) ([]ma.Multiaddr, error) {
	if !madns.Matches(a) {
		return []ma.Multiaddr{a}, nil
	}
	if depth == 0 {
		return nil, fmt.Errorf("more than %d levels of /dnsaddr", MaxDNSDepth)
	}
	if *budget <= 0 {
		return nil, fmt.Errorf("more than %d DNS lookups", MaxDNSLookups)
	}
	*budget--
	next, err := r.Resolve(ctx, a)
	if err != nil {
		return nil, err
	}
	var out []ma.Multiaddr
	var firstErr error
	for _, x := range next {
		got, err := resolveDeep(ctx, r, x, depth-1, budget)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		out = append(out, got...)
		if len(out) >= MaxResolved {
			return out[:MaxResolved], nil
		}
	}
	if len(out) == 0 && firstErr != nil {
		return nil, firstErr
	}
	return out, nil
}

// ParseAddr parses one bootstrap multiaddr with a peer id (see the package
// doc for the forms).
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

// parseEntry parses one entry: an address with a peer id, or a /dnsaddr
// name without one.
func parseEntry(a ma.Multiaddr) (peer.AddrInfo, ma.Multiaddr, error) {
	if len(a) == 1 && a[0].Code() == ma.P_DNSADDR {
		return peer.AddrInfo{}, a, nil
	}
	ai, err := checkAddr(a)
	return ai, nil, err
}

func checkAddr(a ma.Multiaddr) (peer.AddrInfo, error) {
	transport, id := peer.SplitAddr(a)
	if err := config.CheckBootstrapShape(transport); err != nil {
		return peer.AddrInfo{}, fmt.Errorf("%w: %s: %v", ErrBadAddr, a, err)
	}
	if id == "" {
		return peer.AddrInfo{}, fmt.Errorf("%w: %s", ErrNoPeerID, a)
	}
	return peer.AddrInfo{ID: id, Addrs: []ma.Multiaddr{transport}}, nil
}

// merge adds ai to list, merging the addresses of a peer already there.
func merge(list []peer.AddrInfo, ai peer.AddrInfo) []peer.AddrInfo {
	i := slices.IndexFunc(list, func(x peer.AddrInfo) bool { return x.ID == ai.ID })
	if i < 0 {
		return append(list, peer.AddrInfo{ID: ai.ID, Addrs: slices.Clone(ai.Addrs)})
	}
	for _, a := range ai.Addrs {
		if !slices.ContainsFunc(list[i].Addrs, a.Equal) {
			list[i].Addrs = append(list[i].Addrs, a)
		}
	}
	return list
}

// Parse builds the bootstrap list from the flags (first), the config entries
// and the built-in list, merging entries of the same peer. A malformed flag
// is an error (it was just typed); entries without a peer id (other than
// /dnsaddr names) are skipped and reported as warnings.
func Parse(cfg config.DHTConfig, flags []string) (List, []Warning, error) {
	var (
		out   List
		warns []Warning
	)
	add := func(ai peer.AddrInfo, name ma.Multiaddr) {
		if name != nil {
			if !slices.ContainsFunc(out.Names, name.Equal) {
				out.Names = append(out.Names, name)
			}
			return
		}
		out.Peers = merge(out.Peers, ai)
	}
	for _, f := range flags {
		if len(f) > MaxAddrLen {
			return List{}, warns, fmt.Errorf("--bootstrap %q: %w: longer than %d bytes", clip(f), ErrBadAddr, MaxAddrLen)
		}
		a, err := ma.NewMultiaddr(f)
		if err != nil {
			return List{}, warns, fmt.Errorf("--bootstrap %q: %w: %v", clip(f), ErrBadAddr, err)
		}
		ai, name, err := parseEntry(a)
		if errors.Is(err, ErrNoPeerID) {
			warns = append(warns, Warning{Source: "flag", Entry: f, Err: err})
			continue
		}
		if err != nil {
			return List{}, warns, fmt.Errorf("--bootstrap %q: %w", clip(f), err)
		}
		add(ai, name)
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
		ai, name, err := parseEntry(a)
		if err != nil {
			warns = append(warns, Warning{Source: "config", Entry: entry, Err: err})
			continue
		}
		add(ai, name)
	}
	for _, b := range Builtin {
		a, err := ma.NewMultiaddr(b)
		var (
			ai   peer.AddrInfo
			name ma.Multiaddr
		)
		if err == nil {
			ai, name, err = parseEntry(a)
		}
		if err != nil {
			warns = append(warns, Warning{Source: "builtin", Entry: b, Err: err})
			continue
		}
		add(ai, name)
	}
	return out, warns, nil
}

// Peers is Parse with the warnings logged to slog.Default().
func Peers(cfg config.DHTConfig, flags []string) (List, error) {
	return PeersLog(cfg, flags, slog.Default())
}

// PeersLog is Parse with the warnings logged to log.
func PeersLog(cfg config.DHTConfig, flags []string, log *slog.Logger) (List, error) {
	l, warns, err := Parse(cfg, flags)
	LogWarnings(log, warns)
	return l, err
}

// LogWarnings logs skipped entries.
func LogWarnings(log *slog.Logger, warns []Warning) {
	for _, w := range warns {
		log.Warn("bootstrap entry skipped", "source", w.Source, "entry", clip(w.Entry), "err", w.Err)
	}
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
