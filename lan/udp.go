package lan

import (
	"context"
	"crypto/ecdsa"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentd/agentd/internal/backoff"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/trust"

	"golang.org/x/time/rate"
)

// readBufSize is the UDP receive buffer: the longest message
// record.ParseSkillMessage accepts (8 KiB plus a CRLF) and one byte more,
// so that a longer datagram is seen as oversize rather than silently
// truncated.
const readBufSize = record.MaxSkillLineBytes + 3

// resolveTimeout bounds one attempt to obtain an agent's record.
const resolveTimeout = 5 * time.Second

// maxReadErrors is how many consecutive read errors make the socket count
// as failed (the supervisor then reopens it).
const maxReadErrors = 100

// udpProto is the seed-001 text protocol on UDP multicast.
type udpProto struct {
	l       *LAN
	rl      *limiter      // every datagram, per source
	drl     *limiter      // SKILL_DISCOVERs answered, per source
	abytes  *rate.Limiter // SKILL_DISCOVER_RESPONSE bytes, all sources
	hmacKey []byte
	logs    *limiter // rate-limited logging of refused datagrams

	mu      sync.Mutex
	answers map[[32]byte]time.Time // recent answers by content, for AnswerRepeatWindow
	lastTS  int64
	waiters map[*waiter]struct{}
	acks    map[ackKey]time.Time
	// challenges are the certificate registrations waiting for their
	// CHALLENGE_RESPONSE (seed 001 §10.3), by agent and skill.
	challenges map[foreignKey]*challenge
}

type ackKey struct {
	agent string
	st    record.AckStatus
	typ   record.SkillMsgType // the acknowledgement's type ("" for SKILL_REGISTER_ACK)
}

// waiter is one Discover call collecting responses.
type waiter struct{ ch chan response }

type response struct {
	msg *record.SkillMessage
	src netip.AddrPort
}

func newUDPProto(l *LAN) *udpProto {
	u := &udpProto{
		l:       l,
		rl:      newLimiter(l.cfg.RatePerSource, l.cfg.RateBurst),
		drl:     newLimiter(2, 4),
		abytes:  rate.NewLimiter(rate.Limit(l.cfg.AnswerBytesPerSec), l.cfg.AnswerBurst),
		answers: map[[32]byte]time.Time{},
		logs:    newLimiter(0.1, 3),
		waiters: map[*waiter]struct{}{},
		acks:    map[ackKey]time.Time{},

		challenges: map[foreignKey]*challenge{},
	}
	if l.cfg.UDP.HMACKey != "" {
		u.hmacKey = []byte(l.cfg.UDP.HMACKey)
	}
	return u
}

// serve reads datagrams until the socket is closed. Each is handled
// inline and never blocks: work that needs the network (obtaining an
// unknown agent's record) goes to the worker pool.
func (u *udpProto) serve(ctx context.Context, s Socket) error {
	buf := make([]byte, readBufSize)
	errs := 0
	for {
		n, src, _, err := s.ReadFrom(buf)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return err
			}
			u.l.count(mechUDP, "read_error")
			if errs++; errs >= maxReadErrors {
				return err
			}
			continue
		}
		errs = 0
		u.handle(buf[:n], src, time.Now())
	}
}

