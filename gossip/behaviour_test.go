package gossip

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentd/agentd/metrics"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/trust"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
)

// TestUnknownAgentDedupe: beats of an agent whose key B does not know are
// ignored and make B ask for the record once per backoff; once the key is
// known, beats are delivered.
func TestUnknownAgentDedupe(t *testing.T) {
	bubble(t, func(t *testing.T) {
		tn := newTestNet(t, 2, testConfig())
		a, b := tn.nodes[0], tn.nodes[1]
		tn.connect(a, b)
		tn.waitTopicPeers(1)
		tn.waitMesh()
		rec := a.record(t)
		if err := a.v.VerifyAgent(rec, trust.VerifyOptions{}); err != nil { // A knows its own key
			t.Fatal(err)
		}
		for i := range 3 {
			if err := a.g.PublishBeat(tn.ctx, KindHeartbeat, a.beat(t, KindHeartbeat)); err != nil {
				t.Fatalf("publish beat: %v", err)
			}
			waitFor(t, 5*time.Second, fmt.Sprintf("unknown_key refusal %d", i+1), func() bool { return rejects(t, b.m, "gossip", "unknown_key") == float64(i+1) })
		}
		waitFor(t, 5*time.Second, "an UnknownAgent call", func() bool { return len(b.sink.unknownCalls()) > 0 })
		calls := b.sink.unknownCalls()
		if len(calls) != 1 || calls[0].agentID != a.id.AgentID || calls[0].from != a.h.ID() {
			t.Fatalf("UnknownAgent calls = %+v, want one for %s from %s", calls, a.id.AgentID, a.h.ID())
		}
		if n := len(b.sink.deliveries(nil)); n != 0 {
			t.Fatalf("%d deliveries of beats from an unknown agent", n)
		}

		// After the backoff, the next beat asks again (a failed fetch is retried).
		time.Sleep(DefaultConfig().UnknownAgentBackoff)
		if err := a.g.PublishBeat(tn.ctx, KindHeartbeat, a.beat(t, KindHeartbeat)); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, "a second UnknownAgent call", func() bool { return len(b.sink.unknownCalls()) == 2 })

		// The node fetched the record: beats now reach the sink.
		if err := b.v.VerifyAgent(rec, trust.VerifyOptions{From: a.h.ID()}); err != nil {
			t.Fatal(err)
		}
		sb := a.beat(t, KindHeartbeat)
		if err := a.g.PublishBeat(tn.ctx, KindHeartbeat, sb); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, "beat delivery", func() bool {
			return len(b.sink.deliveries(func(d delivery) bool { return d.kind == KindHeartbeat && d.beat.Beat.Seq == sb.Beat.Seq })) == 1
		})
		if got := delivered(t, b.m, KindHeartbeat); got != 1 {
			t.Errorf("delivered{heartbeat} = %v, want 1", got)
		}
	})
}

