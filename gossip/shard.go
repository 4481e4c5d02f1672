package gossip

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/agentd/agentd/metrics"
	"github.com/agentd/agentd/record"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/prometheus/client_golang/prometheus"
)

// Scoped liveness: a capability's agents speak on the topic of its shard
// (record.Shard), and a node subscribes to the shards of its interest.

const (
	shardPrefix = "/agentd/shard/"
	shardSuffix = "/1.0.0"

	// shardSyncQueue bounds the shard syncs waiting for a worker; a sync
	// that does not fit is dropped (the next peer to join the topic, or a
	// heartbeat of an unknown agent, makes up for it).
	shardSyncQueue = 256
	// shardSyncWorkers run shard syncs.
	shardSyncWorkers = 2
	// maxSyncShards bounds the shards of one sync request.
	maxSyncShards = 1024
	// legacyIdentifyWait bounds how long the legacy check waits for
	// identify to list a new announce-topic peer's protocols.
	legacyIdentifyWait = 5 * time.Second
)

// ErrTooManyShards is returned when Config.MaxShards are joined.
var ErrTooManyShards = errors.New("gossip: too many shards")

// ShardTopic returns the topic of a shard: "/agentd/shard/<shard>/1.0.0",
// or "" when shard is not 4 lowercase hex digits.
func ShardTopic(shard string) string {
	if !record.ValidShard(shard) {
		return ""
	}
	return shardPrefix + shard + shardSuffix
}

// ShardOfTopic returns the shard of a shard topic.
func ShardOfTopic(topic string) (string, bool) {
	if !strings.HasPrefix(topic, shardPrefix) || !strings.HasSuffix(topic, shardSuffix) {
		return "", false
	}
	s := topic[len(shardPrefix) : len(topic)-len(shardSuffix)]
	return s, record.ValidShard(s)
}

// shardSync is one queued sync with a peer: one of a shard's first
// (trail 0, of ts), or a trailing sync's first or second attempt (trail
// 1, 2, of the shards of tss).
type shardSync struct {
	p     peer.ID
	ts    *topicState
	tss   []*topicState
	trail int
}

// syncTrail is how long after a shard's first successful sync the
// trailing sync follows (TrailSyncProtocol). A record announced while
// this node joined reached the peer it then asks long before (gossip
// propagation p99 85 ms in simnet's churn, 20 ms links); an author used to
// announce it a second time half a second after the first for the same
// peers, which cost as much as the first announcement (docs/scaling.md).
const syncTrail = time.Second

// syncTrailAttempts bounds the attempts of a trailing sync: a failed one
// is tried once more, syncTrailRetry later.
const (
	syncTrailAttempts = 2
	syncTrailRetry    = 5 * time.Second
)

// syncTrailBatch: a trailing sync due within this of another's is made
// with it (shards whose first syncs ended close together share requests).
const syncTrailBatch = syncTrail / 2

// trails reports whether this node makes trailing syncs.
func (g *Gossip) trails() bool { return g.cfg.Scoped && !g.cfg.DisableSyncTrail }

// SyncTrailed reports whether an announcement of a record with these
// scenes and shards goes only to shard topics (not to the announce topic
// or a scene topic with peers: nothing syncs those) whose every known peer
// lists TrailSyncProtocol, so that each makes a trailing sync of the
// shards it joins; and whether some topic has a peer. Answers are kept per
// topic for a second, as Pullable's.
func (g *Gossip) SyncTrailed(scenes, shards []string) bool {
	return g.topicsSpeak(TrailSyncProtocol, scenes, shards, true)
}

