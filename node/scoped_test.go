package node

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentd/agentd/gossip"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/view"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
)

// hears reports whether n's live view holds the agent.
func hears(n *tnode, agentID string) bool { _, ok := live(n.Node, agentID); return ok }

// addConfigured starts a node whose configuration is the net's changed
// by set.
func (tn *tnet) addConfigured(set func(*Config)) *tnode {
	saved := tn.cfg
	defer func() { tn.cfg = saved }()
	set(&tn.cfg)
	return tn.add(nil, nil)
}

// keptAlive waits until n has held the agent without a break for longer
// than the liveness timeout (30 s) and heard from it since: its heartbeats
// reach n.
func keptAlive(t *testing.T, n *tnode, agentID, what string) {
	t.Helper()
	first, ok := live(n.Node, agentID)
	if !ok {
		t.Fatalf("%s: the agent is not held", what)
	}
	waitFor(t, 45*time.Second, what, func() bool {
		a, ok := live(n.Node, agentID)
		return ok && a.FirstSeen.Equal(first.FirstSeen) && a.LastHeard.Sub(first.FirstSeen) > 30*time.Second
	})
}

// TestScopedInterest: on scoped nodes an agent is heard by the nodes
// interested in its capability — a watch, a host of the same capability,
// a node that queried it — and by no other; a query outside the interest
// is answered by the DHT and joins the interest, so the next agent of that
// capability arrives by gossip; the interest lapses, and the agents with
// it.
func TestScopedInterest(t *testing.T) {
	bubble(t, func(t *testing.T) {
		ctx := context.Background()
		tn := newNet(t, 10, Config{Scope: ScopeInterest, InterestTTL: 20 * time.Second, InterestCheck: 5 * time.Second})
		n := tn.nodes
		waitFor(t, 10*time.Second, "dht", func() bool { return n[9].DHT().RoutingTableSize() > 0 })

		watch := n[9].Subscribe(view.Filter{Capability: "cap.a"}, 64)
		defer watch.Close()
		a1, err := n[1].Register(ctx, spec("skill-a", "cap.a"))
		if err != nil {
			t.Fatal(err)
		}
		b1, err := n[2].Register(ctx, spec("skill-b", "cap.b"))
		if err != nil {
			t.Fatal(err)
		}
		a2, err := n[3].Register(ctx, spec("skill-a", "cap.a", "cap.c"))
		if err != nil {
			t.Fatal(err)
		}
		// The watcher and the other host of cap.a hear both cap.a agents.
		waitFor(t, 10*time.Second, "watcher hears cap.a", func() bool {
			return hears(n[9], a1.Agent.AgentID) && hears(n[9], a2.Agent.AgentID)
		})
		waitFor(t, 10*time.Second, "hosts of cap.a hear each other", func() bool {
			return hears(n[1], a2.Agent.AgentID) && hears(n[3], a1.Agent.AgentID)
		})
		ev := <-watch.C()
		if ev.Type != view.EventRegistered {
			t.Fatalf("first watch event %s, want %s", ev.Type, view.EventRegistered)
		}
		// Heartbeats keep them there past the liveness timeout.
		keptAlive(t, n[9], a1.Agent.AgentID, "heartbeats of cap.a at the watcher past the liveness timeout")
		keptAlive(t, n[1], a2.Agent.AgentID, "heartbeats of cap.a at the other host past the liveness timeout")
		// Nobody without interest in cap.b holds its agent.
		for _, i := range []int{0, 1, 3, 4, 5, 9} {
			if hears(n[i], b1.Agent.AgentID) {
				t.Fatalf("node %d holds cap.b's agent without interest in it", i)
			}
			if got := n[i].Gossip().Shards(); slices.Contains(got, record.Shard("cap.b")) {
				t.Fatalf("node %d joined cap.b's shard: %v", i, got)
			}
		}

		// A query outside the interest goes to the DHT and joins the interest.
		ids, src := discoverIDs(t, n[5].Node, Query{Filter: store.Filter{Capability: "cap.b"}})
		if !slices.Contains(ids, b1.Agent.AgentID) || src != store.SourceDHT {
			t.Fatalf("query for cap.b: %v from %s, want %s from dht", ids, src, b1.Agent.AgentID)
		}
		waitFor(t, 10*time.Second, "cap.b in the interest", func() bool { return n[5].Gossip().ShardReady(record.Shard("cap.b")) })
		ids, src = discoverIDs(t, n[5].Node, Query{Filter: store.Filter{Capability: "cap.b"}})
		if !slices.Contains(ids, b1.Agent.AgentID) || src != store.SourceGossip && src != store.SourceDHT {
			t.Fatalf("second query for cap.b: %v from %s", ids, src)
		}
		// The next cap.b agent reaches the querier by gossip, unasked.
		b2, err := n[6].Register(ctx, spec("skill-b", "cap.b"))
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, "new cap.b agent at the querier", func() bool { return hears(n[5], b2.Agent.AgentID) })

		// Unregister reaches the watcher at once.
		if err := n[1].Unregister(ctx, a1.Agent.AgentID, record.ReasonShutdown); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, "unregister at the watcher", func() bool { return !hears(n[9], a1.Agent.AgentID) })

		// Without queries the interest lapses and its agents are forgotten.
		waitFor(t, 60*time.Second, "cap.b interest to lapse", func() bool {
			return !slices.Contains(n[5].Gossip().Shards(), record.Shard("cap.b"))
		})
		waitFor(t, 5*time.Second, "cap.b agents forgotten", func() bool {
			return !hears(n[5], b1.Agent.AgentID) && !hears(n[5], b2.Agent.AgentID)
		})
		back := n[5].View().Subscribe(view.Filter{Types: []view.EventType{view.EventRegistered}}, 64)
		deadline := time.NewTimer(30 * time.Second) // a negative assertion needs a bound
		for waiting := true; waiting; {
			select {
			case ev := <-back.C():
				if ev.AgentID == b1.Agent.AgentID || ev.AgentID == b2.Agent.AgentID {
					t.Fatal("agents outside the interest came back after it lapsed")
				}
			case <-deadline.C:
				waiting = false
			}
		}
		back.Close()
		if hears(n[5], b1.Agent.AgentID) || hears(n[5], b2.Agent.AgentID) {
			t.Fatal("agents outside the interest came back after it lapsed")
		}
		// A closed watch releases its shard too.
		watch.Close()
		waitFor(t, 60*time.Second, "cap.a interest to lapse at the watcher", func() bool {
			return len(n[9].Gossip().Shards()) == 0
		})
	})
}