// TestReplayAfterUnregister: an announcement replayed after the agent's
// unregister is ignored, counted as a replay and not forwarded.
func TestReplayAfterUnregister(t *testing.T) {
	bubble(t, func(t *testing.T) {
		tn := newTestNet(t, 3, testConfig())
		a, b, c := tn.nodes[0], tn.nodes[1], tn.nodes[2]
		tn.connect(a, b)
		tn.connect(b, c) // a line: C hears A only through B
		tn.waitTopicPeers(1)
		tn.waitMesh()

		old := a.record(t)
		if err := a.g.PublishAnnounce(tn.ctx, old); err != nil {
			t.Fatal(err)
		}
		for i, nd := range []*tnode{b, c} {
			waitFor(t, 5*time.Second, fmt.Sprint("announce at ", i), func() bool { return len(nd.sink.announcesOf(a.id.AgentID, old.Agent.Seq)) == 1 })
		}
		unreg := a.beat(t, KindUnregister)
		if err := a.g.PublishBeat(tn.ctx, KindUnregister, unreg); err != nil {
			t.Fatal(err)
		}
		for _, nd := range []*tnode{b, c} {
			waitFor(t, 5*time.Second, "unregister", func() bool {
				return len(nd.sink.deliveries(func(d delivery) bool { return d.kind == KindUnregister })) == 1
			})
		}

		// Replay 1: the same signed record in a fresh envelope (new bytes,
		// so pubsub's seen-cache does not catch it; the sink's tombstone does).
		env := map[string]any{"protocol_version": "v1.0", "type": "announce", "announce": old.Announce(), "replayed": true}
		data, err := json.Marshal(env)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.g.announce.t.Publish(tn.ctx, data); err != nil {
			t.Fatalf("replay publish: %v", err)
		}
		waitFor(t, 5*time.Second, "replay refusal at B", func() bool { return rejects(t, b.m, "gossip", "replay") == 1 })

		// Replay 2: the identical message after pubsub's seen-cache has
		// forgotten it (2 min); the record itself is still valid (TTL 5 min).
		time.Sleep(3 * time.Minute)
		oldData, err := EncodeAnnounce(old)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.g.announce.t.Publish(tn.ctx, oldData); err != nil {
			t.Fatalf("replay publish: %v", err)
		}
		waitFor(t, 5*time.Second, "second replay refusal at B", func() bool { return rejects(t, b.m, "gossip", "replay") == 2 })

		// A new registration after the unregister is news again. It travels
		// the same A→B→C path after the replays, so once C has it, C would
		// have had any forwarded replay.
		fresh := a.record(t)
		if err := a.g.PublishAnnounce(tn.ctx, fresh); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, "fresh announce at C", func() bool { return len(c.sink.announcesOf(a.id.AgentID, fresh.Agent.Seq)) == 1 })
		for name, nd := range map[string]*tnode{"B": b, "C": c} {
			if n := len(nd.sink.announcesOf(a.id.AgentID, old.Agent.Seq)); n != 1 {
				t.Errorf("%s: old record delivered %d times, want 1", name, n)
			}
		}
		if got := rejects(t, c.m, "gossip", "replay"); got != 0 {
			t.Errorf("C counted %v replays: B forwarded an ignored message", got)
		}
	})
}

// TestRejectReasons: a peer without agentd's validator publishes bad
// messages straight to B; each is refused and counted by reason.
func TestRejectReasons(t *testing.T) {
	bubble(t, func(t *testing.T) {
		tn := newTestNet(t, 1, testConfig())
		b := tn.nodes[0]
		x, pub := tn.rawPeer(t, b)

		// too large: a well-formed envelope padded past 64 KiB.
		pub([]byte(`{"protocol_version":"v1.0","type":"announce","pad":"` + strings.Repeat("x", record.MaxMessageBytes) + `"}`))
		// bad signature: X's own record with a flipped signature byte.
		forged := *x.record(t)
		forged.Signature = slices.Clone(forged.Signature)
		forged.Signature[len(forged.Signature)/2] ^= 0xff
		data, _ := EncodeAnnounce(&forged)
		pub(data)
		// wrong From: a valid record of another peer, published by X.
		victim, err := trust.Generate()
		if err != nil {
			t.Fatal(err)
		}
		data, _ = EncodeAnnounce(signAgent(t, victim, 1))
		pub(data)
		// unsupported major version.
		pub([]byte(`{"protocol_version":"v2.0","type":"announce","announce":{"future":true}}`))
		// malformed: unknown type.
		pub([]byte(`{"protocol_version":"v1.0","type":"shout"}`))
		// a newer minor version of a valid message is accepted.
		good := x.record(t)
		env := map[string]any{"protocol_version": "v1.3", "type": "announce", "announce": good.Announce(), "extension": 1}
		data, _ = json.Marshal(env)
		pub(data)

		want := map[string]float64{"too_large": 1, "bad_signature": 1, "peer_mismatch": 1, "unsupported_version": 1, "malformed": 1}
		waitFor(t, 10*time.Second, "all refusals counted", func() bool {
			for r, n := range want {
				if rejects(t, b.m, "gossip", r) != n {
					return false
				}
			}
			return true
		})
		waitFor(t, 5*time.Second, "newer-minor announce", func() bool { return len(b.sink.announcesOf(x.id.AgentID, good.Agent.Seq)) == 1 })
		if n := len(b.sink.deliveries(nil)); n != 1 {
			t.Errorf("B delivered %d messages, want only the valid one", n)
		}
		if got := delivered(t, b.m, KindAnnounce); got != 1 {
			t.Errorf("delivered{announce} = %v, want 1", got)
		}
	})
}