// handle processes one datagram.
func (u *udpProto) handle(b []byte, src netip.AddrPort, now time.Time) {
	l := u.l
	if len(b) > record.MaxSkillLineBytes+2 {
		l.count(mechUDP, "oversize")
		l.reject(mechUDP, trust.ReasonTooLarge)
		u.logRefused(src, "oversize", nil)
		return
	}
	if !u.rl.allow(src.Addr(), now) {
		l.count(mechUDP, "rate_limited")
		return
	}
	msg, err := record.ParseSkillMessage(string(b))
	if err != nil {
		l.count(mechUDP, "malformed")
		l.reject(mechUDP, trust.ReasonOf(err))
		u.logRefused(src, "malformed", err)
		if id, ok := registerAgentID(b); ok && !l.hosted.has(id) {
			u.ack(id, record.AckInvalid, err.Error(), now)
		}
		if id, skill, ok := unregisterIDs(b); ok && !l.hosted.has(id) {
			u.unregisterAck(id, skill, record.AckInvalid, err.Error(), now)
		}
		return
	}
	switch msg.Type {
	case record.MsgSkillRegister, record.MsgSkillHeartbeat, record.MsgSkillStatus, record.MsgSkillUnregister, record.MsgJoinScene:
		u.handleSigned(msg, src, now)
	case record.MsgChallengeResponse:
		u.handleChallengeResponse(msg, src, now)
	case record.MsgChallenge, record.MsgSkillUnregisterAck, record.MsgJoinSceneResponse:
		// Answers to skills; agentd's own agents do not use them.
		l.count(mechUDP, "response")
	case record.MsgSkillDiscover:
		u.handleDiscover(msg, src, now)
	case record.MsgSkillDiscoverResponse:
		u.handleResponse(msg, src)
	case record.MsgSkillRegisterAck:
		u.handleAck(msg, src, now)
	}
}

// registerAgentID returns the agentId of a SKILL_REGISTER that failed to
// parse, when it is a valid identifier, so the sender can be told INVALID.
func registerAgentID(b []byte) (string, bool) {
	rest, ok := strings.CutPrefix(string(b), string(record.MsgSkillRegister)+":")
	if !ok {
		return "", false
	}
	id, _, _ := strings.Cut(rest, ";")
	return id, record.ValidIdent(id)
}

func (u *udpProto) handleSigned(msg *record.SkillMessage, src netip.AddrPort, now time.Time) {
	l := u.l
	if l.hosted.has(msg.AgentID) {
		l.count(mechUDP, "own")
		return
	}
	isReg := msg.Type == record.MsgSkillRegister
	if d := now.Sub(time.UnixMilli(msg.Timestamp)); d > l.cfg.MaxClockSkew || d < -l.cfg.MaxClockSkew {
		l.count(mechUDP, "stale")
		l.reject(mechUDP, trust.ReasonReplay)
		if isReg {
			u.ack(msg.AgentID, record.AckInvalid, msg.SkillID+": timestamp is more than "+l.cfg.MaxClockSkew.String()+" from the receiver's clock", now)
		}
		return
	}
	if isReg && len(msg.Certificate) > 0 {
		u.handleCertRegister(msg, src, now)
		return
	}
	switch msg.SignatureKind() {
	case record.SigNone:
		l.count(mechUDP, "unsigned")
		l.reject(mechUDP, trust.ReasonUnsigned)
		u.refuse(msg, record.AckUnauthorized, "unsigned", now)
	case record.SigHMAC:
		u.handleHMAC(msg, src, now)
	default:
		if key := l.foreign.key(msg.AgentID); key != nil {
			// A skill of another implementation whose key a certificate
			// challenge proved (challenge.go).
			u.verifyForeign(msg, key, nil, src, now, "signature does not verify with the agent's proven key")
			return
		}
		u.handleECDSA(msg, src, now)
	}
}

// handleHMAC accepts a seed-001 message of another implementation signed
// with the shared key into the foreign table.
func (u *udpProto) handleHMAC(msg *record.SkillMessage, src netip.AddrPort, now time.Time) {
	l := u.l
	if len(u.hmacKey) == 0 {
		l.count(mechUDP, "bad_signature")
		l.reject(mechUDP, trust.ReasonBadSignature)
		u.refuse(msg, record.AckUnauthorized, "HMAC signature but no shared key is configured", now)
		return
	}
	u.verifyForeign(msg, nil, u.hmacKey, src, now, "HMAC signature does not verify")
}

// verifyForeign checks a message of another implementation with the key
// that authenticates it (the shared HMAC key, or the ECDSA key its
// certificate challenge proved) and acts on it, or refuses it saying why.
func (u *udpProto) verifyForeign(msg *record.SkillMessage, pub *ecdsa.PublicKey, hmacKey []byte, src netip.AddrPort, now time.Time, why string) {
	l := u.l
	if err := msg.Verify(pub, hmacKey); err != nil {
		l.count(mechUDP, "bad_signature")
		l.reject(mechUDP, trust.ReasonBadSignature)
		u.logRefused(src, why, err)
		u.refuse(msg, record.AckUnauthorized, why, now)
		return
	}
	u.applyForeign(msg, src, now)
}