// TestLegacyPeerIsBridged: a node of the previous version (announce topic
// and sync 1.0.0 only) and scoped nodes hear each other's agents: the
// scoped nodes publish on the announce topic while it has a subscriber,
// and subscribe to it (the bridge) while a legacy node does.
func TestLegacyPeerIsBridged(t *testing.T) {
	bubble(t, func(t *testing.T) {
		ctx := context.Background()
		tn := newNet(t, 1, Config{Scope: ScopeInterest})
		old := tn.addConfigured(func(c *Config) { c.legacy = true })
		scoped := tn.add(nil, nil)
		watcher := tn.add(nil, nil)
		n0 := tn.nodes[0]
		waitFor(t, 10*time.Second, "bridge at the scoped nodes", func() bool {
			return n0.Gossip().Bridging() && scoped.Gossip().Bridging() && watcher.Gossip().Bridging()
		})
		watch := watcher.Subscribe(view.Filter{Capability: "cap.x"}, 16)
		defer watch.Close()
		ox, err := old.Register(ctx, spec("skill-x", "cap.x"))
		if err != nil {
			t.Fatal(err)
		}
		sy, err := scoped.Register(ctx, spec("skill-y", "cap.y"))
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, "legacy agent at the scoped watcher", func() bool { return hears(watcher, ox.Agent.AgentID) })
		waitFor(t, 10*time.Second, "scoped agent at the legacy node", func() bool { return hears(old, sy.Agent.AgentID) })
		keptAlive(t, watcher, ox.Agent.AgentID, "heartbeats of the legacy agent at the scoped watcher")
		keptAlive(t, old, sy.Agent.AgentID, "heartbeats of the scoped agent at the legacy node")
		// The legacy node leaves: the bridge closes.
		if err := old.Close(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, "bridge closed", func() bool { return !watcher.Gossip().Bridging() })
	})
}

// TestFullAndScopedNodes: a node of full scope hears every agent on the
// announce topic, and its own agent reaches the scoped nodes interested in
// it on the shard topic, which the full node joins without subscribing.
func TestFullAndScopedNodes(t *testing.T) {
	bubble(t, func(t *testing.T) {
		ctx := context.Background()
		tn := newNet(t, 2, Config{Scope: ScopeInterest})
		full := tn.addConfigured(func(c *Config) { c.Scope = ScopeFull })
		scoped := tn.add(nil, nil)
		waitFor(t, 10*time.Second, "dht", func() bool { return scoped.DHT().RoutingTableSize() > 0 && full.DHT().RoutingTableSize() > 0 })
		watch := scoped.Subscribe(view.Filter{Capability: "cap.f"}, 16)
		defer watch.Close()
		fa, err := full.Register(ctx, spec("skill-f", "cap.f"))
		if err != nil {
			t.Fatal(err)
		}
		sa, err := tn.nodes[1].Register(ctx, spec("skill-s", "cap.s"))
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, "full node's agent at the scoped watcher", func() bool { return hears(scoped, fa.Agent.AgentID) })
		waitFor(t, 10*time.Second, "scoped agent at the full node", func() bool { return hears(full, sa.Agent.AgentID) })
		if scoped.Gossip().Bridging() {
			t.Fatal("a node of full scope of this version was taken for one of the previous version")
		}
		if hears(scoped, sa.Agent.AgentID) {
			t.Fatal("the watcher holds an agent outside its interest")
		}
		keptAlive(t, scoped, fa.Agent.AgentID, "heartbeats of the full node's agent at the scoped watcher")
		keptAlive(t, full, sa.Agent.AgentID, "heartbeats of the scoped agent at the full node")
	})
}

