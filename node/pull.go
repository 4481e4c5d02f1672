package node

import (
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/agentd/agentd/gossip"
	"github.com/agentd/agentd/metrics"
	"github.com/agentd/agentd/record"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/prometheus/client_golang/prometheus"
)

// Heartbeat pulls (gossip.PullProtocol): when the live view has not heard
// a remote agent for view.LateAfter heartbeat intervals, the node asks the
// agent's host for its newest heartbeat, once per further interval of
// silence, before the seed's clock marks the agent UNHEALTHY or removes
// it. A host that still beats answers a beat gossip lost; one that stopped
// answers an old beat or nothing, and the clock runs on. A host that does
// not speak the protocol (an earlier version) is not asked again for
// pullUnsupportedFor; a host that cannot be reached is left to the seed's
// clock.
const (
	// pullWorkers bound the pulls in flight; pullQueue the hosts waiting.
	// A late host beyond the queue is asked at its next interval of silence.
	pullWorkers = 4
	pullQueue   = 256
	// pullUnsupportedFor is how long a host that does not speak the
	// protocol is not asked again.
	pullUnsupportedFor = 10 * time.Minute
	// maxPullUnsupported bounds that memory.
	maxPullUnsupported = 4096
)

// pullJob is one late host and its late agents, or (back) agents the
// view dropped when the host was found unreachable, asked for once it
// connects again.
type pullJob struct {
	peerID string
	agents []string
	back   bool
}

// pulls is the node's side of heartbeat pulls: the queue the live view's
// clock fills and the hosts known not to serve them.
type pulls struct {
	q           chan pullJob
	mu          sync.Mutex
	unsupported map[peer.ID]time.Time
}

func newPulls() *pulls {
	return &pulls{q: make(chan pullJob, pullQueue), unsupported: map[peer.ID]time.Time{}}
}

// late is the view's Config.Late: it queues the host.
func (pl *pulls) late(peerID string, agentIDs []string) {
	pl.queue(pullJob{peerID: peerID, agents: agentIDs})
}

// returning queues a host that connected again after it was found
// unreachable, with the agents the view dropped then.
func (pl *pulls) returning(peerID string, agentIDs []string) {
	pl.queue(pullJob{peerID: peerID, agents: agentIDs, back: true})
}

// queue adds j unless the queue is full: it never blocks the liveness
// clock or a connection's notification.
func (pl *pulls) queue(j pullJob) {
	select {
	case pl.q <- j:
	default:
	}
}

// skip reports whether p is known not to serve heartbeat pulls.
func (pl *pulls) skip(p peer.ID, now time.Time) bool {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	at, ok := pl.unsupported[p]
	if ok && now.Sub(at) > pullUnsupportedFor {
		delete(pl.unsupported, p)
		return false
	}
	return ok
}

func (pl *pulls) markUnsupported(p peer.ID, now time.Time) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if len(pl.unsupported) >= maxPullUnsupported {
		for q, at := range pl.unsupported {
			if now.Sub(at) > pullUnsupportedFor {
				delete(pl.unsupported, q)
			}
		}
		if len(pl.unsupported) >= maxPullUnsupported {
			return
		}
	}
	pl.unsupported[p] = now
}

// pullLoop serves the queue until the node stops (one of pullWorkers).
func (n *Node) pullLoop() {
	for {
		select {
		case <-n.ctx.Done():
			return
		case j := <-n.pl.q:
			n.pull(j)
		}
	}
}

// pull asks one late host for its late agents' heartbeats.
func (n *Node) pull(j pullJob) {
	p, err := peer.Decode(j.peerID)
	if err != nil || p == n.host.ID() {
		return
	}
	now := time.Now()
	if n.pl.skip(p, now) || !mayServePulls(n.host.Peerstore().GetProtocols, p) {
		n.m.Inc(pullOutcomes, "unsupported")
		return
	}
	// Only agents this node hears on gossip: one learnt from a lookup
	// outside the interest is meant to time out, not to be kept alive.
	// Agents dropped with an unreachable host were in the view: the
	// beats bring them back from the cache.
	agents := j.agents[:0:0]
	for _, id := range j.agents {
		if j.back {
			if _, ok := n.view.Get(id); !ok {
				agents = append(agents, id)
			}
		} else if a, ok := n.view.Get(id); ok && !a.Local && a.Record.Agent.PeerID == j.peerID && n.inInterest(&a.Record.Agent) {
			agents = append(agents, id)
		}
	}
	for chunk := range slices.Chunk(agents, gossip.MaxPullAgents) {
		got, err := n.gsp.Pull(n.ctx, p, chunk)
		switch {
		case err == nil && got > 0:
			n.m.Inc(pullOutcomes, "news")
		case err == nil:
			n.m.Inc(pullOutcomes, "no_news")
		case n.ctx.Err() != nil:
			return
		case errors.Is(err, gossip.ErrPullUnsupported):
			n.pl.markUnsupported(p, now)
			n.m.Inc(pullOutcomes, "unsupported")
			return
		default:
			n.m.Inc(pullOutcomes, "error")
			// The seed's clock decides. A failed pull is not a suspicion:
			// an overloaded asker's pulls time out too, and in a real-time
			// simnet run past two cores making them one evicted 24 more
			// live agents early (docs/scaling.md).
			n.log.Debug("heartbeat pull failed", "peer_id", p, "agents", len(chunk), "err", err)
			n.askLoud(p, agents)
			return
		}
	}
}