// applyForeign acts on a verified seed-001 message of another
// implementation (HMAC, or ECDSA with the key its certificate challenge
// proved): the foreign table, the acknowledgements, scene joins.
func (u *udpProto) applyForeign(msg *record.SkillMessage, src netip.AddrPort, now time.Time) {
	l := u.l
	isReg := msg.Type == record.MsgSkillRegister
	if !l.d.Verifier.Allowed(record.ExternalAgentID(ForeignNamespace, msg.AgentID)) {
		l.count(mechUDP, "not_allowlisted")
		l.reject(mechUDP, trust.ReasonNotAllowlisted)
		u.refuse(msg, record.AckUnauthorized, "not in the allow-list", now)
		return
	}
	if msg.Type == record.MsgJoinScene {
		u.joinScene(msg, l.foreign.joinScene(msg.AgentID, msg.SkillID, msg.SceneID, now), now)
		return
	}
	l.foreign.mu.Lock()
	f, known := l.foreign.m[foreignKey{msg.AgentID, msg.SkillID}]
	wasGone := known && f.gone
	l.foreign.mu.Unlock()
	if !l.foreign.apply(msg, src.Addr(), now) {
		l.count(mechUDP, "replay")
		switch {
		case isReg:
			u.ack(msg.AgentID, record.AckDuplicate, msg.SkillID+": already registered", now)
		case msg.Type == record.MsgSkillUnregister && (!known || now.UnixMilli() < msg.Timestamp):
			u.unregisterAck(msg.AgentID, msg.SkillID, record.AckNotFound, "not registered", now)
		case msg.Type == record.MsgSkillUnregister && wasGone:
			u.unregisterAck(msg.AgentID, msg.SkillID, record.AckSuccess, "unregistered", now)
		}
		return
	}
	l.count(mechUDP, "foreign")
	switch {
	case isReg && (!known || wasGone):
		u.ack(msg.AgentID, record.AckSuccess, msg.SkillID+": registered", now)
		l.reannounce()
	case msg.Type == record.MsgSkillUnregister:
		u.unregisterAck(msg.AgentID, msg.SkillID, record.AckSuccess, "unregistered", now)
	}
}

// refuse answers a refused signed message: SKILL_REGISTER_ACK,
// SKILL_UNREGISTER_ACK or JOIN_SCENE_RESPONSE with st; heartbeats and
// statuses get no answer.
func (u *udpProto) refuse(msg *record.SkillMessage, st record.AckStatus, why string, now time.Time) {
	switch msg.Type {
	case record.MsgSkillRegister:
		u.ack(msg.AgentID, st, msg.SkillID+": "+why, now)
	case record.MsgSkillUnregister:
		u.unregisterAck(msg.AgentID, msg.SkillID, st, why, now)
	case record.MsgJoinScene:
		u.sendJoin(msg, st, nil, now)
	}
}

// handleECDSA verifies an agentd message with the key pinned for its
// agent, or holds it while the agent's record is obtained.
func (u *udpProto) handleECDSA(msg *record.SkillMessage, src netip.AddrPort, now time.Time) {
	l := u.l
	if !l.d.Verifier.Allowed(msg.AgentID) {
		l.count(mechUDP, "not_allowlisted")
		l.reject(mechUDP, trust.ReasonNotAllowlisted)
		u.refuse(msg, record.AckUnauthorized, "not in the allow-list", now)
		return
	}
	keys := l.d.Verifier.AcceptedKeys(msg.AgentID)
	if len(keys) == 0 {
		if msg.Type == record.MsgJoinScene {
			// An agentd agent joins by its record's scenes; nothing to hold.
			u.sendJoin(msg, record.AckNotFound, nil, now)
			return
		}
		u.holdUnknown(msg, src, now)
		return
	}
	if err := verifyWithAny(msg, keys); err != nil {
		l.count(mechUDP, "bad_signature")
		l.reject(mechUDP, trust.ReasonBadSignature)
		u.logRefused(src, "bad signature", err)
		u.refuse(msg, record.AckUnauthorized, "signature does not verify with the agent's key", now)
		return
	}
	if msg.Type == record.MsgJoinScene {
		st := record.AckNotFound
		if l.agents.offers(msg.AgentID, msg.SkillID) {
			st = record.AckSuccess
		}
		u.joinScene(msg, st, now)
		return
	}
	u.apply(msg, src, now)
}

