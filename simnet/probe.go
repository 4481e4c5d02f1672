package simnet

import (
	"bytes"
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
// difference is the publish-to-delivery latency, validation included. A
// resent announcement (gossip.EncodeResend) carries the record as it was
// signed earlier: its latency is taken from the moment its author first
// sent it (sent), which the probe notes by message id.
type probe struct {
	// every: only messages whose id hashes to 0 mod every are measured,
	// at every node (the same messages everywhere), to bound the cost of
	// decoding them.
	every uint32
	// now is the clock of deliveries and publications (time.Now).
	now  func() time.Time
	ch   chan delivery
	from atomic.Int64 // unix ns; deliveries before it are ignored (warm-up)

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

	// resentAt holds when each sampled resend was published (unix ns,
	// by message id); unpublished counts resends delivered whose
	// publication the probe did not see.
	resentMu    sync.Mutex
	resentAt    map[string]int64
	unpublished atomic.Int64

	byKind map[string]*samples
	all    *samples
	done   chan struct{}
}

type delivery struct {
	at     time.Time
	joined time.Time // when the delivering node (instance) first had a mesh peer in the announce topic
	id     string
	data   []byte
}

// resendMember marks a resend's payload (the envelope member EncodeResend
// writes), so that the probe notes the publication of resends only.
var resendMember = []byte(`"resend":`)

func newProbe(capacity int, every uint32) *probe {
	p := &probe{
		every:    max(every, 1),
		now:      time.Now,
		ch:       make(chan delivery, 1<<14),
		byKind:   map[string]*samples{},
		resentAt: map[string]int64{},
		all:      newSamples(capacity),
		done:     make(chan struct{}),
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
			if m.Resend > 0 {
				p.resentMu.Lock()
				at, ok := p.resentAt[d.id]
				p.resentMu.Unlock()
				if !ok {
					p.unpublished.Add(1)
					continue
				}
				sent = time.Unix(0, at)
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

// sampled reports whether the message with id is one the probe measures.
func (p *probe) sampled(id string) bool {
	if p.every <= 1 {
		return true
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return h.Sum32()%p.every == 0
}

// sent notes when a node first sent each sampled resend it authored:
// pubsub traces a node's own publications to raw tracers only as the RPCs
// that carry them.
func (p *probe) sent(rpc *pubsub.RPC, self peer.ID) {
	for _, m := range rpc.GetPublish() {
		if peer.ID(m.GetFrom()) != self || !bytes.Contains(m.GetData(), resendMember) {
			continue
		}
		id := gossip.MessageID(m)
		if !p.sampled(id) {
			continue
		}
		now := p.now().UnixNano()
		p.resentMu.Lock()
		if _, ok := p.resentAt[id]; !ok {
			p.resentAt[id] = now
		}
		p.resentMu.Unlock()
	}
}

func (p *probe) deliver(msg *pubsub.Message, meshed *meshTimes) {
	if msg.Local || !p.sampled(msg.ID) {
		return
	}
	now := p.now()
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
	case p.ch <- delivery{at: now, joined: joined, id: msg.ID, data: msg.GetData()}:
	default:
		p.dropped.Add(1)
	}
}

// tracer returns the pubsub raw tracer of a node instance, self, that
// starts now.
func (p *probe) tracer(self peer.ID) pubsub.RawTracer {
	return probeTracer{p, &meshTimes{m: map[string]int64{}}, self}
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
// first grafted a peer in each topic. self is the instance's peer: pubsub
// traces the instance's own publications too (delivered to its own
// subscription, or refused by its own validator), and those are not
// receptions.
type probeTracer struct {
	p      *probe
	meshed *meshTimes
	self   peer.ID
}

var _ pubsub.RawTracer = probeTracer{}

func (t probeTracer) DeliverMessage(msg *pubsub.Message) {
	if msg.ReceivedFrom == t.self {
		return // pubsub does not trace these to raw tracers; kept as a guard
	}
	t.p.mix.add(mixFirst, 1)
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
func (t probeTracer) RejectMessage(msg *pubsub.Message, reason string) {
	if msg.ReceivedFrom != t.self {
		t.p.mix.reject(reason)
	}
}
func (t probeTracer) DuplicateMessage(*pubsub.Message)   { t.p.mix.add(mixDuplicates, 1) }
func (t probeTracer) ThrottlePeer(peer.ID)               {}
func (t probeTracer) RecvRPC(rpc *pubsub.RPC)            { t.p.mix.recv(rpc) }
func (t probeTracer) SendRPC(rpc *pubsub.RPC, _ peer.ID) { t.p.sent(rpc, t.self) }

// pubsubMix counts what the nodes' pubsub received: RPCs, the message
// copies in them (first copies delivered, duplicates dropped, copies
// refused), and the message ids of the control messages; one counter per
// mixKind.
type pubsubMix [mixKinds]atomic.Int64

type mixKind int

const (
	mixRPCs mixKind = iota
	mixCopies
	mixFirst
	mixDuplicates
	mixIHave
	mixIWant
	mixIDontWant
	mixGraft
	mixPrune
	// Copies refused: ignored and failed by the validators, dropped
	// unvalidated (queue full, throttled), and for any other reason.
	mixIgnored
	mixFailed
	mixUnvalidated
	mixOtherRefused
	mixKinds
)

func (m *pubsubMix) add(k mixKind, n int) {
	if n > 0 {
		m[k].Add(int64(n))
	}
}

func (m *pubsubMix) reject(reason string) {
	switch reason {
	case pubsub.RejectValidationIgnored:
		m.add(mixIgnored, 1)
	case pubsub.RejectValidationFailed:
		m.add(mixFailed, 1)
	case pubsub.RejectValidationQueueFull, pubsub.RejectValidationThrottled:
		m.add(mixUnvalidated, 1)
	default:
		m.add(mixOtherRefused, 1)
	}
}

func (m *pubsubMix) recv(rpc *pubsub.RPC) {
	m.add(mixRPCs, 1)
	m.add(mixCopies, len(rpc.GetPublish()))
	c := rpc.GetControl()
	if c == nil {
		return
	}
	for _, x := range c.GetIhave() {
		m.add(mixIHave, len(x.GetMessageIDs()))
	}
	for _, x := range c.GetIwant() {
		m.add(mixIWant, len(x.GetMessageIDs()))
	}
	for _, x := range c.GetIdontwant() {
		m.add(mixIDontWant, len(x.GetMessageIDs()))
	}
	m.add(mixGraft, len(c.GetGraft()))
	m.add(mixPrune, len(c.GetPrune()))
}

// mixTotals is a reading of pubsubMix.
type mixTotals [mixKinds]int64

func (m *pubsubMix) read() (t mixTotals) {
	for k := range t {
		t[k] = m[k].Load()
	}
	return t
}

func (a mixTotals) sub(b mixTotals) (d mixTotals) {
	for k := range d {
		d[k] = a[k] - b[k]
	}
	return d
}

// perNodeSecond is the report's form of a window's totals.
func (a mixTotals) perNodeSecond(ns float64) *PubsubMix {
	if ns <= 0 {
		return nil
	}
	f := func(k mixKind) float64 { return float64(a[k]) / ns }
	return &PubsubMix{RPCs: f(mixRPCs), Copies: f(mixCopies), First: f(mixFirst), Duplicates: f(mixDuplicates),
		IHaveIDs: f(mixIHave), IWantIDs: f(mixIWant), Grafts: f(mixGraft), Prunes: f(mixPrune), IDontWantIDs: f(mixIDontWant),
		Ignored: f(mixIgnored), Failed: f(mixFailed), Unvalidated: f(mixUnvalidated), OtherRefused: f(mixOtherRefused)}
}
