package node

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/agentd/agentd/gossip"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/view"
)

// mutedHost loses, while mute is set, everything its GossipSub sends:
// a peer whose heartbeats the network drops (a full queue, a mesh peer
// that withholds them), while the peer itself is fine.
type mutedHost struct {
	host.Host
	mute *atomic.Bool
}

func (h mutedHost) NewStream(ctx context.Context, p peer.ID, pids ...protocol.ID) (network.Stream, error) {
	s, err := h.Host.NewStream(ctx, p, pids...)
	if err != nil || !strings.HasPrefix(string(s.Protocol()), "/meshsub/") {
		return s, err
	}
	return mutedStream{Stream: s, mute: h.mute}, nil
}

type mutedStream struct {
	network.Stream
	mute *atomic.Bool
}

func (s mutedStream) Write(b []byte) (int, error) {
	if s.mute.Load() {
		return len(b), nil
	}
	return s.Stream.Write(b)
}

// healthyAll returns a check, for a waitFor condition, that fails the
// test once the subscription has carried agentID's UNHEALTHY status or
// removal.
func healthyAll(t *testing.T, sub *view.Subscription, agentID, what string) func() {
	return eventCheck(t, sub, agentID, what, func(e view.Event) bool {
		return e.Type == view.EventDeregistered || (e.Type == view.EventStatus && e.Status != record.StatusHealthy)
	})
}

// keptAll returns a check, for a waitFor condition, that fails the test
// once the subscription has carried agentID's removal.
func keptAll(t *testing.T, sub *view.Subscription, agentID, what string) func() {
	return eventCheck(t, sub, agentID, what, func(e view.Event) bool { return e.Type == view.EventDeregistered })
}

// eventCheck returns a check that drains the subscription and fails the
// test at the first event of agentID that bad reports.
func eventCheck(t *testing.T, sub *view.Subscription, agentID, what string, bad func(view.Event) bool) func() {
	return func() {
		t.Helper()
		for {
			select {
			case e := <-sub.C():
				if e.AgentID == agentID && bad(e) {
					t.Fatalf("%s: %s %s %s", what, e.Type, e.Status, e.Reason)
				}
			default:
				return
			}
		}
	}
}

func pullCount(n *tnode, outcome string) float64 {
	return promtest.ToFloat64(n.Metrics().Pulls.WithLabelValues(outcome))
}

// TestPullKeepsAgentWhoseBeatsAreLost: a host whose heartbeats stop
// reaching a node over gossip is asked for them directly, and its agent
// stays HEALTHY there; without the pull it is UNHEALTHY after 15 s and
// gone after 30 s. Both run as protocol v1.2 (no beat requests), whose
// hosts put one heartbeat in three on gossip.
func TestPullKeepsAgentWhoseBeatsAreLost(t *testing.T) {
	bubble(t, func(t *testing.T) {
		ctx := context.Background()
		tn := newNet(t, 1, Config{DisableBeatRequests: true})
		var mute atomic.Bool
		tn.wrap = func(h host.Host) host.Host { return mutedHost{Host: h, mute: &mute} }
		hostN := tn.add(nil, nil)
		tn.wrap = nil
		watcher := tn.nodes[0]
		sa, err := hostN.Register(ctx, spec("skill-p", "cap.p"))
		if err != nil {
			t.Fatal(err)
		}
		id := sa.Agent.AgentID
		waitFor(t, 10*time.Second, "the agent at the watcher", func() bool { return hears(watcher, id) })
		beats := beatsDelivered(watcher)
		// Within three intervals: the host may be quiet between.
		waitFor(t, 20*time.Second, "a heartbeat over gossip", func() bool { return beatsDelivered(watcher) > beats })
		synctest.Wait() // nobody is in the middle of a write
		mute.Store(true)
		sub := watcher.View().Subscribe(view.Filter{}, 64)
		defer sub.Close()
		healthy := healthyAll(t, sub, id, "while gossip was silent")
		// About one pull with news per 10 s: five within a minute, and the
		// agent HEALTHY throughout.
		waitFor(t, time.Minute, "5 pulls with news while gossip is silent", func() bool {
			healthy()
			return pullCount(watcher, "news") >= 5
		})
		if a, ok := live(watcher.Node, id); !ok || a.Status != record.StatusHealthy {
			t.Fatalf("after a minute of silent gossip: live %v, status %s", ok, a.Status)
		}
		if got := pullCount(watcher, "error") + pullCount(watcher, "unsupported"); got != 0 {
			t.Fatalf("failed pulls: %v", got)
		}
		// The host stops: pulls find nothing new, and the seed's clock
		// removes the agent.
		if err := hostN.Close(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 35*time.Second, "the agent gone after its host stopped", func() bool { return !hears(watcher, id) })
	})
}

