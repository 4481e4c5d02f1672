package node

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentd/agentd/liveness"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/trust"
	"github.com/agentd/agentd/view"
	"github.com/libp2p/go-libp2p/core/network"
	ma "github.com/multiformats/go-multiaddr"
)

func TestRegisterPropagatesByGossip(t *testing.T) {
	bubble(t, func(t *testing.T) {
		tn := newNet(t, 20, Config{})
		waitFor(t, 10*time.Second, "mesh", func() bool { return len(tn.nodes[19].Gossip().TopicPeers()) > 0 })
		sub := tn.nodes[3].Subscribe(view.Filter{Capability: "org-data-read"}, 16)
		defer sub.Close()
		sa, err := tn.nodes[1].Register(context.Background(), spec("skill-org-feishu", "org-data-read", "user-auth"))
		if err != nil {
			t.Fatal(err)
		}
		if sa.Agent.AgentID != tn.nodes[1].id.AgentID {
			t.Fatalf("agent id %s, want the node's own", sa.Agent.AgentID)
		}
		for _, nd := range tn.nodes[2:] {
			waitFor(t, 5*time.Second, "announce at every node", func() bool { _, ok := live(nd.Node, sa.Agent.AgentID); return ok })
		}
		// Propagation: when did each node's view get the record?
		var delays []time.Duration
		for _, nd := range append(tn.nodes[:1:1], tn.nodes[2:]...) {
			a, _ := live(nd.Node, sa.Agent.AgentID)
			delays = append(delays, a.FirstSeen.Sub(sa.Agent.Issued()))
		}
		slices.Sort(delays)
		t.Logf("announcement reached %d nodes: p50 %s, p99 %s (virtual time, 20 ms links)", len(delays), delays[len(delays)/2], delays[len(delays)*99/100])
		ev := <-sub.C()
		if ev.Type != view.EventRegistered || ev.AgentID != sa.Agent.AgentID || ev.Source != store.SourceGossip {
			t.Fatalf("event %+v", ev)
		}
		ids, src := discoverIDs(t, tn.nodes[4].Node, Query{Filter: store.Filter{Capability: "org-data-read", Version: ">=1.0.0"}})
		if !slices.Equal(ids, []string{sa.Agent.AgentID}) || src != store.SourceGossip {
			t.Fatalf("discover: %v from %s", ids, src)
		}
		// Same content again is coalesced.
		again, err := tn.nodes[1].Register(context.Background(), spec("skill-org-feishu", "org-data-read", "user-auth"))
		if err != nil || again.Agent.Seq != sa.Agent.Seq {
			t.Fatalf("re-register not coalesced: %v seq %d vs %d", err, again.Agent.Seq, sa.Agent.Seq)
		}
		// A status change propagates.
		if err := tn.nodes[1].SetStatus(context.Background(), sa.Agent.AgentID, record.StatusDegraded); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, "status", func() bool {
			a, ok := live(tn.nodes[4].Node, sa.Agent.AgentID)
			return ok && a.Status == record.StatusDegraded
		})
		// Unregister removes it everywhere at once and the old record
		// cannot come back.
		if err := tn.nodes[1].Unregister(context.Background(), sa.Agent.AgentID, record.ReasonMaintenance); err != nil {
			t.Fatal(err)
		}
		unreg := time.Now()
		for _, nd := range tn.nodes[2:] {
			waitFor(t, 2*time.Second, "unregister at every node", func() bool { _, ok := live(nd.Node, sa.Agent.AgentID); return !ok })
		}
		t.Logf("unregister removed the agent from every node within %s", time.Since(unreg))
		if err := tn.nodes[4].View().CheckAnnounce(sa); err == nil {
			t.Fatal("old announcement accepted after unregister")
		}
	})
}

