package simnet

import (
	"time"

	"github.com/agentd/agentd/node"
	"github.com/libp2p/go-libp2p/core/connmgr"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
)

// kbucketTag is the protection kad-dht v0.42 puts on the peers of its
// routing table's two nearest buckets (dht.go, kbucketTag).
const kbucketTag = "kbucket"

// ConnsPerNode is why an agent node's connections stay open, as the
// connection manager sees them: a protected connection is never trimmed
// (view peers, kad-dht's nearest buckets, GossipSub mesh peers; a peer may
// be protected for several reasons, so View and DHT overlap); a young one
// is within the grace period; the others are what a trim may close once
// the node holds more than the high watermark. Means per node over the
// samples.
type ConnsPerNode struct {
	Protected float64 `json:"protected"`
	View      float64 `json:"view"`
	DHT       float64 `json:"dht_buckets"`
	ViewOrDHT float64 `json:"view_or_dht"`
	Young     float64 `json:"young"`
	Other     float64 `json:"other"`
}

// connSums counts connections of the nodes of one sample (or, summed over
// samples, their per-node means).
type connSums struct {
	peers                                         int
	protected, view, dht, viewOrDHT, young, other float64
}

// add counts h's connected peers; a peer whose oldest open connection
// was opened after since is young (the connection manager's grace period
// runs from its first sight of the peer, which is that connection's
// opening unless the peer had connected and left before).
func (c *connSums) add(h host.Host, since time.Time) {
	nw := h.Network()
	c.count(nw.Peers(), h.ConnManager(), func(p peer.ID) bool {
		for _, cn := range nw.ConnsToPeer(p) {
			if !cn.Stat().Opened.After(since) {
				return false
			}
		}
		return true
	})
}

func (c *connSums) count(peers []peer.ID, cm connmgr.ConnManager, young func(peer.ID) bool) {
	for _, p := range peers {
		c.peers++
		if cm.IsProtected(p, "") {
			c.protected++
			v, d := cm.IsProtected(p, node.ViewTag), cm.IsProtected(p, kbucketTag)
			c.view += b2f(v)
			c.dht += b2f(d)
			c.viewOrDHT += b2f(v || d)
			continue
		}
		if young(p) {
			c.young++
		} else {
			c.other++
		}
	}
}

// addMean adds one sample's per-node means (s over live nodes).
func (c *connSums) addMean(s connSums, live int) {
	n := float64(live)
	c.protected += s.protected / n
	c.view += s.view / n
	c.dht += s.dht / n
	c.viewOrDHT += s.viewOrDHT / n
	c.young += s.young / n
	c.other += s.other / n
}

func (c *connSums) mean(samples int) ConnsPerNode {
	n := float64(samples)
	return ConnsPerNode{Protected: c.protected / n, View: c.view / n, DHT: c.dht / n, ViewOrDHT: c.viewOrDHT / n, Young: c.young / n, Other: c.other / n}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
