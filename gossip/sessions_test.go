package gossip

import (
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/testutil"
	"github.com/libp2p/go-libp2p/core/network"
)

// go-libp2p-pubsub v0.17.0 derives a context per peer session from the
// context it runs under and never cancels it. Under an ordinary context
// every session since the start stayed registered (about 400 bytes each:
// 400 MB in a 1 000-node simnet run); under gossip's (package weakctx) a
// session's context is registered while the session is up and collected
// once the peer has left.
func TestPeerSessionsAreNotKept(t *testing.T) {
	tn := newTestNet(t, 2, Config{})
	a, b := tn.nodes[0], tn.nodes[1]
	runtime.GC()
	before := a.g.psCtx.Registered()
	tn.connect(a, b)
	waitSession(t, a, b)
	if up := a.g.psCtx.Registered(); up <= before {
		t.Fatalf("%d contexts registered with a session up, %d before: pubsub does not run under gossip's context", up, before)
	}
	disconnect(t, tn, a, b)
	testutil.Eventually(t, 10*time.Second, "the session's contexts are collected", func() bool {
		runtime.GC()
		return a.g.psCtx.Registered() <= before
	})
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
		waitSession(t, a, p)
		disconnect(t, tn, a, p)
	}
	testutil.Eventually(t, 10*time.Second, "the neutral peer forgotten", func() bool {
		_, ok := a.g.PeerScores()[good.h.ID()]
		return !ok
	})
	if s, ok := a.g.PeerScores()[bad.h.ID()]; !ok || s >= 0 {
		t.Fatalf("penalised peer: score %v, kept %v; want kept below zero", s, ok)
	}
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

// disconnect unlinks a and b (so that nothing dials again: a sync or a
// pubsub writer respawned for what it takes for a duplicate connection
// would), closes their connections and waits until a's pubsub has dropped
// b.
func disconnect(t *testing.T, tn *testNet, a, b *tnode) {
	t.Helper()
	if err := tn.mn.UnlinkPeers(a.h.ID(), b.h.ID()); err != nil {
		t.Fatal(err)
	}
	// mocknet does not always reset a stream whose connection it closes
	// (a pubsub peer-dead watcher stayed blocked in Read for minutes), so
	// the streams are reset first, and again until pubsub lets go.
	testutil.Eventually(t, 10*time.Second, "pubsub drops the peer", func() bool {
		for _, c := range a.h.Network().ConnsToPeer(b.h.ID()) {
			for _, st := range c.GetStreams() {
				_ = st.Reset()
			}
		}
		for _, c := range b.h.Network().ConnsToPeer(a.h.ID()) {
			for _, st := range c.GetStreams() {
				_ = st.Reset()
			}
		}
		if err := tn.mn.DisconnectPeers(a.h.ID(), b.h.ID()); err != nil {
			t.Fatal(err)
		}
		return !slices.Contains(a.g.ps.ListPeers(""), b.h.ID())
	})
}
