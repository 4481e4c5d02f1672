package simnet

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentd/agentd/node"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/net/connmgr"
	ma "github.com/multiformats/go-multiaddr"
)

// fakeConn is a connection to a peer, as the connection manager's
// notifee reads it.
type fakeConn struct {
	network.Conn
	p peer.ID
}

func (c fakeConn) RemotePeer() peer.ID { return c.p }

// RemoteMultiaddr is read by the manager's GetTagInfo.
func (c fakeConn) RemoteMultiaddr() ma.Multiaddr { return ma.StringCast("/ip4/10.0.0.1/tcp/4777") }

func TestConnSums(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const grace = 3 * time.Second
		cm, err := connmgr.NewConnManager(1, 100, connmgr.WithGracePeriod(grace))
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := cm.Close(); err != nil {
				t.Error(err)
			}
		}()
		ps := []peer.ID{"view", "view+dht", "mesh", "old", "young"}
		for _, p := range ps[:4] {
			cm.Notifee().Connected(nil, fakeConn{p: p})
		}
		cm.Protect(ps[0], node.ViewTag)
		cm.Protect(ps[1], node.ViewTag)
		cm.Protect(ps[1], kbucketTag)
		cm.Protect(ps[2], "pubsub:/agentd/shard/0a1b/1.0.0")
		time.Sleep(10 * time.Second)
		cm.Notifee().Connected(nil, fakeConn{p: ps[4]})

		since := time.Now().Add(-grace)
		var one connSums
		one.count(ps, cm, func(p peer.ID) bool {
			ti := cm.GetTagInfo(p)
			return ti != nil && ti.FirstSeen.After(since)
		})
		if one.Peers != 5 {
			t.Fatalf("peers = %v, want 5", one.Peers)
		}
		var all connSums
		all.addMean(one, 1)
		all.addMean(one, 1)
		got := all.mean(2)
		want := ConnsPerNode{Peers: 5, Protected: 3, View: 2, DHT: 1, MeshOnly: 1, Young: 1, Other: 1}
		if got != want {
			t.Fatalf("mean = %+v, want %+v", got, want)
		}
	})
}
