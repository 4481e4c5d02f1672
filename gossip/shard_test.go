package gossip

import (
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentd/agentd/record"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
)

func TestShardTopicNames(t *testing.T) {
	sh := record.Shard("org-data-read")
	if !record.ValidShard(sh) || len(sh) != 4 {
		t.Fatalf("Shard = %q", sh)
	}
	k := record.SkillKey(record.Wildcard, "org-data-read")
	if want := k.Hex()[:4]; sh != want {
		t.Fatalf("Shard = %q, want the first 4 hex digits of SHA256(\"*:org-data-read\") %q", sh, want)
	}
	topic := ShardTopic(sh)
	if topic != "/agentd/shard/"+sh+"/1.0.0" || !topicRe.MatchString(topic) {
		t.Fatalf("ShardTopic = %q", topic)
	}
	if got, ok := ShardOfTopic(topic); !ok || got != sh {
		t.Fatalf("ShardOfTopic = %q, %v", got, ok)
	}
	for _, bad := range []string{"", "abc", "ABCD", "12345", "zz00"} {
		if ShardTopic(bad) != "" {
			t.Errorf("ShardTopic(%q) accepted", bad)
		}
	}
	if _, ok := ShardOfTopic(AnnounceTopic); ok {
		t.Error("the announce topic read as a shard topic")
	}
}

// TestScopedShards: scoped nodes hear an agent on its shard topic and not
// on the announce topic (nobody subscribes there); an announcement pushed
// onto the wrong shard is rejected as shard_mismatch; a shard sync answers
// only the shard's agents.
func TestScopedShards(t *testing.T) {
	bubble(t, func(t *testing.T) {
		tn, a, b := scopedPair(t)
		o := tn.addHost(2) // observer: raw pubsub, no validator
		if err := tn.mn.LinkAll(); err != nil {
			t.Fatal(err)
		}
		sh := record.Shard("org-data-read")
		other := record.Shard("something-else")
		topics, stop := rawPubSub(t, tn.ctx, o.h, ShardTopic(other))
		defer stop()
		for _, nd := range []*tnode{a, b} {
			if err := nd.g.JoinShard(sh); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.g.JoinShard(other); err != nil {
			t.Fatal(err)
		}
		if err := a.g.JoinShard("nope"); err == nil {
			t.Fatal("JoinShard accepted an invalid shard")
		}
		if got := b.g.Shards(); len(got) != 2 || !slices.Contains(got, sh) {
			t.Fatalf("Shards = %v", got)
		}
		tn.connect(a, b)
		tn.connect(b, o)
		waitFor(t, 5*time.Second, "shard peers", func() bool { return len(a.g.ShardPeers(sh)) == 1 && len(b.g.ShardPeers(other)) == 1 })
		if b.g.Bridging() || len(a.g.TopicPeers()) != 0 {
			t.Fatal("scoped nodes subscribed to the announce topic")
		}

		sa := a.record(t)
		a.sink.setLive(sa)
		if err := a.g.PublishAnnounce(tn.ctx, sa); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, "announce on the shard", func() bool { return len(b.sink.announcesOf(a.id.AgentID, sa.Agent.Seq)) == 1 })
		if d := b.sink.announcesOf(a.id.AgentID, sa.Agent.Seq)[0]; d.topic != ShardTopic(sh) {
			t.Fatalf("delivered on %s, want %s", d.topic, ShardTopic(sh))
		}
		if err := a.g.PublishBeat(tn.ctx, KindHeartbeat, a.beat(t, KindHeartbeat), sh); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, "heartbeat on the shard", func() bool {
			return len(b.sink.deliveries(func(d delivery) bool { return d.kind == KindHeartbeat })) == 1
		})

		// A valid announcement on a shard its agent has no capability in.
		data, _ := EncodeAnnounce(o.record(t))
		if err := topics[ShardTopic(other)].Publish(tn.ctx, data); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, "shard_mismatch at B", func() bool { return rejects(t, b.m, "gossip", "shard_mismatch") == 1 })

		// A shard sync answers only the shard's agents: b holds a's agent
		// (shard sh) and one of another capability.
		b.sink.setLive(otherRecord(t, tn.nodes[1]))
		got, err := a.g.fetchLive(tn.ctx, b.h.ID(), []string{other})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0].Record.Agent.AllCapabilities()[0] != "something-else" {
			t.Fatalf("shard sync answered %d records", len(got))
		}
		got, err = a.g.fetchLive(tn.ctx, b.h.ID(), []string{sh})
		if err != nil || len(got) != 1 || got[0].Record.Agent.AgentID != a.id.AgentID {
			t.Fatalf("shard sync for %s: %d records, %v", sh, len(got), err)
		}
		// Readiness follows the first answered shard sync.
		if !a.g.ShardReady(sh) {
			t.Error("shard not ready after its peer answered a sync")
		}
		a.g.LeaveShard(sh)
		if a.g.ShardReady(sh) || slices.Contains(a.g.Shards(), sh) {
			t.Error("shard still joined after LeaveShard")
		}
	})
}