// TestPullFromAnEarlierVersion: a host that does not speak the protocol
// is asked once, then left to the seed's clock.
func TestPullFromAnEarlierVersion(t *testing.T) {
	bubble(t, func(t *testing.T) {
		ctx := context.Background()
		tn := newNet(t, 1, Config{})
		old := tn.addConfigured(func(c *Config) { c.legacy = true })
		watcher := tn.nodes[0]
		sa, err := old.Register(ctx, spec("skill-o", "cap.o"))
		if err != nil {
			t.Fatal(err)
		}
		id := sa.Agent.AgentID
		waitFor(t, 10*time.Second, "the legacy agent at the watcher", func() bool { return hears(watcher, id) })
		// Identify listed its protocols without the pull: not asked.
		if mayServePulls(watcher.Host().Peerstore().GetProtocols, old.Host().ID()) {
			t.Fatal("a legacy host is taken for one that serves pulls")
		}
		watcher.pull(pullJob{peerID: old.Host().ID().String(), agents: []string{id}})
		if got := pullCount(watcher, "unsupported"); got != 1 {
			t.Fatalf("unsupported = %v, want 1", got)
		}
		// Before identify has listed them, it is asked, once.
		if _, err := watcher.Gossip().Pull(ctx, old.Host().ID(), []string{id}); !errors.Is(err, gossip.ErrPullUnsupported) {
			t.Fatalf("Pull of the legacy host = %v, want ErrPullUnsupported", err)
		}
		// The view's clock: the legacy agent still beats over gossip.
		if a, ok := live(watcher.Node, id); !ok || a.Status != record.StatusHealthy {
			t.Fatalf("legacy agent: live %v, status %s", ok, a.Status)
		}
	})
}

// TestLatestBeats: a host answers the newest heartbeat it published of
// each hosted agent asked for, and nothing for others.
func TestLatestBeats(t *testing.T) {
	bubble(t, func(t *testing.T) {
		ctx := context.Background()
		tn := newNet(t, 2, Config{}) // node 0 listens to node 1's heartbeats
		n := tn.nodes[1]
		sa, err := n.Register(ctx, spec("skill-l", "cap.l"))
		if err != nil {
			t.Fatal(err)
		}
		id := sa.Agent.AgentID
		waitFor(t, 10*time.Second, "a heartbeat published", func() bool { return len(n.latestBeats([]string{id})) == 1 })
		got := n.latestBeats([]string{id, "6f1c1d1e-5b9a-4c47-9d1f-2f7c3b8e9a10"})
		if len(got) != 1 || got[0].AgentID != id || got[0].PeerID != n.Host().ID().String() || got[0].Seq <= sa.Agent.Seq {
			t.Fatalf("latest beats %+v", got)
		}
		if err := n.SetStatus(ctx, id, record.StatusDegraded); err != nil {
			t.Fatal(err)
		}
		if got2 := n.latestBeats([]string{id}); len(got2) != 1 || got2[0].Status != record.StatusDegraded || got2[0].Seq <= got[0].Seq {
			t.Fatalf("after a status change: %+v", got2)
		}
		if err := n.Unregister(ctx, id, record.ReasonShutdown); err != nil {
			t.Fatal(err)
		}
		if got := n.latestBeats([]string{id}); len(got) != 0 {
			t.Fatalf("an unregistered agent still answered: %+v", got)
		}
	})
}

