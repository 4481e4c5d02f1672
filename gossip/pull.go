package gossip

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/agentd/agentd/metrics"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/trust"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/multiformats/go-multistream"
	"github.com/prometheus/client_golang/prometheus"
)

// PullProtocol is the heartbeat pull, /agentd/heartbeat/1.0.0: a node that
// has not heard an agent's heartbeat for two intervals asks the agent's
// host for it directly, before the seed's clock marks the agent UNHEALTHY
// (three missed) or removes it (30 s). GossipSub may lose a heartbeat — a
// full queue at an overloaded peer, a mesh peer that withholds it — and
// the host knows best whether it still beats.
//
// One request and one answer per stream, each an unsigned-varint length
// and a JSON object:
//
//	request: {"protocol_version":"v1.0","agents":["<agent id>", ...]}   1 to MaxPullAgents ids
//	answer:  {"protocol_version":"v1.0","beats":[{"agent_id":..,"seq":..,"status":..,"timestamp":..,"interval_ms":..}, ...]}
//	     or  {"protocol_version":"v1.0","beats":[],"error":{"code":"ErrRateLimited","message":"..."}}
//
// The answer holds the newest heartbeat the host published for each asked
// agent it hosts (the entries of a heartbeat batch; agents it does not host
// are left out). Nothing in it is signed: the stream's connection
// authenticates the host's peer key, and the asker judges each entry as a
// statement of that peer (record.BeatSignerBatch: the peer must host the
// agent's current record), then as any heartbeat — news only if its seq is
// newer than what the asker holds. A host whose agent stopped beating
// answers the old beat, which is no news, so the clock runs on.
//
// Each asker may make PullServeBurst requests at once and one per
// PullServeInterval after; at most PullServeConcurrency are served at a
// time. Refusals carry the seed's codes (ErrRateLimited, ErrUnavailable,
// ErrMalformedPayload, ErrUnsupportedVersion).
const PullProtocol = "/agentd/heartbeat/1.0.0"

// Heartbeat pull limits.
const (
	// MaxPullAgents bounds the agents of one request.
	MaxPullAgents = 64
	// maxPullRequestBytes: MaxPullAgents ids of at most 256 bytes.
	maxPullRequestBytes = MaxPullAgents*(256+3) + 64
	// pullBeatAllowance is the room one answer entry may take.
	pullBeatAllowance = 512
	// maxPullAnswerBytes bounds an answer frame.
	maxPullAnswerBytes = MaxPullAgents*pullBeatAllowance + 1024
)

// ErrPullUnsupported is returned by Pull when the peer does not speak
// PullProtocol (a node of an earlier version).
var ErrPullUnsupported = errors.New("gossip: peer does not serve heartbeat pulls")

// ErrPullRefused is returned (wrapped, with the code) when the host
// answers a pull with an error.
var ErrPullRefused = errors.New("gossip: heartbeat pull refused")

type pullRequest struct {
	ProtocolVersion string   `json:"protocol_version"`
	Agents          []string `json:"agents"`
}

type pullAnswer struct {
	ProtocolVersion string      `json:"protocol_version"`
	Beats           []batchBeat `json:"beats"`
	Error           *syncError  `json:"error,omitempty"`
}

var (
	pullReqMembers    = []string{"protocol_version", "agents"}
	pullAnswerMembers = []string{"protocol_version", "beats", "error"}
)

// EncodePullRequest returns the request frame body asking for the given
// agents' heartbeats.
func EncodePullRequest(agentIDs []string) ([]byte, error) {
	if len(agentIDs) == 0 || len(agentIDs) > MaxPullAgents {
		return nil, &record.FieldError{Field: "agents", Reason: fmt.Sprintf("must hold 1 to %d ids, not %d", MaxPullAgents, len(agentIDs))}
	}
	return json.Marshal(pullRequest{ProtocolVersion: record.ProtocolVersion, Agents: agentIDs})
}

// DecodePullRequest parses and checks a request frame: 1 to MaxPullAgents
// distinct, valid agent ids. An unsupported major version yields
// record.ErrUnsupportedVersion.
func DecodePullRequest(b []byte) ([]string, error) {
	if err := checkFrame(b, maxPullRequestBytes, "heartbeat pull request", pullReqMembers); err != nil {
		return nil, err
	}
	var r pullRequest
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, &record.FieldError{Field: "agents", Reason: "must be an array of strings: " + err.Error()}
	}
	if len(r.Agents) == 0 || len(r.Agents) > MaxPullAgents {
		return nil, &record.FieldError{Field: "agents", Reason: fmt.Sprintf("must hold 1 to %d ids, not %d", MaxPullAgents, len(r.Agents))}
	}
	seen := make(map[string]struct{}, len(r.Agents))
	for i, id := range r.Agents {
		if err := record.ValidateAgentID(id); err != nil {
			return nil, &record.FieldError{Field: fmt.Sprintf("agents[%d]", i), Reason: err.Error()}
		}
		if _, dup := seen[id]; dup {
			return nil, &record.FieldError{Field: fmt.Sprintf("agents[%d]", i), Reason: "appears twice"}
		}
		seen[id] = struct{}{}
	}
	return r.Agents, nil
}

// encodePullAnswer returns an answer frame body carrying beats.
func encodePullAnswer(beats []record.Beat) ([]byte, error) {
	a := pullAnswer{ProtocolVersion: record.ProtocolVersion, Beats: make([]batchBeat, len(beats))}
	for i := range beats {
		a.Beats[i] = toBatchBeat(&beats[i])
	}
	return json.Marshal(a)
}

func encodePullError(code, msg string) []byte {
	b, _ := json.Marshal(pullAnswer{ProtocolVersion: record.ProtocolVersion, Beats: []batchBeat{}, Error: &syncError{Code: code, Message: msg}})
	return b
}

