package lan

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/agentd/agentd/internal/backoff"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/discovery/mdns"
	"github.com/libp2p/go-libp2p/p2p/net/swarm"
)

// connectBackoff is how long a peer found by libp2p's mDNS is not dialled
// again after an attempt.
const connectBackoff = 30 * time.Second

// notifee receives the peers libp2p's mDNS finds. go-libp2p calls
// HandlePeerFound in a new goroutine for every response, repeatedly and
// without waiting for it, so it only records the peer and hands a dial to
// the worker pool, once per peer per connectBackoff.
type notifee struct {
	l *LAN

	mu    sync.Mutex
	tried map[peer.ID]time.Time
}

var _ mdns.Notifee = (*notifee)(nil)

// HandlePeerFound implements mdns.Notifee.
func (n *notifee) HandlePeerFound(ai peer.AddrInfo) {
	l := n.l
	h := l.d.Host
	if h == nil || ai.ID == h.ID() || ai.ID == "" {
		return
	}
	now := time.Now()
	l.peers.add(ai.ID, ai.Addrs, now)
	if h.Network().Connectedness(ai.ID) == network.Connected {
		return
	}
	n.mu.Lock()
	if t, ok := n.tried[ai.ID]; ok && now.Sub(t) < connectBackoff {
		n.mu.Unlock()
		return
	}
	if len(n.tried) >= maxPeers {
		for id, t := range n.tried {
			if now.Sub(t) >= connectBackoff {
				delete(n.tried, id)
			}
		}
		if len(n.tried) >= maxPeers {
			n.mu.Unlock()
			return
		}
	}
	n.tried[ai.ID] = now
	n.mu.Unlock()
	l.enqueue(func(ctx context.Context) { n.connect(ctx, ai) })
}

// connect dials a peer found on the LAN. Two daemons usually find each
// other in the same mDNS exchange and would dial each other at once; with
// both TCP sockets bound to the listening port (SO_REUSEPORT), that is a
// TCP simultaneous open: one connection on which both sides start the
// security handshake as the client, which fails ("unexpected
// clientHelloMsg"), and the swarm's dial back-off then kept the two apart
// for seconds (a flaky test, and a slow first contact in real LANs). So
// the peer with the greater id lets the other dial first and dials itself
// only if no connection came within simultaneousOpenGrace; a dial that
// fails is retried once, after a random pause and with the back-off
// cleared.
func (n *notifee) connect(ctx context.Context, ai peer.AddrInfo) {
	l, h := n.l, n.l.d.Host
	if h.ID() > ai.ID && !backoff.Sleep(ctx, simultaneousOpenGrace) {
		return
	}
	for attempt := 0; attempt < 2; attempt++ {
		if h.Network().Connectedness(ai.ID) == network.Connected {
			l.count(mechMDNS, "libp2p_connected")
			return
		}
		cctx, cancel := context.WithTimeout(ctx, resolveTimeout)
		err := h.Connect(cctx, ai)
		cancel()
		if err == nil {
			l.count(mechMDNS, "libp2p_connected")
			return
		}
		l.count(mechMDNS, "libp2p_connect_failed")
		l.log.Debug("cannot connect a peer found by libp2p mDNS", "peer_id", ai.ID, "attempt", attempt+1, "err", err)
		if sw, ok := h.Network().(*swarm.Swarm); ok {
			sw.Backoff().Clear(ai.ID)
		}
		if attempt == 0 && !backoff.Sleep(ctx, time.Duration(100+rand.IntN(400))*time.Millisecond) {
			return
		}
	}
}

// simultaneousOpenGrace is how long the peer with the greater id waits
// for the other to dial it before it dials (connect).
const simultaneousOpenGrace = 300 * time.Millisecond

// startLibp2pMDNS starts go-libp2p's mDNS peer discovery under agentd's
// own service name and returns it. A failure is logged and nil returned;
// the rest of the LAN code runs.
func (l *LAN) startLibp2pMDNS() mdns.Service {
	n := &notifee{l: l, tried: map[peer.ID]time.Time{}}
	svc := mdns.NewMdnsService(l.d.Host, l.cfg.Libp2pServiceName, n)
	if err := svc.Start(); err != nil {
		l.log.Warn("libp2p mDNS peer discovery did not start", "service", l.cfg.Libp2pServiceName, "err", err)
		_ = svc.Close()
		return nil
	}
	return svc
}
