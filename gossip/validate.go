package gossip

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/trust"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Reasons this package adds to trust's.
const (
	// ReasonSceneMismatch: an announcement on a scene topic for an agent
	// that has no skill in the scene.
	ReasonSceneMismatch trust.Reason = "scene_mismatch"
	// ReasonShardMismatch: an announcement on a shard topic for an agent
	// that has no capability in the shard.
	ReasonShardMismatch trust.Reason = "shard_mismatch"
	// ReasonInternal: a local failure (e.g. reading a key pin) prevented a
	// decision; the message is ignored, nobody is penalised.
	ReasonInternal trust.Reason = "internal"
)

// metricsTransport is the transport label of rejection metrics.
const metricsTransport = "gossip"

// accepted is the ValidatorData of an accepted message.
type accepted struct {
	msg *Message
	// beats are a heartbeat batch's entries that passed every check, as
	// beats of the author (Signer record.BeatSignerBatch): delivered one by
	// one as heartbeats.
	beats []*record.SignedBeat
	// dup marks a payload already accepted on another topic: forwarded on
	// this one, not delivered to the sink again.
	dup bool
}

// validate is the topic validator. See the package doc for the order of
// the checks and which outcome each failure has.
func (g *Gossip) validate(ctx context.Context, topic, scene, shard string, msg *pubsub.Message) pubsub.ValidationResult {
	a, res, reason, err := g.check(topic, scene, shard, msg.Data, msg.GetFrom())
	if err == nil && !a.dup && a.msg.Kind == KindAnnounce && msg.GetFrom() != g.h.ID() {
		if v, ok := g.sink.(AuthorVetter); ok {
			vctx, cancel := context.WithTimeout(ctx, vetWaitDefault)
			reached := v.VetAuthor(vctx, msg.GetFrom(), a.msg.Agent.Agent.Issued())
			cancel()
			if !reached {
				g.recent.release(contentKey(msg.GetFrom(), msg.Data), topic)
				g.pen.add(msg.ReceivedFrom)
				g.m.Reject(metricsTransport, ReasonUnvettedAuthor)
				g.note(a.msg, trust.Reason(ReasonUnvettedAuthor), fmt.Errorf("the author %s could not be reached; its announcement is not forwarded", msg.GetFrom()))
				g.log.Debug("announcement of an author not reached: not forwarded", "author", msg.GetFrom(), "via", msg.ReceivedFrom)
				return pubsub.ValidationIgnore
			}
		}
	}
	if err != nil && reason == trust.ReasonPeerQuota && msg.ReceivedFrom == msg.GetFrom() {
		// The author itself sends more agents than one peer may have:
		// every node applies the same quota, so honest relays never
		// forward them, and the flooding peer pays for each (P4).
		res = pubsub.ValidationReject
	}
	if err != nil {
		g.m.Reject(metricsTransport, string(reason))
		g.log.Debug("gossip message refused", "topic", topic, "author", msg.GetFrom(), "via", msg.ReceivedFrom, "reason", reason, "result", resultName(res), "err", err)
		return res
	}
	msg.ValidatorData = a
	if g.m != nil && !a.dup && msg.GetFrom() != g.h.ID() {
		g.m.GossipDelivered.WithLabelValues(a.msg.Kind).Inc()
	}
	return pubsub.ValidationAccept
}

