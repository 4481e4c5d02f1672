package simnet

import (
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

// simNet is the in-memory network: one mocknet host per virtual node, and
// links (the ability to connect) between the hosts that are up and on the
// same side of a partition. A host that goes down is unlinked from every
// other and its connections are closed, so it is unreachable, as a
// stopped process is; a restart links the same host again (mocknet cannot
// remove a peer).
type simNet struct {
	mn        mocknet.Mocknet
	seed      uint64
	latency   time.Duration
	jitter    time.Duration
	bandwidth float64
	loss      float64
	streams   atomic.Uint64 // streams wrapped, for per-stream loss seeds

	byPeer sync.Map // peer.ID → node index

	// Stream flushers in flight, owned by the network: close resets their
	// streams and waits for them.
	flushers sync.WaitGroup
	flushMu  sync.Mutex
	flushing map[*simStream]struct{}
	// open holds the streams handed out and not yet closed or reset by
	// their users; close resets them (see close).
	open map[*simStream]struct{}

	mu      sync.Mutex
	hosts   map[int]host.Host
	up      map[int]bool
	linked  map[[2]int]bool // a < b
	side    map[int]int     // non-nil while a partition lasts
	nLinked atomic.Int64
}

func newSimNet(s Scenario) *simNet {
	mn := mocknet.New()
	// Latency is applied by the stream wrapper (see delayedStream), which
	// keeps many messages in flight; mocknet would hold each write of 256
	// bytes or more until the previous one arrived. Bandwidth stays with
	// mocknet's per-link rate limiter.
	mn.SetLinkDefaults(mocknet.LinkOptions{Bandwidth: s.Bandwidth})
	return &simNet{
		mn: mn, seed: s.Seed, latency: s.Latency, jitter: s.Jitter, bandwidth: s.Bandwidth, loss: s.Loss,
		hosts: map[int]host.Host{}, up: map[int]bool{}, linked: map[[2]int]bool{},
		flushing: map[*simStream]struct{}{}, open: map[*simStream]struct{}{},
	}
}

// host returns node idx's mocknet host, creating it on first use.
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
	h, err := n.mn.AddPeer(id.PeerKey, addr)
	if err != nil {
		return nil, fmt.Errorf("add mocknet peer %d: %w", idx, err)
	}
	n.hosts[idx] = h
	n.byPeer.Store(h.ID(), idx)
	return h, nil
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
	if n.linked[k] {
		return nil
	}
	l, err := n.mn.LinkPeers(n.hosts[a].ID(), n.hosts[b].ID())
	if err != nil {
		return fmt.Errorf("link %d-%d: %w", a, b, err)
	}
	l.SetOptions(mocknet.LinkOptions{Bandwidth: n.bandwidth})
	n.linked[k] = true
	n.nLinked.Add(1)
	return nil
}

func (n *simNet) unlinkLocked(a, b int) {
	if a > b {
		a, b = b, a
	}
	k := [2]int{a, b}
	if !n.linked[k] {
		return
	}
	delete(n.linked, k)
	n.nLinked.Add(-1)
	// The only error is "no link", which the map rules out.
	_ = n.mn.UnlinkPeers(n.hosts[a].ID(), n.hosts[b].ID())
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

// latencyTo returns the one-way latency from node idx to peer p (0 for a
// peer outside the simulation).
func (n *simNet) latencyTo(idx int, p peer.ID) time.Duration {
	v, ok := n.byPeer.Load(p)
	if !ok {
		return 0
	}
	return n.linkLatency(idx, v.(int))
}

// closeHost closes the host of a node that will never come back.
func (n *simNet) closeHost(idx int) error {
	n.mu.Lock()
	h := n.hosts[idx]
	n.mu.Unlock()
	if h == nil {
		return nil
	}
	return h.Close()
}

func (n *simNet) track(s *simStream) {
	n.flushMu.Lock()
	defer n.flushMu.Unlock()
	n.open[s] = struct{}{}
}

func (n *simNet) untrack(s *simStream) {
	n.flushMu.Lock()
	defer n.flushMu.Unlock()
	delete(n.open, s)
}

func (n *simNet) flushStart(s *simStream) {
	n.flushMu.Lock()
	defer n.flushMu.Unlock()
	n.flushers.Add(1)
	n.flushing[s] = struct{}{}
}

func (n *simNet) flushDone(s *simStream) {
	n.flushMu.Lock()
	defer n.flushMu.Unlock()
	delete(n.flushing, s)
	n.flushers.Done()
}

// close closes every host, which resets the streams of their connections,
// then resets every stream still open or flushing, and waits for the
// flushers. The second step is needed because mocknet adds a new stream
// to its connection after starting the far end: a connection that closes
// in between leaves the stream off its list, where nothing resets it, and
// its goroutine (and any write on it) would wait forever.
func (n *simNet) close() error {
	err := n.mn.Close()
	n.flushMu.Lock()
	stuck := make([]*simStream, 0, len(n.flushing)+len(n.open))
	for s := range n.flushing {
		stuck = append(stuck, s)
	}
	for s := range n.open {
		if _, ok := n.flushing[s]; !ok {
			stuck = append(stuck, s)
		}
	}
	n.flushMu.Unlock()
	for _, s := range stuck {
		s.abort()
	}
	n.flushers.Wait()
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
