package simnet

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentd/agentd/gossip"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/trust"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	pb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/peer"
)

// TestProbeTimesResendsFromTheirPublication: a resent announcement carries
// a record signed long before; its latency is taken from its publication
// (the author's local delivery of that message id), not from the
// record's issued_at, and a resend whose publication was not seen is
// counted apart.
func TestProbeTimesResendsFromTheirPublication(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		id, err := trust.Generate()
		if err != nil {
			t.Fatal(err)
		}
		a := &record.Agent{
			AgentID: id.AgentID, AgentName: "probe",
			Transport: record.Transport{Type: "libp2p", Endpoint: "/p2p/" + id.PeerID.String()},
			Skills: []record.Skill{{SkillID: "s", Version: "1.0.0", SkillType: record.SkillTool,
				Capabilities: []record.Capability{{ID: "c"}}}},
			Seq: 1, IssuedAt: time.Now().UTC().Format(time.RFC3339Nano), TTLSeconds: 300,
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
		msg := func(mid string, from peer.ID) *pubsub.Message {
			topic := "t"
			// pubsub sets ReceivedFrom to the host itself for its own
			// publications (Local is a local-only publication), and to
			// the forwarding peer otherwise.
			return &pubsub.Message{Message: &pb.Message{Data: data, Topic: &topic}, ID: mid, ReceivedFrom: from}
		}
		p := newProbe(64, 1)
		p.start()
		p.measureFrom(time.Now())
		// The author's and a receiver's tracers, each in the topic's mesh.
		author, receiver := probeTracer{p, &meshTimes{m: map[string]int64{"t": 1}}, id.PeerID}, probeTracer{p, &meshTimes{m: map[string]int64{"t": 1}}, other.PeerID}
		time.Sleep(10 * time.Second) // the record is 10 s old when it is resent
		author.DeliverMessage(msg("m1", id.PeerID))
		time.Sleep(40 * time.Millisecond)
		receiver.DeliverMessage(msg("m1", id.PeerID))
		receiver.DeliverMessage(msg("m2", id.PeerID)) // its publication unseen
		p.close()
		got := p.byKind[gossip.KindAnnounce].summary()
		if got.Count != 1 || got.Max != 40 {
			t.Fatalf("resend latencies %+v, want one of 40 ms", got)
		}
		if n := p.unpublished.Load(); n != 1 {
			t.Fatalf("%d resends counted unmeasured, want 1", n)
		}
	})
}
