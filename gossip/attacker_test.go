package gossip

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentd/agentd/liveness"
	"github.com/agentd/agentd/metrics"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/trust"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// A neighbour that answers /agentd/sync/1.0.0 with lies: forged and
// undecodable records, a heard list that does not match, liveness claims
// out of range, an answer larger than asked for, garbage framing. Each is
// refused and counted, the one valid record of the answer still learnt,
// and nothing forged reaches the view (issue 12 item 7).
func TestRogueSyncAnswersAreRefusedAndCounted(t *testing.T) {
	bubble(t, func(t *testing.T) {
		tn := newTestNet(t, 1, testConfig())
		b := tn.nodes[0]
		rogue := tn.addLinkedHost(1)
		tn.connect(b, rogue)

		honestID, err := trust.Generate()
		if err != nil {
			t.Fatal(err)
		}
		honest := signAgent(t, honestID, 1)
		forgedID, err := trust.Generate()
		if err != nil {
			t.Fatal(err)
		}
		forged := *signAgent(t, forgedID, 1)
		forged.Signature = slices.Clone(forged.Signature)
		forged.Signature[10] ^= 0x01
		announce := func(sa *record.SignedAgent) json.RawMessage {
			return json.RawMessage(sa.MarshalAnnounce())
		}
		heard := `{"age_ms":1000,"interval_ms":5000}`
		answer := func(recs []json.RawMessage, heards []string) []byte {
			rs := make([]string, len(recs))
			for i, r := range recs {
				rs[i] = string(r)
			}
			return []byte(fmt.Sprintf(`{"protocol_version":"v1.0","records":[%s],"heard":[%s]}`, strings.Join(rs, ","), strings.Join(heards, ",")))
		}
		var frame atomic.Pointer[[]byte]
		rogue.h.SetStreamHandler(protocol.ID(SyncProtocol), func(s network.Stream) {
			defer func() { _ = s.Close() }()
			if _, err := readFrame(bufio.NewReader(s), 4096); err != nil {
				_ = s.Reset()
				return
			}
			_, _ = s.Write(*frame.Load())
		})
		framed := func(body []byte) []byte {
			var buf strings.Builder
			_ = writeFrame(&buf, body)
			return []byte(buf.String())
		}

		cases := []struct {
			name   string
			frame  []byte
			learnt int    // records that reach the sink
			reason string // the rejects counter that must grow
		}{
			{"forged, undecodable and valid records", framed(answer(
				[]json.RawMessage{announce(&forged), json.RawMessage(`{"agent":1}`), announce(honest)},
				[]string{heard, heard, heard})), 1, "bad_signature"},
			{"heard list shorter than the records", framed(answer([]json.RawMessage{announce(honest)}, nil)), 0, "malformed"},
			{"liveness claimed beyond one day", framed(answer([]json.RawMessage{announce(honest)},
				[]string{`{"age_ms":0,"interval_ms":86400001}`})), 0, "malformed"},
			{"negative age", framed(answer([]json.RawMessage{announce(honest)},
				[]string{`{"age_ms":-1,"interval_ms":5000}`})), 0, "malformed"},
			{"member name in another case", framed([]byte(`{"protocol_version":"v1.0","Records":[],"records":[],"heard":[]}`)), 0, "malformed"},
			{"frame longer than the bound", []byte{0xff, 0xff, 0xff, 0xff, 0x0f}, 0, "too_large"},
			{"non-minimal frame length", []byte{0x80, 0x00}, 0, "malformed"},
		}
		for _, c := range cases {
			f := c.frame
			frame.Store(&f)
			before := rejects(t, b.m, "sync", c.reason)
			n, err := b.g.Sync(tn.ctx)
			if c.learnt > 0 {
				if err != nil || n != c.learnt {
					t.Fatalf("%s: Sync = %d, %v; want %d learnt", c.name, n, err, c.learnt)
				}
			} else if err == nil && n != 0 {
				t.Fatalf("%s: Sync learnt %d records from a lying answer", c.name, n)
			}
			if got := rejects(t, b.m, "sync", c.reason); got <= before {
				t.Errorf("%s: sync %s = %v, not counted", c.name, c.reason, got)
			}
			if ds := b.sink.announcesOf(forgedID.AgentID, 1); len(ds) != 0 {
				t.Fatalf("%s: the forged record reached the view: %+v", c.name, ds)
			}
			if errors.Is(err, ErrSyncRefused) {
				t.Fatalf("%s: a lie was taken for a refusal: %v", c.name, err)
			}
		}
		if got := rejects(t, b.m, "sync", "malformed"); got < 5 {
			t.Errorf("sync malformed = %v, want >= 5 (one undecodable record and four bad answers)", got)
		}
	})
}