// DecodePullAnswer parses an answer frame to a request for asked. Each
// entry must be a valid heartbeat (no unregister reason) of a distinct
// agent that was asked for; the beats come back unbound (PeerID empty:
// the answering peer is theirs). An error answer yields ErrPullRefused.
func DecodePullAnswer(b []byte, asked []string) ([]record.Beat, error) {
	if err := checkFrame(b, maxPullAnswerBytes, "heartbeat pull answer", pullAnswerMembers); err != nil {
		return nil, err
	}
	var r struct {
		Beats []json.RawMessage `json:"beats"`
		Error *syncError        `json:"error"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, &record.FieldError{Field: "beats", Reason: err.Error()}
	}
	if r.Error != nil {
		return nil, fmt.Errorf("%w: %s: %s", ErrPullRefused, record.Truncate(r.Error.Code, 64), record.Truncate(r.Error.Message, 256))
	}
	if len(r.Beats) > len(asked) {
		return nil, &record.FieldError{Field: "beats", Reason: fmt.Sprintf("has %d entries, %d agents were asked for", len(r.Beats), len(asked))}
	}
	want := make(map[string]bool, len(asked))
	for _, id := range asked {
		want[id] = true
	}
	out := make([]record.Beat, 0, len(r.Beats))
	for i, raw := range r.Beats {
		field := fmt.Sprintf("beats[%d]", i)
		bt, err := decodeBatchBeat(raw, field)
		if err != nil {
			return nil, err
		}
		if !want[bt.AgentID] {
			return nil, &record.FieldError{Field: field + ".agent_id", Reason: "was not asked for, or appears twice"}
		}
		want[bt.AgentID] = false
		out = append(out, bt)
	}
	return out, nil
}

// handlePull serves one heartbeat pull: rate-limited per peer, bounded in
// concurrency, size and time.
func (g *Gossip) handlePull(s network.Stream) {
	if !g.enter() {
		_ = s.Reset()
		return
	}
	defer g.wg.Done()
	_ = s.SetDeadline(time.Now().Add(g.cfg.PullTimeout))
	answer := func(b []byte, outcome string) {
		g.m.Inc(pullsServed, outcome)
		_ = answerStream(s, b)
	}
	var ids []string
	release, ok := g.admit(s, requestAdmission{
		name: "pull", what: "heartbeat pulls", slots: g.pullSem, limits: g.pullLimits,
		readBuf: 512, maxBytes: maxPullRequestBytes, refuse: encodePullError, answer: answer,
	}, func(req []byte) (err error) {
		ids, err = DecodePullRequest(req)
		return err
	})
	if !ok {
		return
	}
	defer release()
	self := g.h.ID().String()
	var beats []record.Beat
	for _, b := range g.cfg.LatestBeats(ids) {
		if b.PeerID == self && b.Reason == "" && b.ValidateUnbound() == nil && len(beats) < len(ids) {
			beats = append(beats, b)
		}
	}
	b, err := encodePullAnswer(beats)
	if err != nil {
		_ = s.Reset()
		return
	}
	answer(b, "ok")
}

// Pull asks p, the host of the given agents, for their newest heartbeats
// (at most MaxPullAgents; more are an error) and delivers those that are
// news, as heartbeats from p, to the sink. Each is judged as p's own
// statement (record.BeatSignerBatch) by the verifier and the sink: p must
// host the agent's current record. It returns how many were delivered.
// ErrPullUnsupported means p does not speak PullProtocol.
func (g *Gossip) Pull(ctx context.Context, p peer.ID, agentIDs []string) (int, error) {
	if g.ctx.Err() != nil {
		return 0, ErrClosed
	}
	req, err := EncodePullRequest(agentIDs)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, g.cfg.PullTimeout)
	defer cancel()
	s, err := g.h.NewStream(ctx, p, protocol.ID(PullProtocol))
	if err != nil {
		if errors.Is(err, multistream.ErrNotSupported[protocol.ID]{}) {
			return 0, fmt.Errorf("%w: %s", ErrPullUnsupported, p)
		}
		return 0, err
	}
	stop := context.AfterFunc(ctx, func() { _ = s.Reset() })
	defer stop()
	_ = s.SetDeadline(time.Now().Add(g.cfg.PullTimeout))
	if err := writeFrame(s, req); err != nil {
		_ = s.Reset()
		return 0, err
	}
	_ = s.CloseWrite()
	raw, err := readFrame(bufio.NewReaderSize(s, 1024), maxPullAnswerBytes)
	if err != nil {
		_ = s.Reset()
		return 0, err
	}
	_ = s.Close()
	beats, err := DecodePullAnswer(raw, agentIDs)
	if err != nil {
		if !errors.Is(err, ErrPullRefused) {
			g.m.Reject("pull", string(trust.ReasonOf(err)))
		}
		return 0, err
	}
	author := p.String()
	n := 0
	for _, b := range beats {
		sb := &record.SignedBeat{Beat: b, Signer: record.BeatSignerBatch}
		sb.Beat.PeerID = author
		if err := g.v.VerifyBeat(sb, p); err != nil {
			if trust.ReasonOf(err) == trust.ReasonUnknownKey {
				g.unknown.request(b.AgentID, p, b.Interval())
			}
			continue
		}
		if err := g.sink.CheckBeat(KindHeartbeat, sb); err != nil {
			continue // not news: the host has not beaten since
		}
		g.sink.Beat(KindHeartbeat, sb, p, PullProtocol)
		n++
	}
	return n, nil
}

func pullsServed(m *metrics.Metrics) *prometheus.CounterVec { return m.PullsServed }
