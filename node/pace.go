package node

import (
	"errors"
	"hash/maphash"
	"maps"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/agentd/agentd/gossip"
	"github.com/agentd/agentd/internal/backoff"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/store"
)

// A hosted agent says it is alive once per heartbeat interval, and the
// interval is stretched so that the network's heartbeats stay within the
// budget (docs/scaling.md). The heartbeat loop spreads a round's messages
// evenly over the interval — with 10 000 hosted agents and a 100 s interval
// it sends 100 a second, not 10 000 in a burst and then nothing — and
// each agent's slot carries either a heartbeat or, when its record must be
// signed again, the re-announcement, which tells peers as much. So
// re-signing after a restart and before a record's TTL runs out share the
// heartbeat budget instead of adding bursts to it. When slots are closer
// than batchWindow, the heartbeats of a window leave together as heartbeat
// batches wherever the peers read them (gossip.PublishHeartbeats): one
// message a second per topic instead of one signed message per agent.
//
// Only the hosted agents this node gossips beat (at most MaxAgentsPerPeer,
// what each peer admits of one peer); the quiet ones beyond them are
// walked by quietLoop, which only signs their records again when due.

// beatTick is the granularity of the heartbeat loop: the agents whose slots
// fall in one tick are sent together.
const beatTick = 50 * time.Millisecond

// batchTick is the granularity when heartbeats leave in batches, a quarter
// of batchWindow: they wait for the batch anyway, and a loop waking every
// 50 ms to add a few heartbeats to it woke 20 times a second for nothing.
const batchTick = batchWindow / 4

// batchWindow is how long a heartbeat may wait to leave with others in a
// heartbeat batch (docs/protocol.md, "Heartbeat batches"): a node whose
// slots are closer than this batches them, one message per topic and
// window instead of one per agent. It is small against the 5 s interval
// and the 15 s after which a silent agent is UNHEALTHY.
const batchWindow = time.Second

// republishAtOnce is how many hosted records a topic's first peer gets
// re-announced at once; it learns the others from their heartbeats.
const republishAtOnce = 16

func (n *Node) heartbeatLoop() {
	var (
		pending []gossip.Heartbeat // heartbeats waiting to leave as batches
		flushAt time.Time          // when the oldest of them must leave
	)
	flush := func() {
		if len(pending) > 0 {
			n.publishHeartbeats(pending)
			pending = pending[:0]
		}
	}
	// wait sleeps until t, sending the pending heartbeats on the way when
	// their time comes first.
	wait := func(t time.Time) bool {
		if len(pending) > 0 && flushAt.Before(t) {
			if !n.sleepUntil(flushAt) {
				return false
			}
			flush()
		}
		return n.sleepUntil(t)
	}
	var round uint64 // heartbeat rounds, for quiet heartbeats
	for ; n.ctx.Err() == nil; round++ {
		ids := n.view.HostedIDs(false)
		interval := n.heartbeatInterval()
		start := time.Now()
		if len(ids) == 0 {
			flush()
			if !n.sleepUntil(start.Add(interval)) {
				return
			}
			continue
		}
		step := interval / time.Duration(len(ids))
		// Batch when several slots fall in one window: a node hosting one
		// agent, or a few, sends each heartbeat at its slot, alone.
		batch := step < batchWindow
		tick := beatTick
		if batch {
			tick = batchTick
		}
		for i := 0; i < len(ids); {
			if !wait(start.Add(time.Duration(i) * step)) {
				return
			}
			now := time.Now()
			for ; i < len(ids) && !start.Add(time.Duration(i)*step).After(now.Add(tick)); i++ {
				hb, ok := n.beatDue(ids[i], interval)
				switch {
				case !ok:
				case n.quiet(hb, round+uint64(i)):
				case !batch:
					n.publishHeartbeats([]gossip.Heartbeat{hb})
				default:
					if len(pending) == 0 {
						flushAt = now.Add(batchWindow)
					}
					pending = append(pending, hb)
				}
			}
			if len(pending) >= gossip.MaxBatchBeats {
				flush()
			}
		}
		if !wait(start.Add(interval)) {
			return
		}
	}
}

