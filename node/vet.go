package node

import (
	"context"
	"net/netip"
	"sync"
	"time"

	"github.com/agentd/agentd/internal/backoff"
	"github.com/agentd/agentd/metrics"
	"github.com/agentd/agentd/view"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"
)

// Vetting: a record heard on gossip or sync enters the live view only once
// its peer (the record's peer_id) has been reached over a libp2p
// connection of its own, whose handshake proves the peer key. A peer key
// costs nothing to mint; a reachable host does, and the resource manager
// bounds the connections one address can hold. The view holds the records
// of peers not yet reached (view.Config.Vetted) and asks the vetter to
// reach them; a connection in either direction vets a peer.
const (
	vetTTL        = time.Hour        // a vetted peer stays vetted this long after its last connection
	vetMaxPeers   = 1 << 16          // vetted peers remembered
	vetQueue      = 256              // peers waiting to be reached
	vetWorkers    = 4                // dials in flight
	vetTimeout    = 10 * time.Second // one attempt to reach a peer
	vetRetryAfter = 30 * time.Second // a peer not reached is not tried again sooner…
	// …unless a record it signed after the attempt arrives (it restarted),
	// once vetRetryNews has passed since.
	vetRetryNews = time.Second
	// An attempt whose peer is not found or not reached is made again,
	// after a backoff from vetRetryBase up to vetRetryMax, for vetRetryFor
	// (gossip's validator waits 3 s for an author), while no other peer
	// waits in the queue.
	vetRetryBase = 50 * time.Millisecond
	vetRetryMax  = 800 * time.Millisecond
	vetRetryFor  = 3 * time.Second
)

// vetter reaches the peers of held records and remembers who was reached.
type vetter struct {
	n  *Node
	m  *metrics.Metrics
	q  chan peer.ID
	mu sync.Mutex
	ok map[peer.ID]vetEntry
	// tried: when each peer was last tried (reached or not), so one
	// peer's records cost one dial per vetRetryAfter.
	tried map[peer.ID]time.Time
	// waiters: channels closed when a queued attempt on the peer ends.
	waiters map[peer.ID]chan struct{}
}

type vetEntry struct {
	until  time.Time
	prefix string
}

func newVetter(n *Node) *vetter {
	return &vetter{n: n, m: n.m, q: make(chan peer.ID, vetQueue), ok: map[peer.ID]vetEntry{}, tried: map[peer.ID]time.Time{},
		waiters: map[peer.ID]chan struct{}{}}
}

// vetted reports whether p may have agents in the live view.
func (v *vetter) vetted(p string) bool {
	id, err := peer.Decode(p)
	if err != nil {
		return false
	}
	if id == v.n.host.ID() {
		return true
	}
	connected := v.n.host.Network().Connectedness(id) == network.Connected
	v.mu.Lock()
	e, ok := v.ok[id]
	v.mu.Unlock()
	now := time.Now()
	if connected {
		// Refresh the entry (and its prefix) at most twice per TTL, not on
		// every message the validator checks.
		if !ok || e.until.Sub(now) < vetTTL/2 {
			v.mark(id)
		}
		return true
	}
	return ok && now.Before(e.until)
}

