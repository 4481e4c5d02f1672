package api

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/agentd/agentd/node"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/view"
	"github.com/libp2p/go-libp2p/core/peer"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
)

// Two nodes with gossip: an agent registered on one is discovered through
// the other's API with source gossip, and the other's watchers see it
// arrive and leave.
func TestGossipThroughAPI(t *testing.T) {
	mn := mocknet.New()
	t.Cleanup(func() { _ = mn.Close() })
	cfg := node.Config{DisableDHT: true, HeartbeatInterval: 200 * time.Millisecond, Scope: node.ScopeFull}
	na := newNode(t, nodeOpts{mn: mn, cfg: cfg})
	nb := newNode(t, nodeOpts{mn: mn, cfg: cfg})
	if err := mn.LinkAll(); err != nil {
		t.Fatal(err)
	}
	if err := nb.Host().Connect(t.Context(), peer.AddrInfo{ID: na.Host().ID(), Addrs: na.Host().Addrs()}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "the gossip mesh", func() bool {
		return slices.Contains(na.Gossip().TopicPeers(), nb.Host().ID()) && slices.Contains(nb.Gossip().TopicPeers(), na.Host().ID())
	})
	a := newAPIOn(t, na, Config{})
	b := newAPIOn(t, nb, Config{})
	w := a.dialWS(t, "", nil)
	w.sendText(`{"type":"watch","capability":"cap-g"}`)
	w.readJSON(WSTypeWatching)

	mustStatus(t, b.do("POST", "/agents", announceJSON(t, spec("skill-g", "cap-g"))), 200)
	ev := w.readEvent(view.EventRegistered)
	if ev.AgentID != nb.id.AgentID || ev.Source != "gossip" || ev.PeerID != nb.id.PeerID.String() {
		t.Fatalf("%+v", ev)
	}
	var l AgentList
	mustStatus(t, a.do("GET", "/agents?capability=cap-g", nil), 200).json(t, &l)
	if l.Total != 1 || l.Agents[0].Source != "gossip" {
		t.Fatalf("%+v", l)
	}
	sa, _, err := record.ParseAnnounce(mustJSON(t, l.Agents[0]))
	if err != nil || sa.VerifySignatures() != nil {
		t.Fatalf("the gossiped record does not verify: %v", err)
	}
	mustStatus(t, b.do("DELETE", "/agents/"+nb.id.AgentID+"?reason=SHUTDOWN", nil), 200)
	if ev := w.readEvent(view.EventDeregistered); ev.AgentID != nb.id.AgentID || ev.Reason != "SHUTDOWN" {
		t.Fatalf("%+v", ev)
	}
	mustStatus(t, a.do("GET", "/agents?capability=cap-g&local_only=true", nil), 404)
}

func mustJSON(t testing.TB, e AgentEntry) []byte {
	t.Helper()
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
