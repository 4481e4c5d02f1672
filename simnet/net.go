package simnet

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentd/agentd/trust"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
	ma "github.com/multiformats/go-multiaddr"
)

// simNet is the in-memory network: one host per virtual node over a
// peerNet (memnet.go), and links (the ability to connect) between the
// hosts that are up and on the same side of a partition. A host that goes
// down is unlinked from every other and its connections are closed, so it
// is unreachable, as a stopped process is; a restart links the same host
// again.
type simNet struct {
	seed      uint64
	latency   time.Duration
	jitter    time.Duration
	bandwidth float64
	loss      float64
	streams   atomic.Uint64 // stream halves made, for per-half loss seeds

	byPeer sync.Map // peer.ID → node index

	mu      sync.Mutex
	hosts   map[int]host.Host
	nets    map[int]*peerNet
	up      map[int]bool
	linked  map[[2]int]*memLink // a < b
	side    map[int]int         // non-nil while a partition lasts
	nLinked atomic.Int64
	alarm   *alarm // wakes the readers of every stream (memstream.go)
}

func newSimNet(s Scenario) *simNet {
	return &simNet{
		seed: s.Seed, latency: s.Latency, jitter: s.Jitter, bandwidth: s.Bandwidth, loss: s.Loss,
		hosts: map[int]host.Host{}, nets: map[int]*peerNet{}, up: map[int]bool{}, linked: map[[2]int]*memLink{},
		alarm: newAlarm(),
	}
}

// host returns node idx's host, creating it on first use.
func (n *simNet) host(idx int, id *trust.Identity) (host.Host, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if h := n.hosts[idx]; h != nil {
		return h, nil
	}
	addr, err := ma.NewMultiaddr(hostAddr(idx))
	if err != nil {
		return nil, err
	}
	h, pn, err := n.newMemHost(idx, id.PeerKey, addr)
	if err != nil {
		return nil, fmt.Errorf("host of node %d: %w", idx, err)
	}
	n.hosts[idx], n.nets[idx] = h, pn
	n.byPeer.Store(h.ID(), idx)
	return h, nil
}

// reach says whether node idx may connect to p now, and over which link.
func (n *simNet) reach(idx int, p peer.ID) (*peerNet, *memLink, bool) {
	v, ok := n.byPeer.Load(p)
	if !ok {
		return nil, nil, false
	}
	other := v.(int)
	a, b := min(idx, other), max(idx, other)
	n.mu.Lock()
	defer n.mu.Unlock()
	l, pn := n.linked[[2]int{a, b}], n.nets[other]
	if l == nil || pn == nil {
		return nil, nil, false
	}
	return pn, l, true
}

// hostAddr is node idx's address: each node gets its own /48 in the
// documentation prefix 2001:db8::/32, as agents on the internet have
// their own addresses. This matters: go-libp2p's identify service accepts
// identify pushes at 0.2/s (burst 10) per /56 and 0.5/s per /48, so
// hundreds of hosts in one subnet (mocknet's default 100::/64) lose most
// pushes, and with them the protocol updates GossipSub relies on to open
// its streams (see docs/simnet.md).
func hostAddr(idx int) string {
	return fmt.Sprintf("/ip6/2001:db8:%x::1/tcp/4242", idx&0xffff)
}

// linkLatency is the one-way latency between a and b: Latency plus a
// uniform draw in [-Jitter, +Jitter] that depends only on the seed and the
// pair, so it does not depend on the order in which links are made.
func (n *simNet) linkLatency(a, b int) time.Duration {
	if a > b {
		a, b = b, a
	}
	if n.jitter <= 0 {
		return n.latency
	}
	span := uint64(2*n.jitter) + 1
	u := mix(n.seed ^ mix(uint64(a)<<32|uint64(b)))
	return n.latency + time.Duration(u%span) - n.jitter
}

func (n *simNet) sameSideLocked(a, b int) bool {
	return n.side == nil || n.side[a] == n.side[b]
}