func TestDiscoverThroughDHT(t *testing.T) {
	bubble(t, func(t *testing.T) {
		tn := newNet(t, 6, Config{DisableGossip: true})
		waitFor(t, 20*time.Second, "routing tables", func() bool {
			for _, nd := range tn.nodes {
				if nd.DHT().RoutingTableSize() < 2 {
					return false
				}
			}
			return true
		})
		sa, err := tn.nodes[2].Register(context.Background(), spec("skill-search", "product.search"))
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		var src store.Source
		waitFor(t, 20*time.Second, "dht discovery", func() bool {
			ids, src = discoverIDs(t, tn.nodes[5].Node, Query{Filter: store.Filter{Skill: "skill-search", Capability: "product.search"}})
			return len(ids) == 1
		})
		if ids[0] != sa.Agent.AgentID || src != store.SourceDHT {
			t.Fatalf("got %v from %s", ids, src)
		}
		// The fetched record is now in the live view of the querier.
		if _, ok := live(tn.nodes[5].Node, sa.Agent.AgentID); !ok {
			t.Fatal("fetched record not in the live view")
		}
		// GET by agent id from a node with no connection to the owner
		// answers from the DHT value.
		other := tn.nodes[4]
		var r Result
		waitFor(t, 10*time.Second, "GetAgent from the DHT value", func() bool {
			r, err = other.GetAgent(context.Background(), sa.Agent.AgentID, true)
			return err == nil
		})
		if r.Agent.AgentID != sa.Agent.AgentID || r.Source != store.SourceDHT {
			t.Fatalf("GetAgent: %+v", r)
		}
		// Nothing matches: DISC_002.
		_, err = tn.nodes[5].Discover(context.Background(), Query{Filter: store.Filter{Capability: "nope"}})
		var de *DiscoveryError
		if !errors.As(err, &de) || de.Code != record.CodeNoSkillsFound {
			t.Fatalf("err %v", err)
		}
	})
}

func TestCrashedAgentTimesOutEverywhere(t *testing.T) {
	bubble(t, func(t *testing.T) {
		tn := newNet(t, 20, Config{})
		waitFor(t, 10*time.Second, "mesh", func() bool { return len(tn.nodes[19].Gossip().TopicPeers()) > 0 })
		sa, err := tn.nodes[2].Register(context.Background(), spec("skill-a", "cap.a"))
		if err != nil {
			t.Fatal(err)
		}
		survivors := append(append([]*tnode{}, tn.nodes[:2]...), tn.nodes[3:]...)
		for _, nd := range survivors {
			waitFor(t, 5*time.Second, "announce at every node", func() bool { _, ok := live(nd.Node, sa.Agent.AgentID); return ok })
		}
		crash := time.Now()
		_ = tn.nodes[2].Close() // no unregister: peers only notice the silence
		waitFor(t, 25*time.Second, "UNHEALTHY", func() bool {
			a, ok := live(tn.nodes[3].Node, sa.Agent.AgentID)
			return ok && a.Status == record.StatusUnhealthy
		})
		unhealthy := time.Since(crash)
		if unhealthy < 10*time.Second || unhealthy > 21*time.Second {
			t.Fatalf("UNHEALTHY after %s, want about 3 intervals after the last heartbeat", unhealthy)
		}
		for _, nd := range survivors {
			waitFor(t, 40*time.Second, "gone from every node", func() bool { _, ok := live(nd.Node, sa.Agent.AgentID); return !ok })
		}
		gone := time.Since(crash)
		if gone < 25*time.Second || gone > 37*time.Second {
			t.Fatalf("gone after %s, want the 30 s timeout", gone)
		}
		t.Logf("after the crash: UNHEALTHY at %s, gone at %s (virtual time)", unhealthy, gone)
		// The stale cache still answers, marked stale.
		res, err := tn.nodes[3].Discover(context.Background(), Query{Filter: store.Filter{Capability: "cap.a"}, LocalOnly: true})
		if err != nil || len(res) != 1 || !res[0].Stale || res[0].Source != store.SourceCache {
			t.Fatalf("stale answer: %v %+v", err, res)
		}
	})
}

func TestLateJoinerSeesEveryAgentWithinOneInterval(t *testing.T) {
	bubble(t, func(t *testing.T) {
		tn := newNet(t, 21, Config{})
		var ids []string
		for _, nd := range tn.nodes[1:] {
			sa, err := nd.Register(context.Background(), spec("skill-"+nd.id.AgentID[:8], "cap.shared"))
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, sa.Agent.AgentID)
		}
		time.Sleep(10 * time.Second) // the announcements are long gone from gossip
		late := tn.add(nil, nil)
		joined := time.Now()
		waitFor(t, 5*time.Second, "late joiner's view", func() bool {
			for _, id := range ids {
				if _, ok := live(late.Node, id); !ok {
					return false
				}
			}
			return true
		})
		t.Logf("late joiner complete after %s", time.Since(joined))
	})
}