// TestForgedPublisherScoredDown: a peer publishing validly framed messages
// with broken signatures is scored below the graylist threshold at every
// honest node, and none of its messages, not even a later valid one,
// reaches an honest sink.
func TestForgedPublisherScoredDown(t *testing.T) {
	bubble(t, func(t *testing.T) {
		const honest = 5
		cfg := testConfig()
		tn := newTestNet(t, honest, cfg)
		for i := range honest {
			for j := i + 1; j < honest; j++ {
				tn.connect(tn.nodes[i], tn.nodes[j])
			}
		}
		x := tn.addLinkedHost(honest)
		topics, stop := rawPubSub(t, tn.ctx, x.h, AnnounceTopic)
		defer stop()
		hn := tn.nodes[:honest]
		for _, nd := range hn {
			tn.connect(nd, x)
		}
		tn.waitTopicPeers(honest)
		tn.waitMesh()
		waitFor(t, 10*time.Second, "a first score of the attacker", func() bool {
			for _, nd := range hn {
				if s, ok := nd.g.PeerScores()[x.h.ID()]; !ok || s < 0 {
					return false
				}
			}
			return true
		})

		for range 10 {
			f := *x.record(t)
			f.Signature = slices.Clone(f.Signature)
			f.Signature[4] ^= 0x55
			data, err := EncodeAnnounce(&f)
			if err != nil {
				t.Fatal(err)
			}
			if err := topics[AnnounceTopic].Publish(tn.ctx, data); err != nil {
				t.Fatal(err)
			}
		}
		graylist := DefaultThresholds().GraylistThreshold
		waitFor(t, 10*time.Second, "attacker below the graylist threshold everywhere", func() bool {
			for _, nd := range hn {
				if s, ok := nd.g.PeerScores()[x.h.ID()]; !ok || s >= graylist {
					return false
				}
			}
			return true
		})
		for i, nd := range hn {
			t.Logf("node %d: attacker score %.0f, bad_signature refusals %v", i, nd.g.PeerScores()[x.h.ID()], rejects(t, nd.m, "gossip", "bad_signature"))
			for p, s := range nd.g.PeerScores() {
				if p != x.h.ID() && s < 0 {
					t.Errorf("node %d scores honest peer %s at %v", i, p, s)
				}
			}
		}

		// Even a valid message of the graylisted peer is dropped.
		valid := x.record(t)
		data, _ := EncodeAnnounce(valid)
		if err := topics[AnnounceTopic].Publish(tn.ctx, data); err != nil {
			t.Fatal(err)
		}
		never(t, 3*time.Second, "a delivery of the attacker's messages", func() bool {
			for _, nd := range hn {
				if len(nd.sink.deliveries(func(d delivery) bool { return d.from == x.h.ID() })) > 0 {
					return true
				}
			}
			return false
		})
	})
}