// quietTick is the granularity of the quiet loop: it only checks whether
// records are due to be signed again, so a wake-up a second is enough.
const quietTick = time.Second

// quietLoop keeps the quiet hosted agents' records (view.Agent.Quiet: the
// hosted agents beyond the most this node gossips) signed: it walks them
// paced like the heartbeat loop over one interval of the budget counted
// over every hosted agent (100 s for 10 000), and signs again a record
// whose TTL runs short (dueForResign) or that a restart marked stale. The
// new record goes to the store and the DHT, not to gossip. A quiet agent
// promoted to the gossiped ones leaves this loop for the heartbeat loop.
func (n *Node) quietLoop() {
	for n.ctx.Err() == nil {
		ids := n.view.HostedIDs(true)
		interval := adaptiveInterval(n.cfg.HeartbeatInterval, n.view.LocalCount(), n.cfg.HeartbeatMaxRate)
		start := time.Now()
		if len(ids) > 0 {
			step := interval / time.Duration(len(ids))
			for i := 0; i < len(ids); {
				if !n.sleepUntil(start.Add(time.Duration(i) * step)) {
					return
				}
				now := time.Now()
				for ; i < len(ids) && !start.Add(time.Duration(i)*step).After(now.Add(quietTick)); i++ {
					n.quietDue(ids[i], interval)
				}
			}
		}
		if !n.sleepUntil(start.Add(interval)) {
			return
		}
	}
}

// quietDue fills a quiet agent's slot: its record is signed again when a
// restart marked it or its TTL runs short.
//
// It runs 100 times a second on a node hosting 10 000 agents, so it reads
// the record's memo, not a snapshot of the view's (view.Get here was 4 %
// of the floor's CPU profile).
func (n *Node) quietDue(id string, interval time.Duration) {
	if !n.view.Quiet(id) {
		return // unregistered, or promoted to the heartbeat loop
	}
	n.mu.Lock()
	m, ok := n.memo[id]
	_, stale := n.stale[id]
	n.mu.Unlock()
	if !ok {
		sa, hosted := n.hostedRecord(id) // restored a moment ago: its memo is on its way
		if !hosted {
			return
		}
		m = newHostedMemo(sa)
	}
	if stale || dueForResign(time.Now(), m.issuedAt(), m.validFor(), interval) {
		n.takeStale(id)
		n.resignHosted(id)
	}
}

// quiet reports whether a heartbeat stays off gossip (quiet
// heartbeats), only where every peer on its topics serves heartbeat
// pulls, and never an agent's first since it is hosted (a registration, a
// restart) nor the first after a status or a beat request (loud). Where
// every such peer could also ask for it (gossip.Requestable: protocol
// v1.3, heartbeats on request), it stays off unless a peer asked (wanted);
// then, and where some peer could not ask, one round in
// cfg.GossipBeatEvery goes on gossip (phase: the agent's place in the
// round, so a node's agents take turns). A quiet heartbeat is kept for
// the peers to pull (noteBeat).
func (n *Node) quiet(hb gossip.Heartbeat, phase uint64) bool {
	if n.cfg.GossipBeatEvery <= 1 || n.cfg.legacy || !n.gsp.Pullable(hb.Shards...) {
		return false
	}
	id := hb.Beat.AgentID
	now := time.Now()
	n.mu.Lock()
	_, loud := n.loud[id]
	_, beaten := n.lastBeats[id]
	until, wanted := n.wanted[id]
	if wanted && !now.Before(until) {
		delete(n.wanted, id)
		wanted = false
	}
	n.mu.Unlock()
	onRound := phase%uint64(n.cfg.GossipBeatEvery) == 0
	if loud || !beaten || onRound && (wanted || !n.requests || !n.gsp.Requestable(hb.Shards...)) {
		n.mu.Lock()
		delete(n.loud, id)
		n.mu.Unlock()
		return false
	}
	n.noteBeat(hb.Beat)
	return true
}