// JoinShard joins a shard topic. A scoped node subscribes: it then hears
// the announcements, heartbeats, status changes and unregisters of every
// agent with a capability in the shard, and asks the first peers it meets
// there (Config.SyncPeers of them) for the shard's live agents. An
// unscoped node, which hears everything on the announce topic, only
// joins, to publish its own agents there while the topic has
// subscribers. Joining a shard already joined does nothing.
func (g *Gossip) JoinShard(shard string) error {
	topic := ShardTopic(shard)
	if topic == "" {
		return fmt.Errorf("gossip: invalid shard %q", record.Truncate(shard, 16))
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.closed:
		return ErrClosed
	case !g.started:
		return ErrNotStarted
	}
	if _, ok := g.shards[shard]; ok {
		return nil
	}
	if len(g.shards) >= g.cfg.MaxShards {
		return fmt.Errorf("%w: %d joined, limit %d", ErrTooManyShards, len(g.shards), g.cfg.MaxShards)
	}
	ts, err := g.joinLocked(topic, "", shard, g.cfg.Scoped)
	if err != nil {
		return err
	}
	if err := g.watchLocked(ts); err != nil {
		g.mu.Unlock()
		g.leave(ts)
		g.mu.Lock()
		return err
	}
	g.shards[shard] = ts
	g.log.Debug("shard joined", "shard", shard)
	return nil
}

// LeaveShard unsubscribes from a shard topic; leaving a shard not joined
// does nothing.
func (g *Gossip) LeaveShard(shard string) {
	g.mu.Lock()
	ts, ok := g.shards[shard]
	if ok {
		delete(g.shards, shard)
	}
	closed := g.closed
	g.mu.Unlock()
	if !ok || closed {
		return
	}
	g.leave(ts)
	g.log.Debug("shard left", "shard", shard)
}

// Shards returns the joined shards, sorted.
func (g *Gossip) Shards() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Sorted(maps.Keys(g.shards))
}

// Joined reports whether shard is joined (JoinShard), without the sorted
// copy Shards makes: a registration asks it for each of its shards.
func (g *Gossip) Joined(shard string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	_, ok := g.shards[shard]
	return ok
}

// ShardReady reports whether shard is joined and a peer of its topic has
// answered a sync since: the node's view then holds the shard's live
// agents, and a query for a capability of the shard can be answered from
// it.
func (g *Gossip) ShardReady(shard string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	ts, ok := g.shards[shard]
	return ok && ts.isReady()
}

// WaitShardReady waits until ShardReady(shard) holds or ctx ends, and
// reports which.
func (g *Gossip) WaitShardReady(ctx context.Context, shard string) bool {
	g.mu.Lock()
	ts, ok := g.shards[shard]
	g.mu.Unlock()
	if !ok {
		return false
	}
	select {
	case <-ts.ready:
		return true
	case <-ctx.Done():
		return false
	}
}

// ShardPeers returns the peers known to be in a joined shard topic.
func (g *Gossip) ShardPeers(shard string) []peer.ID {
	g.mu.Lock()
	ts := g.shards[shard]
	g.mu.Unlock()
	if ts == nil {
		return nil
	}
	return ts.t.ListPeers()
}

// Bridging reports whether a scoped node subscribes to the announce topic
// because a peer of the previous version does.
func (g *Gossip) Bridging() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.cfg.Scoped && g.announce != nil && g.announce.sub != nil
}

// watchLocked starts the peer watcher of a topic. g.mu is held.
func (g *Gossip) watchLocked(ts *topicState) error {
	eh, err := ts.t.EventHandler()
	if err != nil {
		return fmt.Errorf("gossip: watch %s: %w", ts.topic, err)
	}
	ctx, stop := context.WithCancel(g.ctx)
	ts.wstop, ts.wdone = stop, make(chan struct{})
	go func() {
		defer close(ts.wdone)
		defer eh.Cancel()
		peers := map[peer.ID]bool{}
		for {
			ev, err := eh.NextPeerEvent(ctx)
			if err != nil {
				return
			}
			switch ev.Type {
			case pubsub.PeerJoin:
				first := len(peers) == 0
				peers[ev.Peer] = true
				ts.listeners.Store(int32(len(peers)))
				g.peerJoined(ctx, ts, ev.Peer, first)
			case pubsub.PeerLeave:
				delete(peers, ev.Peer)
				ts.listeners.Store(int32(len(peers)))
				g.peerLeft(ts, ev.Peer, len(peers) == 0)
			}
		}
	}()
	return nil
}

