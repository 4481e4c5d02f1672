package node

import (
	"context"
	"testing"
	"time"

	coreconnmgr "github.com/libp2p/go-libp2p/core/connmgr"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/p2p/net/connmgr"

	"github.com/agentd/agentd/record"
)

// cmHost gives a mocknet host a real connection manager.
type cmHost struct {
	host.Host
	cm *connmgr.BasicConnMgr
}

func (h cmHost) ConnManager() coreconnmgr.ConnManager { return h.cm }

// TestViewPeersAreTagged: the connection to a peer whose agent is in the
// live view carries the view tag, so a trim closes other connections
// first; the tag goes when the agent leaves the view.
func TestViewPeersAreTagged(t *testing.T) {
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
		if ti := cm.GetTagInfo(p); ti == nil || ti.Tags[viewTag] != viewTagWeight {
			t.Fatalf("connection to a view peer not tagged: %+v", ti)
		}
		if err := host0.Unregister(ctx, sa.Agent.AgentID, record.ReasonMaintenance); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, "the agent gone from the watcher's view", func() bool { return !hears(watcher, sa.Agent.AgentID) })
		watcher.tagViewPeers()
		if ti := cm.GetTagInfo(p); ti == nil {
			t.Fatal("the connection is gone")
		} else if _, ok := ti.Tags[viewTag]; ok {
			t.Fatalf("tag kept after the peer's last agent left: %+v", ti.Tags)
		}
	})
}