// apply acts on a verified agentd message.
func (u *udpProto) apply(msg *record.SkillMessage, src netip.AddrPort, now time.Time) {
	l := u.l
	t := l.agents
	t.mu.Lock()
	_, existed := t.m[msg.AgentID]
	e := t.entryLocked(msg.AgentID, now)
	if !e.fresh(msg.SkillID, msg.Type, msg.Timestamp) {
		t.mu.Unlock()
		l.count(mechUDP, "replay")
		switch msg.Type {
		case record.MsgSkillRegister:
			u.ack(msg.AgentID, record.AckDuplicate, msg.SkillID+": already registered", now)
		case record.MsgSkillUnregister:
			u.unregisterAck(msg.AgentID, msg.SkillID, record.AckSuccess, "unregistered", now)
		}
		return
	}
	e.accept(msg.SkillID, msg.Type, msg.Timestamp)
	e.lastSeen = now
	e.seenAt(src.Addr())
	if msg.Type == record.MsgSkillUnregister {
		wasGone := e.gone
		e.gone = true
		clear(e.acked)
		t.mu.Unlock()
		l.count(mechUDP, "unregister")
		u.unregisterAck(msg.AgentID, msg.SkillID, record.AckSuccess, "unregistered", now)
		if !wasGone {
			l.log.Debug("agent unregistered on the LAN", "agent_id", msg.AgentID, "reason", msg.Reason, "src", src)
			l.forget(msg.AgentID)
		}
		return
	}
	revived := e.gone
	e.gone = false
	var statusChanged bool
	if msg.Type != record.MsgSkillRegister && e.status[msg.SkillID] != msg.Status {
		statusChanged = e.status[msg.SkillID] != "" || msg.Status != record.StatusHealthy
		e.status[msg.SkillID] = msg.Status
	}
	ackNow := msg.Type == record.MsgSkillRegister && !e.acked[msg.SkillID]
	if ackNow {
		e.acked[msg.SkillID] = true
	}
	var (
		learn  *record.SignedAgent
		fetch  bool
		newbie = !existed || revived
	)
	// The held record is outdated when a registration describes the skill
	// otherwise, or when it expires within the timeout (its owner re-signs
	// at half its TTL; the newer one is obtained).
	expiring := e.rec != nil && e.rec.Agent.ExpiresAt().Before(now.Add(l.cfg.UDP.Timeout.D()))
	needRec := e.rec == nil || expiring || (msg.Type == record.MsgSkillRegister && !consistent(e.rec, msg))
	old := e.rec
	switch {
	case needRec:
		if !e.resolving && !now.Before(e.failedUntil) {
			e.resolving = true
			fetch = true
		}
	case revived || now.Sub(e.lastLearn) >= l.cfg.UDP.BroadcastInterval.D()/2:
		e.lastLearn = now
		learn = e.rec
	}
	t.mu.Unlock()

	l.count(mechUDP, "accepted")
	if ackNow {
		u.ack(msg.AgentID, record.AckSuccess, msg.SkillID+": registered", now)
	}
	if newbie {
		l.reannounce()
	}
	if statusChanged && l.d.Status != nil {
		l.d.Status(msg.AgentID, msg.Status)
	}
	if learn != nil {
		l.learn(learn)
	}
	if fetch {
		want := func(sa *record.SignedAgent) bool {
			if old != nil && sa.Agent.Seq <= old.Agent.Seq {
				return false
			}
			return msg.Type != record.MsgSkillRegister || consistent(sa, msg)
		}
		u.startResolve(msg.AgentID, src, want)
	}
}