// check decodes and judges one payload authored by author. A nil error
// means accept. Messages this node authored skip the sink's replay check
// (the view applies local changes directly).
func (g *Gossip) check(topic, scene, shard string, data []byte, author peer.ID) (*accepted, pubsub.ValidationResult, trust.Reason, error) {
	local := author == g.h.ID()
	var key [32]byte
	if local {
		// Being published by this node: publish checked it a moment ago
		// on the announce topic; only this topic's scene or shard is left.
		if a := g.ownChecked(data); a != nil {
			if err := topicMatch(a.msg, scene, shard); err != nil {
				return nil, pubsub.ValidationReject, verifyReason(err), err
			}
			return a, pubsub.ValidationAccept, "", nil
		}
	} else {
		key = contentKey(author, data)
		// The same bytes by the same author, verified and accepted on
		// another topic moments ago: a scoped node gets an agent's beat
		// once per shard topic it shares with the agent. Its signature is
		// a function of these bytes, and a beat carries nothing a topic
		// could refuse (announcements do: scene and shard, so they take
		// the whole path). Forward it without decoding or verifying again.
		if g.recent.verifiedBeat(key, topic) {
			return &accepted{dup: true}, pubsub.ValidationAccept, "", nil
		}
		// An announcement's copy: decoded and verified moments ago; only
		// this topic's scene or shard is left to check.
		if m := g.recent.verifiedAnnounce(key, topic); m != nil {
			if err := topicMatch(m, scene, shard); err != nil {
				return nil, pubsub.ValidationReject, verifyReason(err), err
			}
			return &accepted{msg: m, dup: true}, pubsub.ValidationAccept, "", nil
		}
	}
	m, err := Decode(data, g.cfg.MaxMessageBytes)
	if err != nil {
		reason := trust.ReasonOf(err)
		res := pubsub.ValidationReject
		switch {
		case reason == trust.ReasonVersion:
			res = pubsub.ValidationIgnore
		case reason == trust.ReasonMalformed && newerMinor(data):
			// A later minor version may carry what this version cannot
			// parse; do not penalise the peers that relay it.
			res = pubsub.ValidationIgnore
		}
		return nil, res, reason, err
	}
	if m.NewerMinor && !local && g.warned.add(author) {
		g.log.Warn("peer speaks a newer minor protocol version", "peer_id", author, "version", m.Version, "ours", record.ProtocolVersion)
	}
	if err := topicMatch(m, scene, shard); err != nil {
		g.note(m, verifyReason(err), err)
		return nil, pubsub.ValidationReject, verifyReason(err), err
	}
	if m.Kind == KindBeats {
		return g.checkBatch(topic, key, m, author, local)
	}
	if m.Kind == KindWanted {
		return g.checkWanted(m, author, local)
	}
	if m.Resend > 0 && !local && !g.cfg.DisableResends {
		if ok, a, res, reason, err := g.checkResend(topic, key, m, author); ok {
			return a, res, reason, err
		}
	}
	if ok, a, res, reason, err := g.checkByAuthor(topic, key, m, author, local); ok {
		return a, res, reason, err
	}
	if m.Kind == KindAnnounce {
		err = g.v.VerifyAgent(m.Agent, trust.VerifyOptions{From: author, Transport: "gossip"})
	} else {
		err = g.v.VerifyBeat(m.Beat, author)
	}
	if err != nil {
		reason := verifyReason(err)
		res := resultFor(reason)
		if m.Beat != nil && !local {
			switch {
			case reason == trust.ReasonUnknownKey:
				g.unknown.request(m.Beat.Beat.AgentID, author, m.Beat.Beat.Interval())
			case reason == trust.ReasonBadSignature && !m.Beat.PeerSigned():
				// A beat signed by the agent key that does not verify with
				// the key pinned here may be ours that is stale: the agent
				// rotated its key and this node missed the announcement.
				// Fetch its current record from the author (deduplicated,
				// and verified like any record), and do not penalise the
				// peers that relayed it: they may know the new key.
				g.unknown.request(m.Beat.Beat.AgentID, author, m.Beat.Beat.Interval())
				res = pubsub.ValidationIgnore
			}
		}
		return nil, res, reason, err
	}
	a := &accepted{msg: m}
	if local {
		return a, pubsub.ValidationAccept, "", nil
	}
	if g.recent.claim(key, topic, m) {
		a.dup = true
		return a, pubsub.ValidationAccept, "", nil
	}
	if m.Kind == KindAnnounce {
		err = g.sink.CheckAnnounce(m.Agent)
	} else {
		err = g.sink.CheckBeat(m.Kind, m.Beat)
	}
	if err != nil {
		g.recent.release(key, topic)
		reason := verifyReason(err)
		if reason != trust.ReasonReplay { // a copy already applied is not news
			g.note(m, reason, err)
		}
		return nil, pubsub.ValidationIgnore, reason, err
	}
	if m.Resend > 0 {
		// Taken as news: a later copy of this resend (a replay after
		// pubsub's seen TTL) finds the record held and is not forwarded.
		g.resent.forward(m.Agent.Agent.AgentID, m.Agent.Agent.Seq, m.Resend)
	}
	return a, pubsub.ValidationAccept, "", nil
}