func TestRestartRestoresRegistrations(t *testing.T) {
	bubble(t, func(t *testing.T) {
		tn := newNet(t, 3, Config{})
		nd := tn.nodes[1]
		sa, err := nd.Register(context.Background(), spec("skill-r", "cap.r"))
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, "announce", func() bool { _, ok := live(tn.nodes[2].Node, sa.Agent.AgentID); return ok })
		waitFor(t, 5*time.Second, "gossip peers", func() bool { return slices.Contains(nd.Gossip().TopicPeers(), tn.nodes[2].Host().ID()) })
		if err := nd.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 2*time.Second, "shutdown unregister", func() bool { _, ok := live(tn.nodes[2].Node, sa.Agent.AgentID); return !ok })
		// Same identity, same store: the registration comes back with a
		// newer seq, which beats the SHUTDOWN tombstone.
		re := tn.add(nd.id, nd.st)
		waitFor(t, 10*time.Second, "re-announce after restart", func() bool {
			a, ok := live(tn.nodes[2].Node, sa.Agent.AgentID)
			return ok && a.Record.Agent.Seq > sa.Agent.Seq
		})
		if locals := re.Locals(); len(locals) != 1 || locals[0].Agent.AgentID != sa.Agent.AgentID {
			t.Fatalf("locals %v", locals)
		}
	})
}

// An acknowledged status survives a restart: the restarted node reports it
// and announces it, and a peer that dropped the agent on SHUTDOWN sees it
// again with that status, not HEALTHY. Unregistering clears it.
func TestRestartRestoresStatus(t *testing.T) {
	bubble(t, func(t *testing.T) {
		tn := newNet(t, 3, Config{})
		nd := tn.nodes[1]
		sa, err := nd.Register(context.Background(), spec("skill-s", "cap.s"))
		if err != nil {
			t.Fatal(err)
		}
		id := sa.Agent.AgentID
		waitFor(t, 5*time.Second, "gossip peers", func() bool { return slices.Contains(nd.Gossip().TopicPeers(), tn.nodes[2].Host().ID()) })
		if err := nd.SetStatus(context.Background(), id, record.StatusMaintenance); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, "status on the peer", func() bool {
			a, ok := live(tn.nodes[2].Node, id)
			return ok && a.Status == record.StatusMaintenance
		})
		if err := nd.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 2*time.Second, "shutdown unregister", func() bool { _, ok := live(tn.nodes[2].Node, id); return !ok })
		re := tn.add(nd.id, nd.st)
		if a, ok := re.view.Get(id); !ok || a.Status != record.StatusMaintenance {
			t.Fatalf("restarted node reports %+v, want MAINTENANCE", a.Status)
		}
		// The status statement follows the re-announcement at once; a peer
		// that validates it before the record (pubsub validates in
		// parallel) drops it, and then learns the status from the next
		// heartbeat, which carries it: within one interval.
		waitFor(t, 30*time.Second, "re-announced with its status", func() bool {
			a, ok := live(tn.nodes[2].Node, id)
			return ok && a.Record.Agent.Seq > sa.Agent.Seq && a.Status == record.StatusMaintenance
		})
		// A new registration of the id after an unregister starts HEALTHY.
		if err := re.Unregister(context.Background(), id, record.ReasonShutdown); err != nil {
			t.Fatal(err)
		}
		if _, err := re.Register(context.Background(), spec("skill-s", "cap.s")); err != nil {
			t.Fatal(err)
		}
		if a, _ := re.view.Get(id); a.Status != record.StatusHealthy {
			t.Fatalf("re-registration inherited status %q", a.Status)
		}
		if sts, err := re.st.Statuses(context.Background()); err != nil || len(sts) != 0 {
			t.Fatalf("stored statuses after unregister: %v %v", sts, err)
		}
	})
}

func TestAdaptiveInterval(t *testing.T) {
	for _, c := range []struct {
		agents int
		rate   float64
		want   time.Duration
	}{
		{10, 100, 5 * time.Second},
		{500, 100, 5 * time.Second},
		{1000, 100, 10 * time.Second},
		{100000, 100, 1000 * time.Second},
		{100000, -1, 5 * time.Second},
	} {
		if got := adaptiveInterval(5*time.Second, c.agents, c.rate); got != c.want {
			t.Errorf("adaptiveInterval(5s, %d, %g) = %s, want %s", c.agents, c.rate, got, c.want)
		}
	}
}