// vettingSink is a fakeSink whose node reaches only the authors in ok.
type vettingSink struct {
	*fakeSink
	mu sync.Mutex
	ok map[peer.ID]bool
}

func (s *vettingSink) VetAuthor(_ context.Context, author peer.ID, _ time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ok[author]
}

// A peer that floods announcements authored by peer keys it minted (each
// validly signed, none reachable) gets them past no honest node: the node
// next to it ignores them, so they go no further, counts them, and charges
// the flooding peer in P5 until its score is below the graylist
// threshold. An announcement of a reachable author still travels through
// the same node (issue 12 item 1: the fresh-key flood).
func TestUnreachableAuthorsAreNotForwarded(t *testing.T) {
	bubble(t, func(t *testing.T) {
		tn := newTestNet(t, 0, testConfig())
		a := tn.addHost(0)
		b := tn.addHost(1)
		c := tn.addHost(2)
		x := tn.addHost(3)
		if err := tn.mn.LinkAll(); err != nil {
			t.Fatal(err)
		}
		vs := &vettingSink{fakeSink: b.sink, ok: map[peer.ID]bool{a.h.ID(): true}}
		log := testLogger(t, slog.LevelWarn)
		for _, nd := range []*tnode{a, b, c} {
			var sink Sink = nd.sink
			if nd == b {
				sink = vs
			}
			startOn(t, tn, nd, sink, log)
		}
		topics, stop := rawPubSub(t, tn.ctx, x.h, AnnounceTopic)
		defer stop()
		tn.connect(a, b)
		tn.connect(b, c)
		tn.connect(x, b)
		waitFor(t, 10*time.Second, "topic peers", func() bool {
			return len(b.g.TopicPeers()) == 3 && len(c.g.TopicPeers()) == 1 && len(a.g.TopicPeers()) == 1
		})
		tn.waitMesh()

		var fakes []string
		for range 30 {
			k, err := trust.Generate()
			if err != nil {
				t.Fatal(err)
			}
			sa := signAgent(t, k, 1)
			fakes = append(fakes, sa.Agent.AgentID)
			data, err := EncodeAnnounce(sa)
			if err != nil {
				t.Fatal(err)
			}
			if err := topics[AnnounceTopic].Publish(tn.ctx, data, pubsub.WithSecretKeyAndPeerId(k.PeerKey, k.PeerID)); err != nil {
				t.Fatal(err)
			}
		}
		// An honest announcement through the same node.
		ra := a.record(t)
		if err := a.g.PublishAnnounce(tn.ctx, ra); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, "the reachable author's announcement at c", func() bool {
			return len(c.sink.announcesOf(ra.Agent.AgentID, ra.Agent.Seq)) == 1
		})
		waitFor(t, 10*time.Second, "the flood refused at b", func() bool {
			return rejects(t, b.m, "gossip", ReasonUnvettedAuthor) == 30
		})
		for _, id := range fakes {
			if len(b.sink.announcesOf(id, 1)) != 0 || len(c.sink.announcesOf(id, 1)) != 0 {
				t.Fatalf("a fake of an unreachable author was delivered (b %d, c %d)", len(b.sink.announcesOf(id, 1)), len(c.sink.announcesOf(id, 1)))
			}
		}
		waitFor(t, 10*time.Second, "the flooding peer scored down", func() bool {
			s, ok := b.g.PeerScores()[x.h.ID()]
			return ok && s <= -250
		})
		if s := b.g.PeerScores()[a.h.ID()]; s < 0 {
			t.Fatalf("the honest peer was charged: score %v", s)
		}
	})
}

