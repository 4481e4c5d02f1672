package lan

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/agentd/agentd/record"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// job is work for the pool: obtaining records over the network.
type job func(ctx context.Context)

// enqueue queues a job without blocking; a full queue drops it (counted
// as outcome queue_full) and returns false.
func (l *LAN) enqueue(j job) bool {
	select {
	case l.jobs <- j:
		return true
	default:
		l.count("lan", "queue_full")
		return false
	}
}

// worker runs jobs until ctx ends.
func (l *LAN) worker(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case j := <-l.jobs:
			j(ctx)
		}
	}
}

// maintain expires the tables once a second.
func (l *LAN) maintain(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			timeout := l.cfg.UDP.Timeout.D()
			l.agents.expire(now, max(timeout, l.cfg.MaxClockSkew))
			l.foreign.expire(now, max(timeout, l.cfg.MaxClockSkew))
			l.peers.expire(now, max(timeout, l.cfg.MDNS.TTL.D()*3, 2*time.Minute))
		}
	}
}

// obtain returns a verified record of agentID that want accepts (any
// record when want is nil): first from the node (Resolve: its live view,
// cache and the DHT value), then fetched from the libp2p peers seen at ip.
func (l *LAN) obtain(ctx context.Context, agentID string, ip netip.Addr, want func(*record.SignedAgent) bool) (*record.SignedAgent, error) {
	if want == nil {
		want = func(*record.SignedAgent) bool { return true }
	}
	var errs []error
	if l.d.Resolve != nil {
		sa, err := l.d.Resolve(ctx, agentID)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("resolve: %w", err))
		case sa == nil || sa.Agent.AgentID != agentID:
			errs = append(errs, errors.New("resolve: no record"))
		case !want(sa):
			errs = append(errs, errors.New("resolve: the record is older than the datagram"))
		default:
			if err := l.verify(sa, ""); err != nil {
				errs = append(errs, fmt.Errorf("resolve: %w", err))
			} else {
				return sa, nil
			}
		}
	}
	if l.d.Fetch != nil && ip.IsValid() {
		for _, p := range l.peersAt(ip) {
			if ctx.Err() != nil {
				break
			}
			recs, err := l.d.Fetch(ctx, p, agentID)
			if err != nil {
				errs = append(errs, fmt.Errorf("fetch from %s: %w", p.ID, err))
				continue
			}
			for _, sa := range recs {
				if sa == nil || sa.Agent.AgentID != agentID || !want(sa) {
					continue
				}
				if err := l.verify(sa, p.ID); err != nil {
					errs = append(errs, fmt.Errorf("fetch from %s: %w", p.ID, err))
					continue
				}
				return sa, nil
			}
		}
	}
	if len(errs) == 0 {
		return nil, fmt.Errorf("%w %s: no libp2p peer known at %s", ErrUnresolved, agentID, ip)
	}
	return nil, fmt.Errorf("%w %s: %w", ErrUnresolved, agentID, errors.Join(errs...))
}

// peersAt returns the libp2p peers known at ip: found by mDNS, or
// connected from that address. At most 8.
func (l *LAN) peersAt(ip netip.Addr) []peer.AddrInfo {
	out := l.peers.at(ip)
	if h := l.d.Host; h != nil {
		for _, c := range h.Network().Conns() {
			if cip, ok := addrIP(c.RemoteMultiaddr()); ok && cip == ip {
				p := c.RemotePeer()
				if !slices.ContainsFunc(out, func(ai peer.AddrInfo) bool { return ai.ID == p }) {
					out = append(out, peer.AddrInfo{ID: p, Addrs: []ma.Multiaddr{c.RemoteMultiaddr()}})
				}
			}
		}
	}
	if h := l.d.Host; h != nil {
		out = slices.DeleteFunc(out, func(ai peer.AddrInfo) bool { return ai.ID == h.ID() })
	}
	if len(out) > 8 {
		out = out[:8]
	}
	return out
}
