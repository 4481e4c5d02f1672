package config

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// ErrNoPeerID is returned by BootstrapNode.Addr and AddrInfo for an entry
// that names no peer id. Such entries load (the seed-001 form has only host
// and port), but libp2p authenticates every peer it dials, so they cannot be
// dialled.
var ErrNoPeerID = errors.New("bootstrap node has no peer id; libp2p authenticates every peer, so add peerId or end the multiaddr with /p2p/<peer id>")

// Addr returns the dialable multiaddr of the node, ending in /p2p/<peer id>.
// host/port entries become /ip4/, /ip6/ or /dns/ addresses over TCP. An
// entry without a peer id returns the address it has and an error wrapping
// ErrNoPeerID; a /dnsaddr/<name> entry needs none (its TXT records name
// the peers) and is returned as it is.
func (b BootstrapNode) Addr() (ma.Multiaddr, error) {
	var addr ma.Multiaddr
	if b.Multiaddr != "" {
		a, err := ma.NewMultiaddr(b.Multiaddr)
		if err != nil {
			return nil, fmt.Errorf("%q is not a multiaddr: %w", clip(b.Multiaddr), err)
		}
		addr = a
	} else {
		if b.Host == "" {
			return nil, errors.New("bootstrap node has neither multiaddr nor host")
		}
		if b.Port < 1 || b.Port > 65535 {
			return nil, fmt.Errorf("bootstrap node %s: %d is not a port (1-65535)", b.Host, b.Port)
		}
		proto := "dns"
		if ip, err := netip.ParseAddr(b.Host); err == nil {
			proto = "ip4"
			if ip.Is6() && !ip.Is4In6() {
				proto = "ip6"
			}
			b.Host = ip.Unmap().String()
		}
		a, err := ma.NewMultiaddr("/" + proto + "/" + b.Host + "/tcp/" + strconv.Itoa(b.Port))
		if err != nil {
			return nil, fmt.Errorf("bootstrap node %s:%d: %w", b.Host, b.Port, err)
		}
		addr = a
	}
	transport, id := peer.SplitAddr(addr)
	if b.PeerID != "" {
		want, err := decodePeerID(b.PeerID)
		if err != nil {
			return nil, fmt.Errorf("peerId %q: %w", clip(b.PeerID), err)
		}
		if id != "" && id != want {
			return nil, fmt.Errorf("peerId %s differs from the peer id %s in the multiaddr", want, id)
		}
		id = want
	}
	if err := CheckBootstrapShape(transport); err != nil {
		return nil, err
	}
	if id == "" {
		if len(addr) > 0 && addr[0].Code() == ma.P_DNSADDR {
			// Its TXT records name the peers (/dnsaddr/<name>).
			return addr, nil
		}
		return addr, fmt.Errorf("%s: %w", addr, ErrNoPeerID)
	}
	p2p, err := ma.NewComponent("p2p", id.String())
	if err != nil {
		return nil, fmt.Errorf("peer id %s: %w", id, err)
	}
	return transport.Encapsulate(p2p.Multiaddr()), nil
}

// AddrInfo returns the node as a libp2p peer.AddrInfo, or an error wrapping
// ErrNoPeerID when it names no peer id.
func (b BootstrapNode) AddrInfo() (peer.AddrInfo, error) {
	a, err := b.Addr()
	if err != nil {
		return peer.AddrInfo{}, err
	}
	if _, id := peer.SplitAddr(a); id == "" {
		return peer.AddrInfo{}, fmt.Errorf("%s: %w", a, ErrNoPeerID) // a /dnsaddr name: DNS names the peers
	}
	ai, err := peer.AddrInfoFromP2pAddr(a)
	if err != nil {
		return peer.AddrInfo{}, fmt.Errorf("%s: %w", a, err)
	}
	return *ai, nil
}

func decodePeerID(s string) (peer.ID, error) {
	if len(s) > 128 {
		return "", errors.New("too long")
	}
	return peer.Decode(s)
}

// ErrBootstrapShape is returned for a bootstrap address that is a multiaddr
// but not one a node can join through.
var ErrBootstrapShape = errors.New("not a bootstrap address")

// CheckBootstrapShape checks the address part of a bootstrap entry (the
// multiaddr without /p2p/<peer id>): /dnsaddr/<name> alone, or an /ip4,
// /ip6, /dns, /dns4 or /dns6 address followed by /tcp or /udp.
func CheckBootstrapShape(transport ma.Multiaddr) error {
	if len(transport) == 0 {
		return fmt.Errorf("%w: no transport address before /p2p/<peer id>", ErrBootstrapShape)
	}
	switch transport[0].Code() {
	case ma.P_DNSADDR:
		if len(transport) != 1 {
			return fmt.Errorf("%w: %s: nothing may follow /dnsaddr/<name> but /p2p/<peer id>", ErrBootstrapShape, transport)
		}
	case ma.P_IP4, ma.P_IP6, ma.P_DNS, ma.P_DNS4, ma.P_DNS6:
		if len(transport) < 2 || (transport[1].Code() != ma.P_TCP && transport[1].Code() != ma.P_UDP) {
			return fmt.Errorf("%w: %s needs /tcp or /udp after its address", ErrBootstrapShape, transport)
		}
	default:
		return fmt.Errorf("%w: %s needs an /ip4, /ip6, /dns, /dns4, /dns6 or /dnsaddr address", ErrBootstrapShape, transport)
	}
	return nil
}