// otherRecord signs a record of nd's identity offering only
// "something-else".
func otherRecord(t *testing.T, nd *tnode) *record.SignedAgent {
	t.Helper()
	nd.seq++
	a := &record.Agent{
		AgentID:   nd.id.AgentID,
		AgentName: "other",
		Transport: record.Transport{Type: "libp2p", Endpoint: "/p2p/" + nd.id.PeerID.String()},
		Skills: []record.Skill{{SkillID: "skill-else", Version: "1.0.0", SkillType: record.SkillTool,
			Capabilities: []record.Capability{{ID: "something-else"}}}},
		Seq: nd.seq, IssuedAt: time.Now().UTC().Format(time.RFC3339Nano), TTLSeconds: 300,
	}
	a.SyncCapabilities()
	sa, err := nd.id.Sign(a)
	if err != nil {
		t.Fatal(err)
	}
	return sa
}

// TestRetryShardSync: a shard whose first syncs failed is not ready, and
// RetryShardSync asks a topic peer again once it serves.
func TestRetryShardSync(t *testing.T) {
	bubble(t, func(t *testing.T) {
		tn, a, b := scopedPair(t)
		sh := record.Shard("org-data-read")
		b.sink.setLive(b.record(t))
		// b does not serve sync yet.
		b.h.RemoveStreamHandler(SyncProtocol)
		b.h.RemoveStreamHandler(ScopedSyncProtocol)
		b.h.RemoveStreamHandler(TrailSyncProtocol)
		for _, nd := range []*tnode{a, b} {
			if err := nd.g.JoinShard(sh); err != nil {
				t.Fatal(err)
			}
		}
		tn.connect(a, b)
		waitFor(t, 5*time.Second, "shard peer", func() bool { return len(a.g.ShardPeers(sh)) == 1 })
		shardSyncErrs := func() float64 {
			return promtest.ToFloat64(a.m.ShardSyncs.WithLabelValues("error"))
		}
		waitFor(t, 5*time.Second, "the first shard sync to fail", func() bool { return shardSyncErrs() >= 1 })
		if a.g.ShardReady(sh) {
			t.Fatal("shard ready although its only peer refused the sync")
		}
		b.h.SetStreamHandler(SyncProtocol, b.g.handleSync)
		b.h.SetStreamHandler(ScopedSyncProtocol, b.g.handleSync)
		b.h.SetStreamHandler(TrailSyncProtocol, b.g.handleSync)
		if !a.g.RetryShardSync(sh) {
			t.Fatal("RetryShardSync queued nothing")
		}
		waitFor(t, 5*time.Second, "shard ready after the retry", func() bool { return a.g.ShardReady(sh) })
		if ok := promtest.ToFloat64(a.m.ShardSyncs.WithLabelValues("ok")); ok != 1 {
			t.Errorf("agentd_gossip_shard_syncs_total{outcome=ok} = %v, want 1", ok)
		}
		if len(a.sink.deliveries(func(d delivery) bool { return d.agent != nil && d.agent.Agent.AgentID == b.id.AgentID })) == 0 {
			t.Error("the retried sync delivered nothing")
		}
		if a.g.RetryShardSync(sh) {
			t.Error("RetryShardSync queued a sync for a ready shard")
		}
	})
}