// publishHeartbeats sends hosted agents' heartbeats: in batches where
// every peer of a topic reads them, each signed alone elsewhere.
func (n *Node) publishHeartbeats(hbs []gossip.Heartbeat) {
	for i := range hbs {
		n.noteBeat(hbs[i].Beat)
	}
	if err := n.gsp.PublishHeartbeats(n.ctx, hbs, n.signHostedBeat); err != nil && n.ctx.Err() == nil {
		n.log.Debug("publish heartbeats failed", "heartbeats", len(hbs), "err", err)
	}
}

// sleepUntil waits until t; false when the node stops.
func (n *Node) sleepUntil(t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return n.ctx.Err() == nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-n.ctx.Done():
		return false
	case <-tm.C:
		return true
	}
}

// beatDue fills one agent's heartbeat slot: the re-announcement when its
// record is due to be signed again (done here; ok is false), else the
// heartbeat to send — unless no peer listens on any of the agent's topics
// (a node alone, or whose shards no other node joined): then nothing, and
// the slot costs nothing.
//
// It runs 100 times a second on a node hosting 10 000 agents, so it reads
// the view once and takes what it can from the record's memo.
func (n *Node) beatDue(id string, interval time.Duration) (hb gossip.Heartbeat, ok bool) {
	a, ok := n.view.Get(id)
	if !ok || !a.Local {
		return hb, false
	}
	m := n.memoOf(a.Record)
	if n.takeStale(id) || dueForResign(time.Now(), m.issuedAt(), m.validFor(), interval) {
		n.resignHosted(id)
		return hb, false
	}
	if n.gsp == nil || !n.gsp.Listened(m.shards...) {
		return hb, false // nobody would hear it
	}
	return gossip.Heartbeat{Beat: n.newBeat(id, a.Status, ""), Shards: m.shards}, true
}

// shardsOf returns the shards of a hosted record, computed once per
// record (applyHosted) rather than at every heartbeat, status or
// unregister.
func (n *Node) shardsOf(sa *record.SignedAgent) []string {
	return n.memoOf(sa).shards
}

// memoOf returns what the heartbeat loop needs of a hosted record: kept
// since the view took it (applyHosted), else — a record replaced a
// moment ago — computed now.
func (n *Node) memoOf(sa *record.SignedAgent) hostedMemo {
	n.mu.Lock()
	m, ok := n.memo[sa.Agent.AgentID]
	n.mu.Unlock()
	if ok && m.rec == sa {
		return m
	}
	return newHostedMemo(sa)
}

// applyHosted records the shards of a hosted record that the view has
// just taken (a registration, an update, a restored record): the memo of
// shardsOf and the per-shard counts of wantShards, so that neither a
// heartbeat nor a change of interest walks every hosted record. With
// 112 000 hosted records an unregistration took 147 ms (p50) computing
// them all again.
func (n *Node) applyHosted(sa *record.SignedAgent) {
	m := newHostedMemo(sa)
	id := sa.Agent.AgentID
	n.mu.Lock()
	defer n.mu.Unlock()
	beat, beaten := n.lastBeats[id]
	n.dropHostedLocked(id)
	if beaten { // a new record of the same agent: its last heartbeat stands
		n.lastBeats[id] = beat
	}
	m.seq = max(n.lastSeq[id], sa.Agent.Seq)
	delete(n.lastSeq, id)
	n.memo[id] = m
	for _, s := range m.shards {
		n.hostedShardCount[s]++
	}
}

// dropHostedLocked forgets the shards of a hosted agent (n.mu held).
func (n *Node) dropHostedLocked(id string) {
	m, ok := n.memo[id]
	if !ok {
		return
	}
	delete(n.memo, id)
	delete(n.lastBeats, id)
	delete(n.loud, id)
	delete(n.wanted, id)
	n.lastSeq[id] = m.seq // the seqs used stay above it if the agent comes back
	for _, s := range m.shards {
		if n.hostedShardCount[s] <= 1 {
			delete(n.hostedShardCount, s)
		} else {
			n.hostedShardCount[s]--
		}
	}
}

// hostedMemo is what is kept of a hosted record besides the record: its
// shards and its validity window, parsed once.
type hostedMemo struct {
	rec    *record.SignedAgent
	shards []string
	issued int64  // Unix ns, 0 when issued_at does not parse (issuedAt)
	seq    uint64 // the highest seq this node used for the agent (seqLocked)
	// ttlSeconds is the record's ttl_seconds, and resent how many times
	// rec was resent (reannounceHosted): small, so that the memo, one per
	// hosted agent, stays 56 bytes.
	ttlSeconds uint32
	resent     uint8
}