// TestBeatOnForeignShardIsNotAdmitted: a host that heartbeats its agent
// on a shard none of the agent's capabilities is in makes the shard's
// subscribers fetch the record, which they then drop: a scoped view holds
// only its interest.
func TestBeatOnForeignShardIsNotAdmitted(t *testing.T) {
	bubble(t, func(t *testing.T) {
		ctx := context.Background()
		tn := newNet(t, 3, Config{Scope: ScopeInterest})
		a, m := tn.nodes[1], tn.nodes[2]
		if _, err := a.Register(ctx, spec("skill-a", "cap.a")); err != nil {
			t.Fatal(err)
		}
		mz, err := m.Register(ctx, spec("skill-z", "cap.z"))
		if err != nil {
			t.Fatal(err)
		}
		// m takes the foreign shard into its interest (a watch), so that
		// its node keeps the shard joined: a shard joined by hand with
		// Gossip().JoinShard is left again at the node's next interest
		// sync (which made this test fail 6 times in 40).
		foreign := record.Shard("cap.a")
		defer m.watchInterest("cap.a")()
		// Listened is what a publish consults: the topic's watcher counts
		// the peer a moment after pubsub lists it, and a beat published in
		// between goes to no topic (made this test fail 3 times in 100).
		waitFor(t, 10*time.Second, "a shard peer", func() bool {
			return len(m.Gossip().ShardPeers(foreign)) > 0 && m.Gossip().Listened(foreign)
		})
		sb, err := m.signBeat(mz.Agent.AgentID, record.StatusHealthy, "")
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Gossip().PublishBeat(ctx, kindHeartbeat, sb, foreign); err != nil {
			t.Fatal(err)
		}
		// a fetches the unknown agent's record, then drops it.
		waitFor(t, 10*time.Second, "the fetched record to be dropped", func() bool {
			return promtest.ToFloat64(a.Metrics().Rejects.WithLabelValues("gossip", reasonOutsideInterest)) >= 1
		})
		if hears(a, mz.Agent.AgentID) {
			t.Fatal("a beat on a foreign shard put its agent into a scoped view")
		}
	})
}

// TestFirstTopicPeersReannounceOnce: a node whose topics gain their first
// peer together (a peer joins every shard of its agent) announces the
// agent again once on each of those topics, not once per topic. Toward a
// peer of an earlier version it announces once more half a second later
// (republishTrail: a peer that joined at the same moment may have missed
// the first); toward one of sync 1.2.0, which syncs its shards again a second
// after joining (gossip.TrailSyncProtocol), it does not. The
// re-announcements of a join were 4.1 per registration in simnet's churn,
// a fifth of its CPU; the trailing one cost as much as the first.
func TestFirstTopicPeersReannounceOnce(t *testing.T) {
	for _, old := range []bool{false, true} {
		name := "peer with trailing syncs"
		if old {
			name = "peer without"
		}
		t.Run(name, func(t *testing.T) { testFirstTopicPeersReannounceOnce(t, old) })
	}
}

