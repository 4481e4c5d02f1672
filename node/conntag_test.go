package node

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	coreconnmgr "github.com/libp2p/go-libp2p/core/connmgr"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/net/connmgr"

	"github.com/agentd/agentd/record"
)

// cmHost gives a mocknet host a real connection manager.
type cmHost struct {
	host.Host
	cm *connmgr.BasicConnMgr
}

func (h cmHost) ConnManager() coreconnmgr.ConnManager { return h.cm }

// TestViewPeersAreProtected: the connection to a peer whose agent is in
// the live view is protected from trimming; the protection goes when the
// agent leaves the view.
func TestViewPeersAreProtected(t *testing.T) {
	bubble(t, func(t *testing.T) {
		ctx := context.Background()
		tn := newNet(t, 1, Config{})
		var cm *connmgr.BasicConnMgr
		tn.wrap = func(h host.Host) host.Host {
			var err error
			if cm, err = connmgr.NewConnManager(2, 4); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cm.Close() })
			h.Network().Notify(cm.Notifee())
			return cmHost{Host: h, cm: cm}
		}
		watcher := tn.add(nil, nil)
		host0 := tn.nodes[0]
		sa, err := host0.Register(ctx, spec("skill-t", "cap.t"))
		if err != nil {
			t.Fatal(err)
		}
		p := host0.Host().ID()
		waitFor(t, 10*time.Second, "the agent in the watcher's view", func() bool { return hears(watcher, sa.Agent.AgentID) })
		watcher.tagViewPeers()
		if !cm.IsProtected(p, ViewTag) {
			t.Fatalf("connection to a view peer not protected: %+v", cm.GetTagInfo(p))
		}
		if err := host0.Unregister(ctx, sa.Agent.AgentID, record.ReasonMaintenance); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, "the agent gone from the watcher's view", func() bool { return !hears(watcher, sa.Agent.AgentID) })
		watcher.tagViewPeers()
		if cm.GetTagInfo(p) == nil {
			t.Fatal("the connection is gone")
		}
		if cm.IsProtected(p, ViewTag) {
			t.Fatal("protection kept after the peer's last agent left")
		}
	})
}

// TestPlanViewConns: the first max view peers by rank are protected, the
// rest tagged; peers protected before and no longer (gone from the view,
// disconnected, or past max) are released, as are connected non-view
// peers.
func TestPlanViewConns(t *testing.T) {
	ids := make([]peer.ID, 6)
	rank := map[peer.ID]uint64{}
	for i := range ids {
		ids[i] = peer.ID(fmt.Sprintf("peer-%d", i))
		rank[ids[i]] = uint64(10 - i) // the reverse of the ids' order
	}
	rank[ids[0]] = 0 // first, whatever its id
	inView := func(p peer.ID) bool { return p != ids[1] }
	gone := peer.ID("peer-gone")
	before := map[peer.ID]struct{}{ids[1]: {}, ids[2]: {}, gone: {}, ids[0]: {}}
	connected := []peer.ID{ids[5], ids[3], ids[1], ids[0], ids[4], ids[2]}
	protect, tag, release := planViewConns(connected, inView, func(p peer.ID) uint64 { return rank[p] }, before, 3)
	if want := []peer.ID{ids[0], ids[5], ids[4]}; !slices.Equal(protect, want) {
		t.Errorf("protect = %v, want %v", protect, want)
	}
	if want := []peer.ID{ids[3], ids[2]}; !slices.Equal(tag, want) {
		t.Errorf("tag = %v, want %v", tag, want)
	}
	slices.Sort(release)
	if want := []peer.ID{ids[1], ids[2], gone}; !slices.Equal(release, want) {
		t.Errorf("release = %v, want %v", release, want)
	}
}

// countingCM counts the calls a pass makes into a real connection manager.
type countingCM struct {
	*connmgr.BasicConnMgr
	calls int
}

func (c *countingCM) Protect(p peer.ID, tag string) { c.calls++; c.BasicConnMgr.Protect(p, tag) }
func (c *countingCM) Unprotect(p peer.ID, tag string) bool {
	c.calls++
	return c.BasicConnMgr.Unprotect(p, tag)
}
func (c *countingCM) UntagPeer(p peer.ID, tag string) { c.calls++; c.BasicConnMgr.UntagPeer(p, tag) }

// TestViewConnsApply: a pass leaves the connection manager protecting
// and tagging what its plan says as peers move between protected, tagged
// and released, and a pass that changes nothing calls nothing but
// TagPeer.
func TestViewConnsApply(t *testing.T) {
	base, err := connmgr.NewConnManager(2, 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = base.Close() })
	cm := &countingCM{BasicConnMgr: base}
	a, b, c := peer.ID("peer-a"), peer.ID("peer-b"), peer.ID("peer-c")
	var vc viewConns
	tagValue := func(p peer.ID) int {
		if ti := cm.GetTagInfo(p); ti != nil {
			return ti.Tags[ViewTag]
		}
		return 0
	}
	check := func(step string, protected, tagged []peer.ID) {
		t.Helper()
		for _, p := range []peer.ID{a, b, c} {
			if got, want := cm.IsProtected(p, ViewTag), slices.Contains(protected, p); got != want {
				t.Errorf("%s: %s protected %v, want %v", step, p, got, want)
			}
			if got, want := tagValue(p) == viewTagWeight, slices.Contains(tagged, p); got != want {
				t.Errorf("%s: %s tagged %v, want %v", step, p, got, want)
			}
		}
	}
	vc.apply(cm, []peer.ID{a, b}, []peer.ID{c}, nil)
	check("first pass", []peer.ID{a, b}, []peer.ID{c})

	cm.calls = 0
	vc.apply(cm, []peer.ID{a, b}, []peer.ID{c}, nil)
	check("same plan", []peer.ID{a, b}, []peer.ID{c})
	if cm.calls != 0 {
		t.Errorf("a pass that changes nothing made %d protect/untag calls", cm.calls)
	}

	// a is demoted to a tag, c promoted, b released.
	vc.apply(cm, []peer.ID{c}, []peer.ID{a}, []peer.ID{a, b})
	check("moved", []peer.ID{c}, []peer.ID{a})

	// Everything released.
	vc.apply(cm, nil, nil, []peer.ID{a, c})
	check("released", nil, nil)
}