func (n *simNet) linkLocked(a, b int) error {
	if a > b {
		a, b = b, a
	}
	k := [2]int{a, b}
	if n.linked[k] != nil {
		return nil
	}
	if n.hosts[a] == nil || n.hosts[b] == nil {
		return fmt.Errorf("link %d-%d: no host", a, b)
	}
	l := &memLink{latency: int64(n.linkLatency(a, b))}
	if n.bandwidth > 0 {
		l.limiter = mocknet.NewRateLimiter(n.bandwidth)
	}
	n.linked[k] = l
	n.nLinked.Add(1)
	return nil
}

func (n *simNet) unlinkLocked(a, b int) {
	if a > b {
		a, b = b, a
	}
	k := [2]int{a, b}
	if n.linked[k] == nil {
		return
	}
	delete(n.linked, k)
	n.nLinked.Add(-1)
}

// attach marks idx up and links it with every up host on its side.
func (n *simNet) attach(idx int) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.hosts[idx] == nil {
		return fmt.Errorf("simnet: node %d has no host", idx)
	}
	n.up[idx] = true
	for other := range n.up {
		if other == idx || !n.sameSideLocked(idx, other) {
			continue
		}
		if err := n.linkLocked(idx, other); err != nil {
			return err
		}
	}
	return nil
}

// detach unlinks idx from everyone and closes its connections.
func (n *simNet) detach(idx int) {
	n.mu.Lock()
	h := n.hosts[idx]
	delete(n.up, idx)
	for other := range n.hosts {
		n.unlinkLocked(idx, other)
	}
	n.mu.Unlock()
	if h != nil {
		closeConns(h, nil)
	}
}

// split partitions the network: hosts on different sides are unlinked and
// their connections closed. Hosts absent from side are on side 0.
func (n *simNet) split(side map[int]int) {
	n.mu.Lock()
	n.side = side
	var cut [][2]int
	for k := range n.linked {
		if side[k[0]] != side[k[1]] {
			cut = append(cut, k)
		}
	}
	for _, k := range cut {
		n.unlinkLocked(k[0], k[1])
	}
	hosts := make(map[int]host.Host, len(n.up))
	for idx := range n.up {
		hosts[idx] = n.hosts[idx]
	}
	n.mu.Unlock()
	byPeer := map[peer.ID]int{}
	for idx, h := range hosts {
		byPeer[h.ID()] = idx
	}
	for idx, h := range hosts {
		closeConns(h, func(p peer.ID) bool {
			other, ok := byPeer[p]
			return ok && side[other] != side[idx]
		})
	}
}

// heal ends a partition: every pair of up hosts is linked again. Nothing
// is dialled; the nodes reconnect by themselves.
func (n *simNet) heal() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.side = nil
	for a := range n.up {
		for b := range n.up {
			if a < b {
				if err := n.linkLocked(a, b); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// sideOf returns the side of idx in the current partition (0 when none).
func (n *simNet) sideOf(idx int) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.side[idx]
}

func (n *simNet) partitioned() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.side != nil
}

// dropHost closes node idx's host and forgets it: a stopped node's (host
// makes a new one, same identity and address, when it restarts) or a
// retired one's.
func (n *simNet) dropHost(idx int) error {
	n.mu.Lock()
	h := n.hosts[idx]
	delete(n.hosts, idx)
	delete(n.nets, idx)
	n.mu.Unlock()
	if h == nil {
		return nil
	}
	return h.Close()
}

// close closes every host (and with it its network, connections and
// streams).
func (n *simNet) close() error {
	n.mu.Lock()
	hosts := make([]host.Host, 0, len(n.hosts))
	for _, h := range n.hosts {
		hosts = append(hosts, h)
	}
	n.mu.Unlock()
	var err error
	for _, h := range hosts {
		err = errors.Join(err, h.Close())
	}
	n.alarm.close()
	return err
}

// closeConns closes h's connections to the peers for which drop returns
// true (every connection when drop is nil).
func closeConns(h host.Host, drop func(peer.ID) bool) {
	for _, c := range h.Network().Conns() {
		if drop == nil || drop(c.RemotePeer()) {
			_ = c.Close()
		}
	}
}
