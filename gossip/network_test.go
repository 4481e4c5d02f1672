package gossip

import (
	"context"
	"testing"
	"time"
)

// TestPropagation20 runs 20 nodes on a sparse random topology with 20 ms
// links and measures how long announcements take to reach every node.
func TestPropagation20(t *testing.T) {
	bubble(t, func(t *testing.T) {
		const n = 20
		tn := newTestNet(t, n, testConfig())
		tn.connectSparse(3, 1)
		tn.waitTopicPeers(1)
		tn.waitMesh()

		// Every node announces once; every node must learn all 19 others.
		tn.announceAll(t)

		// Measure: rounds of re-announcements from different nodes.
		var lat []time.Duration
		var worst []time.Duration
		for round := range 10 {
			pub := tn.nodes[(round*7)%n]
			sa := pub.record(t)
			t0 := time.Now()
			if err := pub.g.PublishAnnounce(context.Background(), sa); err != nil {
				t.Fatalf("publish: %v", err)
			}
			var roundMax time.Duration
			for _, nd := range tn.nodes {
				if nd == pub {
					continue
				}
				waitFor(t, 10*time.Second, "re-announcement", func() bool { return len(nd.sink.announcesOf(sa.Agent.AgentID, sa.Agent.Seq)) > 0 })
				d := nd.sink.announcesOf(sa.Agent.AgentID, sa.Agent.Seq)[0].at.Sub(t0)
				lat = append(lat, d)
				roundMax = max(roundMax, d)
			}
			worst = append(worst, roundMax)
		}
		p50, p99 := percentile(lat, 50), percentile(lat, 99)
		t.Logf("propagation over %d deliveries (20 nodes, degree>=3, 20 ms links, virtual time): p50 %v, p99 %v, max %v; full coverage per announcement p50 %v, max %v",
			len(lat), p50, p99, percentile(lat, 100), percentile(worst, 50), percentile(worst, 100))
		// Virtual time counts link latency only: 20 ms per hop. A mesh of
		// degree >= 3 over 20 nodes has a diameter of a few hops.
		if p99 > 200*time.Millisecond {
			t.Errorf("p99 propagation %v, want <= 200 ms (10 hops)", p99)
		}
	})
}

// TestLateJoiner: a node that joins after everyone announced gets the
// complete live view from one neighbour by Sync, well inside one
// heartbeat interval (5 s), and learns agents it still misses from their
// next beats (UnknownAgent).
func TestLateJoiner(t *testing.T) {
	bubble(t, func(t *testing.T) {
		const n = 6
		tn := newTestNet(t, n, testConfig())
		old, late := tn.nodes[:n-1], tn.nodes[n-1]
		for i := range old {
			tn.connect(old[i], old[(i+1)%len(old)]) // a ring of 5
		}
		waitFor(t, 5*time.Second, "ring topic peers", func() bool {
			for _, nd := range old {
				if len(nd.g.TopicPeers()) < 2 {
					return false
				}
			}
			return true
		})
		tn.waitMesh()
		for _, nd := range old {
			sa := nd.record(t)
			nd.sink.setLive(sa) // the view holds its local agents too
			if err := nd.g.PublishAnnounce(tn.ctx, sa); err != nil {
				t.Fatal(err)
			}
		}
		for _, nd := range old {
			waitFor(t, 5*time.Second, "ring to learn everyone", func() bool { return len(nd.sink.LiveRecords(100, nil)) == len(old) })
		}

		tn.connect(late, old[2])
		t0 := time.Now()
		got, err := late.g.Sync(tn.ctx)
		if err != nil {
			t.Fatalf("Sync: %v", err)
		}
		took := time.Since(t0)
		if got != len(old) {
			t.Fatalf("late joiner learnt %d agents, want %d", got, len(old))
		}
		t.Logf("late joiner: complete live view of %d agents in %v (virtual; 20 ms links)", got, took)
		if took >= 5*time.Second {
			t.Errorf("sync took %v, more than one heartbeat interval", took)
		}
	})
}
