package gossip

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/testutil"
	"github.com/libp2p/go-libp2p/core/network"
)

// go-libp2p-pubsub v0.17.0 derives a context per peer session from the
// context it runs under and never cancels it. Under an ordinary context
// every session since the start stayed registered (about 400 bytes each:
// 400 MB in a 1 000-node simnet run); under gossip's they are collected
// once the peer has left.
func TestPeerSessionsAreNotKept(t *testing.T) {
	tn := newTestNet(t, 2, Config{})
	a, b := tn.nodes[0], tn.nodes[1]
	const sessions = 30
	live := 0 // registrations seen while a session is up
	for range sessions {
		tn.connect(a, b)
		// The session's context is made once pubsub's stream to the peer
		// is open.
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
		live = max(live, a.g.psCtx.Registered())
		if err := tn.mn.DisconnectPeers(a.h.ID(), b.h.ID()); err != nil {
			t.Fatal(err)
		}
	}
	var n int
	testutil.Eventually(t, 10*time.Second, "the sessions' contexts are collected", func() bool {
		runtime.GC()
		n = a.g.psCtx.Registered()
		return n < sessions/3
	})
	if live == 0 {
		t.Fatal("no session registered a context with pubsub's: the test measures nothing")
	}
	t.Logf("%d contexts registered after %d sessions (%d while one was up)", n, sessions, live)
}

// A peer that leaves with nothing against it is forgotten by pubsub's
// scoring; one with a penalty is kept (RetainScore), so that it cannot
// shed the penalty by reconnecting.
func TestNeutralPeerScoreIsNotKept(t *testing.T) {
	tn := newTestNet(t, 3, Config{ScoreInspectPeriod: 100 * time.Millisecond})
	a, good, bad := tn.nodes[0], tn.nodes[1], tn.nodes[2]
	for _, p := range []*tnode{good, bad} {
		tn.connect(a, p)
	}
	testutil.Eventually(t, 10*time.Second, "both peers scored", func() bool {
		s := a.g.PeerScores()
		_, g := s[good.h.ID()]
		_, b := s[bad.h.ID()]
		return g && b
	})
	a.g.pen.add(bad.h.ID()) // one unvetted delivery: −10
	for _, p := range []*tnode{good, bad} {
		if err := tn.mn.DisconnectPeers(a.h.ID(), p.h.ID()); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 10*time.Second, "the neutral peer forgotten", func() bool {
		_, ok := a.g.PeerScores()[good.h.ID()]
		return !ok
	})
	if s, ok := a.g.PeerScores()[bad.h.ID()]; !ok || s >= 0 {
		t.Fatalf("penalised peer: score %v, kept %v; want kept below zero", s, ok)
	}
}
