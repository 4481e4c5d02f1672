package gossip

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/agentd/agentd/record"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// BatchProtocol is the protocol id a node lists (through identify) when it
// reads heartbeat batches (KindBeats, protocol version v1.1). No stream is
// ever opened on it: a stream is reset at once. A node sends batches on a
// topic only while every peer it knows on the topic lists it, so a node of
// the previous version keeps getting one signed message per heartbeat.
const BatchProtocol = "/agentd/beats/1.1.0"

// Heartbeat is one hosted agent's heartbeat for PublishHeartbeats: the
// beat, not yet signed, and the shards of the agent's record.
type Heartbeat struct {
	Beat   record.Beat
	Shards []string
}

// PublishHeartbeats publishes heartbeats of agents this node hosts, each on
// the topics PublishBeat would use. On a topic where two or more of them
// go and whose peers all read batches (BatchProtocol), they leave as
// heartbeat batches of up to MaxBatchBeats: one message and one pubsub
// signature for many agents, where a heartbeat alone costs an agent-key
// signature, its RFC 8785 form and a pubsub signature. Elsewhere each beat
// is signed with sign (once, however many such topics it goes to) and
// published alone. Each beat's PeerID must be this host's.
func (g *Gossip) PublishHeartbeats(ctx context.Context, hbs []Heartbeat, sign func(record.Beat) (*record.SignedBeat, error)) error {
	if g.cfg.DisableBatches {
		return g.publishSingly(ctx, hbs, nil, sign)
	}
	self := g.h.ID().String()
	var (
		order    []*topicState                     // topics in the order first met, for a stable order of messages
		batchOK  = map[*topicState]bool{}          // whether every peer of the topic reads batches
		perTopic = map[*topicState][]int{}         // the heartbeats bound for each batchable topic
		single   = make([][]*topicState, len(hbs)) // the topics each heartbeat goes to alone
		errs     []error
	)
	for i := range hbs {
		if hbs[i].Beat.PeerID != self {
			errs = append(errs, fmt.Errorf("%w: heartbeat of agent %s names peer %s, this host is %s", ErrForeignRecord, hbs[i].Beat.AgentID, hbs[i].Beat.PeerID, self))
			continue
		}
		topics, err := g.publishTopics(nil, hbs[i].Shards)
		if err != nil {
			return err
		}
		for _, ts := range heard(topics) {
			ok, known := batchOK[ts]
			if !known {
				ok = g.batchable(ts)
				batchOK[ts] = ok
				order = append(order, ts)
			}
			if ok {
				perTopic[ts] = append(perTopic[ts], i)
			} else {
				single[i] = append(single[i], ts)
			}
		}
	}
	for _, ts := range order {
		idx := perTopic[ts]
		if len(idx) == 1 {
			single[idx[0]] = append(single[idx[0]], ts) // a batch of one saves nothing
			continue
		}
		for chunk := range slices.Chunk(idx, MaxBatchBeats) {
			beats := make([]record.Beat, len(chunk))
			for j, i := range chunk {
				beats[j] = hbs[i].Beat
			}
			if err := g.publishBatch(ctx, ts, beats); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := g.publishSingly(ctx, hbs, single, sign); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// publishSingly signs and publishes each heartbeat alone: on topics[i] for
// hbs[i], or, when topics is nil, wherever PublishBeat would.
func (g *Gossip) publishSingly(ctx context.Context, hbs []Heartbeat, topics [][]*topicState, sign func(record.Beat) (*record.SignedBeat, error)) error {
	var errs []error
	for i := range hbs {
		if topics != nil && len(topics[i]) == 0 {
			continue
		}
		sb, err := sign(hbs[i].Beat)
		if err != nil {
			errs = append(errs, fmt.Errorf("sign heartbeat of agent %s: %w", hbs[i].Beat.AgentID, err))
			continue
		}
		if topics == nil {
			err = g.PublishBeat(ctx, KindHeartbeat, sb, hbs[i].Shards...)
		} else {
			err = g.publishBeatOn(ctx, sb, topics[i])
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// publishBeatOn publishes a signed heartbeat of this host on the given
// topics.
func (g *Gossip) publishBeatOn(ctx context.Context, sb *record.SignedBeat, topics []*topicState) error {
	if err := sb.Beat.Validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrRejected, err)
	}
	data, err := EncodeBeat(KindHeartbeat, sb)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrRejected, err)
	}
	pre := &accepted{msg: &Message{Version: record.ProtocolVersion, Kind: KindHeartbeat, Beat: sb}}
	return g.publish(ctx, KindHeartbeat, data, topics, pre)
}

// publishBatch publishes one heartbeat batch on ts.
func (g *Gossip) publishBatch(ctx context.Context, ts *topicState, beats []record.Beat) error {
	data, err := EncodeBatch(beats)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrRejected, err)
	}
	pre := &accepted{msg: &Message{Version: BatchVersion, Kind: KindBeats, Beats: beats}}
	if err := g.publish(ctx, KindBeats, data, []*topicState{ts}, pre); err != nil {
		return err
	}
	if g.m != nil {
		g.m.BatchedBeats.Add(float64(len(beats)))
	}
	return nil
}