// TestScenes covers join, publish, scene membership checks and leave.
func TestScenes(t *testing.T) {
	bubble(t, func(t *testing.T) {
		tn := newTestNet(t, 2, testConfig())
		a, b := tn.nodes[0], tn.nodes[1]
		o := tn.addLinkedHost(2) // observer on the scene topic only, no validator
		scene := SceneTopic("auth")
		if scene != "/agentd/scene/auth/1.0.0" {
			t.Fatalf("SceneTopic = %q", scene)
		}
		topics, stop := rawPubSub(t, tn.ctx, o.h, scene)
		defer stop()
		osub, err := topics[scene].Subscribe()
		if err != nil {
			t.Fatal(err)
		}
		defer osub.Cancel()

		if err := b.g.JoinScene("no spaces"); !errors.Is(err, ErrInvalidScene) {
			t.Fatalf("JoinScene(invalid) = %v, want ErrInvalidScene", err)
		}
		for _, nd := range []*tnode{a, b} {
			if err := nd.g.JoinScene("auth"); err != nil {
				t.Fatal(err)
			}
			if err := nd.g.JoinScene("auth"); err != nil {
				t.Fatalf("second JoinScene: %v", err)
			}
		}
		if got := b.g.Scenes(); !slices.Equal(got, []string{"auth"}) {
			t.Fatalf("Scenes = %v", got)
		}
		tn.connect(a, b)
		tn.connect(a, o)
		tn.connect(b, o)
		waitFor(t, 5*time.Second, "scene peers", func() bool {
			return len(a.g.ScenePeers("auth")) == 2 && len(b.g.ScenePeers("auth")) == 2
		})

		next := func() *record.SignedAgent {
			t.Helper()
			ctx, cancel := context.WithTimeout(tn.ctx, 5*time.Second)
			defer cancel()
			m, err := osub.Next(ctx)
			if err != nil {
				t.Fatalf("observer: %v", err)
			}
			dm, err := Decode(m.Data, 0)
			if err != nil {
				t.Fatalf("observer decode: %v", err)
			}
			return dm.Agent
		}

		// A member's announcement goes to the announce and the scene topic;
		// B, on both, gets it once.
		in := a.record(t, "auth")
		if err := a.g.PublishAnnounce(tn.ctx, in); err != nil {
			t.Fatal(err)
		}
		if got := next(); got.Agent.Seq != in.Agent.Seq {
			t.Fatalf("observer got seq %d, want %d", got.Agent.Seq, in.Agent.Seq)
		}
		waitFor(t, 5*time.Second, "B delivery", func() bool { return len(b.sink.announcesOf(a.id.AgentID, in.Agent.Seq)) == 1 })

		// A record without the scene is not published on the scene topic.
		out := a.record(t)
		if err := a.g.PublishAnnounce(tn.ctx, out); err != nil {
			t.Fatal(err)
		}
		in2 := a.record(t, "auth")
		if err := a.g.PublishAnnounce(tn.ctx, in2); err != nil {
			t.Fatal(err)
		}
		if got := next(); got.Agent.Seq != in2.Agent.Seq {
			t.Fatalf("observer got seq %d on the scene topic, want %d (seq %d has no skill in the scene)", got.Agent.Seq, in2.Agent.Seq, out.Agent.Seq)
		}
		waitFor(t, 5*time.Second, "B deliveries", func() bool { return len(b.sink.announcesOf(a.id.AgentID, in2.Agent.Seq)) == 1 })
		// Each announcement is delivered at most once. (The record without
		// the scene may be validated after the newer one overtook it and
		// then be dropped as superseded: validation runs concurrently.)
		seen := map[uint64]bool{}
		for _, d := range b.sink.deliveries(nil) {
			if seen[d.agent.Agent.Seq] {
				t.Errorf("seq %d delivered twice", d.agent.Agent.Seq)
			}
			seen[d.agent.Agent.Seq] = true
		}

		// A valid record that is not in the scene, pushed onto the scene
		// topic by a peer without the validator, is rejected.
		data, _ := EncodeAnnounce(o.record(t))
		if err := topics[scene].Publish(tn.ctx, data); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, "scene_mismatch at B", func() bool { return rejects(t, b.m, "gossip", "scene_mismatch") == 1 })

		// Leave.
		if err := b.g.LeaveScene("auth"); err != nil {
			t.Fatal(err)
		}
		if err := b.g.LeaveScene("auth"); !errors.Is(err, ErrSceneNotJoined) {
			t.Fatalf("second LeaveScene = %v, want ErrSceneNotJoined", err)
		}
		if got := b.g.Scenes(); len(got) != 0 {
			t.Fatalf("Scenes after leave = %v", got)
		}
		waitFor(t, 5*time.Second, "A to see B leave the scene", func() bool { return !slices.Contains(a.g.ScenePeers("auth"), b.h.ID()) })
		in3 := a.record(t, "auth")
		if err := a.g.PublishAnnounce(tn.ctx, in3); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, "B delivery through the announce topic", func() bool { return len(b.sink.announcesOf(a.id.AgentID, in3.Agent.Seq)) == 1 })
		if d := b.sink.announcesOf(a.id.AgentID, in3.Agent.Seq)[0]; d.topic != AnnounceTopic {
			t.Errorf("delivered on %s after leaving the scene", d.topic)
		}
	})
}