// A record its client signed with its own key (the node cannot sign its
// heartbeats with that key) stays alive through peer-signed heartbeats,
// and a peer-signed beat from a peer that does not host it is refused.
func TestClientSignedRecordStaysAlive(t *testing.T) {
	bubble(t, func(t *testing.T) {
		tn := newNet(t, 3, Config{})
		waitFor(t, 10*time.Second, "mesh", func() bool { return len(tn.nodes[2].Gossip().TopicPeers()) > 0 })
		client, err := trust.Generate()
		if err != nil {
			t.Fatal(err)
		}
		host := tn.nodes[1]
		a := spec("skill-own-key", "cap.own")
		a.Fill(client.AgentID, host.id.PeerID.String(), client.PublicKeyPEM(), uint64(time.Now().UnixMilli()), time.Now(), time.Hour)
		sa, err := record.Sign(a, client.AgentKey, nil) // the client has no peer key of the host
		if err != nil {
			t.Fatal(err)
		}
		if _, err := host.RegisterSigned(context.Background(), sa); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, "announce", func() bool { _, ok := live(tn.nodes[2].Node, client.AgentID); return ok })
		time.Sleep(45 * time.Second) // well past the 30 s timeout
		got, ok := live(tn.nodes[2].Node, client.AgentID)
		if !ok || got.Status != record.StatusHealthy {
			t.Fatalf("client-signed agent not kept alive by peer-signed heartbeats: %v %+v", ok, got.Status)
		}
		// Another peer's signature on a beat for this agent is refused.
		other := tn.nodes[0]
		forged, err := record.SignBeatPeer(record.Beat{AgentID: client.AgentID, PeerID: other.id.PeerID.String(), Seq: uint64(time.Now().UnixMilli()) + 1000, Timestamp: time.Now().UnixMilli(), Status: record.StatusMaintenance}, other.id.PeerKey)
		if err != nil {
			t.Fatal(err)
		}
		if err := tn.nodes[2].View().CheckBeat("status", forged); trust.ReasonOf(err) != trust.ReasonPeerMismatch {
			t.Fatalf("beat from a peer that does not host the agent: %v", err)
		}
	})
}

// A record found through the DHT is fetched again before its cache entry
// expires while its agent is not heard (cache.refreshBeforeExpiry).
func TestRefreshBeforeExpiry(t *testing.T) {
	bubble(t, func(t *testing.T) {
		tn := newNet(t, 4, Config{DisableGossip: true, Timeout: 10 * time.Minute, CacheTTL: 90 * time.Second})
		waitFor(t, 20*time.Second, "routing tables", func() bool { return tn.nodes[3].DHT().RoutingTableSize() >= 2 })
		sa, err := tn.nodes[1].Register(context.Background(), spec("skill-refresh", "cap.refresh"))
		if err != nil {
			t.Fatal(err)
		}
		q := tn.nodes[3]
		waitFor(t, 20*time.Second, "dht discovery", func() bool {
			ids, _ := discoverIDs(t, q.Node, Query{Filter: store.Filter{Capability: "cap.refresh"}})
			return len(ids) == 1
		})
		first, err := q.Store().Get(context.Background(), sa.Agent.AgentID)
		if err != nil {
			t.Fatal(err)
		}
		// The entry is refreshed before it expires (60 s before), and is
		// never stale on the way.
		waitFor(t, 100*time.Second, "the entry refreshed", func() bool {
			e, err := q.Store().Get(context.Background(), sa.Agent.AgentID)
			if err != nil || e.Stale {
				t.Fatalf("entry lapsed before its refresh: %+v, %v", e, err)
			}
			return e.ExpiresAt.After(first.ExpiresAt)
		})
		// A host that is gone is not refreshed: the entry goes stale.
		_ = tn.nodes[1].Close()
		waitFor(t, 150*time.Second, "the entry of a dead host to go stale", func() bool {
			e, err := q.Store().Get(context.Background(), sa.Agent.AgentID)
			return err != nil || e.Stale
		})
	})
}

