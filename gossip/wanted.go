package gossip

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/trust"
	"github.com/go-json-experiment/json/jsontext"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Beat requests (protocol v1.3; docs/protocol.md, "Heartbeats on
// request"). A node that hears an agent of its interest through
// heartbeat pulls, and whose pull of the agent's host failed, asks the
// host over gossip to put that agent's heartbeats on gossip again:
//
//	{"protocol_version":"v1.3","type":"wanted","wanted":{"peer_id":"<host>","agents":["<agent_id>",...]}}
//
// It goes on one shard topic of the agents that the asker joined; the
// host is on every shard of what it hosts. The host then sends one
// heartbeat in Config.GossipBeatEvery of those agents on gossip for a
// while (node package), as a host of v1.1 and v1.2 does for everyone; a
// host that nobody asked keeps its heartbeats off gossip, where every peer
// it knows on the agent's topics lists WantedProtocol, and its peers pull
// them. Nodes of v1.2 and earlier ignore the message (a newer minor
// version they cannot read) and do not forward it.

// KindWanted is a beat request's type.
const KindWanted Kind = "wanted"

// WantedVersion is the protocol version of a beat request, wantedMinor
// its minor number.
const (
	WantedVersion = "v1.3"
	wantedMinor   = 3
)

// readMinor is the highest minor version this package reads: a message of
// a later minor that it cannot parse is ignored, not rejected.
const readMinor = wantedMinor

// WantedProtocol is the protocol id a node lists (through identify) when
// it sends beat requests where it cannot pull; no stream is ever opened
// on it.
const WantedProtocol = "/agentd/wanted/1.3.0"

// maxWantedBytes bounds a request's wanted member: MaxPullAgents agent
// ids (36 bytes each) and a peer id fit in a third of it.
const maxWantedBytes = 8 << 10

// A node forwards at most wantedPerWindow requests of one author per
// wantedWindow, counted for at most maxWantedAuthors authors per window;
// the rest are ignored (not forwarded, no penalty). An honest node asks a
// host at most once per 20 s (node package).
const (
	wantedWindow     = 10 * time.Second
	wantedPerWindow  = 16
	maxWantedAuthors = 4096
)

// Wanted is a beat request's body: the host asked, and the agents of it
// whose heartbeats the author cannot pull.
type Wanted struct {
	PeerID string   `json:"peer_id"`
	Agents []string `json:"agents"`
}

// validate checks the body's fields.
func (w *Wanted) validate() error {
	if _, err := peer.Decode(w.PeerID); err != nil {
		return &record.FieldError{Field: "wanted.peer_id", Reason: "is not a peer id"}
	}
	if n := len(w.Agents); n == 0 || n > MaxPullAgents {
		return &record.FieldError{Field: "wanted.agents", Reason: fmt.Sprintf("must hold 1 to %d agent ids, not %d", MaxPullAgents, n)}
	}
	seen := make(map[string]struct{}, len(w.Agents))
	for i, id := range w.Agents {
		path := fmt.Sprintf("wanted.agents[%d]", i)
		if err := record.ValidateAgentID(id); err != nil {
			return &record.FieldError{Field: path, Reason: err.Error()}
		}
		if _, dup := seen[id]; dup {
			return &record.FieldError{Field: path, Reason: "appears twice in the request"}
		}
		seen[id] = struct{}{}
	}
	return nil
}

// EncodeWanted returns the pubsub payload of a beat request.
func EncodeWanted(w Wanted) ([]byte, error) {
	if err := w.validate(); err != nil {
		return nil, err
	}
	return encode(envelope{ProtocolVersion: WantedVersion, Type: KindWanted, Wanted: &w})
}

// decodeWanted checks a beat request's wanted member (raw, decoded as w)
// under the envelope's version; newer reports a minor above the highest
// this package reads (readMinor).
func decodeWanted(version string, raw jsontext.Value, w *Wanted) (_ *Wanted, newer bool, err error) {
	_, minor, err := record.ParseVersion(version)
	if err != nil {
		return nil, false, err
	}
	if minor < wantedMinor {
		return nil, false, &record.FieldError{Field: "protocol_version", Reason: fmt.Sprintf("%s cannot carry a wanted message (%s or later)", record.Truncate(version, 16), WantedVersion)}
	}
	if raw == nil || w == nil {
		return nil, false, &record.FieldError{Field: "wanted", Reason: "is required for type wanted"}
	}
	if len(raw) > maxWantedBytes {
		return nil, false, fmt.Errorf("%w: wanted is %d bytes, limit %d", record.ErrTooLarge, len(raw), maxWantedBytes)
	}
	if err := exactMembers(raw, "wanted", wantedMembers); err != nil {
		return nil, false, err
	}
	if err := w.validate(); err != nil {
		return nil, false, err
	}
	return w, minor > readMinor, nil
}

// wantedLimit counts the beat requests forwarded per author in fixed
// windows of wantedWindow.
type wantedLimit struct {
	mu    sync.Mutex
	start time.Time
	n     map[peer.ID]int
}

// allow reports whether one more request of p may be forwarded now.
func (l *wantedLimit) allow(p peer.ID, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n == nil || now.Sub(l.start) >= wantedWindow || now.Before(l.start) {
		l.n, l.start = map[peer.ID]int{}, now
	}
	c, ok := l.n[p]
	if c >= wantedPerWindow || !ok && len(l.n) >= maxWantedAuthors {
		return false
	}
	l.n[p] = c + 1
	return true
}

// ReasonWantedRate refuses a beat request past its author's share
// (ignored: not forwarded, no penalty).
const ReasonWantedRate trust.Reason = "rate_limited"

// checkWanted judges a decoded beat request: another node's is forwarded
// within its author's share.
func (g *Gossip) checkWanted(m *Message, author peer.ID, local bool) (*accepted, pubsub.ValidationResult, trust.Reason, error) {
	if !local && !g.wantedLimit.allow(author, time.Now()) {
		return nil, pubsub.ValidationIgnore, ReasonWantedRate, &trust.RejectError{Reason: ReasonWantedRate, Detail: fmt.Sprintf("more than %d beat requests of peer %s in %s", wantedPerWindow, author, wantedWindow)}
	}
	return &accepted{msg: m}, pubsub.ValidationAccept, "", nil
}

// PublishWanted asks host over gossip to put the heartbeats of agents (at
// most MaxPullAgents of its agents) on gossip: this node cannot pull them.
// It goes on the first joined shard topic among shards (those of the
// agents' records) that has a peer, or else on the announce topic when
// the node publishes there; sent is false when no topic has a peer.
func (g *Gossip) PublishWanted(ctx context.Context, host peer.ID, agents []string, shards ...string) (sent bool, err error) {
	w := Wanted{PeerID: host.String(), Agents: agents}
	data, err := EncodeWanted(w)
	if err != nil {
		return false, fmt.Errorf("%w: %v", ErrRejected, err)
	}
	topics, err := g.publishTopics(nil, shards)
	if err != nil {
		return false, err
	}
	topics = heard(topics)
	if len(topics) == 0 {
		return false, nil
	}
	// A shard topic of the agents is where their scoped host listens;
	// the announce topic only where nothing else is heard.
	ts := topics[0]
	for _, t := range topics {
		if t != g.announce {
			ts = t
			break
		}
	}
	a := &accepted{msg: &Message{Version: WantedVersion, Kind: KindWanted, Wanted: &w}}
	return true, g.publish(ctx, KindWanted, data, []*topicState{ts}, a)
}

// Requestable reports whether every peer this node knows on every topic a
// heartbeat of the given shards goes to lists WantedProtocol: a host may
// then keep the heartbeats nobody asked for off gossip. Like Pullable, a
// topic without a known peer, or with a peer identify has not listed yet,
// makes it false.
func (g *Gossip) Requestable(shards ...string) bool {
	return g.allSpeak(WantedProtocol, shards)
}
