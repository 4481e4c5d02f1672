package gossip

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	pb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// gateClock is a settable clock for the copy gate.
type gateClock struct{ t time.Time }

func (c *gateClock) now() time.Time { return c.t }

func gateMsg(data string) *pb.Message {
	return &pb.Message{
		From: []byte("author"), Data: []byte(data), Seqno: []byte{0, 0, 0, 1},
		Topic: proto.String("/agentd/shard/abcd/1.0.0"), Signature: []byte("signature"), Key: []byte("key"),
	}
}

// pass runs one RPC of msgs through the gate and returns the copies
// pubsub would see.
func pass(t *testing.T, cg *copyGate, from peer.ID, msgs ...*pb.Message) []*pb.Message {
	t.Helper()
	rpc := &pubsub.RPC{RPC: pb.RPC{Publish: msgs}}
	if err := cg.inspect(from, rpc); err != nil {
		t.Fatalf("inspect refused an RPC: %v", err)
	}
	return rpc.Publish
}

func TestCopyGateDropsOnlyIdenticalCopies(t *testing.T) {
	clk := &gateClock{t: time.Unix(1000, 0)}
	counter := prometheus.NewCounter(prometheus.CounterOpts{Name: "gated"})
	cg := newCopyGate(time.Second, 100, 1<<20, clk.now, counter)
	leader := gateMsg("payload")
	if got := pass(t, cg, "a", leader); len(got) != 1 {
		t.Fatalf("the first copy: %d passed, want 1", len(got))
	}
	if got := pass(t, cg, "b", gateMsg("payload")); len(got) != 0 {
		t.Fatalf("an identical copy from another peer passed while the first is in validation")
	}
	if cg.Dropped() != 1 || promtest.ToFloat64(counter) != 1 {
		t.Fatalf("Dropped = %d, metric %v, want 1", cg.Dropped(), promtest.ToFloat64(counter))
	}
	// Every field the signature check reads makes a copy other bytes: it
	// is checked on its own, and a forged copy cannot hold back an honest
	// one.
	variants := map[string]func(m *pb.Message){
		"signature": func(m *pb.Message) { m.Signature = []byte("signaturf") },
		"seqno":     func(m *pb.Message) { m.Seqno = []byte{0, 0, 0, 2} },
		"key":       func(m *pb.Message) { m.Key = nil },
		"from":      func(m *pb.Message) { m.From = []byte("authos") },
		"data":      func(m *pb.Message) { m.Data = []byte("payloae") },
		"topic":     func(m *pb.Message) { m.Topic = proto.String("/agentd/shard/abce/1.0.0") },
		"no topic":  func(m *pb.Message) { m.Topic = nil },
		"empty topic": func(m *pb.Message) {
			m.Topic = proto.String("")
		},
		"unknown field": func(m *pb.Message) {
			m.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 7))
		},
	}
	for name, change := range variants {
		m := gateMsg("payload")
		change(m)
		if got := pass(t, cg, "c", m); len(got) != 1 {
			t.Errorf("a copy differing in %s was dropped", name)
		}
	}
	// "no topic" and "empty topic" differ from each other too.
	if keyOf(&pb.Message{}) == keyOf(&pb.Message{Topic: proto.String("")}) {
		t.Error("a message without a topic has the key of one with an empty topic")
	}
	// Several copies in one RPC: the repeat is dropped, the rest kept in order.
	other := gateMsg("other")
	got := pass(t, cg, "d", other, gateMsg("other"), gateMsg("third"))
	if len(got) != 2 || got[0] != other || string(got[1].Data) != "third" {
		t.Fatalf("one RPC with a repeated copy: got %d copies", len(got))
	}
}

func TestCopyGateForgetsSettledLeaders(t *testing.T) {
	events := map[string]func(cg *copyGate, m *pubsub.Message){
		"validated": func(cg *copyGate, m *pubsub.Message) { cg.ValidateMessage(m) },
		"duplicate": func(cg *copyGate, m *pubsub.Message) { cg.DuplicateMessage(m) },
		"rejected":  func(cg *copyGate, m *pubsub.Message) { cg.RejectMessage(m, pubsub.RejectValidationQueueFull) },
		"delivered": func(cg *copyGate, m *pubsub.Message) { cg.DeliverMessage(m) },
	}
	for name, settle := range events {
		t.Run(name, func(t *testing.T) {
			clk := &gateClock{t: time.Unix(1000, 0)}
			cg := newCopyGate(time.Second, 100, 1<<20, clk.now, nil)
			leader := gateMsg("payload")
			pass(t, cg, "a", leader)
			// Another message's outcome settles nothing.
			settle(cg, &pubsub.Message{Message: gateMsg("payload")})
			if got := pass(t, cg, "b", gateMsg("payload")); len(got) != 0 {
				t.Fatal("a copy passed though its leader was not settled")
			}
			settle(cg, &pubsub.Message{Message: leader})
			if got := pass(t, cg, "b", gateMsg("payload")); len(got) != 1 {
				t.Fatalf("a copy was dropped after its leader was %s", name)
			}
		})
	}
}