// scopedPair starts two linked, unconnected scoped gossip nodes.
func scopedPair(t *testing.T) (*testNet, *tnode, *tnode) {
	t.Helper()
	cfg := testConfig()
	cfg.Scoped = true
	tn := newTestNet(t, 2, cfg)
	return tn, tn.nodes[0], tn.nodes[1]
}

// TestListenedFollowsSubscribers: Listened says whether a peer subscribes
// to one of the joined shards given, from the topic watchers' counts, and
// follows a subscriber that joins and leaves.
func TestListenedFollowsSubscribers(t *testing.T) {
	bubble(t, func(t *testing.T) {
		tn, a, b := scopedPair(t)
		if err := tn.mn.LinkAll(); err != nil {
			t.Fatal(err)
		}
		sh, other := record.Shard("cap-listened"), record.Shard("cap-unheard")
		for _, s := range []string{sh, other} {
			if err := a.g.JoinShard(s); err != nil {
				t.Fatal(err)
			}
		}
		tn.connect(a, b)
		if a.g.Listened(sh, other) {
			t.Fatal("listened with no subscriber")
		}
		if err := b.g.JoinShard(sh); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, "a subscriber", func() bool { return a.g.Listened(other, sh) })
		if a.g.Listened(other) || a.g.Listened() || a.g.Listened(record.Shard("not-joined")) {
			t.Fatal("listened on a shard nobody else subscribes to")
		}
		b.g.LeaveShard(sh)
		waitFor(t, 5*time.Second, "the subscriber gone", func() bool { return !a.g.Listened(sh, other) })
	})
}

// TestPublishTopicsAskPubsubNothing: choosing the topics a heartbeat goes
// to reads the topic watchers' counts and takes no turn of pubsub's event
// loop. Each Topic.ListPeers is one (a closure, a channel and a slice, two
// goroutine wake-ups), and a node hosting 10 000 agents asked three per
// heartbeat: 300 a second, most of its idle CPU with one peer listening.
func TestPublishTopicsAskPubsubNothing(t *testing.T) {
	bubble(t, func(t *testing.T) {
		tn, a, b := scopedPair(t)
		sh, other := record.Shard("cap-listened"), record.Shard("cap-unheard")
		for _, s := range []string{sh, other} {
			if err := a.g.JoinShard(s); err != nil {
				t.Fatal(err)
			}
		}
		tn.connect(a, b)
		if err := b.g.JoinShard(sh); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, "a subscriber", func() bool { return a.g.Listened(sh) })
		shards := []string{sh, other}
		pick := func() []*topicState {
			topics, err := a.g.publishTopics(nil, shards)
			if err != nil {
				t.Fatal(err)
			}
			return heard(topics)
		}
		if got := pick(); len(got) != 1 || got[0].shard != sh {
			t.Fatalf("heard topics %v, want only shard %s's", got, sh)
		}
		synctest.Wait() // every goroutine of the bubble idle: none allocates meanwhile
		// Two topics joined, one heard: the two result slices grow three
		// times. Any ListPeers adds at least three allocations.
		if allocs := testing.AllocsPerRun(20, func() { pick() }); allocs > 3 {
			t.Fatalf("choosing a heartbeat's topics allocated %.0f times: it asks pubsub's event loop (ListPeers)", allocs)
		}
	})
}