func testFirstTopicPeersReannounceOnce(t *testing.T, old bool) {
	bubble(t, func(t *testing.T) {
		ctx := context.Background()
		tn := newNet(t, 1, Config{Scope: ScopeInterest})
		host := tn.nodes[0]
		caps := []string{"cap.r1", "cap.r2", "cap.r3", "cap.r4"}
		a := spec("skill-r", caps...)
		if shards := a.Shards(); len(shards) != len(caps) {
			t.Fatalf("the capabilities fall in %d shards, want %d", len(shards), len(caps))
		}
		sa, err := host.Register(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		id := sa.Agent.AgentID
		announced := func() float64 { return promtest.ToFloat64(host.m.GossipPublished.WithLabelValues("announce")) }
		time.Sleep(time.Second)
		synctest.Wait()
		if n := announced(); n != 0 {
			t.Fatalf("%v announcements published with no peer", n)
		}
		peer := tn.addConfigured(func(c *Config) { c.DisableSyncTrail = old })
		if _, err := peer.Register(ctx, spec("skill-q", caps...)); err != nil {
			t.Fatal(err)
		}
		joined := time.Now()
		waitFor(t, 10*time.Second, "the host's agent at the peer", func() bool { return hears(peer, id) })
		// One publish per shard topic of the record, all of which the peer
		// joined at once (a scoped node does not join scene topics).
		topics := float64(len(caps))
		time.Sleep(republishTrail/2 - time.Since(joined))
		synctest.Wait()
		if n := announced(); n != topics {
			t.Fatalf("%v announcements published %v after the peer joined the agent's %v shard topics at once, want %v (one re-announcement)", n, time.Since(joined), topics, topics)
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		want, resends, skipped := topics, 1.0, 1.0
		if old {
			want, resends, skipped = 2*topics, 2, 0
		}
		if n := announced(); n != want {
			t.Fatalf("%v announcements published %v after the peer joined, want %v", n, time.Since(joined), want)
		}
		if n := promtest.ToFloat64(host.m.TrailsSkipped); n != skipped {
			t.Fatalf("%v trailing re-announcements skipped, want %v", n, skipped)
		}
		cur, _ := host.hostedRecord(id)
		if got, ok := live(peer.Node, id); !ok || got.Record.Agent.Seq != cur.Agent.Seq {
			t.Fatalf("the peer holds the agent at seq %d (held %v), the host announced %d", got.Record.Agent.Seq, ok, cur.Agent.Seq)
		}
		// Every one was a resend of the registered record: no new seq.
		if cur.Agent.Seq != sa.Agent.Seq {
			t.Fatalf("the hosted record is at seq %d, registered at %d: re-announcing signed it again", cur.Agent.Seq, sa.Agent.Seq)
		}
		if n := promtest.ToFloat64(host.m.Resends.WithLabelValues("sent")); n != resends {
			t.Fatalf("%v resends sent, want %v", n, resends)
		}
		// The peer's trailing sync, if it makes them: one request for the
		// four shards it joined together. Its only peer, the host, has
		// spent its sync rate limit on the four first syncs (3 at once,
		// then one per 5 s), so the request succeeds at its second attempt.
		trails := func() float64 { return promtest.ToFloat64(peer.m.TrailSyncs.WithLabelValues("ok")) }
		if old {
			if n := trails(); n != 0 {
				t.Fatalf("%v trailing syncs at a peer of an earlier version", n)
			}
			return
		}
		waitFor(t, 10*time.Second, "the peer's trailing sync", func() bool { return trails() >= 1 })
		if n := trails(); n != 1 {
			t.Fatalf("%v trailing syncs at the peer, want 1 for its four shards", n)
		}
	})
}

// TestReannounceSignsAgainForOldPeers: a topic peer that does not
// forward resends (a node of protocol v1.1) gets the re-announcements
// signed again, with new seqs, as before v1.2.
func TestReannounceSignsAgainForOldPeers(t *testing.T) {
	bubble(t, func(t *testing.T) {
		ctx := context.Background()
		tn := newNet(t, 1, Config{Scope: ScopeInterest})
		host := tn.nodes[0]
		caps := []string{"cap.o1", "cap.o2"}
		sa, err := host.Register(ctx, spec("skill-o", caps...))
		if err != nil {
			t.Fatal(err)
		}
		id := sa.Agent.AgentID
		old := tn.addConfigured(func(c *Config) {
			gc := gossip.DefaultConfig()
			gc.DisableResends = true
			c.Gossip = &gc
		})
		if _, err := old.Register(ctx, spec("skill-p", caps...)); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, "the trailing re-announcement at the old peer", func() bool {
			got, ok := live(old.Node, id)
			return ok && got.Record.Agent.Seq >= sa.Agent.Seq+2
		})
		if n := promtest.ToFloat64(host.m.Resends.WithLabelValues("sent")); n != 0 {
			t.Fatalf("%v resends sent to a peer that does not forward them", n)
		}
	})
}

// TestTrailingSyncsFollowTheVersion: a configuration that models an
// earlier version makes no trailing syncs.
func TestTrailingSyncsFollowTheVersion(t *testing.T) {
	noBatches, noTrail := gossip.DefaultConfig(), gossip.DefaultConfig()
	noBatches.DisableBatches, noTrail.DisableSyncTrail = true, true
	for _, c := range []struct {
		name string
		cfg  Config
		want bool
	}{
		{"default", Config{}, true},
		{"DisableSyncTrail", Config{DisableSyncTrail: true}, false},
		{"v1.2 (DisableBeatRequests)", Config{DisableBeatRequests: true}, false},
		{"v1.0 (gossip without batches)", Config{Gossip: &noBatches}, false},
		{"gossip DisableSyncTrail", Config{Gossip: &noTrail}, false},
		{"before scoped liveness", Config{legacy: true}, false},
	} {
		if got := c.cfg.TrailingSyncs(); got != c.want {
			t.Errorf("%s: TrailingSyncs = %v, want %v", c.name, got, c.want)
		}
	}
}