// validFor is the record's time to live.
func (m hostedMemo) validFor() time.Duration { return time.Duration(m.ttlSeconds) * time.Second }

// issuedAt is the record's issue time; the zero time when it does not parse.
func (m hostedMemo) issuedAt() time.Time {
	if m.issued == 0 {
		return time.Time{}
	}
	return time.Unix(0, m.issued)
}

// unixNano is t in Unix ns, 0 for the zero time (or one outside the
// years 1678–2262 that Unix ns can hold).
func unixNano(t time.Time) int64 {
	if t.IsZero() || t.Year() < 1678 || t.Year() > 2261 {
		return 0
	}
	return t.UnixNano()
}

func newHostedMemo(sa *record.SignedAgent) hostedMemo {
	return hostedMemo{
		rec: sa, shards: sa.Agent.Shards(),
		issued: unixNano(sa.Agent.Issued()), ttlSeconds: uint32(max(0, min(sa.Agent.TTLSeconds, math.MaxUint32))),
	}
}

// dueForResign reports whether a hosted record issued at issued, valid for
// ttl, is signed again in the slot at now: a quarter of its TTL or less
// left, or its next slot (an interval on) would leave less than an
// eighth. So a record is signed again
// in the first slot past three quarters of its TTL, or in the slot before
// when the interval is so long (more than an eighth of the TTL: 100 000
// hosted agents at the budget's 1 000 s) that waiting for the next one
// would bring it too close to its expiry. Either way it has an eighth of
// its TTL or more left when it is signed again.
//
// Each re-signing is a signature, a disk write, an announcement and a DHT
// put, some 1.5 ms of CPU with one peer listening: at half the TTL, as
// until 2026-11-27, a node hosting 10 000 agents spent 0.9 % of a core on
// it, two thirds of what its heartbeats cost (docs/performance.md, "The
// DHT's upkeep"). A quarter of an hour (at the default hour) is still far
// more than an announcement needs to reach the peers, or a peer that
// missed it to fetch the record a minute before it expires
// (store.DefaultRefreshBefore); the DHT puts the new seq at once, and its
// values outlast the old record (dht.DefaultValueMaxAge).
func dueForResign(now, issued time.Time, ttl, interval time.Duration) bool {
	expires := issued.Add(ttl)
	// The next slot comes at most an interval and a tick later.
	next := now.Add(interval + batchTick)
	return !now.Before(expires.Add(-ttl/4)) || next.After(expires.Add(-ttl/8))
}

// resignHosted signs a hosted record again and announces it, then says
// again what status the agent last reported if it is not HEALTHY.
func (n *Node) resignHosted(id string) {
	unlock := n.lockAgent(id)
	defer unlock()
	sa, ok := n.hostedRecord(id)
	if !ok {
		return // unregistered meanwhile
	}
	n.resignLocked(sa)
}

// resignLocked is resignHosted with the agent's lock held.
func (n *Node) resignLocked(sa *record.SignedAgent) {
	id := sa.Agent.AgentID
	if _, err := n.resign(n.ctx, sa); errors.Is(err, store.ErrNoSpace) {
		// A full disk cannot take the new seq: announce the stored record
		// as it is (peers that hold it keep it; it is signed again at its
		// next slot with room).
		n.log.Warn("disk full: announcing the stored record without re-signing it", "agent_id", id, "err", err)
		n.announce(n.ctx, sa)
	} else if err != nil {
		if n.ctx.Err() == nil {
			n.log.Warn("re-announce failed", "agent_id", id, "err", err)
		}
		return
	}
	n.restateStatus(id)
}

// restateStatus publishes a hosted agent's status again when it is not
// HEALTHY, after its record was announced again: a peer that missed the
// record missed the status too.
func (n *Node) restateStatus(id string) {
	if a, ok := n.view.Get(id); ok && a.Status != "" && a.Status != record.StatusHealthy {
		if err := n.publishStatus(n.ctx, id, a.Status); err != nil && n.ctx.Err() == nil {
			n.log.Debug("re-publish status failed", "agent_id", id, "err", err)
		}
	}
}

