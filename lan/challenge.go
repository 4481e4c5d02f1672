package lan

import (
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/trust"
)

// Seed-001 peers of other implementations that sign with their own ECDSA
// key (seed 001 §10.1-§10.3). Such a skill cannot be resolved to an agentd
// record, so it proves its key with a certificate and a challenge:
//
//	skill  -> SKILL_REGISTER:…;{timestamp};{certificate};{signature}
//	agentd    checks the chain against the trust store (§10.2) and the
//	          registration's signature with the leaf's key
//	agentd -> CHALLENGE:{agentId};{skillId};{nonce};{timestamp}
//	skill  -> CHALLENGE_RESPONSE:{agentId};{skillId};{nonce};{timestamp};{signature}
//	agentd    checks the signature with the leaf's key, pins the key for
//	          the agent id, registers the skill
//	agentd -> SKILL_REGISTER_ACK:{agentId};SUCCESS;…
//
// From then on the skill's heartbeats, statuses, unregistrations, scene
// joins and plain registrations are verified with the pinned key, and its
// skills are answered as the HMAC ones are (foreign table, agent id
// record.ExternalAgentID("seed001", agentId)).

// ChallengeTimeout is how long a CHALLENGE waits for its response.
const ChallengeTimeout = 10 * time.Second

// maxChallenges bounds the registrations waiting for a response.
const maxChallenges = 256

// challenge is a certificate registration waiting for its response.
type challenge struct {
	nonce   string
	key     *ecdsa.PublicKey
	msg     *record.SkillMessage
	src     netip.AddrPort
	expires time.Time
}

// handleCertRegister checks a SKILL_REGISTER that carries a certificate
// chain and challenges its key (or registers at once when that key is the
// one already proven for the agent).
func (u *udpProto) handleCertRegister(msg *record.SkillMessage, src netip.AddrPort, now time.Time) {
	l := u.l
	ext := record.ExternalAgentID(ForeignNamespace, msg.AgentID)
	if !l.d.Verifier.Allowed(ext) {
		l.count(mechUDP, "not_allowlisted")
		l.reject(mechUDP, trust.ReasonNotAllowlisted)
		u.ack(msg.AgentID, record.AckUnauthorized, msg.SkillID+": not in the allow-list", now)
		return
	}
	chain := make([]*x509.Certificate, 0, len(msg.Certificate))
	for i, c := range msg.Certificate {
		der, err := record.DecodeBase64(c)
		var cert *x509.Certificate
		if err == nil {
			cert, err = x509.ParseCertificate(der)
		}
		if err != nil {
			l.count(mechUDP, "malformed")
			l.reject(mechUDP, trust.ReasonBadCertificate)
			u.ack(msg.AgentID, record.AckInvalid, fmt.Sprintf("%s: certificate[%d] is not a DER X.509 certificate: %v", msg.SkillID, i, err), now)
			return
		}
		chain = append(chain, cert)
	}
	key, err := l.d.Verifier.VerifySkillCertificate(chain, msg.AgentID, msg.SkillID)
	if err != nil {
		l.count(mechUDP, "bad_certificate")
		l.reject(mechUDP, trust.ReasonOf(err))
		u.logRefused(src, "certificate refused", err)
		u.ack(msg.AgentID, record.AckUnauthorized, msg.SkillID+": certificate refused: "+err.Error(), now)
		return
	}
	if err := msg.Verify(key, nil); err != nil {
		l.count(mechUDP, "bad_signature")
		l.reject(mechUDP, trust.ReasonBadSignature)
		u.ack(msg.AgentID, record.AckUnauthorized, msg.SkillID+": the registration is not signed by the certificate's key", now)
		return
	}
	if pinned := l.foreign.key(msg.AgentID); pinned != nil {
		if pinned.Equal(key) {
			u.applyForeign(msg, src, now)
			return
		}
		if !l.d.Verifier.HasChain() {
			// Without a trust store the first proven key stays: another
			// certificate proves nothing more than its own key.
			l.count(mechUDP, "key_mismatch")
			l.reject(mechUDP, trust.ReasonKeyMismatch)
			u.ack(msg.AgentID, record.AckUnauthorized, msg.SkillID+": the agent id is bound to another key", now)
			return
		}
	}
	nonce := make([]byte, 16)
	if _, err := rand.Read(nonce); err != nil {
		return
	}
	c := &challenge{nonce: hex.EncodeToString(nonce), key: key, msg: msg, src: src, expires: now.Add(ChallengeTimeout)}
	k := foreignKey{msg.AgentID, msg.SkillID}
	u.mu.Lock()
	for kk, old := range u.challenges {
		if !now.Before(old.expires) {
			delete(u.challenges, kk)
		}
	}
	if _, ok := u.challenges[k]; !ok && len(u.challenges) >= maxChallenges {
		u.mu.Unlock()
		l.count(mechUDP, "challenges_full")
		return
	}
	if old, ok := u.challenges[k]; ok && now.Sub(old.expires.Add(-ChallengeTimeout)) < time.Second {
		// One challenge a second per skill: a retransmission keeps it.
		u.mu.Unlock()
		return
	}
	u.challenges[k] = c
	u.mu.Unlock()
	m := record.SkillMessage{Type: record.MsgChallenge, AgentID: msg.AgentID, SkillID: msg.SkillID, Nonce: c.nonce, Timestamp: u.nextTS()}
	if u.send(&m) {
		l.count(mechUDP, "sent_challenge")
	}
}

