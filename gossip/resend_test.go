package gossip

import (
	"bytes"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/agentd/agentd/record"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
)

// TestEncodeResend: a resend is the announcement of the same record with
// its counter, within 1 … MaxResend, and a new payload for each counter.
func TestEncodeResend(t *testing.T) {
	tn := newTestNet(t, 1, testConfig())
	sa := tn.nodes[0].record(t)
	plain, err := EncodeAnnounce(sa)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{string(plain): true}
	for n := 1; n <= MaxResend; n++ {
		data, err := EncodeResend(sa, n)
		if err != nil {
			t.Fatalf("resend %d: %v", n, err)
		}
		if seen[string(data)] {
			t.Fatalf("resend %d is the payload of an earlier message", n)
		}
		seen[string(data)] = true
		m, err := Decode(data, 0)
		if err != nil || m.Resend != n || m.Agent.Hash() != sa.Hash() || m.Agent.Agent.Seq != sa.Agent.Seq {
			t.Fatalf("resend %d decodes to %+v, %v", n, m, err)
		}
	}
	for _, n := range []int{0, -1, MaxResend + 1} {
		if _, err := EncodeResend(sa, n); !errors.Is(err, record.ErrMalformed) {
			t.Fatalf("resend %d: %v, want ErrMalformed", n, err)
		}
	}
	if _, err := EncodeResend(nil, 1); !errors.Is(err, record.ErrMalformed) {
		t.Fatalf("resend of nil: %v", err)
	}
}

// TestResendLog: each counter of a record's seq passes once; a newer seq
// starts over; an older seq never passes; a full log starts over.
func TestResendLog(t *testing.T) {
	l := newResendLog(2)
	steps := []struct {
		id   string
		seq  uint64
		n    int
		want bool
	}{
		{"a", 5, 1, true},
		{"a", 5, 1, false}, // a replay
		{"a", 5, 2, true},
		{"a", 5, 1, false}, // an earlier counter
		{"a", 6, 1, true},  // a newer record
		{"a", 5, 3, false}, // an older record
		{"b", 1, 1, true},
		{"c", 1, 1, true}, // full: starts over
		{"a", 6, 1, true}, // forgotten
	}
	for i, s := range steps {
		if got := l.forward(s.id, s.seq, s.n); got != s.want {
			t.Fatalf("step %d: forward(%s, %d, %d) = %v, want %v", i, s.id, s.seq, s.n, got, s.want)
		}
	}
	if len(l.m) > 2 {
		t.Fatalf("the log holds %d agents, bound 2", len(l.m))
	}
}

