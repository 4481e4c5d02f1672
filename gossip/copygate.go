package gossip

import (
	"crypto/sha256"
	"sync"
	"sync/atomic"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	pb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/prometheus/client_golang/prometheus"
)

// copyGate drops a received message copy that is identical, byte for
// byte, to a copy still waiting for pubsub's signature check.
//
// go-libp2p-pubsub v0.17.0 marks a message seen only after it verified
// the message's signature (validation.validate: so that nobody can occupy
// an honest message's id with a forged copy), so every copy that arrives
// while the first waits in the validation queue is verified again: one
// Ed25519 check per mesh peer instead of one per message, on a node whose
// CPU is already behind — which is when copies queue. The gate runs as the
// application's RPC inspector, on pubsub's event loop before any of that,
// and removes such copies from the RPC.
//
// A copy is dropped only when every field the signature check reads is
// equal (topic, author, payload, seqno, signature, key and any fields
// unknown to the protobuf), so the check would have come to the same
// result: a forged or malleated copy is other bytes and goes through, and
// cannot make the gate drop an honest one. The gate forgets a copy (the
// leader) as soon as pubsub traces its outcome — validated (pubsub's own
// seen-cache covers the message from then on), a duplicate, or refused for
// any reason, a full validation queue included — so that the next copy is
// checked as before. What the trace does not report (an RPC of a peer the
// router graylisted, a topic not subscribed) expires after window. A peer
// whose score was below zero at the router's last score snapshot does not
// lead: its copies would be ignored, and the honest ones behind them must
// not wait. A peer that fell below the graylist threshold since the last
// snapshot can still lead a message for at most window; the copies it
// made the gate drop are then lost to this node until GossipSub's IHAVE
// gossip offers the message again.
//
// GossipSub's mesh-delivery score (P3) counts the duplicates a mesh peer
// delivers; agentd's topics do not use it (AnnounceTopicScoreParams), and
// New turns the gate off when a configuration weighs it.
type copyGate struct {
	window     time.Duration
	maxLeaders int // leaders tracked at most
	// maxBytes bounds the payload bytes of the leaders' messages, which
	// the gate keeps alive until they settle: a peer flooding large
	// messages on a topic nobody traces cannot make it hold more.
	maxBytes int
	now      func() time.Time
	dropped  atomic.Uint64
	counter  prometheus.Counter // nil: not exported
	// low holds the peers whose last known score is below zero.
	low atomic.Pointer[map[peer.ID]struct{}]

	mu        sync.Mutex
	leaders   map[copyKey]time.Time
	byMsg     map[*pb.Message]copyKey
	bytes     int // payload bytes of the messages in byMsg
	lastSweep time.Time
}

// copyKey is the SHA-256 of every field of a pubsub message.
type copyKey [sha256.Size]byte

// Defaults of the gate: how long a leader holds back identical copies at
// most, and how many leaders and payload bytes it tracks (past that,
// copies pass unchecked).
const (
	copyGateWindow   = time.Second
	copyGateMax      = 4096
	copyGateMaxBytes = 4 << 20
)

var _ pubsub.RawTracer = (*copyGate)(nil)

func newCopyGate(window time.Duration, maxLeaders, maxBytes int, now func() time.Time, counter prometheus.Counter) *copyGate {
	return &copyGate{
		counter:    counter,
		window:     window,
		maxLeaders: maxLeaders,
		maxBytes:   maxBytes,
		now:        now,
		leaders:    map[copyKey]time.Time{},
		byMsg:      map[*pb.Message]copyKey{},
	}
}

// keyOf hashes every field of m, each length-prefixed, the topic with its
// presence.
func keyOf(m *pb.Message) copyKey {
	h := sha256.New()
	if m.Topic == nil {
		h.Write([]byte{0})
	} else {
		h.Write([]byte{1})
		writePrefixed(h, []byte(*m.Topic))
	}
	for _, b := range [][]byte{m.From, m.Data, m.Seqno, m.Signature, m.Key, m.ProtoReflect().GetUnknown()} {
		writePrefixed(h, b)
	}
	var k copyKey
	h.Sum(k[:0])
	return k
}