func TestCopyGateWindow(t *testing.T) {
	clk := &gateClock{t: time.Unix(1000, 0)}
	cg := newCopyGate(time.Second, 100, 1<<20, clk.now, nil)
	pass(t, cg, "a", gateMsg("payload")) // a leader whose outcome is never traced
	clk.t = clk.t.Add(999 * time.Millisecond)
	if got := pass(t, cg, "b", gateMsg("payload")); len(got) != 0 {
		t.Fatal("a copy passed inside the window")
	}
	clk.t = clk.t.Add(time.Millisecond)
	if got := pass(t, cg, "b", gateMsg("payload")); len(got) != 1 {
		t.Fatal("a copy was dropped after the window")
	}
	// The sweep forgets expired leaders.
	clk.t = clk.t.Add(time.Second)
	pass(t, cg, "c", gateMsg("new"))
	cg.mu.Lock()
	leaders, byMsg := len(cg.leaders), len(cg.byMsg)
	cg.mu.Unlock()
	if leaders != 1 || byMsg != 1 {
		t.Fatalf("after the sweep: %d leaders and %d messages held, want 1 and 1", leaders, byMsg)
	}
}

func TestCopyGateLowScorePeersDoNotLead(t *testing.T) {
	clk := &gateClock{t: time.Unix(1000, 0)}
	cg := newCopyGate(time.Second, 100, 1<<20, clk.now, nil)
	cg.setScores(map[peer.ID]float64{"bad": -0.5, "good": 0.001})
	if got := pass(t, cg, "bad", gateMsg("payload")); len(got) != 1 {
		t.Fatal("a low-scoring peer's copy was dropped")
	}
	// The router may ignore the low-scoring peer's copy: the honest one
	// behind it must reach validation, and then leads.
	if got := pass(t, cg, "good", gateMsg("payload")); len(got) != 1 {
		t.Fatal("an honest copy was held back by a low-scoring peer's")
	}
	if got := pass(t, cg, "other", gateMsg("payload")); len(got) != 0 {
		t.Fatal("the honest copy did not lead")
	}
}

func TestCopyGateBound(t *testing.T) {
	clk := &gateClock{t: time.Unix(1000, 0)}
	cg := newCopyGate(time.Second, 2, 1<<20, clk.now, nil)
	pass(t, cg, "a", gateMsg("1"), gateMsg("2"), gateMsg("3"))
	if got := pass(t, cg, "b", gateMsg("3")); len(got) != 1 {
		t.Fatal("a copy past the bound was tracked")
	}
	if got := pass(t, cg, "b", gateMsg("2")); len(got) != 0 {
		t.Fatal("a copy within the bound was not tracked")
	}

	// The bytes held: a message whose payload would pass the bound does
	// not lead; settling frees its share.
	cg = newCopyGate(time.Second, 100, 10, clk.now, nil)
	big := gateMsg("123456")
	pass(t, cg, "a", big, gateMsg("78901"))
	if got := pass(t, cg, "b", gateMsg("78901")); len(got) != 1 {
		t.Fatal("a message past the byte bound was tracked")
	}
	cg.ValidateMessage(&pubsub.Message{Message: big})
	pass(t, cg, "a", gateMsg("78901"))
	if got := pass(t, cg, "b", gateMsg("78901")); len(got) != 0 {
		t.Fatal("a settled leader's bytes were not freed")
	}
	cg.mu.Lock()
	defer cg.mu.Unlock()
	if cg.bytes != 5 {
		t.Fatalf("%d bytes counted, want 5", cg.bytes)
	}
}

func TestCopyGateOffWhenMeshDeliveriesWeigh(t *testing.T) {
	c := Config{Score: DefaultScoreParams(), SceneTopicScore: AnnounceTopicScoreParams()}
	if weighsMeshDeliveries(c) {
		t.Fatal("agentd's default score parameters weigh mesh deliveries")
	}
	p3 := AnnounceTopicScoreParams()
	p3.MeshMessageDeliveriesWeight = -1
	c.SceneTopicScore = p3
	if !weighsMeshDeliveries(c) {
		t.Fatal("a scene score with P3 did not turn the gate off")
	}
	c.SceneTopicScore = AnnounceTopicScoreParams()
	c.Score.Topics[AnnounceTopic] = p3
	if !weighsMeshDeliveries(c) {
		t.Fatal("an announce-topic score with P3 did not turn the gate off")
	}
}