// TestJoinerDoesNotReviveTheDead: an agent that crashed 20 s before a node
// joined reaches the joiner by sync, but as news 20 s old: it leaves the
// joiner's view when it leaves everyone's (30 s after its last heartbeat),
// not 30 s after the join.
func TestJoinerDoesNotReviveTheDead(t *testing.T) {
	bubble(t, func(t *testing.T) {
		tn := newNet(t, 4, Config{})
		waitFor(t, 10*time.Second, "mesh", func() bool { return len(tn.nodes[3].Gossip().TopicPeers()) > 0 })
		sa, err := tn.nodes[2].Register(context.Background(), spec("skill-a", "cap.a"))
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, "announce", func() bool { _, ok := live(tn.nodes[1].Node, sa.Agent.AgentID); return ok })
		crash := time.Now()
		_ = tn.nodes[2].Close()
		time.Sleep(20 * time.Second)
		late := tn.add(nil, nil)
		waitFor(t, 5*time.Second, "the joiner's sync", func() bool { _, ok := live(late.Node, sa.Agent.AgentID); return ok })
		a, _ := live(late.Node, sa.Agent.AgentID)
		if a.Status != record.StatusUnhealthy {
			t.Errorf("status at the joiner %s, want UNHEALTHY (silent for 20 s)", a.Status)
		}
		waitFor(t, 30*time.Second, "the dead agent to leave the joiner's view", func() bool { _, ok := live(late.Node, sa.Agent.AgentID); return !ok })
		if gone := time.Since(crash); gone > 37*time.Second {
			t.Fatalf("gone at the joiner %s after the crash, want the 30 s timeout of its last heartbeat", gone)
		}
	})
}

// TestRegisteredBeforeAnyPeerIsAnnouncedOnJoin: a node that registers its
// agent before it has any peer (the first announcement reaches nobody)
// announces it again when the first gossip peer arrives, so the network
// knows it well before its first heartbeat.
func TestRegisteredBeforeAnyPeerIsAnnouncedOnJoin(t *testing.T) {
	bubble(t, func(t *testing.T) {
		tn := newNet(t, 3, Config{})
		waitFor(t, 10*time.Second, "mesh", func() bool { return len(tn.nodes[2].Gossip().TopicPeers()) > 0 })
		id, err := trust.Generate()
		if err != nil {
			t.Fatal(err)
		}
		st, err := store.Open(store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		h, err := tn.mn.AddPeer(id.PeerKey, ma.StringCast("/ip6/100::99/tcp/4242"))
		if err != nil {
			t.Fatal(err)
		}
		nd, err := New(Config{}, Options{Identity: id, Host: h, Store: st})
		if err != nil {
			t.Fatal(err)
		}
		if err := nd.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = nd.Close(); _ = st.Close() })
		sa, err := nd.Register(context.Background(), spec("skill-a", "cap.a"))
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the announcement went out, to nobody
		if err := tn.mn.LinkAll(); err != nil {
			t.Fatal(err)
		}
		if _, err := tn.mn.ConnectPeers(h.ID(), tn.nodes[0].Host().ID()); err != nil {
			t.Fatal(err)
		}
		joined := time.Now()
		for _, other := range tn.nodes {
			waitFor(t, 10*time.Second, "the agent at every node", func() bool { _, ok := live(other.Node, sa.Agent.AgentID); return ok })
		}
		// Its first heartbeat is due 5 s after Start, 3 s after the join.
		if d := time.Since(joined); d > time.Second {
			t.Fatalf("known everywhere %s after the join, want well under the heartbeat interval", d)
		}
	})
}