// Beat requests (protocol v1.3, docs/protocol.md "Heartbeats on
// request"): a host whose every peer could ask keeps heartbeats nobody
// asked for off gossip; a node that cannot pull a host asks it, over
// gossip, to put them on again.
const (
	// askEvery: a host is asked at most this often by one node, after
	// two failed pulls within it; while its pulls keep failing, the node
	// asks again.
	askEvery = 20 * time.Second
	// wantedFor is how long a request keeps an agent's heartbeats on
	// gossip: three requests' worth.
	wantedFor = 3 * askEvery
	// maxAsked bounds the hosts whose failed pulls are remembered.
	maxAsked = 4096
)

// askState is what a node remembers of its pulls of one host that failed:
// when the last one failed and when it last asked the host.
type askState struct{ failed, asked time.Time }

// fail records a failed pull at now (known: an earlier one is recorded)
// and reports whether to ask the host: the second failure within
// askEvery, not within askEvery of the last request.
func (st askState) fail(now time.Time, known bool) (askState, bool) {
	second := known && now.Sub(st.failed) <= askEvery
	st.failed = now
	ask := second && (st.asked.IsZero() || now.Sub(st.asked) >= askEvery)
	if ask {
		st.asked = now
	}
	return st, ask
}

// askLoud asks host p over gossip to put the heartbeats of agents (its
// agents in this node's interest, whose pull failed) on gossip: on the
// second failed pull of the host within askEvery, and at most once per
// askEvery. One failure is not enough: an overloaded asker's pulls time
// out too, and asking then would put more on gossip where the node is
// already behind. A node of an earlier version (requests off) keeps to
// the seed's clock and the host's 1-in-3 round.
func (n *Node) askLoud(p peer.ID, agents []string) {
	if !n.requests || len(agents) == 0 {
		return
	}
	now := time.Now()
	n.mu.Lock()
	st, known := n.asked[p]
	if !known && len(n.asked) >= maxAsked {
		for q, s := range n.asked {
			if now.Sub(s.failed) > askEvery && now.Sub(s.asked) >= askEvery {
				delete(n.asked, q)
			}
		}
		if len(n.asked) >= maxAsked {
			n.mu.Unlock()
			return
		}
	}
	st, ask := st.fail(now, known)
	n.asked[p] = st
	n.mu.Unlock()
	if !ask {
		return
	}
	var shards []string
	for _, id := range agents {
		if a, ok := n.view.Get(id); ok {
			shards = append(shards, a.Record.Agent.Shards()...)
		}
	}
	if len(agents) > gossip.MaxPullAgents {
		agents = agents[:gossip.MaxPullAgents]
	}
	sent, err := n.gsp.PublishWanted(n.ctx, p, agents, shards...)
	switch {
	case err != nil:
		n.log.Debug("beat request not sent", "peer_id", p, "agents", len(agents), "err", err)
	case sent:
		n.m.Inc(beatRequests, "sent")
	}
}

// onWanted is gossip's Config.OnWanted: a peer cannot pull the heartbeats
// of these agents, so those this node gossips go on gossip again — the
// next one at once (loud), then one round in GossipBeatEvery for
// wantedFor. Ids of agents this node does not gossip are ignored.
func (n *Node) onWanted(from peer.ID, agentIDs []string) {
	until := time.Now().Add(wantedFor)
	n.mu.Lock()
	took := 0
	for _, id := range agentIDs {
		if _, gossiped := n.lastBeats[id]; !gossiped {
			continue // not hosted, quiet, or not beaten yet (then loud anyway)
		}
		n.wanted[id] = until
		n.loud[id] = struct{}{}
		took++
	}
	n.mu.Unlock()
	if took > 0 {
		n.m.Inc(beatRequests, "received")
		n.log.Debug("heartbeats asked on gossip", "peer_id", from, "agents", took)
	}
}

func beatRequests(m *metrics.Metrics) *prometheus.CounterVec { return m.BeatRequests }

// mayServePulls reports whether p may serve heartbeat pulls: identify
// listed the protocol, or has listed nothing yet (never met: asking
// finds out).
func mayServePulls(protocols func(peer.ID) ([]protocol.ID, error), p peer.ID) bool {
	protos, err := protocols(p)
	return err != nil || len(protos) == 0 || slices.Contains(protos, protocol.ID(gossip.PullProtocol))
}

// latestBeats answers heartbeat pulls: the newest heartbeat published for
// each hosted agent asked for that has beaten since its record was taken.
func (n *Node) latestBeats(agentIDs []string) []record.Beat {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []record.Beat
	for _, id := range agentIDs {
		if b, ok := n.lastBeats[id]; ok {
			out = append(out, b)
		}
	}
	return out
}

// noteBeat remembers a hosted agent's newest published heartbeat (or
// status), the answer to a heartbeat pull.
func (n *Node) noteBeat(b record.Beat) {
	if b.Reason != "" {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, hosted := n.memo[b.AgentID]; hosted && b.Seq > n.lastBeats[b.AgentID].Seq {
		n.lastBeats[b.AgentID] = b
	}
}

func pullOutcomes(m *metrics.Metrics) *prometheus.CounterVec { return m.Pulls }
