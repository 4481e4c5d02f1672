package simnet

import (
	"hash/fnv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentd/agentd/gossip"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// probe measures gossip propagation: every node's pubsub hands each
// message it delivers (accepted by the validators, first copy only, not its
// own) to the probe with the time of delivery; a collector goroutine
// decodes the message and subtracts the moment its author signed it (the
// beat's timestamp, or the record's issued_at), which agentd sets right
// before publishing. Every node runs in this process on one clock, so the
// difference is the publish-to-delivery latency, validation included.
type probe struct {
	// every: only messages whose id hashes to 0 mod every are measured,
	// at every node (the same messages everywhere), to bound the cost of
	// decoding them.
	every uint32
	ch    chan delivery
	from  atomic.Int64 // unix ns; deliveries before it are ignored (warm-up)

	mu     sync.RWMutex
	closed bool

	dropped       atomic.Int64 // deliveries lost because the collector lagged
	decodeErrors  atomic.Int64
	rpcDrops      atomic.Int64 // pubsub DropRPC: an outbound queue was full
	undeliverable atomic.Int64 // pubsub UndeliverableMessage: a node's sink lagged
	// mix counts what the nodes' pubsub received, by kind, all the time;
	// the report takes the measured window's difference.
	mix pubsubMix
	// catchUp counts deliveries of messages signed before the delivering
	// node was in the announce topic's mesh (its first GRAFT): a joiner
	// fetching recent history through IHAVE/IWANT, not a message late to
	// the nodes that could receive it.
	catchUp atomic.Int64

	byKind map[string]*samples
	all    *samples
	done   chan struct{}
}

type delivery struct {
	at     time.Time
	joined time.Time // when the delivering node (instance) first had a mesh peer in the announce topic
	data   []byte
}

func newProbe(capacity int, every uint32) *probe {
	p := &probe{
		every:  max(every, 1),
		ch:     make(chan delivery, 1<<14),
		byKind: map[string]*samples{},
		all:    newSamples(capacity),
		done:   make(chan struct{}),
	}
	for _, k := range []string{gossip.KindAnnounce, gossip.KindHeartbeat, gossip.KindStatus, gossip.KindUnregister, gossip.KindBeats} {
		p.byKind[k] = newSamples(capacity / 4)
	}
	p.from.Store(time.Now().Add(100 * 365 * 24 * time.Hour).UnixNano())
	return p
}

// start runs the collector until close.
func (p *probe) start() {
	go func() {
		defer close(p.done)
		for d := range p.ch {
			m, err := gossip.Decode(d.data, 0)
			if err != nil {
				p.decodeErrors.Add(1)
				continue
			}
			var sent time.Time
			switch {
			case m.Beat != nil:
				sent = time.UnixMilli(m.Beat.Beat.Timestamp)
			case m.Agent != nil:
				sent = m.Agent.Agent.Issued()
			case len(m.Beats) > 0:
				// A heartbeat batch leaves when its newest entry is made.
				for _, b := range m.Beats {
					if t := b.Time(); t.After(sent) {
						sent = t
					}
				}
			}
			if sent.IsZero() {
				p.decodeErrors.Add(1)
				continue
			}
			if sent.Before(d.joined) {
				p.catchUp.Add(1)
				continue
			}
			lat := max(d.at.Sub(sent), 0)
			p.all.add(lat)
			if s := p.byKind[m.Kind]; s != nil {
				s.add(lat)
			}
		}
	}()
}

// measureFrom starts counting deliveries at t.
func (p *probe) measureFrom(t time.Time) { p.from.Store(t.UnixNano()) }

// close stops the collector once no tracer can deliver any more and waits
// for it.
func (p *probe) close() {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.ch)
	}
	p.mu.Unlock()
	<-p.done
}

func (p *probe) deliver(msg *pubsub.Message, meshed *meshTimes) {
	if msg.Local {
		return
	}
	if p.every > 1 {
		h := fnv.New32a()
		_, _ = h.Write([]byte(msg.ID))
		if h.Sum32()%p.every != 0 {
			return
		}
	}
	now := time.Now()
	if now.UnixNano() < p.from.Load() {
		return
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return
	}
	joined := now // not in the mesh yet: whatever it gets is history
	if t := meshed.first(msg.GetTopic()); t != 0 {
		joined = time.Unix(0, t)
	}
	select {
	case p.ch <- delivery{at: now, joined: joined, data: msg.GetData()}:
	default:
		p.dropped.Add(1)
	}
}

// tracer returns the pubsub raw tracer of one node.
// tracer returns the tracer of a node instance that starts now.
func (p *probe) tracer() pubsub.RawTracer {
	return probeTracer{p, &meshTimes{m: map[string]int64{}}}
}

// meshTimes records when a node instance first grafted a peer in each
// topic (unix ns).
type meshTimes struct {
	mu sync.Mutex
	m  map[string]int64
}

func (m *meshTimes) graft(topic string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.m[topic]; !ok {
		m.m[topic] = time.Now().UnixNano()
	}
}

// first returns when the instance first had a mesh peer in topic (0: not
// yet).
func (m *meshTimes) first(topic string) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.m[topic]
}

// probeTracer is one node instance's tracer. meshed is when the instance
// first grafted a peer in each topic.
type probeTracer struct {
	p      *probe
	meshed *meshTimes
}

