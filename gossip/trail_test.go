package gossip

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/agentd/agentd/record"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
)

// TestTrailingSync: a node of sync 1.2.0 syncs the shards it joined once
// more a second after their first syncs, in one request for shards joined
// moments apart, and so gets the records its peer learned in between
// (announcements it missed while joining); it lists
// TrailSyncProtocol, and a peer's SyncTrailed says so. A node of 1.1.0
// lists nothing and its peer's SyncTrailed is false: an author then keeps
// its trailing re-announcement (node package).
func TestTrailingSync(t *testing.T) {
	for _, old := range []bool{false, true} {
		name := "sync 1.2.0"
		if old {
			name = "sync 1.1.0"
		}
		t.Run(name, func(t *testing.T) {
			bubble(t, func(t *testing.T) {
				cfg := testConfig()
				cfg.Scoped = true
				cfg.DisableSyncTrail = old
				tn := newTestNet(t, 2, cfg)
				a, b := tn.nodes[0], tn.nodes[1]
				sh := record.Shard("org-data-read")
				for _, nd := range []*tnode{a, b} {
					if err := nd.g.JoinShard(sh); err != nil {
						t.Fatal(err)
					}
				}
				tn.connect(a, b)
				waitFor(t, 5*time.Second, "a's first shard sync, and a identified at b", func() bool {
					protos, _ := b.h.Peerstore().SupportsProtocols(a.h.ID(), protocol.ID(ScopedSyncProtocol))
					return a.g.ShardReady(sh) && len(protos) == 1
				})
				protos, err := b.h.Peerstore().SupportsProtocols(a.h.ID(), protocol.ID(TrailSyncProtocol))
				if err != nil {
					t.Fatal(err)
				}
				if lists := len(protos) == 1; lists == old {
					t.Fatalf("a lists %s: %v", TrailSyncProtocol, lists)
				}
				if trailed := b.g.SyncTrailed(nil, []string{sh}); trailed == old {
					t.Fatalf("b.SyncTrailed = %v for a peer of %s", trailed, name)
				}
				if old {
					if n := promtest.ToFloat64(a.m.TrailSyncs.WithLabelValues("ok")) + promtest.ToFloat64(a.m.TrailSyncs.WithLabelValues("error")); n != 0 {
						t.Fatalf("%v trailing syncs at a node of sync 1.1.0", n)
					}
					return
				}
				// A second shard, joined a moment later: its trailing sync
				// falls due within syncTrailBatch of the first's and shares
				// its request.
				sh2 := record.Shard("something-else")
				for _, nd := range []*tnode{a, b} {
					if err := nd.g.JoinShard(sh2); err != nil {
						t.Fatal(err)
					}
				}
				waitFor(t, 5*time.Second, "a's first sync of the second shard", func() bool { return a.g.ShardReady(sh2) })
				// b learns a record in each shard after a's first syncs:
				// nothing but the trailing sync brings them to a.
				x := tn.addHost(2)
				recs := []*record.SignedAgent{b.record(t), otherRecord(t, x)}
				for _, sa := range recs {
					b.sink.setLive(sa)
				}
				waitFor(t, 5*time.Second, "b's records at a", func() bool {
					for _, sa := range recs {
						id := sa.Agent.AgentID
						if len(a.sink.deliveries(func(d delivery) bool { return d.agent != nil && d.agent.Agent.AgentID == id })) == 0 {
							return false
						}
					}
					return true
				})
				if n := promtest.ToFloat64(a.m.TrailSyncs.WithLabelValues("ok")); n != 1 {
					t.Fatalf("%v trailing syncs, want 1 for both shards", n)
				}
				if n := promtest.ToFloat64(a.m.ShardSyncs.WithLabelValues("ok")); n != 2 {
					t.Fatalf("%v first shard syncs, want 2", n)
				}
			})
		})
	}
}

// TestCoverShards: trailing syncs go to as few peers as cover the shards,
// the peer on the most of them first, and every shard with a peer is
// asked exactly once.
func TestCoverShards(t *testing.T) {
	a, b, c := peer.ID("A"), peer.ID("B"), peer.ID("C")
	s1, s2, s3, s4 := &topicState{shard: "0001"}, &topicState{shard: "0002"}, &topicState{shard: "0003"}, &topicState{shard: "0004"}
	groups := coverShards(map[*topicState][]peer.ID{
		s1: {b, a},
		s2: {a},
		s3: {c, a},
		s4: nil, // no peer: not asked
	})
	if len(groups) != 1 || groups[0].p != a || len(groups[0].tss) != 3 {
		t.Fatalf("groups = %v, want A for the three shards it holds", groups)
	}
	groups = coverShards(map[*topicState][]peer.ID{s1: {a, b}, s2: {b}, s3: {c}})
	if len(groups) != 2 || groups[0].p != b || len(groups[0].tss) != 2 || groups[1].p != c || len(groups[1].tss) != 1 {
		t.Fatalf("groups = %v, want B for 0001 and 0002, then C for 0003", groups)
	}
	if groups[0].tss[0] != s1 || groups[0].tss[1] != s2 {
		t.Fatalf("B's shards are not in shard order: %v", groups[0].tss)
	}
	if len(coverShards(map[*topicState][]peer.ID{s4: nil})) != 0 {
		t.Fatal("a shard without peers was asked")
	}
	// Shards with no peer in common: every one asked once, past the
	// greedy rounds too.
	disjoint := map[*topicState][]peer.ID{}
	for i := range 3 * maxCoverRounds {
		disjoint[&topicState{shard: fmt.Sprintf("%04x", i)}] = []peer.ID{peer.ID(fmt.Sprintf("P%d", i)), peer.ID(fmt.Sprintf("Q%d", i))}
	}
	asked := map[*topicState]int{}
	for _, g := range coverShards(disjoint) {
		for _, ts := range g.tss {
			asked[ts]++
			if !slices.Contains(disjoint[ts], g.p) {
				t.Fatalf("shard %s asked of %s, not a peer of its topic", ts.shard, g.p)
			}
		}
	}
	if len(asked) != len(disjoint) {
		t.Fatalf("%d of %d shards asked", len(asked), len(disjoint))
	}
	for ts, n := range asked {
		if n != 1 {
			t.Fatalf("shard %s asked %d times", ts.shard, n)
		}
	}
}
