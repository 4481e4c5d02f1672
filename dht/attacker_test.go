package dht

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/agentd/agentd/record"
	kaddht "github.com/libp2p/go-libp2p-kad-dht"
	pb "github.com/libp2p/go-libp2p-kad-dht/pb"
	lprecord "github.com/libp2p/go-libp2p-record"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// acceptAll is a rogue's validator: it stores and serves whatever it gets.
type acceptAll struct{}

func (acceptAll) Validate(string, []byte) error        { return nil }
func (acceptAll) Select(string, [][]byte) (int, error) { return 0, nil }

// rogueKad joins the cluster as a kad-dht server that keeps and answers
// anything (issue 12 item 7: an attacker peer on the DHT itself).
func rogueKad(t *testing.T, c *cluster) (*kaddht.IpfsDHT, *pb.ProtocolMessenger) {
	t.Helper()
	id := mustIdentity(t)
	h, err := c.mn.AddPeer(id.PeerKey, ma.StringCast("/ip4/10.9.0.1/tcp/4777"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.mn.LinkAll(); err != nil {
		t.Fatal(err)
	}
	kad, err := kaddht.New(h, kaddht.Mode(kaddht.ModeServer), kaddht.ProtocolPrefix(ProtocolPrefix),
		kaddht.Validator(lprecord.NamespacedValidator{ValueNamespace: acceptAll{}}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kad.Close(); _ = h.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, n := range c.nodes {
		if err := h.Connect(ctx, n.info()); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range c.nodes {
		eventually(t, 10*time.Second, "the rogue in every routing table", func() bool {
			k, _, _ := n.d.running()
			return k.RoutingTable().Find(h.ID()) != ""
		})
	}
	pm, err := pb.NewProtocolMessenger(kad.MessageSender())
	if err != nil {
		t.Fatal(err)
	}
	return kad, pm
}

func valueRejects(n *node, reason string) float64 {
	return counterValue(n.m.Rejects.WithLabelValues("dht_value", reason))
}

// A peer that PUTs forged values, or answers GETs with them, is refused by
// every honest node and counted; the genuine record is what a GET returns.
func TestForgedDHTValuesAreRefusedAndCounted(t *testing.T) {
	c := newCluster(t, 4, 0, nil)
	victim, q := c.nodes[1], c.nodes[3]
	genuine := victim.host(t, 1, skillSpec{"skill-v": {"cap-v"}})
	ctx := findCtx(t)
	eventually(t, 15*time.Second, "the genuine value stored", func() bool {
		sa, err := q.d.GetRecord(ctx, victim.id.AgentID)
		return err == nil && sa.Agent.Seq == 1
	})
	kad, pm := rogueKad(t, c)

	// A higher seq with a broken signature would win Select if accepted.
	forged := signedAgent(t, victim.id, 99, skillSpec{"skill-v": {"cap-v"}})
	forged.Signature[len(forged.Signature)/2] ^= 0x01
	key := ValueKey(victim.id.AgentID)
	// The genuine record of the victim under another agent's key.
	other := mustIdentity(t)
	misfiled := ValueKey(other.AgentID)

	// PUT straight to every honest node.
	for _, n := range c.nodes {
		for _, v := range []struct {
			key string
			val []byte
		}{{key, forged.MarshalAnnounce()}, {misfiled, genuine.MarshalAnnounce()}} {
			rec := lprecord.MakePutRecord(v.key, v.val)
			if err := pm.PutValue(ctx, n.h.ID(), rec); err == nil {
				t.Fatalf("node %s accepted a forged PUT_VALUE under %s", n.h.ID(), v.key)
			}
		}
	}
	for i, n := range c.nodes {
		if got := valueRejects(n, "bad_signature"); got < 1 {
			t.Errorf("node %d: dht_value bad_signature = %v, want >= 1", i, got)
		}
		if got := valueRejects(n, "bad_key"); got < 1 {
			t.Errorf("node %d: dht_value bad_key = %v, want >= 1", i, got)
		}
	}

	// The rogue keeps the forged value itself and answers GETs with it.
	if err := kad.PutValue(ctx, key, forged.MarshalAnnounce()); err != nil {
		t.Logf("rogue PutValue: %v (the honest nodes refuse it)", err)
	}
	before := valueRejects(q, "bad_signature")
	eventually(t, 15*time.Second, "the forged GET answer refused and counted", func() bool {
		sa, err := q.d.GetRecord(ctx, victim.id.AgentID)
		if err != nil || sa.Agent.Seq != 1 {
			t.Fatalf("GetRecord with a lying peer = %+v, %v; want the genuine seq 1", sa, err)
		}
		return valueRejects(q, "bad_signature") > before
	})
	// Nobody honest stored it.
	for i, n := range c.nodes {
		if rec, _, err := pm.GetValue(ctx, n.h.ID(), key); err == nil && rec != nil {
			if sa, _, perr := record.ParseAnnounce(rec.GetValue()); perr == nil && sa.Agent.Seq == 99 {
				t.Fatalf("node %d stored the forged value", i)
			}
		}
	}
}

// A provider record claiming another peer provides a key is dropped by
// kad-dht itself (handlers.go handleAddProvider, v0.42.2: "received
// provider from wrong peer"); kad-dht gives no hook to count it, so this
// shows the refusal: the claimed peer is never returned as a provider. A
// provider record a rogue makes for itself is accepted by the DHT (any
// peer may provide), and its record fetch is what is refused and counted
// (TestForgedAndMisboundRecordsAreRejected, TestRecordNotOfferingCapabilityIsDropped).
func TestForgedProviderRecordsAreDropped(t *testing.T) {
	c := newCluster(t, 4, 0, nil)
	victim, q := c.nodes[1], c.nodes[3]
	_, pm := rogueKad(t, c)
	ctx := findCtx(t)
	k := record.SkillKey("skill-forged", "cap-forged")
	for _, n := range c.nodes {
		err := pm.PutProviderAddrs(ctx, n.h.ID(), k.CID().Hash(), peer.AddrInfo{ID: victim.h.ID(), Addrs: victim.h.Addrs()})
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Logf("ADD_PROVIDER to %s: %v", n.h.ID(), err)
		}
	}
	kq, _, _ := q.d.running()
	for p := range kq.FindProvidersAsync(ctx, k.CID(), 10) {
		if p.ID == victim.h.ID() {
			t.Fatalf("a provider record forged by another peer was stored and returned: %v", p)
		}
	}
	fs, err := q.d.Find(ctx, "skill-forged", "cap-forged", 5)
	if err != nil && !errors.Is(err, ErrNotFound) {
		t.Fatal(err)
	}
	if len(fs) != 0 {
		t.Fatalf("Find returned %+v for a key only forged provider records name", fs)
	}
}