// TestPullsForgetUnsupportedHosts: a host found not to serve pulls is
// skipped for pullUnsupportedFor, then asked again; the memory is bounded.
func TestPullsForgetUnsupportedHosts(t *testing.T) {
	pl := newPulls()
	now := time.Now()
	p := peer.ID("old")
	if pl.skip(p, now) {
		t.Fatal("skipped before it was found out")
	}
	pl.markUnsupported(p, now)
	if !pl.skip(p, now.Add(pullUnsupportedFor-time.Second)) {
		t.Fatal("asked again within the period")
	}
	if pl.skip(p, now.Add(pullUnsupportedFor+time.Second)) {
		t.Fatal("skipped after the period")
	}
	for i := range maxPullUnsupported + 10 {
		pl.markUnsupported(peer.ID(rune(i)), now)
	}
	if len(pl.unsupported) > maxPullUnsupported {
		t.Fatalf("%d hosts remembered, bound %d", len(pl.unsupported), maxPullUnsupported)
	}
	// A full queue drops a late host rather than block the view's clock.
	for range pullQueue + 5 {
		pl.late("p", []string{"a"})
	}
	if len(pl.q) != pullQueue {
		t.Fatalf("queue holds %d", len(pl.q))
	}
}

// pulledAgent registers an agent at hostN and waits until watcher hears
// it and has pulled its heartbeat once (the host is quiet); it returns
// the agent's id and a subscription to watcher's view, closed with the
// test.
func pulledAgent(t *testing.T, hostN, watcher *tnode, skill, capability string) (string, *view.Subscription) {
	t.Helper()
	sa, err := hostN.Register(context.Background(), spec(skill, capability))
	if err != nil {
		t.Fatal(err)
	}
	id := sa.Agent.AgentID
	waitFor(t, 10*time.Second, "the agent at the watcher", func() bool { return hears(watcher, id) })
	waitFor(t, 40*time.Second, "a first pull: the host is quiet", func() bool { return pullCount(watcher, "news") > 0 })
	sub := watcher.View().Subscribe(view.Filter{}, 64)
	t.Cleanup(sub.Close)
	return id, sub
}

func beatsDelivered(n *tnode) float64 {
	return promtest.ToFloat64(n.Metrics().GossipDelivered.WithLabelValues("heartbeat"))
}

// TestQuietHeartbeats: toward a node that serves heartbeat pulls but
// sends no beat requests (protocol v1.2), a host puts one heartbeat in
// GossipBeatEvery on gossip and the node asks for the others when late:
// the agent stays HEALTHY. A node of an earlier version on the topic gets
// every heartbeat again.
func TestQuietHeartbeats(t *testing.T) {
	bubble(t, func(t *testing.T) {
		tn := newNet(t, 1, Config{})
		hostN := tn.nodes[0]
		watcher := tn.addConfigured(func(c *Config) { c.DisableBeatRequests = true })
		id, sub := pulledAgent(t, hostN, watcher, "skill-q", "cap.q")
		healthy := healthyAll(t, sub, id, "during quiet heartbeats")
		// Over four quiet cycles (one heartbeat on gossip, one pull each:
		// a minute at 5 s), gossip carries one heartbeat in three.
		before, pulled, start := beatsDelivered(watcher), pullCount(watcher, "news"), time.Now()
		waitFor(t, 90*time.Second, "4 more pulls with news", func() bool {
			healthy()
			return pullCount(watcher, "news")-pulled >= 4
		})
		took, gossiped, pulls := time.Since(start), beatsDelivered(watcher)-before, pullCount(watcher, "news")-pulled
		if gossiped < 3 || gossiped > 5 {
			t.Fatalf("%v heartbeats on gossip over %v (%v pulls), want one in %d", gossiped, took, pulls, DefaultGossipBeatEvery)
		}
		if took > 70*time.Second {
			t.Fatalf("4 pulls with news took %v, want about one per 15 s", took)
		}
		// A node of an earlier version joins: every heartbeat goes on
		// gossip again.
		old := tn.addConfigured(func(c *Config) { c.legacy = true })
		waitFor(t, 10*time.Second, "the agent at the old node", func() bool { return hears(old, id) })
		waitFor(t, 10*time.Second, "a heartbeat at the old node", func() bool { return beatsDelivered(old) > 0 })
		before = beatsDelivered(old)
		// Every heartbeat on gossip again: 11 more within a minute (12 at 5 s).
		waitFor(t, time.Minute, "11 heartbeats at the old node", func() bool { return beatsDelivered(old)-before >= 11 })
		if a, ok := live(old.Node, id); !ok || a.Status != record.StatusHealthy {
			t.Fatalf("at the old node: live %v, status %s", ok, a.Status)
		}
	})
}

