package daemon

import (
	"fmt"

	"github.com/agentd/agentd/config"
	"github.com/agentd/agentd/p2p"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/relay"
	ma "github.com/multiformats/go-multiaddr"
)

// NATConfig maps the nat section onto the host's NAT traversal. relays are
// the AutoRelay candidates tried first (the bootstrap peers); relayService
// turns the circuit relay v2 service on whatever nat.relay.enabled says
// (`agentd bootstrap`).
func NATConfig(c config.NATConfig, relays []peer.AddrInfo, relayService bool) (p2p.NAT, error) {
	n := p2p.NAT{
		Reachability: c.Reachability,
		PortMapping:  c.PortMapping,
		HolePunching: c.HolePunching,
		AutoRelay:    c.AutoRelay,
		NATService:   true,
		RelayService: relayService || c.Relay.Enabled,
	}
	if len(relays) > 0 {
		n.Relays = func() []peer.AddrInfo { return relays }
	}
	for i, s := range c.Announce {
		a, err := ma.NewMultiaddr(s)
		if err != nil {
			return p2p.NAT{}, fmt.Errorf("nat.announce[%d]: %q: %w", i, s, err)
		}
		n.Announce = append(n.Announce, a)
	}
	r := c.Relay
	res := relay.Resources{
		MaxReservations:      r.MaxReservations,
		MaxReservationsPerIP: r.MaxReservationsPerIP,
		MaxCircuits:          r.MaxCircuits,
		ReservationTTL:       r.ReservationTTL.D(),
	}
	if r.ConnDuration != 0 || r.ConnData != 0 {
		res.Limit = &relay.RelayLimit{Duration: r.ConnDuration.D(), Data: int64(r.ConnData)} //nolint:gosec // validated <= 1 GiB
	}
	n.RelayResources = p2p.RelayResources(res)
	return n, nil
}
