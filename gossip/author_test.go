package gossip

import (
	"testing"
	"time"

	"github.com/agentd/agentd/record"
)

// TestBeatTakenOnItsAuthorsSignature: a heartbeat published by its own
// peer is judged on the pubsub message's signature (record.
// BeatSignerAuthor), its agent signature not verified, as long as that
// peer hosts the agent's current record — but for one beat in 16, chosen
// by seq; when the record names another peer, the agent signature decides
// again — a valid one delivers the beat as the agent's, a broken one is
// rejected.
func TestBeatTakenOnItsAuthorsSignature(t *testing.T) {
	bubble(t, func(t *testing.T) {
		tn := newTestNet(t, 1, testConfig())
		b := tn.nodes[0]
		x, pub, rec := tn.knownRawPeer(t, b) // X's agent key pinned at B
		// The next beats' seqs: the first two not among those verified by
		// sample, the third one of them.
		x.seq = rec.Agent.Seq
		for verifiedBySample(x.seq+1) || verifiedBySample(x.seq+2) || !verifiedBySample(x.seq+3) {
			x.seq++
		}

		heartbeats := func() []delivery {
			return b.sink.deliveries(func(d delivery) bool { return d.kind == KindHeartbeat })
		}
		send := func(sb *record.SignedBeat) {
			t.Helper()
			data, err := EncodeBeat(KindHeartbeat, sb)
			if err != nil {
				t.Fatal(err)
			}
			pub(data)
		}
		broken := func(sb *record.SignedBeat) *record.SignedBeat {
			c := *sb
			c.Signature = append([]byte(nil), sb.Signature...)
			c.Signature[8] ^= 1 // inside r: still well-formed DER
			return &c
		}

		send(x.beat(t, KindHeartbeat))
		waitFor(t, 5*time.Second, "the first heartbeat", func() bool { return len(heartbeats()) == 1 })
		if d := heartbeats()[0]; d.beat.Signer != record.BeatSignerAuthor || d.from != x.h.ID() {
			t.Fatalf("delivered %+v from %s, want a beat taken on its author's signature", d.beat, d.from)
		}
		// Its host could sign the same with its peer key: the agent
		// signature adds nothing, and is not checked.
		send(broken(x.beat(t, KindHeartbeat)))
		waitFor(t, 5*time.Second, "the second heartbeat", func() bool { return len(heartbeats()) == 2 })
		// One beat in 16 has its signature checked all the same: the
		// failure that tells a node it missed the agent's key rotation.
		before := rejects(t, b.m, "gossip", "bad_signature")
		send(broken(x.beat(t, KindHeartbeat)))
		waitFor(t, 5*time.Second, "the sampled broken signature refused", func() bool { return rejects(t, b.m, "gossip", "bad_signature") == before+1 })
		if n := len(heartbeats()); n != 2 {
			t.Fatalf("%d heartbeats delivered, want 2", n)
		}
		for verifiedBySample(x.seq + 1) {
			x.seq++
		}

		// B now holds a record of the agent that names another peer (the
		// agent moved): the author's word is not enough, its agent key's is.
		b.sink.mu.Lock()
		b.sink.live[x.id.AgentID] = &record.SignedAgent{Agent: record.Agent{AgentID: x.id.AgentID, PeerID: "12D3KooWElsewhere"}}
		b.sink.mu.Unlock()
		send(x.beat(t, KindHeartbeat))
		waitFor(t, 5*time.Second, "the third heartbeat", func() bool { return len(heartbeats()) == 3 })
		if d := heartbeats()[2]; d.beat.Signer != "" {
			t.Fatalf("delivered %+v, want the agent-signed beat", d.beat)
		}
		before = rejects(t, b.m, "gossip", "bad_signature")
		send(broken(x.beat(t, KindHeartbeat)))
		waitFor(t, 5*time.Second, "the broken signature rejected", func() bool { return rejects(t, b.m, "gossip", "bad_signature") == before+1 })
		if n := len(heartbeats()); n != 3 {
			t.Fatalf("%d heartbeats delivered, want 3", n)
		}
	})
}

// TestVerifiedBySampleRate: about one seq in 16 is verified by sample,
// whether seqs count one by one or come from a millisecond clock.
func TestVerifiedBySampleRate(t *testing.T) {
	for _, c := range []struct {
		name        string
		first, step uint64
	}{
		{"counted", 1, 1},
		{"clock, 5 s apart", 1795284263518, 5000},
		{"clock, 100 s apart", 1795284263518, 100000},
	} {
		n, hits := 160000, 0
		for i := range n {
			if verifiedBySample(c.first + uint64(i)*c.step) {
				hits++
			}
		}
		if want := n / authorVerifyEvery; hits < want*9/10 || hits > want*11/10 {
			t.Errorf("%s: %d of %d seqs sampled, want about %d", c.name, hits, n, want)
		}
	}
}