// consistent reports whether a registration describes the skill as the
// record does (same version and capability ids); if not, the record is
// outdated and a newer one is obtained.
func consistent(sa *record.SignedAgent, msg *record.SkillMessage) bool {
	s, ok := sa.Agent.Skill(msg.SkillID)
	if !ok || s.Version != msg.Version || s.SkillType != msg.SkillType {
		return false
	}
	return slices.Equal(s.CapabilityIDs(), msg.Capabilities)
}

// holdUnknown keeps a datagram of an agent whose key is not known yet and
// starts obtaining its record.
func (u *udpProto) holdUnknown(msg *record.SkillMessage, src netip.AddrPort, now time.Time) {
	l := u.l
	if record.ValidateAgentID(msg.AgentID) != nil {
		// Not an agentd agent id: nothing can resolve its key.
		l.count(mechUDP, "unknown_key")
		l.reject(mechUDP, trust.ReasonUnknownKey)
		u.refuse(msg, record.AckUnauthorized, "ECDSA signature from an unknown agent: register with a certificate first (SKILL_REGISTER with {certificate}, then answer the CHALLENGE)", now)
		return
	}
	t := l.agents
	t.mu.Lock()
	_, existed := t.m[msg.AgentID]
	e := t.entryLocked(msg.AgentID, now)
	e.lastSeen = now
	e.seenAt(src.Addr())
	if now.Before(e.failedUntil) {
		t.mu.Unlock()
		l.count(mechUDP, "unknown_key")
		l.reject(mechUDP, trust.ReasonUnknownKey)
		return
	}
	i := slices.IndexFunc(e.pending, func(p pendingMsg) bool {
		return p.msg.SkillID == msg.SkillID && p.msg.Type == msg.Type
	})
	switch {
	case i >= 0:
		e.pending[i] = pendingMsg{msg, src}
	case len(e.pending) < maxPending:
		e.pending = append(e.pending, pendingMsg{msg, src})
	}
	start := !e.resolving
	e.resolving = true
	t.mu.Unlock()
	l.count(mechUDP, "held")
	if !existed {
		l.reannounce()
	}
	if start {
		u.startResolve(msg.AgentID, src, nil)
	}
}

// startResolve queues a job that obtains the agent's record (one that
// want accepts, when want is set), then applies the held datagrams.
func (u *udpProto) startResolve(agentID string, src netip.AddrPort, want func(*record.SignedAgent) bool) {
	l := u.l
	ok := l.enqueue(func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
		defer cancel()
		sa, err := l.obtain(ctx, agentID, src.Addr(), want)
		u.resolved(agentID, sa, err)
	})
	if !ok {
		l.agents.mu.Lock()
		if e, ok := l.agents.m[agentID]; ok {
			e.resolving = false
			e.pending = nil
		}
		l.agents.mu.Unlock()
	}
}

// resolved finishes a resolution: on success the record is kept and
// learnt and the held datagrams are verified with the agent's key.
func (u *udpProto) resolved(agentID string, sa *record.SignedAgent, err error) {
	l := u.l
	now := time.Now()
	t := l.agents
	t.mu.Lock()
	e := t.entryLocked(agentID, now)
	e.resolving = false
	held := e.pending
	e.pending = nil
	if err != nil {
		e.failedUntil = now.Add(l.retryBackoff(e.failures))
		e.failures++
		t.mu.Unlock()
		l.count(mechUDP, "unresolved")
		l.reject(mechUDP, trust.ReasonUnknownKey)
		// No acknowledgement: the registration is neither accepted nor
		// refused yet (it is tried again after the back-off).
		l.log.Debug("no verified record for an agent seen on the LAN", "agent_id", agentID, "err", err)
		return
	}
	e.failures = 0
	if e.rec == nil || sa.Agent.Seq > e.rec.Agent.Seq {
		e.rec, e.hash = sa, sa.Hash()
	}
	// The record is learnt by apply below, once a held datagram verifies
	// with its key: a forged datagram naming the agent proves nothing.
	e.lastLearn = time.Time{}
	t.mu.Unlock()
	l.count(mechUDP, "resolved")
	keys := l.d.Verifier.AcceptedKeys(agentID)
	if len(keys) == 0 {
		return
	}
	for _, p := range held {
		if err := verifyWithAny(p.msg, keys); err != nil {
			l.count(mechUDP, "bad_signature")
			l.reject(mechUDP, trust.ReasonBadSignature)
			u.logRefused(p.src, "bad signature", err)
			continue
		}
		u.apply(p.msg, p.src, now)
	}
}