// TestSync: a node that joins late gets its neighbour's live view.
func TestSync(t *testing.T) {
	bubble(t, func(t *testing.T) {
		tn := newTestNet(t, 2, testConfig())
		a, b := tn.nodes[0], tn.nodes[1]
		if _, err := b.g.Sync(tn.ctx); !errors.Is(err, ErrNoPeers) {
			t.Fatalf("Sync without peers = %v, want ErrNoPeers", err)
		}
		var want []*record.SignedAgent
		for i := range 5 {
			id, err := trust.Generate()
			if err != nil {
				t.Fatal(err)
			}
			sa := signAgent(t, id, uint64(i+1))
			a.sink.setLive(sa)
			a.sink.heard[sa.Agent.AgentID] = Heard{Age: time.Duration(i) * 1500 * time.Millisecond, Interval: 5 * time.Second}
			want = append(want, sa)
		}
		// A tampered record and B's own record are in A's view too.
		bad, _ := trust.Generate()
		tampered := *signAgent(t, bad, 1)
		tampered.PeerSignature = slices.Clone(tampered.PeerSignature)
		tampered.PeerSignature[0] ^= 1
		a.sink.setLive(&tampered)
		a.sink.setLive(b.record(t))

		tn.connect(a, b)
		n, err := b.g.Sync(tn.ctx)
		if err != nil {
			t.Fatalf("Sync: %v", err)
		}
		if n != len(want) {
			t.Fatalf("Sync learnt %d records, want %d", n, len(want))
		}
		for i, sa := range want {
			ds := b.sink.announcesOf(sa.Agent.AgentID, sa.Agent.Seq)
			if len(ds) != 1 || ds[0].topic != SyncProtocol || ds[0].from.String() != sa.Agent.PeerID {
				t.Fatalf("record %s delivered as %+v", sa.Agent.AgentID, ds)
			}
			if want := (Heard{Age: time.Duration(i) * 1500 * time.Millisecond, Interval: 5 * time.Second}); ds[0].heard != want {
				t.Errorf("record %d delivered with heard %+v, want what A reported, %+v", i, ds[0].heard, want)
			}
		}
		if got := rejects(t, b.m, "sync", "bad_peer_signature"); got != 1 {
			t.Errorf("sync bad_peer_signature = %v, want 1", got)
		}
		// Nothing new the second time.
		if n, err := b.g.Sync(tn.ctx); err != nil || n != 0 {
			t.Fatalf("second Sync = %d, %v; want 0, nil", n, err)
		}
		// A serves one peer at most SyncServeBurst (3) requests at once.
		if _, err := b.g.Sync(tn.ctx); err != nil {
			t.Fatalf("third Sync: %v", err)
		}
		if _, err := b.g.Sync(tn.ctx); !errors.Is(err, ErrSyncRefused) || !strings.Contains(err.Error(), record.CodeRateLimited) {
			t.Fatalf("fourth Sync = %v, want rate limited", err)
		}
		if got := rejects(t, a.m, "sync", "rate_limited"); got != 1 {
			t.Errorf("rate_limited = %v, want 1", got)
		}
		time.Sleep(DefaultConfig().SyncServeInterval)
		if _, err := b.g.Sync(tn.ctx); err != nil {
			t.Fatalf("Sync after the interval: %v", err)
		}
	})
}

