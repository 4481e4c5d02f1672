package node

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/view"
	"github.com/libp2p/go-libp2p/core/network"
)

// reasonOutsideInterest counts, in agentd_validation_rejects_total, a
// record fetched for a beat heard on a shard topic that has no capability
// in any joined shard.
const reasonOutsideInterest = "outside_interest"

// Scope values of Config.Scope.
const (
	// ScopeInterest: the node hears only the agents of its interest — the
	// capabilities of the agents it hosts, of its recent queries and of its
	// open watches — on their shard topics (docs/protocol.md, "Scoped
	// liveness"). Other queries go to the DHT.
	ScopeInterest = "interest"
	// ScopeFull: the node subscribes to the announce topic and hears the
	// whole network (a registry, a console of the network, a node of the
	// previous version's behaviour).
	ScopeFull = "full"
)

const (
	// shardPeerTarget is how many peers of a joined shard topic the node
	// looks for through the shard's rendezvous key when it has fewer.
	shardPeerTarget = 4
	// shardRefresh is how often a shard with enough peers is looked up
	// again, and shardRefreshPeers how many new subscribers it then
	// connects to.
	shardRefresh      = 2 * time.Minute
	shardRefreshPeers = 2
	// shardDiscoverPeers bounds the subscribers connected per discovery.
	shardDiscoverPeers = 4
	// shardDiscoverMin and shardDiscoverMax bound the backoff between
	// discoveries of one shard that found no peer.
	shardDiscoverMin = 10 * time.Second
	shardDiscoverMax = 5 * time.Minute
	// shardDiscoverParallel bounds the discoveries in flight.
	shardDiscoverParallel = 4
)

// interest tracks what a scoped node wants to hear besides the agents it
// hosts (those are read from the view each time).
type interest struct {
	mu      sync.Mutex
	queried map[string]time.Time // shard → end of interest
	watched map[string]int       // shard → open watches
	next    map[string]time.Time // shard → next rendezvous discovery
	backoff map[string]time.Duration
	sem     chan struct{}
}

func newInterest() *interest {
	return &interest{
		queried: map[string]time.Time{}, watched: map[string]int{},
		next: map[string]time.Time{}, backoff: map[string]time.Duration{},
		sem: make(chan struct{}, shardDiscoverParallel),
	}
}

// Scoped reports whether the node keeps to its interest (Config.Scope is
// ScopeInterest and gossip runs).
func (n *Node) Scoped() bool {
	return n.gsp != nil && n.cfg.Scope == ScopeInterest && !n.cfg.legacy
}

// covers reports whether the live view can answer a query for capability
// by itself: always for an unscoped node; for a scoped one when the
// capability's shard is joined and a peer of it answered a sync (or the
// node has no peer at all, so nothing else could answer either).
func (n *Node) covers(capability string) bool {
	if !n.Scoped() {
		return true
	}
	if capability == "" {
		return false
	}
	if len(n.host.Network().Peers()) == 0 {
		return true // nobody to ask: the view is all there is
	}
	return n.gsp.ShardReady(record.Shard(capability))
}

// touchInterest adds capability to the interest for Config.InterestTTL.
func (n *Node) touchInterest(capability string) {
	if !n.Scoped() || capability == "" {
		return
	}
	sh := record.Shard(capability)
	n.in.mu.Lock()
	_, had := n.in.queried[sh]
	n.in.queried[sh] = time.Now().Add(n.cfg.InterestTTL)
	n.in.mu.Unlock()
	if !had {
		n.syncInterest()
	}
}

// watchInterest holds capability's shard while a watch is open; the
// returned function releases it.
func (n *Node) watchInterest(capability string) func() {
	if !n.Scoped() || capability == "" {
		return func() {}
	}
	sh := record.Shard(capability)
	n.in.mu.Lock()
	n.in.watched[sh]++
	n.in.mu.Unlock()
	n.syncInterest()
	var once sync.Once
	return func() {
		once.Do(func() {
			n.in.mu.Lock()
			if n.in.watched[sh]--; n.in.watched[sh] <= 0 {
				delete(n.in.watched, sh)
			}
			n.in.mu.Unlock()
			// Left at the next interest tick, not at once: a watch that
			// reconnects keeps its shard.
		})
	}
}

// Subscribe returns a subscription to registry events (seed 004 watch).
// On a scoped node a watch of a capability holds that capability in the
// interest while it is open.
func (n *Node) Subscribe(f view.Filter, buf int) *view.Subscription {
	release := n.watchInterest(f.Capability)
	return n.view.SubscribeNotify(f, buf, release)
}

// inInterest reports whether a scoped node listens to one of the agent's
// shards (always true for an unscoped or bridging node).
func (n *Node) inInterest(a *record.Agent) bool {
	if !n.Scoped() || n.gsp.Bridging() {
		return true
	}
	some, _ := n.joined(a)
	return some
}

// shardsJoined reports whether every shard of a hosted record is joined.
func (n *Node) shardsJoined(sa *record.SignedAgent) bool {
	if n.gsp == nil {
		return true
	}
	_, all := n.joined(&sa.Agent)
	return all
}

// joined reports whether some and whether all of the agent's shards are
// joined. gossip must run.
func (n *Node) joined(a *record.Agent) (some, all bool) {
	all = true
	for _, sh := range a.Shards() {
		ok := n.gsp.Joined(sh)
		some = some || ok
		all = all && ok
	}
	return some, all
}