// reannounceHosted announces a hosted record again for peers that missed
// it (republishLoop). The record is resent as it is (gossip.PublishResend:
// no new seq, so no signature, disk write or DHT update here, and the
// peers that hold it forward it without verifying or applying it again)
// when this node announced it since it started (a record restored from
// disk waits in n.stale: its peers may hold a tombstone over its seq), it
// has resends left (gossip.MaxResend), and every peer of its topics
// forwards resends; otherwise it is signed again, as before protocol v1.2.
func (n *Node) reannounceHosted(id string) {
	unlock := n.lockAgent(id)
	defer unlock()
	sa, ok := n.hostedRecord(id)
	if !ok {
		return // unregistered meanwhile
	}
	if k := n.nextResend(sa); k > 0 && n.gsp != nil && !n.view.Quiet(id) {
		err := n.gsp.PublishResend(n.ctx, sa, k)
		if err == nil {
			n.restateStatus(id)
			return
		}
		if !errors.Is(err, gossip.ErrNotResendable) && n.ctx.Err() == nil {
			n.log.Debug("resend failed; signing the record again", "agent_id", id, "err", err)
		}
	}
	n.resignLocked(sa)
}

// nextResend returns the resend counter for sa's next resend, and counts
// it; 0 when sa may not be resent: it is not the hosted record, it waits
// to be signed again (n.stale), or its resends are spent.
func (n *Node) nextResend(sa *record.SignedAgent) int {
	id := sa.Agent.AgentID
	n.mu.Lock()
	defer n.mu.Unlock()
	m, ok := n.memo[id]
	if _, stale := n.stale[id]; stale || !ok || m.rec == nil || m.rec.Agent.Seq != sa.Agent.Seq || int(m.resent) >= gossip.MaxResend {
		return 0
	}
	m.resent++
	n.memo[id] = m
	return int(m.resent)
}

// markStale queues hosted agents for re-signing in their next heartbeat
// slot.
func (n *Node) markStale(ids ...string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.stale) == 0 && len(ids) > 1 {
		// A start marks every hosted record at once: one allocation.
		n.stale = make(map[string]struct{}, len(ids))
	}
	for _, id := range ids {
		n.stale[id] = struct{}{}
	}
}

func (n *Node) takeStale(id string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	_, ok := n.stale[id]
	delete(n.stale, id)
	return ok
}

// Resigning returns how many hosted records wait for their slot to be
// signed and announced again (after a restart, most of them).
func (n *Node) Resigning() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.stale)
}

// republishLocals asks for the hosted records of a topic to be
// announced again (all of them for the announce topic, those with a
// capability in the shard for a shard topic). Gossip calls it when the
// topic gains its first peer: what was published before reached nobody.
// The record is resent unchanged where the topics' peers forward resends
// (reannounceHosted; protocol v1.2), else re-signed with the next seq,
// because pubsub drops a payload it has published already (message ids
// are content hashes) and peers of earlier versions would refuse a seq
// they hold as a replay. Only the first
// republishAtOnce are: the new peer learns the others from their
// heartbeats, whose unknown agents it fetches (within its quota) — a
// record fetch costs this node one signature, a re-announcement a
// signature, a disk sync and a DHT update, and a registry node hosting
// 100 000 agents would spend its budget for a quarter of an hour
// re-announcing what the peer can mostly not admit.
//
// The re-announcements are made by republishLoop, after
// republishSettle and once more after republishTrail: a joining node's
// topics gain their first peers in bursts (a peer's subscriptions arrive
// together), and one re-announcement publishes on every topic of the
// record that has peers by then — two per join, where there was one per
// topic (4.1 per registration in simnet's churn; coalesced, a node there
// sends 8.7 % fewer messages, docs/scaling.md). republishLocals itself
// returns at once: it runs on the topic's peer watcher, whose next events
// (the new peer's shard sync) waited for every re-signing and disk write.
func (n *Node) republishLocals(topic string) {
	shard, isShard := gossip.ShardOfTopic(topic)
	var ids []string
	for _, id := range n.view.HostedIDs(false) {
		sa, ok := n.hostedRecord(id)
		if !ok || (isShard && !slices.Contains(n.shardsOf(sa), shard)) {
			continue
		}
		if ids = append(ids, id); len(ids) == republishAtOnce {
			break
		}
	}
	if len(ids) == 0 {
		return
	}
	n.mu.Lock()
	for _, id := range ids {
		n.repub[id] = struct{}{}
	}
	n.mu.Unlock()
	select {
	case n.repubWake <- struct{}{}:
	default:
	}
}