// TestCrashedPeerLeavesAtOnce: a crash (links cut, connections closed)
// removes the peer's agent from every view within a few seconds — by the
// nodes connected to it through suspicion, by the others through the
// peer_down claim — with reason PEER_UNREACHABLE; and a neighbour that
// still holds the agent (early detection off) cannot bring it back through
// sync.
func TestCrashedPeerLeavesAtOnce(t *testing.T) {
	bubble(t, func(t *testing.T) {
		tn := newNet(t, 3, Config{})
		tn.cfg.DisableSuspicion = true
		keeper := tn.add(nil, nil) // seed rules only: holds the agent until the timeout
		tn.cfg.DisableSuspicion = false
		for _, nd := range tn.nodes {
			waitFor(t, 10*time.Second, "mesh", func() bool { return len(nd.Gossip().TopicPeers()) > 0 })
		}
		victim := tn.nodes[2]
		sa, err := victim.Register(context.Background(), spec("skill-a", "cap.a"))
		if err != nil {
			t.Fatal(err)
		}
		for _, nd := range tn.nodes {
			waitFor(t, 5*time.Second, "announce", func() bool { _, ok := live(nd.Node, sa.Agent.AgentID); return ok })
		}
		watchers := map[int]*view.Subscription{}
		for _, i := range []int{0, 1} {
			watchers[i] = tn.nodes[i].Subscribe(view.Filter{AgentID: sa.Agent.AgentID, Types: []view.EventType{view.EventDeregistered}}, 8)
			defer watchers[i].Close()
		}
		// A killed process answers nothing from the first instant. mocknet
		// closes a host's connections one by one, and the node's Close
		// removes its probe handler first (a host that answers without it
		// counts as an agentd of an earlier version: alive), so a helper
		// could still reach the victim through a connection not yet closed;
		// as liveness's own tests do, the victim resets every probe from
		// now on, and its host goes before its node.
		crash := time.Now()
		victim.Host().SetStreamHandler(liveness.ProbeProtocol, func(s network.Stream) { _ = s.Reset() })
		for _, p := range tn.mn.Peers() {
			if p != victim.id.PeerID {
				_ = tn.mn.UnlinkPeers(victim.id.PeerID, p)
			}
		}
		_ = victim.Host().Close()
		_ = victim.Close()
		for i, w := range watchers {
			select {
			case ev := <-w.C():
				if ev.Reason != view.ReasonPeerDown {
					t.Errorf("node %d: deregistered %s, want %s", i, ev.Reason, view.ReasonPeerDown)
				}
				if d := time.Since(crash); d > 3*time.Second {
					t.Errorf("node %d dropped the crashed agent after %s, want ≤ 3 s", i, d)
				}
			case <-time.After(40 * time.Second):
				t.Fatalf("node %d never dropped the crashed agent", i)
			}
		}
		if _, ok := live(keeper.Node, sa.Agent.AgentID); !ok {
			t.Fatal("the node without early detection dropped the agent before its timeout")
		}
		// Node 0 asks its neighbours, the keeper among them, for their
		// live view: the dead agent must not come back.
		if _, err := tn.nodes[0].Gossip().Sync(context.Background()); err != nil {
			t.Logf("sync: %v", err)
		}
		synctest.Wait()
		if _, ok := live(tn.nodes[0].Node, sa.Agent.AgentID); ok {
			t.Fatal("a neighbour's sync brought the crashed agent back")
		}
	})
}

// Two specs registered on one node without agent_id are two agents: the
// first takes the node's agent_id, another agent_name gets a stable id of
// its own, and registering either again updates it. A second agent
// without a name is refused with a message saying what to do.
func TestSecondSpecGetsItsOwnAgentID(t *testing.T) {
	bubble(t, func(t *testing.T) {
		tn := newNet(t, 1, Config{})
		n := tn.nodes[0].Node
		ctx := context.Background()
		a := spec("skill-a", "cap-a")
		a.AgentName = "alpha"
		sa, err := n.Register(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		if sa.Agent.AgentID != n.id.AgentID {
			t.Fatalf("first agent %s, want the node's %s", sa.Agent.AgentID, n.id.AgentID)
		}
		if err := n.SetStatus(ctx, sa.Agent.AgentID, record.StatusDegraded); err != nil {
			t.Fatal(err)
		}
		b := spec("skill-b", "cap-b")
		b.AgentName = "beta"
		sb, err := n.Register(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		if sb.Agent.AgentID == sa.Agent.AgentID {
			t.Fatal("the second spec replaced the first")
		}
		if got, ok := n.View().Get(sb.Agent.AgentID); !ok || got.Status == record.StatusDegraded {
			t.Fatalf("second agent %+v: must not inherit the first one's status", got)
		}
		if _, ok := n.View().Get(sa.Agent.AgentID); !ok {
			t.Fatal("the first agent is gone")
		}
		// Registering either again updates it.
		b2 := spec("skill-b", "cap-b", "cap-b2")
		b2.AgentName = "beta"
		sb2, err := n.Register(ctx, b2)
		if err != nil || sb2.Agent.AgentID != sb.Agent.AgentID || sb2.Agent.Seq <= sb.Agent.Seq {
			t.Fatalf("%v %+v", err, sb2)
		}
		a2 := spec("skill-a", "cap-a", "cap-a2")
		a2.AgentName = "alpha"
		if sa2, err := n.Register(ctx, a2); err != nil || sa2.Agent.AgentID != n.id.AgentID {
			t.Fatalf("%v %+v", err, sa2)
		}
		// Without a name there is nothing to tell a second agent apart.
		_, err = n.Register(ctx, spec("skill-c", "cap-c"))
		if err == nil || !strings.Contains(err.Error(), "agent_name") {
			t.Fatalf("nameless second agent: %v", err)
		}
		if len(n.View().Locals()) != 2 {
			t.Fatalf("%d hosted agents, want 2", len(n.View().Locals()))
		}
	})
}