// TestLivenessClaims: on the liveness topic a peer that forwards malformed
// peer_down claims is rejected and scored down (P4), a lie about a live
// peer is not forwarded, and nothing is dropped from the view.
func TestLivenessClaims(t *testing.T) {
	bubble(t, func(t *testing.T) {
		tn := newTestNet(t, 0, testConfig())
		b := tn.addHost(1)
		c := tn.addHost(2)
		x := tn.addHost(3)
		if err := tn.mn.LinkAll(); err != nil {
			t.Fatal(err)
		}
		log := testLogger(t, slog.LevelWarn)
		var mu sync.Mutex
		var downs []peer.ID
		for _, nd := range []*tnode{b, c} {
			g := startOn(t, tn, nd, nd.sink, log)
			det := liveness.New(nd.h, liveness.Config{}, liveness.Hooks{
				Holds: func(peer.ID) bool { return true },
				Down: func(p peer.ID) {
					mu.Lock()
					downs = append(downs, p)
					mu.Unlock()
				},
			}, nd.m, log)
			if err := g.JoinLiveness(det.ValidateClaim); err != nil {
				t.Fatal(err)
			}
			det.Start(tn.ctx)
			t.Cleanup(func() { _ = det.Close() })
		}
		topics, stop := rawPubSub(t, tn.ctx, x.h, LivenessTopic)
		defer stop()
		tn.connect(x, b)
		tn.connect(b, c)
		waitFor(t, 10*time.Second, "mesh", func() bool {
			return len(b.g.MeshPeers(LivenessTopic)) == 2
		})
		// A lie: c is alive (b reaches it at once).
		lie, err := liveness.EncodeClaim(c.h.ID(), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if err := topics[LivenessTopic].Publish(tn.ctx, lie); err != nil {
			t.Fatal(err)
		}
		for i := range 20 {
			bad := fmt.Appendf(nil, `{"protocol_version":"v1.0","type":"peer_down","peer_id":"not-a-peer-%d","at":"2026-11-25T00:00:00Z"}`, i)
			if err := topics[LivenessTopic].Publish(tn.ctx, bad); err != nil {
				t.Fatal(err)
			}
		}
		// Once x's score falls below the graylist threshold (a few
		// invalid messages: P4 is quadratic), b ignores the rest of its
		// RPCs.
		waitFor(t, 10*time.Second, "the malformed claims refused at b", func() bool {
			return rejects(t, b.m, "liveness", "malformed") >= 1
		})
		waitFor(t, 10*time.Second, "the lie refuted at b", func() bool {
			return testutil.ToFloat64(b.m.DownClaims.WithLabelValues("refuted")) == 1
		})
		waitFor(t, 10*time.Second, "the liar graylisted", func() bool {
			s, ok := b.g.PeerScores()[x.h.ID()]
			return ok && s < DefaultThresholds().GraylistThreshold
		})
		synctest.Wait()
		if n := testutil.ToFloat64(c.m.DownClaims.WithLabelValues("refuted")) + testutil.ToFloat64(c.m.DownClaims.WithLabelValues("malformed")); n != 0 {
			t.Errorf("c saw %v of x's claims: b forwarded them", n)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(downs) != 0 {
			t.Errorf("peers dropped on a lie: %v", downs)
		}
	})
}

// startOn starts gossip on nd with its own metrics, delivering to sink.
func startOn(t *testing.T, tn *testNet, nd *tnode, sink Sink, log *slog.Logger) *Gossip {
	t.Helper()
	nd.m = metrics.New(false)
	g, err := New(tn.ctx, nd.h, testConfig(), nd.v, sink, nd.m, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Start(tn.ctx); err != nil {
		t.Fatal(err)
	}
	nd.g = g
	return g
}