// peerJoined handles a new subscriber of a watched topic.
func (g *Gossip) peerJoined(ctx context.Context, ts *topicState, p peer.ID, first bool) {
	g.mu.Lock()
	onPeers := g.onPeers
	g.mu.Unlock()
	if first && onPeers != nil {
		onPeers(ts.topic)
	}
	switch {
	case ts.shard != "" && g.cfg.Scoped:
		g.queueShardSync(p, ts)
	case ts.topic == AnnounceTopic && g.cfg.Scoped:
		g.wg.Go(func() { g.checkLegacy(ctx, p) })
	}
}

// peerLeft handles a subscriber leaving a watched topic.
func (g *Gossip) peerLeft(ts *topicState, p peer.ID, none bool) {
	switch {
	case ts.shard != "" && none:
		// Partitioned from the shard: sync again with the first peers
		// met after the heal.
		g.mu.Lock()
		ts.syncs = 0
		ts.trailed = false
		g.mu.Unlock()
	case ts.topic == AnnounceTopic && g.cfg.Scoped:
		g.setLegacy(p, false)
	}
}

// checkLegacy decides whether an announce-topic subscriber is a node of
// the previous version: one that serves SyncProtocol but not
// ScopedSyncProtocol. Identify may not have listed its protocols yet when
// its subscription arrives; the check then waits for identify's event
// (legacyIdentifyWait at most).
func (g *Gossip) checkLegacy(ctx context.Context, p peer.ID) {
	// Subscribe before looking, so the event cannot slip in between.
	sub, err := g.h.EventBus().Subscribe([]any{new(event.EvtPeerIdentificationCompleted), new(event.EvtPeerIdentificationFailed)})
	if err != nil {
		g.log.Debug("identify events unavailable", "err", err)
		return
	}
	defer func() { _ = sub.Close() }() // closing a bus subscription only unregisters it
	decide := func() bool {
		protos, err := g.h.Peerstore().SupportsProtocols(p, protocol.ID(SyncProtocol), protocol.ID(ScopedSyncProtocol))
		if err != nil || len(protos) == 0 {
			return false
		}
		g.setLegacy(p, !slices.Contains(protos, protocol.ID(ScopedSyncProtocol)))
		return true
	}
	if decide() {
		return
	}
	wait := time.NewTimer(legacyIdentifyWait)
	defer wait.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-wait.C:
			return // not an agentd node we know how to serve
		case e := <-sub.Out():
			switch e := e.(type) {
			case event.EvtPeerIdentificationCompleted:
				if e.Peer == p && decide() {
					return
				}
			case event.EvtPeerIdentificationFailed:
				if e.Peer == p {
					return
				}
			}
		}
	}
}

// setLegacy records whether p is a subscriber of the previous version and
// subscribes to the announce topic while one is (the bridge), so that the
// agents of old nodes stay in this node's view and its own reach them.
func (g *Gossip) setLegacy(p peer.ID, legacy bool) {
	g.mu.Lock()
	if g.closed || g.announce == nil {
		g.mu.Unlock()
		return
	}
	if legacy {
		g.legacy[p] = true
	} else {
		delete(g.legacy, p)
	}
	ts := g.announce
	switch {
	case len(g.legacy) > 0 && ts.sub == nil:
		err := g.subscribeLocked(ts)
		g.mu.Unlock()
		if err != nil {
			g.log.Warn("bridging the announce topic failed", "err", err)
			return
		}
		g.log.Info("bridging the announce topic for a peer of the previous version", "peer_id", p)
	case len(g.legacy) == 0 && ts.sub != nil:
		sub, cancel, done := ts.sub, ts.cancel, ts.done
		ts.sub = nil
		g.mu.Unlock()
		unsubscribe(sub, cancel, done)
		g.log.Info("announce topic bridge closed: no peer of the previous version is left")
	default:
		g.mu.Unlock()
	}
}

// RetryShardSync asks a peer of a joined shard topic for the shard's live
// agents if no sync of the shard has succeeded yet and none is running
// (the first ones may have been refused: rate limits, a busy peer). It
// reports whether a sync was queued.
func (g *Gossip) RetryShardSync(shard string) bool {
	g.mu.Lock()
	ts, ok := g.shards[shard]
	if !ok || ts.isReady() || ts.syncs > 0 || !g.cfg.Scoped {
		g.mu.Unlock()
		return false
	}
	g.mu.Unlock()
	peers := ts.t.ListPeers()
	if len(peers) == 0 {
		return false
	}
	g.queueShardSync(peers[rand.IntN(len(peers))], ts)
	return true
}