// checkResend judges a resent announcement (docs/protocol.md, "Resent
// announcements") that this node may already hold. Only the record's own
// host may resend it (peer_mismatch otherwise, as for any announcement).
// When the live view holds exactly this record — the same seq, canonical
// bytes and signatures, all checked when it was admitted — the resend is
// forwarded without its signatures being verified again and without
// being delivered; each resend counter of a record is forwarded once
// (resendLog), so a replay after pubsub's seen TTL goes no further than
// the node it reaches. It reports ok false, and the caller takes an
// announcement's path, when the view does not hold the record: the
// resend is then news here, or a replay the sink refuses.
func (g *Gossip) checkResend(topic string, key [32]byte, m *Message, author peer.ID) (ok bool, a *accepted, res pubsub.ValidationResult, reason trust.Reason, err error) {
	sa := m.Agent
	if sa.Agent.PeerID != author.String() {
		err = &trust.RejectError{Reason: trust.ReasonPeerMismatch, Field: "peer_id", Detail: fmt.Sprintf("a resend of agent %s's record by %s, which is not its peer %s", sa.Agent.AgentID, author, sa.Agent.PeerID)}
		return true, nil, pubsub.ValidationReject, trust.ReasonPeerMismatch, err
	}
	h, isHolder := g.sink.(RecordHolder)
	if !isHolder || !h.Holds(sa) {
		return false, nil, 0, "", nil
	}
	if g.recent.claim(key, topic, m) {
		return true, &accepted{msg: m, dup: true}, pubsub.ValidationAccept, "", nil
	}
	if !g.resent.forward(sa.Agent.AgentID, sa.Agent.Seq, m.Resend) {
		g.recent.release(key, topic)
		err = &trust.RejectError{Reason: trust.ReasonReplay, Detail: fmt.Sprintf("resend %d of agent %s's record seq %d was forwarded already", m.Resend, sa.Agent.AgentID, sa.Agent.Seq)}
		return true, nil, pubsub.ValidationIgnore, trust.ReasonReplay, err
	}
	if g.m != nil {
		g.m.Resends.WithLabelValues("forwarded").Inc()
	}
	return true, &accepted{msg: m, dup: true}, pubsub.ValidationAccept, "", nil
}

// RecordHolder is implemented by a Sink that can tell whether it holds a
// record exactly (the live view): Holds reports whether it holds sa's
// agent at sa's seq with the same canonical bytes and signatures. It must
// be fast and must not block.
type RecordHolder interface {
	Holds(sa *record.SignedAgent) bool
}

// resendLog remembers, per agent, the highest resend of its record this
// node has forwarded or taken, so that each is forwarded at most once.
// It is bounded; when full it starts over (a replay of a forgotten resend
// is forwarded once more, which costs what the resend cost the first
// time, no more).
type resendLog struct {
	mu  sync.Mutex
	max int
	m   map[string]resendMark
}

type resendMark struct {
	seq uint64
	n   int
}

func newResendLog(max int) *resendLog { return &resendLog{max: max, m: map[string]resendMark{}} }

// forward reports whether resend n of agentID's record seq is newer than
// every resend of the agent this node forwarded or took, and records it.
func (l *resendLog) forward(agentID string, seq uint64, n int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, ok := l.m[agentID]; ok && (e.seq > seq || e.seq == seq && e.n >= n) {
		return false
	}
	if _, ok := l.m[agentID]; !ok && len(l.m) >= l.max {
		clear(l.m)
	}
	l.m[agentID] = resendMark{seq: seq, n: n}
	return true
}

// resendLogMax bounds resendLog: one entry per agent resent within its
// reach, about 60 bytes each.
const resendLogMax = 1 << 16

