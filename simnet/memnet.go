package simnet

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	ic "github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"
	bhost "github.com/libp2p/go-libp2p/p2p/host/basic"
	"github.com/libp2p/go-libp2p/p2p/host/eventbus"
	"github.com/libp2p/go-libp2p/p2p/host/peerstore/pstoremem"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
	ma "github.com/multiformats/go-multiaddr"
)

// The in-memory network under the simulated hosts. It does what
// go-libp2p's mocknet did for simnet — a network.Network per host, with
// connections between hosts that simNet allows to reach each other — but
// its streams carry data without a goroutine of their own: a write queues
// its bytes with their arrival time (link latency, bandwidth and loss) and
// the reader takes them when they are due. mocknet runs a goroutine, a
// timer and two pipes per stream direction to do the same, which made
// its streams the largest share of a simulated node's goroutines (46 %
// at 150 nodes) and of its stack memory, and a goroutine hand-off per
// message. Everything above the network — basic host, multistream
// negotiation, identify, the protocols — is go-libp2p's own, as before.
//
// Not modelled, as in mocknet: security handshakes, stream multiplexer
// framing and flow-control windows (each stream direction holds at most
// maxInFlight bytes in flight instead), and deadlines (SetDeadline and
// its kin are no-ops).

var (
	memConnIDs   atomic.Int64
	memStreamIDs atomic.Int64
)

// errConnClosed is returned by NewStream on a closed connection.
var errConnClosed = errors.New("simnet: connection closed")

// newMemHost creates the basic host of node idx over a fresh peerNet
// with the identity key k and the address addr.
func (n *simNet) newMemHost(idx int, k ic.PrivKey, addr ma.Multiaddr) (host.Host, *peerNet, error) {
	p, err := peer.IDFromPrivateKey(k)
	if err != nil {
		return nil, nil, err
	}
	ps, err := pstoremem.NewPeerstore()
	if err != nil {
		return nil, nil, err
	}
	ps.AddAddr(p, addr, peerstore.PermanentAddrTTL)
	if err := ps.AddPrivKey(p, k); err != nil {
		return nil, nil, errors.Join(err, ps.Close())
	}
	if err := ps.AddPubKey(p, k.GetPublic()); err != nil {
		return nil, nil, errors.Join(err, ps.Close())
	}
	bus := eventbus.NewBus()
	emitter, err := bus.Emitter(&event.EvtPeerConnectednessChanged{})
	if err != nil {
		return nil, nil, errors.Join(err, ps.Close())
	}
	pn := &peerNet{
		sn: n, idx: idx, peer: p, addr: addr, ps: ps, emitter: emitter,
		conns:  map[peer.ID]map[*memConn]struct{}{},
		notifs: map[network.Notifiee]struct{}{},
	}
	// The options mocknet gives its hosts: no negotiation timeout (there
	// is no slow network under the negotiation) and no signed peer
	// records (they would need a certified address book).
	h, err := bhost.NewHost(pn, &bhost.HostOpts{NegotiationTimeout: -1, DisableSignedPeerRecord: true, EventBus: bus})
	if err != nil {
		return nil, nil, errors.Join(err, pn.Close())
	}
	h.Start()
	return h, pn, nil
}

// memLink is what the two ends of a connection share: the link's
// latency and, when bandwidth is limited, its rate limiter.
type memLink struct {
	latency int64 // time.Duration, one way
	limiter *mocknet.RateLimiter
}

// peerNet is one host's network.Network.
type peerNet struct {
	sn      *simNet
	idx     int
	peer    peer.ID
	addr    ma.Multiaddr
	ps      peerstore.Peerstore
	emitter event.Emitter

	mu      sync.RWMutex
	conns   map[peer.ID]map[*memConn]struct{}
	handler network.StreamHandler
	closed  bool

	notifMu sync.Mutex
	notifs  map[network.Notifiee]struct{}
}

var _ network.Network = (*peerNet)(nil)

func (pn *peerNet) Peerstore() peerstore.Peerstore { return pn.ps }
func (pn *peerNet) LocalPeer() peer.ID             { return pn.peer }

// Close closes every connection, the event emitter and the peerstore.
func (pn *peerNet) Close() error {
	pn.mu.Lock()
	if pn.closed {
		pn.mu.Unlock()
		return nil
	}
	pn.closed = true
	pn.mu.Unlock()
	for _, c := range pn.allConns() {
		_ = c.Close()
	}
	return errors.Join(pn.emitter.Close(), pn.ps.Close())
}

func (pn *peerNet) allConns() []*memConn {
	pn.mu.RLock()
	defer pn.mu.RUnlock()
	var cs []*memConn
	for _, m := range pn.conns {
		for c := range m {
			cs = append(cs, c)
		}
	}
	return cs
}

// DialPeer returns a connection to p: an open one, or a new one when
// simNet says the two hosts can reach each other.
func (pn *peerNet) DialPeer(_ context.Context, p peer.ID) (network.Conn, error) {
	return pn.dial(p)
}