func beatRequestCount(n *tnode, direction string) float64 {
	return promtest.ToFloat64(n.Metrics().BeatRequests.WithLabelValues(direction))
}

// TestAskOnTheSecondFailure: a host is asked on the second failed pull
// within askEvery, then not again within askEvery of that request;
// failures further apart than askEvery never ask.
func TestAskOnTheSecondFailure(t *testing.T) {
	t0 := time.Unix(1000, 0)
	steps := []struct {
		at   time.Duration
		want bool
	}{
		{0, false},                             // the first failure
		{5 * time.Second, true},                // the second within askEvery
		{10 * time.Second, false},              // asked 5 s ago
		{25 * time.Second, true},               // asked 20 s ago, failed 15 s ago
		{25*time.Second + askEvery + 1, false}, // the last failure too long ago
		{25*time.Second + 2*askEvery, true},
	}
	var st askState
	known := false
	for i, s := range steps {
		var ask bool
		st, ask = st.fail(t0.Add(s.at), known)
		known = true
		if ask != s.want {
			t.Fatalf("step %d (failure at %v): ask %v, want %v", i, s.at, ask, s.want)
		}
	}
}

// TestHeartbeatsOnRequest: between nodes of protocol v1.3 a host keeps
// its heartbeats off gossip and the watcher pulls them, HEALTHY
// throughout. When the watcher can no longer pull, it asks the host over
// gossip, and the host puts one heartbeat in GossipBeatEvery on gossip
// again: the agent stays in the watcher's view however long its pulls
// fail, as with a host of v1.2.
func TestHeartbeatsOnRequest(t *testing.T) {
	bubble(t, func(t *testing.T) {
		tn := newNet(t, 2, Config{})
		watcher, hostN := tn.nodes[0], tn.nodes[1]
		id, sub := pulledAgent(t, hostN, watcher, "skill-r", "cap.r")
		healthy := healthyAll(t, sub, id, "while nobody asked for heartbeats on gossip")
		before, pulled := beatsDelivered(watcher), pullCount(watcher, "news")
		waitFor(t, 90*time.Second, "4 more pulls with news", func() bool {
			healthy()
			return pullCount(watcher, "news")-pulled >= 4
		})
		if got := beatsDelivered(watcher) - before; got != 0 {
			t.Fatalf("%v heartbeats on gossip while the watcher pulled them, want none", got)
		}
		if n := beatRequestCount(watcher, "sent"); n != 0 {
			t.Fatalf("%v beat requests sent while pulls worked", n)
		}
		// A request for agents the host does not gossip (another host's,
		// or made up) changes nothing there.
		hostN.onWanted(watcher.Host().ID(), []string{uuid.NewString(), watcher.id.AgentID})
		hostN.mu.Lock()
		nWanted := len(hostN.wanted)
		hostN.mu.Unlock()
		if n := beatRequestCount(hostN, "received"); n != 0 || nWanted != 0 {
			t.Fatalf("a request for agents the host does not gossip: %v counted, %d agents wanted", n, nWanted)
		}

		// The host now resets every pull: the watcher cannot pull, asks,
		// and hears the agent on gossip again.
		hostN.Host().SetStreamHandler(gossip.PullProtocol, func(s network.Stream) { _ = s.Reset() })
		kept := keptAll(t, sub, id, "while its pulls failed")
		before = beatsDelivered(watcher)
		waitFor(t, time.Minute, "a heartbeat on gossip after a request", func() bool {
			kept()
			return beatsDelivered(watcher) > before
		})
		if s, r := beatRequestCount(watcher, "sent"), beatRequestCount(hostN, "received"); s < 1 || r < 1 {
			t.Fatalf("beat requests: %v sent by the watcher, %v received by the host", s, r)
		}
		// Six failed pulls later (about 90 s at one per 15 s), the agent
		// is still there: the requests keep the host's round on gossip.
		// Each gossiped heartbeat is followed by one failed pull, two
		// intervals later, before the next round's: about as many
		// heartbeats as failures (a request alone would bring one
		// heartbeat per request, and two failures for each).
		failed, gossiped := pullCount(watcher, "error"), beatsDelivered(watcher)
		waitFor(t, 3*time.Minute, "6 more failed pulls", func() bool {
			kept()
			return pullCount(watcher, "error")-failed >= 6
		})
		if !hears(watcher, id) {
			t.Fatal("the agent left the watcher's view while its host beat")
		}
		if got := beatsDelivered(watcher) - gossiped; got < 5 {
			t.Fatalf("%v heartbeats on gossip over 6 failed pulls, want one per round of %d", got, DefaultGossipBeatEvery)
		}
		if s := beatRequestCount(watcher, "sent"); s < 3 {
			t.Fatalf("%v beat requests over 90 s of failed pulls, want one per %v", s, askEvery)
		}
	})
}