// republishSettle is how long republishLoop lets a burst of first topic
// peers land before it re-announces: long beside the moment a peer's
// subscriptions take to be handled, short beside the 150 ms (p50, simnet)
// a new agent takes to be seen everywhere.
const republishSettle = 10 * time.Millisecond

// republishTrail is when an agent re-announced for first topic peers is
// announced once more: nodes that joined at the same moment as this one
// (a churn's joiners, a partition's healing) were not yet in the topic's
// mesh, or synced the shard from a peer the announcement had not reached.
// Topics that gain their first peer meanwhile wait for it. In simnet's
// churn, with no trailing announcement, one join in 50 was seen everywhere
// only after its first heartbeat (5 s).
const republishTrail = 500 * time.Millisecond

// trailless reports whether the hosted agent id can skip its trailing
// re-announcement: every peer on its shard topics makes a trailing sync
// of the shards it joins (gossip.TrailSyncProtocol, sync 1.2.0), so a
// peer that joined with this node and missed the first announcement gets
// the record from a neighbour a second after its first sync, at the cost
// of one sync answer instead of the announcement's copies at every peer
// of every topic of the record (docs/scaling.md, "Trailing shard syncs").
// A record announced on a scene topic (or on the announce topic, for a
// node of full scope or of an earlier version) keeps it: nothing syncs
// those.
func (n *Node) trailless(id string) bool {
	sa, ok := n.hostedRecord(id)
	if !ok {
		return true // unregistered meanwhile
	}
	if n.gsp == nil {
		return false
	}
	if n.gsp.SyncTrailed(sa.Agent.AllScenes(), n.shardsOf(sa)) {
		n.m.TrailsSkipped.Inc()
		return true
	}
	return false
}

// republishLoop re-announces the hosted agents republishLocals asked for:
// once after republishSettle, and once more after republishTrail.
func (n *Node) republishLoop() {
	trail := time.NewTimer(time.Hour)
	trail.Stop()
	defer trail.Stop()
	var trailing map[string]struct{} // announced once; again when trail fires
	resign := func(ids []string) bool {
		for _, id := range ids {
			if n.ctx.Err() != nil {
				return false
			}
			n.reannounceHosted(id)
		}
		return true
	}
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-n.repubWake:
			if !backoff.Sleep(n.ctx, republishSettle) {
				return
			}
			n.mu.Lock()
			ids := slices.Sorted(maps.Keys(n.repub))
			clear(n.repub)
			n.mu.Unlock()
			ids = slices.DeleteFunc(ids, func(id string) bool { _, ok := trailing[id]; return ok })
			if len(ids) == 0 {
				continue
			}
			if !resign(ids) {
				return
			}
			if len(trailing) == 0 {
				trailing = make(map[string]struct{}, len(ids))
				trail.Reset(republishTrail)
			}
			for _, id := range ids {
				trailing[id] = struct{}{}
			}
		case <-trail.C:
			ids := slices.DeleteFunc(slices.Sorted(maps.Keys(trailing)), n.trailless)
			trailing = nil
			if !resign(ids) {
				return
			}
		}
	}
}

// agentLocks serialise the changes of one hosted agent (a registration, an
// unregistration, a re-signing in the background), so that a re-signing
// never writes back the content a concurrent registration replaced.
type agentLocks [64]sync.Mutex

var agentLockSeed = maphash.MakeSeed()

func (n *Node) lockAgent(id string) (unlock func()) {
	m := &n.agentMu[maphash.String(agentLockSeed, id)%uint64(len(n.agentMu))]
	m.Lock()
	return m.Unlock
}