var _ pubsub.RawTracer = probeTracer{}

func (t probeTracer) DeliverMessage(msg *pubsub.Message) {
	t.p.mix.first.Add(1)
	t.p.deliver(msg, t.meshed)
}
func (t probeTracer) DropRPC(*pubsub.RPC, peer.ID)             { t.p.rpcDrops.Add(1) }
func (t probeTracer) UndeliverableMessage(*pubsub.Message)     { t.p.undeliverable.Add(1) }
func (t probeTracer) OnNewOutboundStream(peer.ID, protocol.ID) {}
func (t probeTracer) OnClosedOutboundStream(peer.ID)           {}
func (t probeTracer) Join(string)                              {}
func (t probeTracer) Leave(string)                             {}
func (t probeTracer) Graft(_ peer.ID, topic string)            { t.meshed.graft(topic) }
func (t probeTracer) Prune(peer.ID, string)                    {}
func (t probeTracer) ValidateMessage(*pubsub.Message)          {}
func (t probeTracer) RejectMessage(_ *pubsub.Message, reason string) {
	t.p.mix.reject(reason)
}
func (t probeTracer) DuplicateMessage(*pubsub.Message) { t.p.mix.duplicates.Add(1) }
func (t probeTracer) ThrottlePeer(peer.ID)             {}
func (t probeTracer) RecvRPC(rpc *pubsub.RPC)          { t.p.mix.recv(rpc) }
func (t probeTracer) SendRPC(*pubsub.RPC, peer.ID)     {}

// pubsubMix counts what the nodes' pubsub received: RPCs, the message
// copies in them (first copies delivered, duplicates dropped), and the
// message ids of the control messages.
type pubsubMix struct {
	rpcs, copies, first, duplicates, ihave, iwant, graft, prune, idontwant atomic.Int64
	// Copies refused: ignored and failed by the validators, dropped
	// unvalidated (queue full, throttled), and for any other reason.
	ignored, failed, unvalidated, otherRefused atomic.Int64
}

func (m *pubsubMix) reject(reason string) {
	switch reason {
	case pubsub.RejectValidationIgnored:
		m.ignored.Add(1)
	case pubsub.RejectValidationFailed:
		m.failed.Add(1)
	case pubsub.RejectValidationQueueFull, pubsub.RejectValidationThrottled:
		m.unvalidated.Add(1)
	default:
		m.otherRefused.Add(1)
	}
}

func (m *pubsubMix) recv(rpc *pubsub.RPC) {
	m.rpcs.Add(1)
	if n := len(rpc.GetPublish()); n > 0 {
		m.copies.Add(int64(n))
	}
	c := rpc.GetControl()
	if c == nil {
		return
	}
	var ihave, iwant, idontwant int
	for _, x := range c.GetIhave() {
		ihave += len(x.GetMessageIDs())
	}
	for _, x := range c.GetIwant() {
		iwant += len(x.GetMessageIDs())
	}
	for _, x := range c.GetIdontwant() {
		idontwant += len(x.GetMessageIDs())
	}
	m.ihave.Add(int64(ihave))
	m.iwant.Add(int64(iwant))
	m.idontwant.Add(int64(idontwant))
	m.graft.Add(int64(len(c.GetGraft())))
	m.prune.Add(int64(len(c.GetPrune())))
}

// mixTotals is a reading of pubsubMix.
type mixTotals struct {
	rpcs, copies, first, duplicates, ihave, iwant, graft, prune, idontwant int64
	ignored, failed, unvalidated, otherRefused                             int64
}

func (m *pubsubMix) read() mixTotals {
	return mixTotals{m.rpcs.Load(), m.copies.Load(), m.first.Load(), m.duplicates.Load(),
		m.ihave.Load(), m.iwant.Load(), m.graft.Load(), m.prune.Load(), m.idontwant.Load(),
		m.ignored.Load(), m.failed.Load(), m.unvalidated.Load(), m.otherRefused.Load()}
}

func (a mixTotals) sub(b mixTotals) mixTotals {
	return mixTotals{a.rpcs - b.rpcs, a.copies - b.copies, a.first - b.first, a.duplicates - b.duplicates,
		a.ihave - b.ihave, a.iwant - b.iwant, a.graft - b.graft, a.prune - b.prune, a.idontwant - b.idontwant,
		a.ignored - b.ignored, a.failed - b.failed, a.unvalidated - b.unvalidated, a.otherRefused - b.otherRefused}
}

// perNodeSecond is the report's form of a window's totals.
func (a mixTotals) perNodeSecond(ns float64) *PubsubMix {
	if ns <= 0 {
		return nil
	}
	f := func(v int64) float64 { return float64(v) / ns }
	return &PubsubMix{RPCs: f(a.rpcs), Copies: f(a.copies), First: f(a.first), Duplicates: f(a.duplicates),
		IHaveIDs: f(a.ihave), IWantIDs: f(a.iwant), Grafts: f(a.graft), Prunes: f(a.prune), IDontWantIDs: f(a.idontwant),
		Ignored: f(a.ignored), Failed: f(a.failed), Unvalidated: f(a.unvalidated), OtherRefused: f(a.otherRefused)}
}