// inspect is pubsub's application RPC inspector: it removes from rpc the
// message copies identical to a leader and makes the others leaders. It
// never refuses an RPC.
func (cg *copyGate) inspect(from peer.ID, rpc *pubsub.RPC) error {
	msgs := rpc.GetPublish()
	if len(msgs) == 0 {
		return nil
	}
	low := cg.low.Load()
	lead := low == nil
	if !lead {
		_, isLow := (*low)[from]
		lead = !isLow
	}
	now := cg.now()
	cg.mu.Lock()
	defer cg.mu.Unlock()
	if now.Sub(cg.lastSweep) >= cg.window {
		cg.sweepLocked(now)
	}
	kept := msgs[:0]
	for _, m := range msgs {
		if m == nil {
			kept = append(kept, m)
			continue
		}
		k := keyOf(m)
		if at, ok := cg.leaders[k]; ok && now.Sub(at) < cg.window {
			cg.dropped.Add(1)
			if cg.counter != nil {
				cg.counter.Inc()
			}
			continue
		}
		if lead && len(cg.leaders) < cg.maxLeaders && cg.bytes+len(m.Data) <= cg.maxBytes {
			cg.leaders[k] = now
			if _, ok := cg.byMsg[m]; !ok {
				cg.bytes += len(m.Data)
			}
			cg.byMsg[m] = k
		}
		kept = append(kept, m)
	}
	clear(msgs[len(kept):])
	rpc.Publish = kept
	return nil
}

// sweepLocked forgets the leaders older than the window.
func (cg *copyGate) sweepLocked(now time.Time) {
	cg.lastSweep = now
	for m, k := range cg.byMsg {
		if at, ok := cg.leaders[k]; !ok || now.Sub(at) >= cg.window {
			delete(cg.leaders, k)
			cg.forgetLocked(m)
		}
	}
}

func (cg *copyGate) forgetLocked(m *pb.Message) {
	delete(cg.byMsg, m)
	cg.bytes -= len(m.Data)
}

// settle forgets msg if it leads: pubsub traced its outcome.
func (cg *copyGate) settle(msg *pubsub.Message) {
	if msg == nil || msg.Message == nil {
		return
	}
	cg.mu.Lock()
	defer cg.mu.Unlock()
	if k, ok := cg.byMsg[msg.Message]; ok {
		cg.forgetLocked(msg.Message)
		delete(cg.leaders, k)
	}
}

// setScores records which peers scored below zero in the router's latest
// snapshot.
func (cg *copyGate) setScores(scores map[peer.ID]float64) {
	low := map[peer.ID]struct{}{}
	for p, s := range scores {
		if s < 0 {
			low[p] = struct{}{}
		}
	}
	cg.low.Store(&low)
}

// Dropped returns how many copies the gate removed.
func (cg *copyGate) Dropped() uint64 { return cg.dropped.Load() }

// The trace events that settle a leader; the others are no-ops.
func (cg *copyGate) ValidateMessage(msg *pubsub.Message)         { cg.settle(msg) }
func (cg *copyGate) DuplicateMessage(msg *pubsub.Message)        { cg.settle(msg) }
func (cg *copyGate) RejectMessage(msg *pubsub.Message, _ string) { cg.settle(msg) }
func (cg *copyGate) DeliverMessage(msg *pubsub.Message)          { cg.settle(msg) }

func (cg *copyGate) AddPeer(peer.ID, protocol.ID)             {}
func (cg *copyGate) RemovePeer(peer.ID)                       {}
func (cg *copyGate) Join(string)                              {}
func (cg *copyGate) Leave(string)                             {}
func (cg *copyGate) Graft(peer.ID, string)                    {}
func (cg *copyGate) Prune(peer.ID, string)                    {}
func (cg *copyGate) UndeliverableMessage(*pubsub.Message)     {}
func (cg *copyGate) ThrottlePeer(peer.ID)                     {}
func (cg *copyGate) RecvRPC(*pubsub.RPC)                      {}
func (cg *copyGate) SendRPC(*pubsub.RPC, peer.ID)             {}
func (cg *copyGate) DropRPC(*pubsub.RPC, peer.ID)             {}
func (cg *copyGate) OnNewOutboundStream(peer.ID, protocol.ID) {}
func (cg *copyGate) OnClosedOutboundStream(peer.ID)           {}