// checkByAuthor judges a heartbeat on its pubsub signature when the
// message's author is the beat's own peer: pubsub has verified the
// author's Ed25519 signature, so the beat is that peer's statement, and
// judged as one (record.BeatSignerAuthor: the verifier's policy, then the
// sink's news and the peer-signed rule — the author must host the agent's
// current record) it needs no verification of its own signature. The
// agent key's ECDSA verification was a fifth of agentd's gossip check in
// a 100-node simnet (docs/scaling.md).
//
// It reports ok false, and the caller takes the signature's path, for
// anything else: another kind, a beat whose author is not its peer, a
// policy refusal (the signature's path gives the same, and asks for the
// record of an unknown agent), and a beat the rule refuses — the author
// does not host the agent as far as this node knows, and the agent's key
// may still vouch for it. A beat that is not news is ignored here, as it
// would be after its signature.
//
// One beat in authorVerifyEvery of each agent (chosen by its seq) takes
// the signature's path anyway: a node that missed an agent's key rotation
// still holds the old key, a beat signed with the new one fails there, and
// that failure is what makes the node fetch the agent's current record —
// within about authorVerifyEvery heartbeat intervals.
//
// Nothing changes on the wire: the beat stays signed, and a node that
// does not take this path verifies it.
func (g *Gossip) checkByAuthor(topic string, key [32]byte, m *Message, author peer.ID, local bool) (ok bool, a *accepted, res pubsub.ValidationResult, reason trust.Reason, err error) {
	if local || m.Kind != KindHeartbeat || verifiedBySample(m.Beat.Beat.Seq) {
		return false, nil, 0, "", nil
	}
	sb := *m.Beat
	sb.Signer = record.BeatSignerAuthor
	if sb.Beat.PeerID != author.String() || g.v.VerifyBeat(&sb, author) != nil {
		return false, nil, 0, "", nil
	}
	am := *m
	am.Beat = &sb
	if g.recent.claim(key, topic, &am) {
		return true, &accepted{msg: &am, dup: true}, pubsub.ValidationAccept, "", nil
	}
	if err := g.sink.CheckBeat(am.Kind, &sb); err != nil {
		g.recent.release(key, topic)
		if reason := verifyReason(err); reason == trust.ReasonReplay {
			return true, nil, pubsub.ValidationIgnore, reason, err
		}
		return false, nil, 0, "", nil
	}
	return true, &accepted{msg: &am}, pubsub.ValidationAccept, "", nil
}

// About one heartbeat in authorVerifyEvery (1 << authorVerifyBits) of
// each agent has its own signature verified even when its author could
// vouch for it (checkByAuthor).
const (
	authorVerifyBits  = 4
	authorVerifyEvery = 1 << authorVerifyBits
)

// verifiedBySample reports whether the heartbeat of seq is one of those:
// the top bits of a multiplicative (Fibonacci) hash of the seq are zero,
// so that seqs counted one by one and seqs taken from a clock are
// sampled alike.
func verifiedBySample(seq uint64) bool {
	return (seq*0x9E3779B97F4A7C15)>>(64-authorVerifyBits) == 0
}

// checkBatch judges a decoded heartbeat batch by its author. pubsub has
// verified the message's signature, so each entry is a beat of the author
// (record.BeatSignerBatch): the verifier applies its policy to it (the
// agent's key pinned, allow-list, certificate) and the sink its news and
// binding rules (the author must host the agent's current record), entry
// by entry. The batch is accepted, and forwarded, when some entry is
// news; the others are dropped from what is delivered. An entry of an
// unknown agent asks for its record, as a single beat does. Nothing is
// rejected here: what an entry is worth depends on the receiver's view.
func (g *Gossip) checkBatch(topic string, key [32]byte, m *Message, author peer.ID, local bool) (*accepted, pubsub.ValidationResult, trust.Reason, error) {
	beats := make([]*record.SignedBeat, len(m.Beats))
	authorID := author.String()
	for i := range m.Beats {
		sb := &record.SignedBeat{Beat: m.Beats[i], Signer: record.BeatSignerBatch}
		sb.Beat.PeerID = authorID
		beats[i] = sb
	}
	if local {
		return &accepted{msg: m, beats: beats}, pubsub.ValidationAccept, "", nil
	}
	if g.recent.claim(key, topic, m) {
		return &accepted{msg: m, dup: true}, pubsub.ValidationAccept, "", nil
	}
	var (
		reason trust.Reason
		first  error
		keep   = beats[:0]
	)
	for _, sb := range beats {
		err := g.v.VerifyBeat(sb, author)
		if err != nil && verifyReason(err) == trust.ReasonUnknownKey {
			g.unknown.request(sb.Beat.AgentID, author, sb.Beat.Interval())
		} else if err == nil {
			if err = g.sink.CheckBeat(KindHeartbeat, sb); err != nil && verifyReason(err) != trust.ReasonReplay {
				g.note(&Message{Kind: KindHeartbeat, Beat: sb}, verifyReason(err), err)
			}
		}
		if err != nil {
			if first == nil {
				reason, first = verifyReason(err), err
			}
			continue
		}
		keep = append(keep, sb)
	}
	if len(keep) == 0 {
		g.recent.release(key, topic)
		return nil, pubsub.ValidationIgnore, reason, fmt.Errorf("no beat of the batch of %d is news: %w", len(beats), first)
	}
	return &accepted{msg: m, beats: keep}, pubsub.ValidationAccept, "", nil
}