func (pn *peerNet) dial(p peer.ID) (*memConn, error) {
	if p == pn.peer {
		return nil, fmt.Errorf("simnet: %s dialled itself", p)
	}
	pn.mu.RLock()
	for c := range pn.conns[p] {
		pn.mu.RUnlock()
		return c, nil
	}
	closed := pn.closed
	pn.mu.RUnlock()
	if closed {
		return nil, fmt.Errorf("simnet: %s is closed", pn.peer)
	}
	remote, link, ok := pn.sn.reach(pn.idx, p)
	if !ok {
		return nil, fmt.Errorf("simnet: %s cannot reach %s", pn.peer, p)
	}
	lc := newMemConn(pn, remote, link, network.DirOutbound)
	rc := newMemConn(remote, pn, link, network.DirInbound)
	lc.remote, rc.remote = rc, lc
	if err := addConnPair(lc, rc); err != nil {
		return nil, err
	}
	// Connected notifications: the dialler's at once, the listener's
	// from its own goroutine (as mocknet and the swarm do), each under the
	// connection's notification lock so that its Disconnected comes after.
	go remote.connected(rc)
	pn.connected(lc)
	return lc, nil
}

// addConnPair registers both ends of a new connection, locking the two
// networks in index order, and takes both connections' notification
// locks (connected releases them).
func addConnPair(lc, rc *memConn) error {
	a, b := lc.net, rc.net
	if a.idx > b.idx {
		a, b = b, a
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	b.mu.Lock()
	defer b.mu.Unlock()
	if a.closed || b.closed {
		return fmt.Errorf("simnet: %s or %s is closed", a.peer, b.peer)
	}
	for _, c := range []*memConn{lc, rc} {
		m := c.net.conns[c.remotePeer]
		if m == nil {
			m = map[*memConn]struct{}{}
			c.net.conns[c.remotePeer] = m
		}
		m[c] = struct{}{}
		c.first = len(m) == 1
	}
	lc.notifLk.Lock()
	rc.notifLk.Lock()
	return nil
}

func (pn *peerNet) connected(c *memConn) {
	defer c.notifLk.Unlock()
	pn.notifyAll(func(f network.Notifiee) { f.Connected(pn, c) })
	if c.first {
		_ = pn.emitter.Emit(event.EvtPeerConnectednessChanged{Peer: c.remotePeer, Connectedness: network.Connected})
	}
}

// removeConn unregisters a closed connection and tells the notifiees,
// from a goroutine of its own as the swarm does.
func (pn *peerNet) removeConn(c *memConn) {
	pn.mu.Lock()
	m := pn.conns[c.remotePeer]
	delete(m, c)
	last := len(m) == 0
	if last {
		delete(pn.conns, c.remotePeer)
	}
	pn.mu.Unlock()
	go func() {
		c.notifLk.Lock()
		defer c.notifLk.Unlock()
		pn.notifyAll(func(f network.Notifiee) { f.Disconnected(pn, c) })
	}()
	if last {
		_ = pn.emitter.Emit(event.EvtPeerConnectednessChanged{Peer: c.remotePeer, Connectedness: network.NotConnected})
	}
}

func (pn *peerNet) Peers() []peer.ID {
	pn.mu.RLock()
	defer pn.mu.RUnlock()
	return slices.Collect(maps.Keys(pn.conns))
}

func (pn *peerNet) Conns() []network.Conn {
	cs := pn.allConns()
	out := make([]network.Conn, len(cs))
	for i, c := range cs {
		out[i] = c
	}
	return out
}

func (pn *peerNet) ConnsToPeer(p peer.ID) []network.Conn {
	pn.mu.RLock()
	defer pn.mu.RUnlock()
	m := pn.conns[p]
	if len(m) == 0 {
		return nil
	}
	out := make([]network.Conn, 0, len(m))
	for c := range m {
		out = append(out, c)
	}
	return out
}

func (pn *peerNet) Connectedness(p peer.ID) network.Connectedness {
	pn.mu.RLock()
	defer pn.mu.RUnlock()
	if len(pn.conns[p]) > 0 {
		return network.Connected
	}
	return network.NotConnected
}

// ClosePeer closes every connection to p.
func (pn *peerNet) ClosePeer(p peer.ID) error {
	for _, c := range pn.ConnsToPeer(p) {
		_ = c.Close()
	}
	return nil
}

// NewStream opens a stream to p, dialling it first when needed.
func (pn *peerNet) NewStream(ctx context.Context, p peer.ID) (network.Stream, error) {
	c, err := pn.dial(p)
	if err != nil {
		return nil, err
	}
	return c.NewStream(ctx)
}

func (pn *peerNet) SetStreamHandler(h network.StreamHandler) {
	pn.mu.Lock()
	pn.handler = h
	pn.mu.Unlock()
}

func (pn *peerNet) Listen(addrs ...ma.Multiaddr) error {
	pn.ps.AddAddrs(pn.peer, addrs, peerstore.PermanentAddrTTL)
	for _, a := range addrs {
		pn.notifyAll(func(f network.Notifiee) { f.Listen(pn, a) })
	}
	return nil
}

func (pn *peerNet) ListenAddresses() []ma.Multiaddr { return pn.ps.Addrs(pn.peer) }

func (pn *peerNet) InterfaceListenAddresses() ([]ma.Multiaddr, error) {
	return pn.ListenAddresses(), nil
}

func (pn *peerNet) CanDial(peer.ID, ma.Multiaddr) bool { return true }

func (pn *peerNet) ResourceManager() network.ResourceManager {
	return &network.NullResourceManager{}
}

func (pn *peerNet) Notify(f network.Notifiee) {
	pn.notifMu.Lock()
	pn.notifs[f] = struct{}{}
	pn.notifMu.Unlock()
}

func (pn *peerNet) StopNotify(f network.Notifiee) {
	pn.notifMu.Lock()
	delete(pn.notifs, f)
	pn.notifMu.Unlock()
}

// notifyAll calls every notifiee synchronously, as the swarm does.
func (pn *peerNet) notifyAll(f func(network.Notifiee)) {
	pn.notifMu.Lock()
	defer pn.notifMu.Unlock()
	for n := range pn.notifs {
		f(n)
	}
}

// memConn is one end of a connection.
type memConn struct {
	id         int64
	net        *peerNet
	remote     *memConn
	remotePeer peer.ID
	remoteAddr ma.Multiaddr
	remotePub  ic.PubKey
	link       *memLink
	stat       network.ConnStats
	first      bool // the first connection to remotePeer (set under net.mu)

	notifLk sync.Mutex
	closed  atomic.Bool

	mu      sync.Mutex
	streams map[*memStream]struct{}
}

var _ network.Conn = (*memConn)(nil)

func newMemConn(local, remote *peerNet, l *memLink, dir network.Direction) *memConn {
	return &memConn{
		id: memConnIDs.Add(1), net: local, remotePeer: remote.peer, remoteAddr: remote.addr,
		remotePub: remote.ps.PubKey(remote.peer), link: l,
		stat:    network.ConnStats{Stats: network.Stats{Direction: dir, Opened: time.Now()}},
		streams: map[*memStream]struct{}{},
	}
}

// Close closes both ends: every stream is reset and both networks
// forget the connection.
func (c *memConn) Close() error {
	if !c.closed.CompareAndSwap(false, true) {
		return nil
	}
	c.mu.Lock()
	streams := make([]*memStream, 0, len(c.streams))
	for s := range c.streams {
		streams = append(streams, s)
	}
	c.streams = nil
	c.mu.Unlock()
	for _, s := range streams {
		_ = s.Reset()
	}
	c.net.removeConn(c)
	return c.remote.Close()
}

func (c *memConn) CloseWithError(network.ConnErrorCode) error { return c.Close() }
func (c *memConn) IsClosed() bool                             { return c.closed.Load() }
func (c *memConn) ID() string                                 { return strconv.FormatInt(c.id, 10) }
func (c *memConn) As(any) bool                                { return false }
func (c *memConn) LocalPeer() peer.ID                         { return c.net.peer }
func (c *memConn) RemotePeer() peer.ID                        { return c.remotePeer }
func (c *memConn) RemotePublicKey() ic.PubKey                 { return c.remotePub }
func (c *memConn) LocalMultiaddr() ma.Multiaddr               { return c.net.addr }
func (c *memConn) RemoteMultiaddr() ma.Multiaddr              { return c.remoteAddr }
func (c *memConn) Stat() network.ConnStats                    { return c.stat }
func (c *memConn) Scope() network.ConnScope                   { return &network.NullScope{} }

func (c *memConn) ConnState() network.ConnectionState { return network.ConnectionState{} }

// NewStream opens a stream; the far end's handler runs on a goroutine of
// its own, as the swarm runs it.
func (c *memConn) NewStream(context.Context) (network.Stream, error) {
	local, remote := newStreamPair(c)
	if !c.addStream(local) || !c.remote.addStream(remote) {
		local.resetBoth()
		c.removeStream(local)
		return nil, errConnClosed
	}
	rn := c.remote.net
	rn.mu.RLock()
	h := rn.handler
	rn.mu.RUnlock()
	if h == nil {
		_ = remote.Reset()
	} else {
		go h(remote)
	}
	return local, nil
}

func (c *memConn) addStream(s *memStream) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.streams == nil {
		return false
	}
	c.streams[s] = struct{}{}
	return true
}

func (c *memConn) removeStream(s *memStream) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.streams, s)
}

func (c *memConn) GetStreams() []network.Stream {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]network.Stream, 0, len(c.streams))
	for s := range c.streams {
		out = append(out, s)
	}
	return out
}