// TestDroppedAgentsArePulledBackOnReconnect: agents dropped when their
// host was found unreachable (a split) come back as soon as the host
// connects again — pulled, not waiting for a quiet host's next heartbeat
// on gossip (up to three intervals).
func TestDroppedAgentsArePulledBackOnReconnect(t *testing.T) {
	bubble(t, func(t *testing.T) {
		ctx := context.Background()
		tn := newNet(t, 3, Config{})
		other, hostN, watcher := tn.nodes[0], tn.nodes[1], tn.nodes[2]
		sa, err := hostN.Register(ctx, spec("skill-b", "cap.b"))
		if err != nil {
			t.Fatal(err)
		}
		id := sa.Agent.AgentID
		waitFor(t, 10*time.Second, "the agent at the watcher", func() bool { return hears(watcher, id) })
		// Past the loud first heartbeat: the host has made a second.
		waitFor(t, 10*time.Second, "a first heartbeat", func() bool { return len(hostN.latestBeats([]string{id})) == 1 })
		first := hostN.latestBeats([]string{id})[0].Seq
		waitFor(t, 10*time.Second, "a second heartbeat", func() bool { return hostN.latestBeats([]string{id})[0].Seq > first })
		// A split: the watcher alone on one side. The host keeps a topic
		// peer (other), so the heal gives it no first peer to re-announce to.
		for _, p := range []*tnode{other, hostN} {
			if err := tn.mn.UnlinkPeers(watcher.Host().ID(), p.Host().ID()); err != nil {
				t.Fatal(err)
			}
			if err := tn.mn.DisconnectPeers(watcher.Host().ID(), p.Host().ID()); err != nil {
				t.Fatal(err)
			}
		}
		watcher.peerDown(hostN.Host().ID()) // what early failure detection concludes
		if hears(watcher, id) {
			t.Fatal("the agent of a peer found down is still live")
		}
		// The split lasts until the host has beaten since the drop: its
		// newest heartbeat is news to the watcher.
		dropped := hostN.latestBeats([]string{id})[0].Seq
		waitFor(t, 20*time.Second, "a heartbeat of the host during the split", func() bool {
			b := hostN.latestBeats([]string{id})
			return len(b) == 1 && b[0].Seq > dropped
		})
		if _, err := tn.mn.LinkPeers(watcher.Host().ID(), hostN.Host().ID()); err != nil {
			t.Fatal(err)
		}
		if _, err := tn.mn.ConnectPeers(watcher.Host().ID(), hostN.Host().ID()); err != nil {
			t.Fatal(err)
		}
		healed := time.Now()
		waitFor(t, 20*time.Second, "the agent back at the watcher", func() bool { return hears(watcher, id) })
		if took := time.Since(healed); took > time.Second {
			t.Fatalf("the agent came back %v after the reconnection, want at once (a pull)", took)
		}
	})
}