// queueShardSync asks p for the shard's live agents unless enough peers
// of the topic were asked already.
func (g *Gossip) queueShardSync(p peer.ID, ts *topicState) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed || ts.syncs >= g.cfg.SyncPeers {
		return
	}
	select {
	case g.syncQ <- shardSync{p: p, ts: ts}:
		ts.syncs++
	default:
	}
}

// shardSyncWorker runs queued shard syncs until Close.
func (g *Gossip) shardSyncWorker() {
	for {
		select {
		case <-g.ctx.Done():
			return
		case req := <-g.syncQ:
			if req.trail > 0 {
				g.trailSync(req)
				continue
			}
			err := g.syncFrom(g.ctx, req.p, []string{req.ts.shard})
			outcome := "ok"
			if err != nil {
				outcome = "error"
			}
			g.m.Inc(shardSyncs, outcome)
			g.mu.Lock()
			if err != nil {
				req.ts.syncs-- // let the next peer try
			} else {
				if !req.ts.isReady() {
					close(req.ts.ready) // under g.mu: closed once
				}
				if !req.ts.trailed && g.trails() {
					req.ts.trailed = true
					g.addTrailLocked(req.ts, 1, syncTrail)
				}
			}
			g.mu.Unlock()
			if err != nil {
				g.log.Debug("shard sync failed", "shard", req.ts.shard, "peer_id", req.p, "err", err)
			}
		}
	}
}

// trailSync runs one trailing sync: the shards of req.tss with req.p in
// one request. A failed one is tried once more, syncTrailRetry later (a
// responder's rate limit has room again by then), with the peers then
// found.
func (g *Gossip) trailSync(req shardSync) {
	shards := make([]string, len(req.tss))
	for i, ts := range req.tss {
		shards[i] = ts.shard
	}
	err := g.syncFrom(g.ctx, req.p, shards)
	outcome := "ok"
	if err != nil {
		outcome = "error"
	}
	g.m.Inc(trailSyncs, outcome)
	if err == nil {
		return
	}
	g.log.Debug("trailing shard sync failed", "shards", len(shards), "peer_id", req.p, "attempt", req.trail, "err", err)
	if req.trail >= syncTrailAttempts {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, ts := range req.tss {
		g.addTrailLocked(ts, req.trail+1, syncTrailRetry)
	}
}

// pendingTrail is a shard waiting for its trailing sync.
type pendingTrail struct {
	attempt int
	due     time.Time
}

// addTrailLocked schedules attempt n of ts's trailing sync after delay,
// arming a timer unless the one armed last fires within syncTrailBatch
// before the sync is due (so a node joining a thousand shards at once
// waits on one timer, not a thousand). g.mu is held.
func (g *Gossip) addTrailLocked(ts *topicState, n int, delay time.Duration) {
	if g.closed {
		return
	}
	if g.trailQ == nil {
		g.trailQ = map[*topicState]pendingTrail{}
	}
	due := time.Now().Add(delay)
	g.trailQ[ts] = pendingTrail{attempt: n, due: due}
	if !g.trailFire.After(due) && !g.trailFire.Before(due.Add(-syncTrailBatch)) {
		return // the timer armed last fires within syncTrailBatch before it and takes it (runTrails)
	}
	g.trailFire = due
	g.wg.Go(func() {
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-g.ctx.Done():
		case <-t.C:
			g.runTrails()
		}
	})
}