// TestResendReachesWhoMissedIt: in a chain A–B–C, B holds A's record (from
// a shard sync) and C does not. A's resend is forwarded by B without being
// delivered to it, and delivered to C. The same resend counter again, in
// other bytes (a new pubsub message id, as a replay after pubsub's seen
// TTL is), goes no further than B; a later counter passes; another peer
// cannot resend A's record.
func TestResendReachesWhoMissedIt(t *testing.T) {
	bubble(t, func(t *testing.T) {
		tn := newTestNet(t, 3, testConfig())
		a, b, c := tn.nodes[0], tn.nodes[1], tn.nodes[2]
		tn.connect(a, b)
		tn.connect(b, c)
		waitFor(t, 10*time.Second, "the chain's meshes", func() bool {
			return len(a.g.MeshPeers(AnnounceTopic)) == 1 && len(b.g.MeshPeers(AnnounceTopic)) == 2 && len(c.g.MeshPeers(AnnounceTopic)) == 1
		})
		rec := a.record(t)
		id := a.id.AgentID
		b.sink.setLive(rec) // learnt from a shard sync: held, never delivered by gossip
		forwarded := func(nd *tnode) float64 { return promtest.ToFloat64(nd.m.Resends.WithLabelValues("forwarded")) }

		if err := a.g.PublishResend(tn.ctx, rec, 1); err != nil {
			t.Fatalf("resend 1: %v", err)
		}
		waitFor(t, 5*time.Second, "the resent record at C", func() bool { return len(c.sink.announcesOf(id, rec.Agent.Seq)) == 1 })
		if got := b.sink.announcesOf(id, rec.Agent.Seq); len(got) != 0 {
			t.Fatalf("B was delivered the record %d times, want none (a resend of a record held is forwarded, not delivered)", len(got))
		}
		if n := forwarded(b); n != 1 {
			t.Fatalf("B counted %v resends forwarded, want 1", n)
		}
		if n := promtest.ToFloat64(a.m.Resends.WithLabelValues("sent")); n != 1 {
			t.Fatalf("A counted %v resends sent, want 1", n)
		}

		// Resend 1 again as a message pubsub has not seen: the same
		// payload with a member this version ignores. B drops it as a
		// replay.
		data, err := EncodeResend(rec, 1)
		if err != nil {
			t.Fatal(err)
		}
		again := bytes.Replace(data, []byte(`"resend":1`), []byte(`"resend":1,"x":0`), 1)
		topics, err := a.g.publishTopics(nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		cReplays := rejects(t, c.m, metricsTransport, "replay")
		bReplays := rejects(t, b.m, metricsTransport, "replay")
		if err := a.g.publish(tn.ctx, KindAnnounce, again, topics, nil); err != nil {
			t.Fatalf("resend 1 again: %v", err)
		}
		waitFor(t, 5*time.Second, "B to drop the replayed resend", func() bool { return rejects(t, b.m, metricsTransport, "replay") > bReplays })
		if n := forwarded(b); n != 1 {
			t.Fatalf("B counted %v resends forwarded after the replay, want 1", n)
		}

		// A later counter passes both, delivered to neither again.
		if err := a.g.PublishResend(tn.ctx, rec, 2); err != nil {
			t.Fatalf("resend 2: %v", err)
		}
		waitFor(t, 5*time.Second, "resend 2 forwarded by C", func() bool { return forwarded(c) == 1 })
		// B sends C what it forwards in order, on one stream: had B
		// forwarded the replay, C would have counted it before resend 2.
		if n := rejects(t, c.m, metricsTransport, "replay"); n != cReplays {
			t.Fatalf("the replayed resend reached C (%v replays counted, %v before): B forwarded it", n, cReplays)
		}
		if nb, nc := len(b.sink.announcesOf(id, rec.Agent.Seq)), len(c.sink.announcesOf(id, rec.Agent.Seq)); nb != 0 || nc != 1 {
			t.Fatalf("deliveries after resend 2: B %d, C %d; want 0 and 1", nb, nc)
		}

		// Another peer resending A's record: refused, its forwarder
		// penalised as for any announcement by a peer that is not the
		// record's.
		x, pub := tn.rawPeer(t, b)
		waitFor(t, 10*time.Second, "X in B's mesh", func() bool { return slices.Contains(b.g.MeshPeers(AnnounceTopic), x.h.ID()) })
		data, err = EncodeResend(rec, 3)
		if err != nil {
			t.Fatal(err)
		}
		before := rejects(t, b.m, metricsTransport, "peer_mismatch")
		pub(data)
		waitFor(t, 5*time.Second, "B to refuse X's resend of A's record", func() bool {
			return rejects(t, b.m, metricsTransport, "peer_mismatch") > before
		})
		if n := forwarded(b); n != 2 {
			t.Fatalf("B counted %v resends forwarded, want 2 (X's is not one)", n)
		}
	})
}

// TestResendToNobodyIsNotCounted: a resend on topics without a peer is
// not published, not counted as sent, and not an error (the caller's
// counter moves on; the next resend goes out when a peer is there).
func TestResendToNobodyIsNotCounted(t *testing.T) {
	bubble(t, func(t *testing.T) {
		tn := newTestNet(t, 1, testConfig())
		a := tn.nodes[0]
		if err := a.g.PublishResend(tn.ctx, a.record(t), 1); err != nil {
			t.Fatalf("resend to nobody: %v", err)
		}
		if n := promtest.ToFloat64(a.m.Resends.WithLabelValues("sent")); n != 0 {
			t.Fatalf("%v resends counted sent with no peer", n)
		}
		if err := a.g.PublishResend(tn.ctx, a.record(t), MaxResend+1); !errors.Is(err, ErrRejected) {
			t.Fatalf("resend %d: %v, want ErrRejected", MaxResend+1, err)
		}
	})
}