// handleChallengeResponse completes a certificate registration.
func (u *udpProto) handleChallengeResponse(msg *record.SkillMessage, src netip.AddrPort, now time.Time) {
	l := u.l
	k := foreignKey{msg.AgentID, msg.SkillID}
	u.mu.Lock()
	c, ok := u.challenges[k]
	if ok && (c.nonce != msg.Nonce || !now.Before(c.expires)) {
		ok = false
	}
	u.mu.Unlock()
	if !ok {
		// Not ours (another node's nonce), expired, or never asked.
		l.count(mechUDP, "challenge_unknown")
		return
	}
	if d := now.Sub(time.UnixMilli(msg.Timestamp)); d > l.cfg.MaxClockSkew || d < -l.cfg.MaxClockSkew {
		l.count(mechUDP, "stale")
		l.reject(mechUDP, trust.ReasonReplay)
		return
	}
	if msg.SignatureKind() != record.SigECDSA || msg.Verify(c.key, nil) != nil {
		l.count(mechUDP, "bad_signature")
		l.reject(mechUDP, trust.ReasonBadSignature)
		u.ack(msg.AgentID, record.AckUnauthorized, msg.SkillID+": the challenge response is not signed by the certificate's key", now)
		return
	}
	u.mu.Lock()
	if u.challenges[k] == c {
		delete(u.challenges, k)
	}
	u.mu.Unlock()
	l.foreign.pin(msg.AgentID, c.key)
	l.count(mechUDP, "challenge_passed")
	u.applyForeign(c.msg, c.src, now)
}

// unregisterAck answers a SKILL_UNREGISTER (seed 001 §9.2).
func (u *udpProto) unregisterAck(agentID, skillID string, st record.AckStatus, text string, now time.Time) {
	if !record.ValidIdent(agentID) || !record.ValidIdent(skillID) {
		return
	}
	if !u.ackDue(ackKey{agent: agentID + ";" + skillID, st: st, typ: record.MsgSkillUnregisterAck}, now) {
		return
	}
	m := record.SkillMessage{Type: record.MsgSkillUnregisterAck, AgentID: agentID, SkillID: skillID, Ack: st,
		Message: ackText(text), Timestamp: u.nextTS()}
	if u.send(&m) {
		u.l.count(mechUDP, "unregister_ack_sent_"+strings.ToLower(string(st)))
	}
}

// unregisterIDs returns the agentId and skillId of a SKILL_UNREGISTER that
// failed to parse, when both are valid identifiers.
func unregisterIDs(b []byte) (string, string, bool) {
	rest, ok := strings.CutPrefix(string(b), string(record.MsgSkillUnregister)+":")
	if !ok {
		return "", "", false
	}
	f := strings.SplitN(rest, ";", 3)
	if len(f) < 2 {
		return "", "", false
	}
	return f[0], f[1], record.ValidIdent(f[0]) && record.ValidIdent(f[1])
}

// joinScene answers a verified JOIN_SCENE (seed 001 §2.2): st is SUCCESS
// when this node holds the skill, NOT_FOUND otherwise; a success lists the
// scene's members.
func (u *udpProto) joinScene(msg *record.SkillMessage, st record.AckStatus, now time.Time) {
	var members []record.SceneMember
	if st == record.AckSuccess {
		members = u.sceneMembers(msg.SceneID)
	}
	u.sendJoin(msg, st, members, now)
}