// runTrails queues the trailing syncs that are due, or due within
// syncTrailBatch: the shards a node joined together (a start, a heal) go
// to as few peers as cover them, each asked once for all of its shards — one
// request per shard would meet the responder's rate limit (3 at once,
// then one per 5 s per peer) that the shards' first syncs just spent. A
// shard whose topic lost its peers, was left, or finds the queue full is
// dropped: its topic's next first peer starts over (peerLeft).
func (g *Gossip) runTrails() {
	now := time.Now()
	g.mu.Lock()
	due := map[int][]*topicState{}
	for ts, pt := range g.trailQ {
		if pt.due.After(now.Add(syncTrailBatch)) {
			continue
		}
		delete(g.trailQ, ts)
		if g.shards[ts.shard] == ts && ts.listeners.Load() > 0 {
			due[pt.attempt] = append(due[pt.attempt], ts)
		}
	}
	g.mu.Unlock()
	for attempt, tss := range due {
		peersOf := make(map[*topicState][]peer.ID, len(tss))
		for _, ts := range tss {
			peersOf[ts] = ts.t.ListPeers()
		}
		for _, grp := range coverShards(peersOf) {
			g.mu.Lock()
			if !g.closed {
				select {
				case g.syncQ <- shardSync{p: grp.p, tss: grp.tss, trail: attempt}:
				default:
				}
			}
			g.mu.Unlock()
		}
	}
}

// maxCoverRounds bounds coverShards' greedy rounds.
const maxCoverRounds = 8

// ownPeers groups the shards of left by a random peer of each.
func ownPeers(left map[*topicState][]peer.ID) []trailGroup {
	byPeer := map[peer.ID][]*topicState{}
	for ts, ps := range left {
		p := ps[rand.IntN(len(ps))]
		byPeer[p] = append(byPeer[p], ts)
	}
	out := make([]trailGroup, 0, len(byPeer))
	for _, p := range slices.Sorted(maps.Keys(byPeer)) {
		out = append(out, trailGroup{p: p, tss: byShard(byPeer[p])})
	}
	return out
}

// byShard sorts tss by shard, so that a request lists its shards in one
// order whatever the map order it was gathered in.
func byShard(tss []*topicState) []*topicState {
	slices.SortFunc(tss, func(a, b *topicState) int { return strings.Compare(a.shard, b.shard) })
	return tss
}

// trailGroup is one trailing sync request: a peer and the shards asked.
type trailGroup struct {
	p   peer.ID
	tss []*topicState
}

// coverShards groups shards by a peer of each shard's topic, greedily: the
// peer on the most of the shards left (ties broken at random) takes all of
// them, until every shard with a peer has one. Each shard's topics'
// peers are given in peersOf. A round costs a pass over every peer of
// every shard left, so after maxCoverRounds the shards left (topics with
// few peers in common) each take a random peer of their own, grouped.
func coverShards(peersOf map[*topicState][]peer.ID) []trailGroup {
	left := make(map[*topicState][]peer.ID, len(peersOf))
	for ts, ps := range peersOf {
		if len(ps) > 0 {
			left[ts] = ps
		}
	}
	var out []trailGroup
	for len(left) > 0 {
		if len(out) == maxCoverRounds {
			return append(out, ownPeers(left)...)
		}
		count := map[peer.ID]int{}
		for _, ps := range left {
			for _, p := range ps {
				count[p]++
			}
		}
		var best []peer.ID
		top := 0
		for p, c := range count {
			switch {
			case c > top:
				best, top = append(best[:0], p), c
			case c == top:
				best = append(best, p)
			}
		}
		slices.Sort(best) // map order is random; the draw below is the one choice
		p := best[rand.IntN(len(best))]
		grp := trailGroup{p: p}
		for ts, ps := range left {
			if slices.Contains(ps, p) {
				grp.tss = append(grp.tss, ts)
				delete(left, ts)
			}
		}
		grp.tss = byShard(grp.tss)
		out = append(out, grp)
	}
	return out
}

// syncFrom runs one sync exchange with p for shards (nil: everything p
// holds) and hands the news to the sink.
func (g *Gossip) syncFrom(ctx context.Context, p peer.ID, shards []string) error {
	recs, err := g.fetchLive(ctx, p, shards)
	if err != nil {
		return err
	}
	g.absorb([][]LiveRecord{recs})
	return nil
}

func shardSyncs(m *metrics.Metrics) *prometheus.CounterVec { return m.ShardSyncs }

func trailSyncs(m *metrics.Metrics) *prometheus.CounterVec { return m.TrailSyncs }
