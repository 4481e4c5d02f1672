package gossip

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/testutil"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/network"
)

// go-libp2p-pubsub v0.17.0 derives a context per peer session from the
// context it runs under and never cancels it. Under an ordinary context
// every session since the start stayed registered (about 400 bytes each:
// 400 MB in a 1 000-node simnet run); gossip runs pubsub under a
// weakctx.Context, which lets such a context be collected once its session
// has ended (package weakctx's tests). Here: a session's context is
// registered there, so pubsub does run under it.
func TestPubsubRunsUnderTheWeakContext(t *testing.T) {
	tn := newTestNet(t, 2, Config{})
	a, b := tn.nodes[0], tn.nodes[1]
	runtime.GC()
	before := a.g.psCtx.Registered()
	tn.connect(a, b)
	waitSession(t, a, b)
	if up := a.g.psCtx.Registered(); up <= before {
		t.Fatalf("%d contexts registered with a session up, %d before: pubsub does not run under gossip's context", up, before)
	}
}

// A peer that did nothing wrong scores above zero, so that pubsub forgets
// it when it leaves (it keeps, for RetainScore, only the peers that leave
// with a score of zero or less); a penalised one scores below. The quiet
// peer runs pubsub but shares no topic with the node, as a peer met for a
// DHT lookup does: nothing else would lift its score above zero.
func TestNeutralPeerScoresAboveZero(t *testing.T) {
	tn := newTestNet(t, 2, Config{ScoreInspectPeriod: 100 * time.Millisecond})
	a, bad := tn.nodes[0], tn.nodes[1]
	quiet := tn.addHost(2)
	if _, err := pubsub.NewGossipSub(tn.ctx, quiet.h); err != nil {
		t.Fatal(err)
	}
	if _, err := tn.mn.LinkPeers(a.h.ID(), quiet.h.ID()); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*tnode{quiet, bad} {
		tn.connect(a, p)
		waitSession(t, a, p)
	}
	a.g.pen.add(bad.h.ID()) // one unvetted delivery: −10
	testutil.Eventually(t, 10*time.Second, "the quiet peer above zero, the penalised one below", func() bool {
		s := a.g.PeerScores()
		q, okq := s[quiet.h.ID()]
		b, okb := s[bad.h.ID()]
		return okq && okb && q > 0 && b < 0
	})
}

// waitSession waits until a's pubsub has its stream to b open.
func waitSession(t *testing.T, a, b *tnode) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, "pubsub opens its stream to the peer", func() bool {
		for _, c := range a.h.Network().ConnsToPeer(b.h.ID()) {
			for _, st := range c.GetStreams() {
				if st.Stat().Direction == network.DirOutbound && strings.HasPrefix(string(st.Protocol()), "/meshsub/") {
					return true
				}
			}
		}
		return false
	})
}