func (u *udpProto) handleDiscover(msg *record.SkillMessage, src netip.AddrPort, now time.Time) {
	l := u.l
	if msg.AgentID == l.requester {
		l.count(mechUDP, "own")
		return
	}
	if !u.drl.allow(src.Addr(), now) {
		l.count(mechUDP, "discover_rate_limited")
		return
	}
	var entries []record.SkillEntry
	for _, h := range l.hosted.list() {
		for _, e := range record.SkillEntriesFromAgent(&h.rec.Agent) {
			s, _ := h.rec.Agent.Skill(e.SkillID)
			if matchesDiscover(msg, s) {
				entries = append(entries, e)
			}
		}
	}
	if len(entries) == 0 {
		l.count(mechUDP, "discover_no_match")
		return
	}
	msgs, err := record.PackDiscoverResponse(msg.AgentID, entries, now.UnixMilli())
	if err != nil {
		l.log.Warn("cannot answer a SKILL_DISCOVER", "err", err)
		return
	}
	texts := make([][]byte, 0, len(msgs))
	size := 0
	for i := range msgs {
		t, err := msgs[i].Format()
		if err != nil {
			l.log.Warn("cannot format a SKILL_DISCOVER_RESPONSE", "err", err)
			return
		}
		texts = append(texts, []byte(t))
		size += len(t)
	}
	if u.repeated(msg.AgentID, entries, now) {
		l.count(mechUDP, "discover_repeat_suppressed")
		return
	}
	if !u.abytes.AllowN(now, size) {
		l.count(mechUDP, "discover_over_budget")
		return
	}
	for _, t := range texts {
		u.sendText(record.MsgSkillDiscoverResponse, t)
	}
	l.count(mechUDP, "discover_answered")
}

// repeated reports whether the same answer (same requester id, same
// entries) went out within AnswerRepeatWindow, and otherwise remembers
// this one. The requester id is part of the key because a seed-001 peer
// keeps only answers addressed to it.
func (u *udpProto) repeated(requester string, entries []record.SkillEntry, now time.Time) bool {
	h := sha256.New()
	h.Write([]byte(requester))
	for _, e := range entries {
		b, _ := json.Marshal(e)
		h.Write(b)
	}
	var key [32]byte
	h.Sum(key[:0])
	win := u.l.cfg.AnswerRepeatWindow
	u.mu.Lock()
	defer u.mu.Unlock()
	if t, ok := u.answers[key]; ok && now.Sub(t) < win {
		return true
	}
	if len(u.answers) >= maxSources {
		for k, t := range u.answers {
			if now.Sub(t) >= win {
				delete(u.answers, k)
			}
		}
		if len(u.answers) >= maxSources {
			clear(u.answers)
		}
	}
	u.answers[key] = now
	return false
}

// matchesDiscover reports whether a skill satisfies the filters of a
// SKILL_DISCOVER: it offers every listed capability, belongs to every
// listed scene, and is of one of the listed types (an empty filter
// matches any).
func matchesDiscover(msg *record.SkillMessage, s *record.Skill) bool {
	if s == nil {
		return false
	}
	for _, c := range msg.CapabilityFilter {
		if _, ok := s.Capability(c); !ok {
			return false
		}
	}
	for _, sc := range msg.SceneFilter {
		if !slices.Contains(s.Scenes, sc) {
			return false
		}
	}
	return len(msg.TypeFilter) == 0 || slices.Contains(msg.TypeFilter, s.SkillType)
}