// batchable reports whether every peer this node knows on the topic reads
// heartbeat batches. A peer whose protocols identify has not listed yet
// counts as one that does not.
func (g *Gossip) batchable(ts *topicState) bool {
	peers := ts.t.ListPeers()
	if len(peers) == 0 {
		return false
	}
	ps := g.h.Peerstore()
	for _, p := range peers {
		protos, err := ps.SupportsProtocols(p, protocol.ID(BatchProtocol))
		if err != nil || len(protos) == 0 {
			return false
		}
	}
	return true
}

// refuseStream is BatchProtocol's handler: the protocol is only listed,
// never spoken.
func refuseStream(s network.Stream) { _ = s.Reset() }

// pullableTTL is how long Pullable trusts its answer for a topic: each
// answer is a round trip through pubsub's event loop (Topic.ListPeers).
const pullableTTL = time.Second

// Pullable reports whether every peer this node knows on every topic a
// heartbeat of the given shards goes to serves heartbeat pulls (lists
// PullProtocol through identify). A host may then leave some of its
// heartbeats off gossip (quiet heartbeats, docs/protocol.md): those peers
// ask for them when they are late. A topic without a known peer, or with
// a peer whose protocols identify has not listed yet, makes it false, so
// a node of an earlier version keeps getting every heartbeat, as with
// heartbeat batches. Answers are kept per topic for a second.
func (g *Gossip) Pullable(shards ...string) bool {
	return g.allSpeak(PullProtocol, shards)
}

// allSpeak reports whether every peer this node knows on every topic a
// message of the given shards goes to lists proto (topicSpeaks), and some
// topic has a peer.
func (g *Gossip) allSpeak(proto string, shards []string) bool {
	return g.topicsSpeak(proto, nil, shards, false)
}

// topicsSpeak is allSpeak for a message of the given scenes and shards;
// with shardsOnly, a topic other than a shard topic among them (the
// announce topic, a scene topic) makes it false.
func (g *Gossip) topicsSpeak(proto string, scenes, shards []string, shardsOnly bool) bool {
	topics, err := g.publishTopics(scenes, shards)
	if err != nil {
		return false
	}
	if topics = heard(topics); len(topics) == 0 {
		return false
	}
	now := time.Now()
	for _, ts := range topics {
		if (shardsOnly && ts.shard == "") || !g.topicSpeaks(ts, proto, now) {
			return false
		}
	}
	return true
}

// topicSpeaks reports whether every peer this node knows on the topic
// lists proto (PullProtocol, ResendProtocol, WantedProtocol or
// TrailSyncProtocol) through identify; a topic
// without a known peer, or with a peer whose protocols identify has not
// listed yet, does not. Answers are kept per topic for pullableTTL.
func (g *Gossip) topicSpeaks(ts *topicState, proto string, now time.Time) bool {
	cache := &ts.pullable
	switch proto {
	case ResendProtocol:
		cache = &ts.resendable
	case WantedProtocol:
		cache = &ts.wantable
	case TrailSyncProtocol:
		cache = &ts.trailable
	}
	g.mu.Lock()
	if c := *cache; !c.at.IsZero() && now.Sub(c.at) < pullableTTL {
		g.mu.Unlock()
		return c.ok
	}
	g.mu.Unlock()
	peers := ts.t.ListPeers()
	ok := len(peers) > 0
	ps := g.h.Peerstore()
	for _, p := range peers {
		if protos, err := ps.SupportsProtocols(p, protocol.ID(proto)); err != nil || len(protos) == 0 {
			ok = false
			break
		}
	}
	g.mu.Lock()
	*cache = speaks{ok: ok, at: now}
	g.mu.Unlock()
	return ok
}
