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
// be protected for several reasons, so View and DHT overlap, and MeshOnly
// counts the protected peers that are neither); a young one is within the
// grace period; the others are what a trim may close once the node holds
// more than the high watermark. Means per node over the samples; Peers is
// their sum.
type ConnsPerNode struct {
	Peers     float64 `json:"peers"`
	Protected float64 `json:"protected"`
	View      float64 `json:"view"`
	DHT       float64 `json:"dht_buckets"`
	MeshOnly  float64 `json:"mesh_only"`
	Young     float64 `json:"young"`
	Other     float64 `json:"other"`
}

// connSums counts the connections of the nodes of one sample, or, summed
// over samples, their per-node means.
type connSums ConnsPerNode

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
		c.Peers++
		if cm.IsProtected(p, "") {
			c.Protected++
			v, d := cm.IsProtected(p, node.ViewTag), cm.IsProtected(p, kbucketTag)
			c.View += b2f(v)
			c.DHT += b2f(d)
			c.MeshOnly += b2f(!v && !d)
			continue
		}
		if young(p) {
			c.Young++
		} else {
			c.Other++
		}
	}
}

// addMean adds one sample's per-node means (s over live nodes).
func (c *connSums) addMean(s connSums, live int) {
	n := float64(live)
	c.Peers += s.Peers / n
	c.Protected += s.Protected / n
	c.View += s.View / n
	c.DHT += s.DHT / n
	c.MeshOnly += s.MeshOnly / n
	c.Young += s.Young / n
	c.Other += s.Other / n
}

func (c *connSums) mean(samples int) ConnsPerNode {
	n := float64(samples)
	return ConnsPerNode{Peers: c.Peers / n, Protected: c.Protected / n, View: c.View / n, DHT: c.DHT / n, MeshOnly: c.MeshOnly / n, Young: c.Young / n, Other: c.Other / n}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