// TestCopyGateSettlesOnARealRouter: wired into pubsub, every leader the
// gate makes is settled by the router's trace (none waits for its window),
// and every message still arrives once.
func TestCopyGateSettlesOnARealRouter(t *testing.T) {
	bubble(t, func(t *testing.T) {
		const n = 5
		tn := newTestNet(t, n, testConfig())
		for i := range n {
			for j := i + 1; j < n; j++ {
				tn.connect(tn.nodes[i], tn.nodes[j])
			}
		}
		tn.waitTopicPeers(n - 1)
		tn.waitMesh()
		for _, nd := range tn.nodes {
			if nd.g.gate == nil {
				t.Fatal("the default configuration runs without the copy gate")
			}
		}
		tn.announceAll(t)
		for i, nd := range tn.nodes {
			waitFor(t, 500*time.Millisecond, fmt.Sprintf("node %d's gate to settle every leader", i), func() bool {
				nd.g.gate.mu.Lock()
				defer nd.g.gate.mu.Unlock()
				return len(nd.g.gate.leaders) == 0 && len(nd.g.gate.byMsg) == 0
			})
		}
	})
}

// TestCopyGateForgedCopyDoesNotHoldBackTheHonestOne: a peer that lies
// sends a node a copy of a message with a corrupted signature and, in the
// same RPC, the honest copy. The forged one waits for the signature check
// first; the honest one must not be dropped as its duplicate. Then two
// identical honest copies: the second is dropped, the message delivered
// once.
func TestCopyGateForgedCopyDoesNotHoldBackTheHonestOne(t *testing.T) {
	bubble(t, func(t *testing.T) {
		tn := newTestNet(t, 1, testConfig())
		v := tn.nodes[0]
		liar := tn.addLinkedHost(1)
		tn.connect(v, liar)
		s, err := liar.h.NewStream(tn.ctx, v.h.ID(), pubsub.GossipSubID_v12)
		if err != nil {
			t.Fatalf("open a gossipsub stream: %v", err)
		}
		defer func() { _ = s.Close() }()
		send := func(rpc *pb.RPC) {
			t.Helper()
			b, err := proto.Marshal(rpc)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Write(append(protowire.AppendVarint(nil, uint64(len(b))), b...)); err != nil {
				t.Fatalf("write an RPC: %v", err)
			}
		}
		// A message of the liar's own agent, signed as pubsub signs.
		signed := func(seq uint64) *pb.Message {
			t.Helper()
			data, err := EncodeAnnounce(liar.record(t))
			if err != nil {
				t.Fatal(err)
			}
			m := &pb.Message{From: []byte(liar.h.ID()), Data: data, Seqno: binary.BigEndian.AppendUint64(nil, seq), Topic: proto.String(AnnounceTopic)}
			b, err := proto.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			if m.Signature, err = liar.h.Peerstore().PrivKey(liar.h.ID()).Sign(append([]byte(pubsub.SignPrefix), b...)); err != nil {
				t.Fatal(err)
			}
			return m
		}
		send(&pb.RPC{Subscriptions: []*pb.RPC_SubOpts{{Subscribe: proto.Bool(true), Topicid: proto.String(AnnounceTopic)}}})

		honest := signed(1)
		forged := proto.CloneOf(honest)
		forged.Signature[len(forged.Signature)-1] ^= 1
		send(&pb.RPC{Publish: []*pb.Message{forged, honest}})
		waitFor(t, 5*time.Second, "the honest copy behind a forged one to be delivered", func() bool {
			return len(v.sink.announcesOf(liar.id.AgentID, 1)) == 1
		})
		if n := v.g.CopiesDropped(); n != 0 {
			t.Fatalf("the gate dropped %d copies; the forged and the honest one differ", n)
		}

		again := signed(2)
		send(&pb.RPC{Publish: []*pb.Message{again, proto.CloneOf(again)}})
		waitFor(t, 5*time.Second, "the second message to be delivered", func() bool {
			return len(v.sink.announcesOf(liar.id.AgentID, 2)) == 1
		})
		if n := v.g.CopiesDropped(); n != 1 {
			t.Fatalf("the gate dropped %d copies of two identical ones in one RPC, want 1", n)
		}
		if got := len(v.sink.announcesOf(liar.id.AgentID, 2)); got != 1 {
			t.Fatalf("the second message was delivered %d times", got)
		}
	})
}