func (u *udpProto) handleResponse(msg *record.SkillMessage, src netip.AddrPort) {
	l := u.l
	if msg.AgentID != l.requester {
		l.count(mechUDP, "response_other")
		return
	}
	u.mu.Lock()
	ws := make([]*waiter, 0, len(u.waiters))
	for w := range u.waiters {
		ws = append(ws, w)
	}
	u.mu.Unlock()
	if len(ws) == 0 {
		l.count(mechUDP, "response_late")
		return
	}
	l.count(mechUDP, "response")
	for _, w := range ws {
		select {
		case w.ch <- response{msg, src}:
		default:
			l.count(mechUDP, "response_dropped")
		}
	}
}

func (u *udpProto) handleAck(msg *record.SkillMessage, src netip.AddrPort, now time.Time) {
	l := u.l
	if !l.hosted.has(msg.AgentID) {
		l.count(mechUDP, "ack_other")
		return
	}
	l.count(mechUDP, "ack_"+strings.ToLower(string(msg.Ack)))
	if msg.Ack == record.AckInvalid || msg.Ack == record.AckUnauthorized {
		if u.logs.allow(src.Addr(), now) {
			l.log.Warn("a LAN peer refused a registration of a hosted agent",
				"agent_id", msg.AgentID, "status", msg.Ack, "message", msg.Message, "src", src)
		}
	}
}

func (u *udpProto) register(w *waiter) {
	u.mu.Lock()
	u.waiters[w] = struct{}{}
	u.mu.Unlock()
}

func (u *udpProto) unregisterWaiter(w *waiter) {
	u.mu.Lock()
	delete(u.waiters, w)
	u.mu.Unlock()
}

// ---- sending ----

// nextTS returns a timestamp (epoch ms) strictly greater than every one
// this node sent before, so that receivers never take two of its messages
// for a replay.
func (u *udpProto) nextTS() int64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	ts := time.Now().UnixMilli()
	if ts <= u.lastTS {
		ts = u.lastTS + 1
	}
	u.lastTS = ts
	return ts
}

// send multicasts one message; it is dropped (and counted) while the
// socket is down.
func (u *udpProto) send(m *record.SkillMessage) bool {
	text, err := m.Format()
	if err != nil {
		u.l.log.Warn("cannot format a LAN message", "type", m.Type, "err", err)
		return false
	}
	return u.sendText(m.Type, []byte(text))
}

// sendText multicasts one formatted message.
func (u *udpProto) sendText(typ record.SkillMsgType, text []byte) bool {
	l := u.l
	s := l.sock(mechUDP)
	if s == nil {
		l.count(mechUDP, "send_unavailable")
		return false
	}
	if err := s.Multicast(text, 0); err != nil {
		l.count(mechUDP, "send_error")
		l.log.Debug("multicast send failed", "type", typ, "err", err)
		return false
	}
	l.count(mechUDP, "sent_"+strings.ToLower(strings.TrimPrefix(string(typ), "SKILL_")))
	return true
}

func (u *udpProto) sign(m *record.SkillMessage) bool {
	if err := m.SignECDSA(u.l.d.Identity.AgentKey); err != nil {
		u.l.log.Warn("cannot sign a LAN message", "type", m.Type, "agent_id", m.AgentID, "err", err)
		return false
	}
	return true
}

// sendRegisters sends one signed SKILL_REGISTER per skill of each agent
// this node can sign for.
func (u *udpProto) sendRegisters(hs []*hostedAgent) {
	for _, h := range hs {
		if !h.canSign {
			continue
		}
		for _, m := range record.SkillsFromAgent(&h.rec.Agent) {
			m.Timestamp = u.nextTS()
			if u.sign(&m) {
				u.send(&m)
			}
		}
	}
}

