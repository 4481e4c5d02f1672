package dht

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/testutil"
	"github.com/agentd/agentd/record"
	"github.com/libp2p/go-libp2p/core/peer"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
)

// A node that hosted agents while it had no peer puts their values once a
// peer arrives, within its retry backoff, though the loop keeps waking for
// other work: each wake-up used to re-arm the retry timer a step further,
// so it never fired and the values waited for the hourly republish round
// (a registry restarted alone, or started before its peers, could not be
// found by agent id).
func TestValuesPutWhileAloneReachALaterPeer(t *testing.T) {
	mn := mocknet.New()
	t.Cleanup(func() { _ = mn.Close() })
	var nodes []*node
	for i := range 2 {
		n := newNode(t, mn, i, func(_ int, c *Config) {
			c.ReprovideInterval = time.Minute // the retry backoff's ceiling
		})
		t.Cleanup(func() { _ = n.d.Close() })
		if err := n.d.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	if err := mn.LinkAll(); err != nil {
		t.Fatal(err)
	}
	alone, later := nodes[0], nodes[1]

	// Twelve agents registered one at a time, each a pass of the loop with
	// nobody to put to: enough passes to take a backoff that started at
	// 100 ms past its one-minute ceiling.
	var recs []*record.SignedAgent
	for i := range 12 {
		id := mustIdentity(t)
		recs = append(recs, signedAgent(t, id, 1, skillSpec{fmt.Sprintf("skill-%d", i): {"cap"}}))
		alone.d.Provide(recs[i])
		testutil.Eventually(t, 10*time.Second, fmt.Sprintf("agent %d taken by the loop", i), func() bool {
			st := alone.d.Status()
			return st.PublishedValues == i+1 && st.PendingRetries >= i+1
		})
	}

	// The peer joins through the lonely node, which does not bootstrap
	// again: only its retries can put the values.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := later.d.Bootstrap(ctx, []peer.AddrInfo{alone.info()}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "every value put to the peer that joined", func() bool {
		st := alone.d.Status()
		return st.RoutingTable == 1 && st.PendingRetries == 0 && st.QueuedPuts == 0
	})
	for _, sa := range recs {
		got, err := later.d.GetRecord(ctx, sa.Agent.AgentID)
		if err != nil || got.Agent.AgentID != sa.Agent.AgentID {
			t.Fatalf("the peer that joined cannot get agent %s by id: %v", sa.Agent.AgentID, err)
		}
	}
}