// sceneMembers lists the skills of a scene: the agents of the live view
// (Deps.SceneMembers) and the foreign skills, without duplicates.
func (u *udpProto) sceneMembers(scene string) []record.SceneMember {
	l := u.l
	var out []record.SceneMember
	if l.d.SceneMembers != nil {
		out = l.d.SceneMembers(scene)
	}
	out = append(out, l.foreign.sceneMembers(scene, time.Now(), l.cfg.UDP.Timeout.D())...)
	slices.SortFunc(out, func(a, b record.SceneMember) int {
		if c := strings.Compare(a.AgentID, b.AgentID); c != 0 {
			return c
		}
		return strings.Compare(a.SkillID, b.SkillID)
	})
	out = slices.CompactFunc(out, func(a, b record.SceneMember) bool { return a.AgentID == b.AgentID && a.SkillID == b.SkillID })
	var keep []record.SceneMember
	for _, m := range out {
		if record.ValidIdent(m.AgentID) && record.ValidIdent(m.SkillID) && !strings.ContainsAny(m.Endpoint, ";|,") {
			keep = append(keep, m)
		}
	}
	return keep
}

// sendJoin sends a JOIN_SCENE_RESPONSE, dropping members from the end
// until it fits one datagram.
func (u *udpProto) sendJoin(msg *record.SkillMessage, st record.AckStatus, members []record.SceneMember, now time.Time) {
	if !u.ackDue(ackKey{agent: msg.AgentID + ";" + msg.SceneID, st: st, typ: record.MsgJoinSceneResponse}, now) {
		return
	}
	members = members[:min(len(members), record.MaxSceneMembers)]
	m := record.SkillMessage{Type: record.MsgJoinSceneResponse, AgentID: msg.AgentID, SceneID: msg.SceneID,
		GroupID: sceneGroupID(msg.SceneID), Ack: st, Members: members, Timestamp: u.nextTS()}
	for {
		if _, err := m.Format(); err == nil || len(m.Members) == 0 {
			break
		}
		m.Members = m.Members[:len(m.Members)-1]
	}
	if u.send(&m) {
		u.l.count(mechUDP, "join_sent_"+strings.ToLower(string(st)))
	}
}

// sceneGroupID is record.SceneGroupID, or none when that is not a valid
// groupId (a scene id near the length limit).
func sceneGroupID(scene string) string {
	g := record.SceneGroupID(scene)
	if !record.ValidIdent(g) {
		return ""
	}
	return g
}

// key returns the ECDSA key a challenge proved for a foreign agent.
func (t *foreignTable) key(agentID string) *ecdsa.PublicKey {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.keys[agentID]
}

// pin records the key a challenge proved for a foreign agent.
func (t *foreignTable) pin(agentID string, key *ecdsa.PublicKey) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.keys[agentID]; !ok && len(t.keys) >= t.max {
		for k := range t.keys {
			delete(t.keys, k) // an arbitrary one: it challenges again
			break
		}
	}
	t.keys[agentID] = key
}

// joinScene adds a scene to a registered foreign skill and reports SUCCESS,
// or NOT_FOUND when the skill is not registered.
func (t *foreignTable) joinScene(agentID, skillID, scene string, now time.Time) record.AckStatus {
	t.mu.Lock()
	defer t.mu.Unlock()
	f, ok := t.m[foreignKey{agentID, skillID}]
	if !ok || f.gone {
		return record.AckNotFound
	}
	if !slices.Contains(f.skill.Scenes, scene) && len(f.skill.Scenes) < record.MaxScenesPerSkill {
		f.skill.Scenes = append(slices.Clone(f.skill.Scenes), scene)
	}
	f.lastSeen = now
	return record.AckSuccess
}

// sceneMembers lists the live foreign skills of a scene.
func (t *foreignTable) sceneMembers(scene string, now time.Time, alive time.Duration) []record.SceneMember {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []record.SceneMember
	for k, f := range t.m {
		if f.gone || now.Sub(f.lastSeen) > alive || !slices.Contains(f.skill.Scenes, scene) {
			continue
		}
		out = append(out, record.SceneMember{AgentID: k.agent, SkillID: k.skill, Endpoint: f.skill.Endpoint})
	}
	return out
}

// offers reports whether the verified record held for an agentd agent
// lists the skill.
func (t *agentTable) offers(agentID, skillID string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.m[agentID]
	if !ok || e.rec == nil || e.gone {
		return false
	}
	_, has := e.rec.Agent.Skill(skillID)
	return has
}