// sendBeats sends a signed SKILL_HEARTBEAT or SKILL_STATUS per skill.
func (u *udpProto) sendBeats(hs []*hostedAgent, typ record.SkillMsgType) {
	for _, h := range hs {
		if !h.canSign {
			continue
		}
		for i := range h.rec.Agent.Skills {
			m := record.SkillMessage{Type: typ, AgentID: h.id(), SkillID: h.rec.Agent.Skills[i].SkillID,
				Status: h.status, Timestamp: u.nextTS()}
			if u.sign(&m) {
				u.send(&m)
			}
		}
	}
}

// unregister sends a signed SKILL_UNREGISTER per skill, and the same again
// 100 ms later (bounded by ctx), as a lost unregister would leave the
// agent listed until the timeout.
func (u *udpProto) unregister(ctx context.Context, hs []*hostedAgent, reason record.UnregisterReason) {
	send := func() {
		for _, h := range hs {
			if !h.canSign {
				continue
			}
			for i := range h.rec.Agent.Skills {
				m := record.SkillMessage{Type: record.MsgSkillUnregister, AgentID: h.id(),
					SkillID: h.rec.Agent.Skills[i].SkillID, Reason: reason, Timestamp: u.nextTS()}
				if u.sign(&m) {
					u.send(&m)
				}
			}
		}
	}
	send()
	if backoff.Sleep(ctx, 100*time.Millisecond) {
		send()
	}
}

// ack multicasts a SKILL_REGISTER_ACK, at most once per second per agent
// and status.
func (u *udpProto) ack(agentID string, st record.AckStatus, text string, now time.Time) {
	if !record.ValidIdent(agentID) {
		return
	}
	if !u.ackDue(ackKey{agent: agentID, st: st}, now) {
		return
	}
	m := record.SkillMessage{Type: record.MsgSkillRegisterAck, AgentID: agentID, Ack: st,
		Message: ackText(text), Timestamp: u.nextTS()}
	if u.send(&m) {
		u.l.count(mechUDP, "ack_sent_"+strings.ToLower(string(st)))
	}
}

// ackDue reports whether the answer k may be sent now (at most one per
// second per agent, type and status) and records it.
func (u *udpProto) ackDue(k ackKey, now time.Time) bool {
	u.mu.Lock()
	if t, ok := u.acks[k]; ok && now.Sub(t) < time.Second {
		u.mu.Unlock()
		return false
	}
	if len(u.acks) >= maxSources {
		for kk, t := range u.acks {
			if now.Sub(t) >= time.Second {
				delete(u.acks, kk)
			}
		}
		if len(u.acks) >= maxSources {
			u.mu.Unlock()
			return false
		}
	}
	u.acks[k] = now
	u.mu.Unlock()
	return true
}

// ackText makes a free-text acknowledgement message safe for the text
// format: printable, without ';', at most 200 bytes.
func ackText(s string) string {
	s = strings.Map(func(r rune) rune {
		if r == ';' || r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	if len(s) > 200 {
		s = s[:200]
		for len(s) > 0 && !utf8ValidTail(s) {
			s = s[:len(s)-1]
		}
	}
	return s
}

func utf8ValidTail(s string) bool {
	return strings.ToValidUTF8(s, "\uFFFD") == s
}

// logRefused logs a refused datagram at debug level, at most once per 10 s
// per source (a burst of 3), so a flood cannot flood the log.
func (u *udpProto) logRefused(src netip.AddrPort, what string, err error) {
	if !u.logs.allow(src.Addr(), time.Now()) {
		return
	}
	if err != nil {
		u.l.log.Debug("LAN datagram refused", "mechanism", mechUDP, "src", src, "why", what, "err", err)
	} else {
		u.l.log.Debug("LAN datagram refused", "mechanism", mechUDP, "src", src, "why", what)
	}
}

// verifyWithAny verifies an agentd datagram with any of the agent's
// accepted keys: the current one, and the previous one during a key
// rotation's grace period.
func verifyWithAny(msg *record.SkillMessage, keys []*ecdsa.PublicKey) error {
	var err error
	for _, k := range keys {
		if err = msg.Verify(k, nil); err == nil {
			return nil
		}
	}
	return err
}