// TestSyncKeepsTheFreshestAge: two neighbours hold the same record, one
// heard from the agent 20 s ago, the other 2 s ago; the joiner gets the
// record once, with the fresher age (an agent alive for one honest
// neighbour is alive).
func TestSyncKeepsTheFreshestAge(t *testing.T) {
	bubble(t, func(t *testing.T) {
		tn := newTestNet(t, 3, testConfig())
		a, b, c := tn.nodes[0], tn.nodes[1], tn.nodes[2]
		id, err := trust.Generate()
		if err != nil {
			t.Fatal(err)
		}
		sa := signAgent(t, id, 1)
		a.sink.setLive(sa)
		a.sink.heard[sa.Agent.AgentID] = Heard{Age: 20 * time.Second, Interval: 5 * time.Second}
		b.sink.setLive(sa)
		b.sink.heard[sa.Agent.AgentID] = Heard{Age: 2 * time.Second, Interval: 5 * time.Second}
		tn.connect(c, a)
		tn.connect(c, b)
		if n, err := c.g.Sync(tn.ctx); err != nil || n != 1 {
			t.Fatalf("Sync = %d, %v; want 1 record", n, err)
		}
		ds := c.sink.announcesOf(sa.Agent.AgentID, 1)
		if len(ds) != 1 || ds[0].heard.Age != 2*time.Second {
			t.Fatalf("delivered %+v, want one delivery heard 2s ago", ds)
		}
	})
}

// TestStarTopologyPeerExchange: every node dials only node 0. With peer
// exchange the leaves learn each other when node 0 prunes its mesh to
// Dhi, and an announcement reaches everyone in a few link latencies;
// without it the leaves outside node 0's mesh depend on IHAVE gossip,
// which picks Dlazy of them per heartbeat for HistoryGossip heartbeats,
// so some wait seconds and some never get the message.
func TestStarTopologyPeerExchange(t *testing.T) {
	const n, rounds = 20, 5
	const patience = 5 * time.Second
	type outcome struct {
		full     []time.Duration // per round; patience+1 when incomplete
		coverage float64         // share of (round, node) deliveries within patience
		conns    float64
	}
	results := map[bool]*outcome{}
	for _, px := range []bool{true, false} {
		name := map[bool]string{true: "px-on", false: "px-off"}[px]
		t.Run(name, func(t *testing.T) {
			bubble(t, func(t *testing.T) {
				cfg := testConfig()
				cfg.PeerExchange = px
				tn := newTestNet(t, n, cfg)
				hub := tn.nodes[0]
				for _, nd := range tn.nodes[1:] {
					tn.connect(nd, hub)
				}
				tn.waitTopicPeers(1)
				tn.waitMesh()
				// settle waits until the hub has pruned its mesh to Dhi and
				// every leaf that learnt other peers (by PX) has built its mesh.
				params := pubsub.DefaultGossipSubParams()
				settle := func() {
					waitFor(t, 30*time.Second, "hub prune and leaf meshes", func() bool {
						if len(hub.g.MeshPeers(AnnounceTopic)) > params.Dhi {
							return false
						}
						for _, nd := range tn.nodes[1:] {
							if tp := len(nd.g.TopicPeers()); tp > 1 && len(nd.g.MeshPeers(AnnounceTopic)) < min(tp, params.Dlo) {
								return false
							}
						}
						return true
					})
				}
				settle()
				out := &outcome{}
				total := 0
				for _, nd := range tn.nodes {
					total += len(nd.h.Network().Peers())
				}
				out.conns = float64(total) / n
				got := 0
				var first time.Duration
				for round := range rounds + 1 {
					pub := tn.nodes[1+round*3]
					sa := pub.record(t)
					t0 := time.Now()
					if err := pub.g.PublishAnnounce(tn.ctx, sa); err != nil {
						t.Fatal(err)
					}
					reached := func() int {
						c := 0
						for _, nd := range tn.nodes {
							if nd != pub && len(nd.sink.announcesOf(sa.Agent.AgentID, sa.Agent.Seq)) > 0 {
								c++
							}
						}
						return c
					}
					deadline := t0.Add(patience)
					for reached() < n-1 && time.Now().Before(deadline) {
						time.Sleep(time.Millisecond)
					}
					last := patience + time.Millisecond
					if reached() == n-1 {
						last = 0
						for _, nd := range tn.nodes {
							if nd != pub {
								last = max(last, nd.sink.announcesOf(sa.Agent.AgentID, sa.Agent.Seq)[0].at.Sub(t0))
							}
						}
					}
					if round == 0 {
						// The first announcement races the PX dials
						// the hub's first prune set off; report it
						// apart, then measure the settled overlay.
						first = last
						settle()
						total = 0
						for _, nd := range tn.nodes {
							total += len(nd.h.Network().Peers())
						}
						out.conns = float64(total) / n
						continue
					}
					got += reached()
					out.full = append(out.full, last)
				}
				out.coverage = float64(got) / float64(rounds*(n-1))
				results[px] = out
				t.Logf("%s: avg connections per node %.1f; time for an announcement from a leaf to reach all %d nodes (virtual time; %v = not within %v): first after start %v; next %d: p50 %v, max %v; coverage within %v: %.0f%%",
					name, out.conns, n, patience+time.Millisecond, patience, first, rounds, percentile(out.full, 50), percentile(out.full, 100), patience, 100*out.coverage)
			})
		})
	}
	on, off := results[true], results[false]
	if on == nil || off == nil {
		return // a subtest failed
	}
	if on.coverage != 1 {
		t.Errorf("with peer exchange %.0f%% of deliveries arrived, want all", 100*on.coverage)
	}
	if m := percentile(on.full, 100); m > 200*time.Millisecond {
		t.Errorf("with peer exchange the slowest full delivery took %v, want <= 200 ms", m)
	}
	if percentile(off.full, 50) <= percentile(on.full, 50) {
		t.Errorf("peer exchange did not help: p50 %v with, %v without", percentile(on.full, 50), percentile(off.full, 50))
	}
	if on.conns <= off.conns {
		t.Errorf("peer exchange made no connections: %.1f vs %.1f per node", on.conns, off.conns)
	}
}