// prefixOf is the address prefix p was reached at ("" when not public).
func (v *vetter) prefixOf(p string) string {
	id, err := peer.Decode(p)
	if err != nil {
		return ""
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.ok[id].prefix
}

// mark records p as vetted now, with the prefix of its connection.
func (v *vetter) mark(p peer.ID) {
	prefix := ""
	for _, c := range v.n.host.Network().ConnsToPeer(p) {
		if pf := publicPrefix(c.RemoteMultiaddr()); pf != "" {
			prefix = pf
			break
		}
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, ok := v.ok[p]; !ok && len(v.ok) >= vetMaxPeers {
		now := time.Now()
		for id, e := range v.ok {
			if now.After(e.until) {
				delete(v.ok, id)
			}
		}
		if len(v.ok) >= vetMaxPeers {
			return // full of live entries: p is vetted while connected only
		}
	}
	v.ok[p] = vetEntry{until: time.Now().Add(vetTTL), prefix: prefix}
}

// publicPrefix is the /24 (IPv4) or /48 (IPv6) of a public address, ""
// for any other address (loopback, private, documentation ranges: many
// honest agents share those, and they are not reachable from the
// internet anyway).
func publicPrefix(a ma.Multiaddr) string {
	if a == nil || !manet.IsPublicAddr(a) {
		return ""
	}
	ip, err := manet.ToIP(a)
	if err != nil {
		return ""
	}
	addr, ok := netip.AddrFromSlice(ip)
	if !ok {
		return ""
	}
	addr = addr.Unmap()
	bits := 48
	if addr.Is4() {
		bits = 24
	}
	pf, err := addr.Prefix(bits)
	if err != nil {
		return ""
	}
	return pf.String()
}

// wait reports whether p is vetted, trying to reach it first if it is not
// and it was not tried within vetRetryAfter, or was tried before issued
// (when the record that asks was signed: the peer has lived since) and
// not within vetRetryNews; it returns when the attempt ends or ctx does
// (gossip's validator, which must not forward the announcements of
// authors nobody can reach). Without the second rule a node that
// restarted within 30 s of a failed attempt (one of its old records,
// forwarded while it was down) had its new announcement ignored at once,
// and its agent waited for its first heartbeat there: 3 to 7 joins in 50
// of simnet's churn were seen everywhere only after 5 s.
func (v *vetter) wait(ctx context.Context, p peer.ID, issued time.Time) bool {
	if v.vetted(p.String()) {
		return true
	}
	done := v.enqueue(p, issued)
	if done == nil {
		return false
	}
	select {
	case <-done:
		return v.vetted(p.String())
	case <-ctx.Done():
		return false
	}
}

// request queues p to be reached (view.Config.RequestVet). It never blocks.
func (v *vetter) request(p string) {
	id, err := peer.Decode(p)
	if err != nil {
		return
	}
	v.enqueue(id, time.Time{})
}

// enqueue queues an attempt on id unless one is queued (its channel is
// returned) or one began within vetRetryAfter and, if it began before
// issued, within vetRetryNews (nil). The channel is closed when the
// attempt ends.
func (v *vetter) enqueue(id peer.ID, issued time.Time) chan struct{} {
	now := time.Now()
	v.mu.Lock()
	if w, ok := v.waiters[id]; ok {
		v.mu.Unlock()
		return w
	}
	if t, ok := v.tried[id]; ok && !retryVet(now, t, issued) {
		v.mu.Unlock()
		return nil
	}
	v.tried[id] = now
	if len(v.tried) > vetMaxPeers {
		for k, t := range v.tried {
			if now.Sub(t) >= vetRetryAfter {
				delete(v.tried, k)
			}
		}
	}
	w := make(chan struct{})
	v.waiters[id] = w
	v.mu.Unlock()
	select {
	case v.q <- id:
		return w
	default:
		v.m.Reject("view", "vet_queue_full")
		v.mu.Lock()
		delete(v.tried, id) // not tried: the next record may try it
		v.mu.Unlock()
		v.finish(id)
		return nil
	}
}

// retryVet reports whether a peer last tried at tried is tried again at
// now for a record issued then: after vetRetryAfter, or after vetRetryNews
// when the record was signed after the attempt began.
func retryVet(now, tried, issued time.Time) bool {
	since := now.Sub(tried)
	return since >= vetRetryAfter || (issued.After(tried) && since >= vetRetryNews)
}

// finish wakes the waiters of an attempt on id.
func (v *vetter) finish(id peer.ID) {
	v.mu.Lock()
	w := v.waiters[id]
	delete(v.waiters, id)
	v.mu.Unlock()
	if w != nil {
		close(w)
	}
}

// run reaches queued peers until ctx ends; the node owns the goroutines.
func (v *vetter) run(ctx context.Context, wg *sync.WaitGroup) {
	for range vetWorkers {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case p := <-v.q:
					v.reach(ctx, p)
				}
			}
		})
	}
}

// reach connects to p: by the addresses the peerstore has, else by a DHT
// lookup of the peer. A peer not reached is tried again for vetRetryFor,
// with a backoff, as long as no other peer waits: a node that joined a
// moment ago is not in anyone's routing table yet, and its announcement
// can reach a node through relays before the node can find it (a
// resent announcement is forwarded at once by the nodes that hold the
// record). Without the retries that announcement was dropped, and the
// agent waited for the next one (docs/scaling.md, "Built: re-announcements
// that are not new records").
func (v *vetter) reach(ctx context.Context, p peer.ID) {
	ctx, cancel := context.WithTimeout(ctx, vetTimeout)
	defer cancel()
	defer v.finish(p)
	h := v.n.host
	retry := backoff.Backoff{Base: vetRetryBase, Max: vetRetryMax}
	until := time.Now().Add(vetRetryFor)
	for h.Network().Connectedness(p) != network.Connected {
		ai := peer.AddrInfo{ID: p}
		if len(h.Peerstore().Addrs(p)) == 0 && v.n.dht != nil {
			if found, err := v.n.dht.FindPeer(ctx, p); err == nil {
				ai = found
			}
		}
		err := h.Connect(ctx, ai)
		if err == nil {
			break
		}
		wait := retry.Next()
		if len(v.q) > 0 || time.Now().Add(wait).After(until) || !backoff.Sleep(ctx, wait) {
			v.m.Reject("view", "vet_failed")
			v.n.log.Debug("peer of a held record not reached", "peer_id", p, "err", err)
			return
		}
	}
	v.mark(p)
	v.n.view.PeerVetted(p.String())
}

// peerDown is liveness.Hooks.Down: the agents of a peer confirmed
// unreachable leave the live view now rather than at the timeout; until
// the peer shows life, a neighbour's sync cannot bring them back
// (view.DropPeer). The peer stays vetted: after a network split heals,
// its agents return with their first heartbeat.
func (n *Node) peerDown(p peer.ID) {
	if k := n.view.DropPeer(p, view.ReasonPeerDown); k > 0 {
		n.log.Info("agents of an unreachable peer removed", "peer_id", p, "agents", k)
	}
}

// connected vets a peer that connected (network.Notifiee); the view's
// held records of that peer are admitted off the notifier's goroutine.
func (v *vetter) connected(_ network.Network, c network.Conn) {
	p := c.RemotePeer()
	v.mark(p)
	if back := v.n.view.PeerUp(p); len(back) > 0 && v.n.pl != nil {
		// Agents dropped when p was found unreachable (a split that
		// healed): ask p for their heartbeats now; a quiet host puts its
		// next one on gossip only within three intervals.
		v.n.pl.returning(p.String(), back)
	}
	if v.n.view.Pending() == 0 {
		return
	}
	v.n.mu.Lock()
	if v.n.closed || !v.n.started {
		v.n.mu.Unlock()
		return
	}
	v.n.wg.Add(1)
	v.n.mu.Unlock()
	go func() {
		defer v.n.wg.Done()
		v.n.view.PeerVetted(p.String())
	}()
}
