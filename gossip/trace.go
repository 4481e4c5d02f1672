package gossip

import (
	"sync"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// meshTracker follows the router's mesh from its trace events (GRAFT,
// PRUNE, peer down, leave). pubsub calls it from its event loop, so every
// method only updates a map.
type meshTracker struct {
	g    *Gossip
	mu   sync.Mutex
	mesh map[string]map[peer.ID]struct{}
}

var _ pubsub.RawTracer = (*meshTracker)(nil)

func newMeshTracker(g *Gossip) *meshTracker {
	return &meshTracker{g: g, mesh: map[string]map[peer.ID]struct{}{}}
}

func (mt *meshTracker) peers(topic string) []peer.ID {
	mt.mu.Lock()
	defer mt.mu.Unlock()
	out := make([]peer.ID, 0, len(mt.mesh[topic]))
	for p := range mt.mesh[topic] {
		out = append(out, p)
	}
	return out
}

func (mt *meshTracker) Graft(p peer.ID, topic string) {
	mt.mu.Lock()
	defer mt.mu.Unlock()
	m := mt.mesh[topic]
	if m == nil {
		m = map[peer.ID]struct{}{}
		mt.mesh[topic] = m
	}
	m[p] = struct{}{}
}

func (mt *meshTracker) Prune(p peer.ID, topic string) {
	mt.mu.Lock()
	defer mt.mu.Unlock()
	delete(mt.mesh[topic], p)
}

func (mt *meshTracker) Leave(topic string) {
	mt.mu.Lock()
	defer mt.mu.Unlock()
	delete(mt.mesh, topic)
}

func (mt *meshTracker) OnClosedOutboundStream(p peer.ID) {
	mt.mu.Lock()
	defer mt.mu.Unlock()
	for _, m := range mt.mesh {
		delete(m, p)
	}
}

// UndeliverableMessage: a subscription loop fell Config.SubscriptionBuffer
// messages behind and pubsub dropped one for it.
func (mt *meshTracker) UndeliverableMessage(msg *pubsub.Message) {
	mt.g.log.Warn("gossip delivery dropped: sink too slow", "topic", msg.GetTopic(), "author", msg.GetFrom())
}

func (mt *meshTracker) OnNewOutboundStream(peer.ID, protocol.ID) {}
func (mt *meshTracker) Join(string)                              {}
func (mt *meshTracker) ValidateMessage(*pubsub.Message)          {}
func (mt *meshTracker) DeliverMessage(*pubsub.Message)           {}
func (mt *meshTracker) RejectMessage(*pubsub.Message, string)    {}
func (mt *meshTracker) DuplicateMessage(*pubsub.Message)         {}
func (mt *meshTracker) ThrottlePeer(peer.ID)                     {}
func (mt *meshTracker) RecvRPC(*pubsub.RPC)                      {}
func (mt *meshTracker) SendRPC(*pubsub.RPC, peer.ID)             {}
func (mt *meshTracker) DropRPC(*pubsub.RPC, peer.ID)             {}