// note records in the verifier's journal a refusal of a decoded message
// that the verifier did not make (agentd explain).
func (g *Gossip) note(m *Message, reason trust.Reason, err error) {
	switch {
	case m == nil:
	case m.Agent != nil:
		g.v.NoteRecord(m.Agent, metricsTransport, reason, err)
	case m.Beat != nil:
		g.v.NoteBeat(m.Beat, metricsTransport, reason, err)
	}
}

// topicMatch checks an announcement against the scene or shard of the
// topic it came on: an agent is announced only where it belongs.
func topicMatch(m *Message, scene, shard string) error {
	if m.Kind != KindAnnounce {
		return nil
	}
	if scene != "" && !slices.Contains(m.Agent.Agent.AllScenes(), scene) {
		return &trust.RejectError{Reason: ReasonSceneMismatch, Detail: "agent " + m.Agent.Agent.AgentID + " has no skill in scene " + scene}
	}
	if shard != "" && !slices.Contains(m.Agent.Agent.Shards(), shard) {
		return &trust.RejectError{Reason: ReasonShardMismatch, Detail: "agent " + m.Agent.Agent.AgentID + " has no capability in shard " + shard}
	}
	return nil
}

// verifyReason classifies an error of the Verifier or the Sink. Only a
// *trust.RejectError carries a verdict about the message; anything else is
// a local failure.
func verifyReason(err error) trust.Reason {
	var re *trust.RejectError
	if errors.As(err, &re) {
		return re.Reason
	}
	return ReasonInternal
}

// resultFor maps a verification failure to the pubsub verdict. Reject
// (which costs the forwarding peer P4 score) is kept for failures every
// node judges the same way: malformed input, bad or missing signatures,
// and an author that is not the record's peer. Failures that depend on
// this node's state or policy (unknown or pinned keys, allow-list,
// certificate roots, clock) are ignored without penalty: an honest relay
// may have judged them differently.
//
// A beat whose signature does not verify with the pinned key is rejected:
// beats carry no key, every node verifies them with the key it pinned from
// the agent's record, and in a consistent network those are the same key.
func resultFor(r trust.Reason) pubsub.ValidationResult {
	switch r {
	case trust.ReasonMalformed, trust.ReasonTooLarge, trust.ReasonUnsigned,
		trust.ReasonBadSignature, trust.ReasonBadPeerSignature, trust.ReasonPeerMismatch,
		ReasonSceneMismatch:
		return pubsub.ValidationReject
	}
	return pubsub.ValidationIgnore
}

func resultName(r pubsub.ValidationResult) string {
	switch r {
	case pubsub.ValidationAccept:
		return "accept"
	case pubsub.ValidationReject:
		return "reject"
	case pubsub.ValidationIgnore:
		return "ignore"
	}
	return "unknown"
}

// newerMinor reports whether data declares a newer minor version of ours.
func newerMinor(data []byte) bool {
	version, _, err := readVersion(data)
	if err != nil {
		return false
	}
	_, minor, err := record.ParseVersion(version)
	return err == nil && minor > readMinor
}

// ---- recent: payloads accepted per topic ----

const (
	// seenTTL is how long pubsub remembers a message id as seen (and the
	// score its deliveries), and recentTTL matches it: after it, a copy
	// would be a new message to pubsub too. pubsub's default is 2 min; a
	// message lives a few seconds in the network (gossip history 5 s), a
	// late copy is refused by the view's seq and tombstone checks anyway,
	// and the three caches were 16 % of simnet's live heap at 2 min.
	seenTTL   = 30 * time.Second
	recentTTL = seenTTL
	recentMax = 1 << 16
)

// recentCache remembers, for a bounded time and count, which topic each
// accepted payload was first accepted on, so the same announcement arriving
// on a scene topic after the announce topic is forwarded there (the sink
// would call it a replay) without being delivered twice.
type recentCache struct {
	mu    sync.Mutex
	ttl   time.Duration
	max   int
	m     map[[32]byte]recentEntry
	order [][32]byte
}

type recentEntry struct {
	topic string
	at    time.Time
	beat  bool     // not an announcement (see verifiedBeat)
	msg   *Message // the decoded announcement (see verifiedAnnounce)
}