// wantShards is the shard set the node should be subscribed to: the
// shards of hosted agents (scoped or not: their heartbeats go there), and
// for a scoped node those of unexpired queries and open watches.
func (n *Node) wantShards(now time.Time) map[string]bool {
	want := map[string]bool{}
	if n.cfg.legacy {
		return want
	}
	n.mu.Lock()
	for sh := range n.hostedShardCount {
		want[sh] = true
	}
	n.mu.Unlock()
	if !n.Scoped() {
		return want
	}
	n.in.mu.Lock()
	defer n.in.mu.Unlock()
	for sh, until := range n.in.queried {
		if now.After(until) {
			delete(n.in.queried, sh)
			continue
		}
		want[sh] = true
	}
	for sh := range n.in.watched {
		want[sh] = true
	}
	return want
}

// syncInterest joins and leaves shard topics to match the interest,
// updates the rendezvous keys the DHT provides, looks for peers of new
// shards, and on a scoped node forgets the agents that left the interest.
// One call runs at a time; a call made while another runs returns at once
// and the running one goes round again, so a caller never waits for
// another (leaving a shard waits for its topic's peer watcher, which may
// be republishing a record and so calling here).
func (n *Node) syncInterest() {
	if n.gsp == nil {
		return
	}
	n.interestDirty.Store(true)
	for {
		if !n.interestMu.TryLock() {
			return // the holder sees interestDirty
		}
		for n.interestDirty.Swap(false) {
			n.syncInterestLocked()
		}
		n.interestMu.Unlock()
		if !n.interestDirty.Load() {
			return
		}
	}
}

// syncInterestLocked is one round of syncInterest; interestMu is held.
func (n *Node) syncInterestLocked() {
	if n.ctx.Err() != nil {
		return
	}
	want := n.wantShards(time.Now())
	have := map[string]bool{}
	for _, sh := range n.gsp.Shards() {
		have[sh] = true
	}
	var joined []string
	for sh := range want {
		if have[sh] {
			continue
		}
		if err := n.gsp.JoinShard(sh); err != nil {
			n.log.Warn("join shard failed", "shard", sh, "err", err)
			delete(want, sh)
			continue
		}
		joined = append(joined, sh)
	}
	left := 0
	for sh := range have {
		if !want[sh] {
			n.gsp.LeaveShard(sh)
			left++
			n.in.mu.Lock()
			delete(n.in.next, sh)
			delete(n.in.backoff, sh)
			n.in.mu.Unlock()
		}
	}
	if (len(joined) > 0 || left > 0) && n.dht != nil {
		keys := make([]record.Key, 0, len(want))
		for sh := range want {
			keys = append(keys, record.RendezvousKey(sh))
		}
		n.dht.SetRendezvous(keys)
	}
	if left > 0 && n.Scoped() && !n.gsp.Bridging() {
		if k := n.view.Prune(func(a *record.Agent) bool { return a.InShards(want) }); k > 0 {
			n.log.Debug("interest shrank", "shards_left", left, "agents_forgotten", k)
		}
	}
	for _, sh := range joined {
		n.discoverShard(sh, true)
	}
}

// discoverShard looks for subscribers of a joined shard through its
// rendezvous key and connects to those that are not yet its topic peers:
// while the topic has fewer than shardPeerTarget peers, at most once per
// backoff (unless now); otherwise once per shardRefresh, so that groups of
// subscribers that found no one of each other's at first (a topic split
// in two) merge.
func (n *Node) discoverShard(sh string, now bool) {
	if n.dht == nil {
		return
	}
	topicPeers := n.gsp.ShardPeers(sh)
	need := len(topicPeers) < shardPeerTarget
	n.in.mu.Lock()
	t := time.Now()
	if !now && t.Before(n.in.next[sh]) {
		n.in.mu.Unlock()
		return
	}
	b := n.in.backoff[sh]
	if b == 0 {
		b = shardDiscoverMin
	}
	if need {
		n.in.next[sh] = t.Add(b)
		n.in.backoff[sh] = min(2*b, shardDiscoverMax)
	} else {
		n.in.next[sh] = t.Add(shardRefresh)
	}
	n.in.mu.Unlock()
	select {
	case n.in.sem <- struct{}{}:
	default:
		return // enough in flight; the next tick tries again
	}
	want := shardDiscoverPeers
	if !need {
		want = shardRefreshPeers
	}
	n.wg.Go(func() {
		defer func() { <-n.in.sem }()
		ctx, cancel := context.WithTimeout(n.ctx, n.cfg.LookupTimeout)
		defer cancel()
		found, err := n.dht.FindPeers(ctx, record.RendezvousKey(sh), 2*shardDiscoverPeers)
		if err != nil {
			n.log.Debug("shard discovery failed", "shard", sh, "err", err)
			return
		}
		added := 0
		for _, p := range found {
			if added >= want {
				break
			}
			if slices.Contains(topicPeers, p.ID) {
				continue
			}
			if n.host.Network().Connectedness(p.ID) == network.Connected {
				added++ // connected already: its subscription is on its way
				continue
			}
			cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
			if err := n.host.Connect(cctx, p); err == nil {
				added++
			}
			ccancel()
		}
		if added > 0 {
			n.in.mu.Lock()
			n.in.backoff[sh] = shardDiscoverMin
			n.in.mu.Unlock()
		}
		n.log.Debug("shard discovery", "shard", sh, "found", len(found), "added", added)
	})
}

// interestTick expires query interest, looks for peers of the joined
// shards and retries the sync of shards no peer answered yet.
func (n *Node) interestTick() {
	n.syncInterest()
	for _, sh := range n.gsp.Shards() {
		n.discoverShard(sh, false)
		n.gsp.RetryShardSync(sh)
	}
}
