package gossip

import (
	"sync/atomic"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"google.golang.org/protobuf/proto"
)

// Traffic counts what one node's pubsub sends and receives: RPCs (the
// frames on the wire, each holding messages and control), the published
// messages inside them (duplicates included: every copy that crosses the
// wire counts), and their protobuf-encoded bytes. Pass it in
// Config.Tracers. It is safe for concurrent use and never blocks.
type Traffic struct {
	RecvRPCs, SentRPCs         atomic.Int64
	RecvMessages, SentMessages atomic.Int64
	RecvBytes, SentBytes       atomic.Int64
	Duplicates, Delivered      atomic.Int64
}

// TrafficSnapshot is a copy of the counters.
type TrafficSnapshot struct {
	RecvRPCs, SentRPCs         int64
	RecvMessages, SentMessages int64
	RecvBytes, SentBytes       int64
	Duplicates, Delivered      int64
}

// Snapshot reads the counters.
func (t *Traffic) Snapshot() TrafficSnapshot {
	return TrafficSnapshot{
		RecvRPCs: t.RecvRPCs.Load(), SentRPCs: t.SentRPCs.Load(),
		RecvMessages: t.RecvMessages.Load(), SentMessages: t.SentMessages.Load(),
		RecvBytes: t.RecvBytes.Load(), SentBytes: t.SentBytes.Load(),
		Duplicates: t.Duplicates.Load(), Delivered: t.Delivered.Load(),
	}
}

// Sub returns s - o.
func (s TrafficSnapshot) Sub(o TrafficSnapshot) TrafficSnapshot {
	return TrafficSnapshot{
		RecvRPCs: s.RecvRPCs - o.RecvRPCs, SentRPCs: s.SentRPCs - o.SentRPCs,
		RecvMessages: s.RecvMessages - o.RecvMessages, SentMessages: s.SentMessages - o.SentMessages,
		RecvBytes: s.RecvBytes - o.RecvBytes, SentBytes: s.SentBytes - o.SentBytes,
		Duplicates: s.Duplicates - o.Duplicates, Delivered: s.Delivered - o.Delivered,
	}
}

var _ pubsub.RawTracer = (*Traffic)(nil)

// RecvRPC implements pubsub.RawTracer.
func (t *Traffic) RecvRPC(rpc *pubsub.RPC) {
	t.RecvRPCs.Add(1)
	t.RecvMessages.Add(int64(len(rpc.GetPublish())))
	t.RecvBytes.Add(int64(proto.Size(&rpc.RPC)))
}

// SendRPC implements pubsub.RawTracer.
func (t *Traffic) SendRPC(rpc *pubsub.RPC, _ peer.ID) {
	t.SentRPCs.Add(1)
	t.SentMessages.Add(int64(len(rpc.GetPublish())))
	t.SentBytes.Add(int64(proto.Size(&rpc.RPC)))
}

// DuplicateMessage implements pubsub.RawTracer.
func (t *Traffic) DuplicateMessage(*pubsub.Message) { t.Duplicates.Add(1) }

// DeliverMessage implements pubsub.RawTracer.
func (t *Traffic) DeliverMessage(*pubsub.Message) { t.Delivered.Add(1) }

// The remaining RawTracer methods count nothing.

func (t *Traffic) OnNewOutboundStream(peer.ID, protocol.ID) {}
func (t *Traffic) OnClosedOutboundStream(peer.ID)           {}
func (t *Traffic) Join(string)                              {}
func (t *Traffic) Leave(string)                             {}
func (t *Traffic) Graft(peer.ID, string)                    {}
func (t *Traffic) Prune(peer.ID, string)                    {}
func (t *Traffic) ValidateMessage(*pubsub.Message)          {}
func (t *Traffic) RejectMessage(*pubsub.Message, string)    {}
func (t *Traffic) ThrottlePeer(peer.ID)                     {}
func (t *Traffic) DropRPC(*pubsub.RPC, peer.ID)             {}
func (t *Traffic) UndeliverableMessage(*pubsub.Message)     {}