var _ = pubsub.ValidationAccept
var _ peer.ID

// TestOnTopicPeers: the hook fires when the announce topic goes from no
// subscriber to one, not for every further subscriber, and again after
// the node lost them all.
func TestOnTopicPeers(t *testing.T) {
	bubble(t, func(t *testing.T) {
		tn := newTestNet(t, 2, testConfig())
		nd := tn.addHost(2)
		nd.m = metrics.New(false)
		g, err := New(tn.ctx, nd.h, testConfig(), nd.v, nd.sink, nd.m, nil)
		if err != nil {
			t.Fatal(err)
		}
		var calls atomic.Int32
		g.OnTopicPeers(func(string) { calls.Add(1) })
		if err := g.Start(tn.ctx); err != nil {
			t.Fatal(err)
		}
		nd.g = g
		if err := tn.mn.LinkAll(); err != nil {
			t.Fatal(err)
		}
		a, b := tn.nodes[0], tn.nodes[1]
		tn.connect(nd, a)
		waitFor(t, 5*time.Second, "the first topic peer", func() bool { return calls.Load() == 1 })
		tn.connect(nd, b)
		waitFor(t, 5*time.Second, "the second topic peer", func() bool { return len(g.TopicPeers()) == 2 })
		synctest.Wait() // everything the second peer set off has run
		if n := calls.Load(); n != 1 {
			t.Fatalf("hook called %d times for two peers, want once", n)
		}
		for _, p := range []*tnode{a, b} {
			if err := tn.mn.DisconnectPeers(nd.h.ID(), p.h.ID()); err != nil {
				t.Fatal(err)
			}
		}
		waitFor(t, 5*time.Second, "no topic peer", func() bool { return len(g.TopicPeers()) == 0 })
		tn.connect(nd, b)
		waitFor(t, 5*time.Second, "a topic peer again", func() bool { return calls.Load() == 2 })
	})
}
