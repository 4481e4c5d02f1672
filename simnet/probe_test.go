package simnet

import (
	"testing"
	"time"

	"github.com/agentd/agentd/gossip"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/trust"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	pb "github.com/libp2p/go-libp2p-pubsub/pb"
)

// TestProbeTimesResendsFromTheirPublication: a resent announcement carries
// a record signed long before; its latency is taken from its publication
// (the first RPC its author sent it in), not from the
// record's issued_at, and a resend whose publication was not seen is
// counted apart.
func TestProbeTimesResendsFromTheirPublication(t *testing.T) {
	// The probe's clock, moved by hand: the record was signed 10 s
	// before it is resent.
	clock := time.Now()
	signed := clock.Add(-10 * time.Second)
	id, err := trust.Generate()
	if err != nil {
		t.Fatal(err)
	}
	a := &record.Agent{
		AgentID: id.AgentID, AgentName: "probe",
		Transport: record.Transport{Type: "libp2p", Endpoint: "/p2p/" + id.PeerID.String()},
		Skills: []record.Skill{{SkillID: "s", Version: "1.0.0", SkillType: record.SkillTool,
			Capabilities: []record.Capability{{ID: "c"}}}},
		Seq: 1, IssuedAt: signed.UTC().Format(time.RFC3339Nano), TTLSeconds: 300,
	}
	a.SyncCapabilities()
	sa, err := id.Sign(a)
	if err != nil {
		t.Fatal(err)
	}
	data, err := gossip.EncodeResend(sa, 1)
	if err != nil {
		t.Fatal(err)
	}
	other, err := trust.Generate()
	if err != nil {
		t.Fatal(err)
	}
	topic := "t"
	wire := &pb.Message{Data: data, Topic: &topic, From: []byte(id.PeerID)}
	mid := gossip.MessageID(wire)
	msg := func(mid string) *pubsub.Message {
		return &pubsub.Message{Message: wire, ID: mid, ReceivedFrom: id.PeerID}
	}
	p := newProbe(64, 1)
	p.now = func() time.Time { return clock }
	p.start()
	p.measureFrom(signed)
	// The author's and a receiver's tracers, each in the topic's mesh.
	author, receiver := probeTracer{p, &meshTimes{m: map[string]int64{"t": 1}}, id.PeerID}, probeTracer{p, &meshTimes{m: map[string]int64{"t": 1}}, other.PeerID}
	// pubsub traces a node's own publication to raw tracers only as
	// the RPCs it sends.
	author.SendRPC(&pubsub.RPC{RPC: pb.RPC{Publish: []*pb.Message{wire}}}, other.PeerID)
	clock = clock.Add(40 * time.Millisecond)
	author.SendRPC(&pubsub.RPC{RPC: pb.RPC{Publish: []*pb.Message{wire}}}, other.PeerID) // a later copy
	receiver.DeliverMessage(msg(mid))
	receiver.DeliverMessage(msg("m2")) // its publication unseen
	p.close()
	got := p.byKind[gossip.KindAnnounce].summary()
	if got.Count != 1 || got.Max != 40 {
		t.Fatalf("resend latencies %+v, want one of 40 ms", got)
	}
	if n := p.unpublished.Load(); n != 1 {
		t.Fatalf("%d resends counted unmeasured, want 1", n)
	}
}