func newRecentCache(ttl time.Duration, max int) *recentCache {
	return &recentCache{ttl: ttl, max: max, m: map[[32]byte]recentEntry{}}
}

// claim reports whether payload k was accepted on another topic within
// the TTL (a duplicate to forward, not deliver). Otherwise it records k
// for topic, so that a copy validated concurrently on another topic is a
// duplicate; release undoes that when the sink refuses the payload.
func (c *recentCache) claim(k [32]byte, topic string, m *Message) bool {
	beat := m.Kind != KindAnnounce
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[k]; ok && now.Sub(e.at) < c.ttl {
		return e.topic != topic
	}
	for len(c.order) > 0 {
		old := c.order[0]
		if e, ok := c.m[old]; ok && len(c.m) < c.max && now.Sub(e.at) < c.ttl {
			break
		}
		delete(c.m, old)
		c.order = c.order[1:]
	}
	e := recentEntry{topic: topic, at: now, beat: beat}
	if !beat {
		e.msg = m
	}
	c.m[k] = e
	c.order = append(c.order, k)
	return false
}

// verifiedBeat reports whether k, a beat (heartbeat, status or
// unregister), was accepted on another topic within the TTL.
func (c *recentCache) verifiedBeat(k [32]byte, topic string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[k]
	return ok && e.beat && e.topic != topic && time.Since(e.at) < c.ttl
}

// verifiedAnnounce returns the decoded announcement k if it was accepted
// on another topic within the TTL (the sink took it: it passed every
// check but the topic's own scene or shard).
func (c *recentCache) verifiedAnnounce(k [32]byte, topic string) *Message {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[k]
	if !ok || e.beat || e.msg == nil || e.topic == topic || time.Since(e.at) >= c.ttl {
		return nil
	}
	return e.msg
}

// release forgets k if topic holds it.
func (c *recentCache) release(k [32]byte, topic string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[k]; ok && e.topic == topic {
		delete(c.m, k)
	}
}

// ---- peers warned once ----

// peerSet is a bounded set; when full it starts over (a repeated warning is
// harmless, unbounded memory is not).
type peerSet struct {
	mu  sync.Mutex
	max int
	m   map[peer.ID]struct{}
}

func newPeerSet(max int) *peerSet { return &peerSet{max: max, m: map[peer.ID]struct{}{}} }

// add reports whether p was not yet in the set.
func (s *peerSet) add(p peer.ID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[p]; ok {
		return false
	}
	if len(s.m) >= s.max {
		clear(s.m)
	}
	s.m[p] = struct{}{}
	return true
}

// ---- unknown agents ----

const (
	unknownQueueLen   = 256
	unknownMaxTracked = 4096
)

type unknownReq struct {
	agentID  string
	from     peer.ID
	interval time.Duration // what the beat claimed (0: none)
}

// unknownQueue deduplicates Sink.UnknownAgent calls per agent and runs
// them off the validator, on a bounded queue.
type unknownQueue struct {
	backoff time.Duration
	ch      chan unknownReq
	mu      sync.Mutex
	last    map[string]time.Time
}

func newUnknownQueue(backoff time.Duration) *unknownQueue {
	return &unknownQueue{backoff: backoff, ch: make(chan unknownReq, unknownQueueLen), last: map[string]time.Time{}}
}

// request queues a call unless one for the agent was queued within the
// backoff. It never blocks: when the queue is full the request is dropped
// and a later beat retries.
func (u *unknownQueue) request(agentID string, from peer.ID, interval time.Duration) {
	now := time.Now()
	u.mu.Lock()
	if t, ok := u.last[agentID]; ok && now.Sub(t) < u.backoff {
		u.mu.Unlock()
		return
	}
	if len(u.last) >= unknownMaxTracked {
		for id, t := range u.last {
			if now.Sub(t) >= u.backoff {
				delete(u.last, id)
			}
		}
		if len(u.last) >= unknownMaxTracked {
			u.mu.Unlock()
			return
		}
	}
	u.last[agentID] = now
	u.mu.Unlock()
	select {
	case u.ch <- unknownReq{agentID: agentID, from: from, interval: interval}:
	default:
		u.mu.Lock()
		delete(u.last, agentID)
		u.mu.Unlock()
	}
}

func (u *unknownQueue) work(ctx context.Context, sink Sink) {
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-u.ch:
			sink.UnknownAgent(r.agentID, r.from, r.interval)
		}
	}
}
