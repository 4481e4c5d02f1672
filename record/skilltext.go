package record

import (
	"crypto/ecdsa"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/Masterminds/semver/v3"
)

// The seed-001 text messages carried in UDP datagrams on the LAN (seed 001
// §2, §3, §5.2, §8, §9): "{TYPE}:{payload}", the payload fields separated by
// ';', lists inside a field separated by ','. The layouts are:
//
//	SKILL_REGISTER:{agentId};{skillId};{version};{skillType};{endpoint};{capabilities};{scenes};{timestamp};{signature}
//	SKILL_REGISTER_ACK:{agentId};{status};{message};{timestamp}
//	SKILL_UNREGISTER:{agentId};{skillId};{reason};{timestamp};{signature}
//	SKILL_DISCOVER:{requesterId};{capabilityFilter};{sceneFilter};{typeFilter};{timestamp}
//	SKILL_DISCOVER_RESPONSE:{requesterId};{skills};{timestamp}
//	SKILL_HEARTBEAT:{agentId};{skillId};{status};{timestamp};{signature}
//	SKILL_STATUS:{agentId};{skillId};{status};{timestamp};{signature}
//
// and, for what seed 001 names without a layout (§2.2, §9.2, §10.3),
// agentd's layouts in the same style:
//
//	SKILL_REGISTER:{agentId};{skillId};{version};{skillType};{endpoint};{capabilities};{scenes};{timestamp};{certificate};{signature}
//	CHALLENGE:{agentId};{skillId};{nonce};{timestamp}
//	CHALLENGE_RESPONSE:{agentId};{skillId};{nonce};{timestamp};{signature}
//	SKILL_UNREGISTER_ACK:{agentId};{skillId};{status};{message};{timestamp}
//	JOIN_SCENE:{agentId};{skillId};{sceneId};{timestamp};{signature}
//	JOIN_SCENE_RESPONSE:{agentId};{sceneId};{groupId};{status};{members};{timestamp}
//
// The ten-field SKILL_REGISTER is the registration "with certificate" of
// §10.3: {certificate} is the X.509 chain, leaf first, each certificate
// the standard base64 of its DER, joined by ','. The receiver answers a
// CHALLENGE with a fresh {nonce} (32 lowercase hex digits); the skill
// answers with a CHALLENGE_RESPONSE signed by the certificate's key. In a
// JOIN_SCENE_RESPONSE each member is agentId|skillId|endpoint and the
// members are joined by ','.
//
// SKILL_STATUS is named by seed 001 §5.2 without a layout; agentd gives it
// the heartbeat's. In a discovery response each skill is
// skillId|version|endpoint|capabilities|scenes and the skills are joined by
// ';' between the requester id and the timestamp, so the response is parsed
// by position from both ends; the acknowledgement's free-text message may
// contain ';' for the same reason. timestamp is epoch milliseconds.
//
// The parser accepts only the canonical form that Format writes (decimal
// timestamps without leading zeros, no empty list elements), so
// Format(Parse(line)) == line and a signature can be checked against the
// re-formatted text.

// SkillMsgType is the type prefix of a seed-001 text message.
type SkillMsgType string

// The seven message types of seed 001 §5.2.
const (
	MsgSkillRegister         SkillMsgType = "SKILL_REGISTER"
	MsgSkillRegisterAck      SkillMsgType = "SKILL_REGISTER_ACK"
	MsgSkillUnregister       SkillMsgType = "SKILL_UNREGISTER"
	MsgSkillDiscover         SkillMsgType = "SKILL_DISCOVER"
	MsgSkillDiscoverResponse SkillMsgType = "SKILL_DISCOVER_RESPONSE"
	MsgSkillHeartbeat        SkillMsgType = "SKILL_HEARTBEAT"
	MsgSkillStatus           SkillMsgType = "SKILL_STATUS"
)

// The messages seed 001 names in its flows without a layout: the
// certificate challenge (§10.3), the unregistration acknowledgement
// (§9.2) and joining a scene (§2.2).
const (
	MsgChallenge          SkillMsgType = "CHALLENGE"
	MsgChallengeResponse  SkillMsgType = "CHALLENGE_RESPONSE"
	MsgSkillUnregisterAck SkillMsgType = "SKILL_UNREGISTER_ACK"
	MsgJoinScene          SkillMsgType = "JOIN_SCENE"
	MsgJoinSceneResponse  SkillMsgType = "JOIN_SCENE_RESPONSE"
)

// Valid reports whether t is one of the seed-001 message types.
func (t SkillMsgType) Valid() bool {
	switch t {
	case MsgSkillRegister, MsgSkillRegisterAck, MsgSkillUnregister, MsgSkillDiscover,
		MsgSkillDiscoverResponse, MsgSkillHeartbeat, MsgSkillStatus,
		MsgChallenge, MsgChallengeResponse, MsgSkillUnregisterAck, MsgJoinScene, MsgJoinSceneResponse:
		return true
	}
	return false
}

// Signed reports whether the layout of t ends with a signature field. The
// acknowledgement, the discovery request and the discovery response have
// none in seed 001: they are hints, and whoever acts on one must verify the
// signed registration or record it points to.
func (t SkillMsgType) Signed() bool {
	switch t {
	case MsgSkillRegister, MsgSkillUnregister, MsgSkillHeartbeat, MsgSkillStatus, MsgChallengeResponse, MsgJoinScene:
		return true
	}
	return false
}

// AckStatus is the status of a SKILL_REGISTER_ACK (seed 001 §2.3).
type AckStatus string

// The acknowledgement statuses.
const (
	AckSuccess      AckStatus = "SUCCESS"
	AckDuplicate    AckStatus = "DUPLICATE"
	AckInvalid      AckStatus = "INVALID"
	AckUnauthorized AckStatus = "UNAUTHORIZED"
	// AckNotFound answers an unregistration or a scene join of a skill
	// the receiver does not hold (SKILL_UNREGISTER_ACK,
	// JOIN_SCENE_RESPONSE; not SKILL_REGISTER_ACK).
	AckNotFound AckStatus = "NOT_FOUND"
)

// Valid reports whether s is one of the acknowledgement statuses.
func (s AckStatus) Valid() bool {
	switch s {
	case AckSuccess, AckDuplicate, AckInvalid, AckUnauthorized, AckNotFound:
		return true
	}
	return false
}

// SceneMember is one member of a JOIN_SCENE_RESPONSE.
type SceneMember struct {
	AgentID  string
	SkillID  string
	Endpoint string
}

// Limits of the certificate form of SKILL_REGISTER.
const (
	// MaxSkillCertificates bounds the chain a SKILL_REGISTER carries.
	MaxSkillCertificates = 4
	// MaxSceneMembers bounds the members of one JOIN_SCENE_RESPONSE.
	MaxSceneMembers = 64
)

// Limits of the text messages.
const (
	// MaxSkillLineBytes bounds one message: it must fit one UDP datagram
	// without IP fragmentation trouble on common links, and the receive
	// buffer of the LAN listener is this size.
	MaxSkillLineBytes = 8 << 10
	// MaxDiscoverSkills bounds the skills of one SKILL_DISCOVER_RESPONSE;
	// PackDiscoverResponse splits longer answers.
	MaxDiscoverSkills = 64
	// MaxSkillSignatureLen bounds the signature field.
	MaxSkillSignatureLen = 512
)

// SkillEntry is one skill of a SKILL_DISCOVER_RESPONSE.
type SkillEntry struct {
	SkillID      string
	Version      string
	Endpoint     string
	Capabilities []string
	Scenes       []string
}

// SkillMessage is one seed-001 text message. Which fields are used depends
// on Type (see the layouts in the package documentation); the others are
// zero.
type SkillMessage struct {
	Type SkillMsgType
	// AgentID is {agentId}, or {requesterId} for SKILL_DISCOVER and
	// SKILL_DISCOVER_RESPONSE.
	AgentID string
	// SkillID is {skillId} (REGISTER, UNREGISTER, HEARTBEAT, STATUS).
	SkillID string
	// Version, SkillType, Endpoint, Capabilities and Scenes are the
	// SKILL_REGISTER fields.
	Version      string
	SkillType    SkillType
	Endpoint     string
	Capabilities []string
	Scenes       []string
	// CapabilityFilter, SceneFilter and TypeFilter are the SKILL_DISCOVER
	// filters, each a comma-separated list on the wire; empty matches any.
	CapabilityFilter []string
	SceneFilter      []string
	TypeFilter       []SkillType
	// Status is the health of SKILL_HEARTBEAT and SKILL_STATUS.
	Status Status
	// Ack and Message are the SKILL_REGISTER_ACK status and free text.
	Ack     AckStatus
	Message string
	// Reason is the SKILL_UNREGISTER reason.
	Reason UnregisterReason
	// Skills are the SKILL_DISCOVER_RESPONSE entries.
	Skills []SkillEntry
	// Certificate is the X.509 chain of a SKILL_REGISTER with
	// certificate (§10.3): the base64 DER of each, leaf first.
	Certificate []string
	// Nonce is the CHALLENGE and CHALLENGE_RESPONSE nonce.
	Nonce string
	// SceneID is the JOIN_SCENE and JOIN_SCENE_RESPONSE scene; GroupID,
	// Members and Ack the response's group, members and status.
	SceneID string
	GroupID string
	Members []SceneMember
	// Timestamp is epoch milliseconds.
	Timestamp int64
	// Signature is the opaque signature field of the signed types: base64
	// ECDSA (SHA256withECDSA, ASN.1 DER) or lowercase hex HMAC-SHA256 over
	// SignedText. Empty when unsigned.
	Signature string
}

var (
	timestampRe    = regexp.MustCompile(`^(0|[1-9][0-9]{0,18})$`)
	skillSigRe     = regexp.MustCompile(`^[A-Za-z0-9+/=._-]*$`)
	hmacSigRe      = regexp.MustCompile(`^[0-9a-f]{64}$`)
	nonceRe        = regexp.MustCompile(`^[0-9a-f]{32}$`)
	skillFieldSeps = ";|,"
)

// ParseSkillMessage parses one seed-001 text message. One trailing "\n" or
// "\r\n" is ignored; any other control character is refused. The signature
// is an opaque field here: it is checked by Verify, so the seed's examples
// with placeholder signatures parse.
func ParseSkillMessage(line string) (*SkillMessage, error) {
	if len(line) > MaxSkillLineBytes+2 {
		return nil, fmt.Errorf("%w: message is %d bytes, limit %d", ErrTooLarge, len(line), MaxSkillLineBytes)
	}
	if strings.HasSuffix(line, "\r\n") {
		line = line[:len(line)-2]
	} else {
		line = strings.TrimSuffix(line, "\n")
	}
	if len(line) > MaxSkillLineBytes {
		return nil, fmt.Errorf("%w: message is %d bytes, limit %d", ErrTooLarge, len(line), MaxSkillLineBytes)
	}
	if !Printable(line) {
		return nil, fieldErr("message", "must be UTF-8 without control characters")
	}
	typ, payload, ok := strings.Cut(line, ":")
	if !ok {
		return nil, fieldErr("type", "missing ':' after the message type")
	}
	m := &SkillMessage{Type: SkillMsgType(typ)}
	if !m.Type.Valid() {
		return nil, fieldErr("type", "%q is not a seed-001 message type", trunc(typ))
	}
	f := strings.Split(payload, ";")
	want := map[SkillMsgType]int{
		MsgSkillRegister:   9,
		MsgSkillUnregister: 5,
		MsgSkillDiscover:   5,
		MsgSkillHeartbeat:  5,
		MsgSkillStatus:     5,
	}
	want[MsgChallenge], want[MsgChallengeResponse], want[MsgJoinScene], want[MsgJoinSceneResponse] = 4, 5, 5, 6
	if m.Type == MsgSkillRegister && len(f) == 10 {
		// The certificate form (§10.3).
		var err error
		if m.Certificate, err = parseList(f[8], "certificate"); err != nil {
			return nil, err
		}
		if len(m.Certificate) == 0 {
			return nil, fieldErr("certificate", "is empty")
		}
		f = append(f[:8], f[9])
	}
	if n, fixed := want[m.Type]; fixed && len(f) != n {
		return nil, fieldErr("payload", "%s has %d ';'-separated fields, want %d", m.Type, len(f), n)
	}
	var err error
	switch m.Type {
	case MsgChallenge, MsgChallengeResponse:
		m.AgentID, m.SkillID, m.Nonce = f[0], f[1], f[2]
		if m.Timestamp, err = parseTimestamp(f[3]); err != nil {
			return nil, err
		}
		if m.Type == MsgChallengeResponse {
			m.Signature = f[4]
		}
	case MsgJoinScene:
		m.AgentID, m.SkillID, m.SceneID = f[0], f[1], f[2]
		if m.Timestamp, err = parseTimestamp(f[3]); err != nil {
			return nil, err
		}
		m.Signature = f[4]
	case MsgJoinSceneResponse:
		m.AgentID, m.SceneID, m.GroupID, m.Ack = f[0], f[1], f[2], AckStatus(f[3])
		members, err := parseList(f[4], "members")
		if err != nil {
			return nil, err
		}
		if len(members) > MaxSceneMembers {
			return nil, fieldErr("members", "has %d members, more than %d", len(members), MaxSceneMembers)
		}
		for i, mem := range members {
			p := strings.Split(mem, "|")
			if len(p) != 3 {
				return nil, fieldErr(fmt.Sprintf("members[%d]", i), "has %d '|'-separated fields, want 3 (agentId|skillId|endpoint)", len(p))
			}
			m.Members = append(m.Members, SceneMember{AgentID: p[0], SkillID: p[1], Endpoint: p[2]})
		}
		if m.Timestamp, err = parseTimestamp(f[5]); err != nil {
			return nil, err
		}
	case MsgSkillUnregisterAck:
		if len(f) < 5 {
			return nil, fieldErr("payload", "%s has %d ';'-separated fields, want at least 5", m.Type, len(f))
		}
		m.AgentID, m.SkillID, m.Ack = f[0], f[1], AckStatus(f[2])
		m.Message = strings.Join(f[3:len(f)-1], ";")
		if m.Timestamp, err = parseTimestamp(f[len(f)-1]); err != nil {
			return nil, err
		}
	case MsgSkillRegister:
		m.AgentID, m.SkillID, m.Version, m.SkillType, m.Endpoint = f[0], f[1], f[2], SkillType(f[3]), f[4]
		if m.Capabilities, err = parseList(f[5], "capabilities"); err != nil {
			return nil, err
		}
		if m.Scenes, err = parseList(f[6], "scenes"); err != nil {
			return nil, err
		}
		if m.Timestamp, err = parseTimestamp(f[7]); err != nil {
			return nil, err
		}
		m.Signature = f[8]
	case MsgSkillRegisterAck:
		if len(f) < 4 {
			return nil, fieldErr("payload", "%s has %d ';'-separated fields, want at least 4", m.Type, len(f))
		}
		m.AgentID, m.Ack = f[0], AckStatus(f[1])
		m.Message = strings.Join(f[2:len(f)-1], ";")
		if m.Timestamp, err = parseTimestamp(f[len(f)-1]); err != nil {
			return nil, err
		}
	case MsgSkillUnregister:
		m.AgentID, m.SkillID, m.Reason = f[0], f[1], UnregisterReason(f[2])
		if m.Timestamp, err = parseTimestamp(f[3]); err != nil {
			return nil, err
		}
		m.Signature = f[4]
	case MsgSkillHeartbeat, MsgSkillStatus:
		m.AgentID, m.SkillID, m.Status = f[0], f[1], Status(f[2])
		if m.Timestamp, err = parseTimestamp(f[3]); err != nil {
			return nil, err
		}
		m.Signature = f[4]
	case MsgSkillDiscover:
		m.AgentID = f[0]
		if m.CapabilityFilter, err = parseList(f[1], "capabilityFilter"); err != nil {
			return nil, err
		}
		if m.SceneFilter, err = parseList(f[2], "sceneFilter"); err != nil {
			return nil, err
		}
		types, err := parseList(f[3], "typeFilter")
		if err != nil {
			return nil, err
		}
		for _, t := range types {
			m.TypeFilter = append(m.TypeFilter, SkillType(t))
		}
		if m.Timestamp, err = parseTimestamp(f[4]); err != nil {
			return nil, err
		}
	case MsgSkillDiscoverResponse:
		if len(f) < 3 {
			return nil, fieldErr("payload", "%s has %d ';'-separated fields, want at least 3 (an empty skill list is written as an empty field)", m.Type, len(f))
		}
		m.AgentID = f[0]
		if m.Timestamp, err = parseTimestamp(f[len(f)-1]); err != nil {
			return nil, err
		}
		entries := f[1 : len(f)-1]
		if len(entries) == 1 && entries[0] == "" {
			entries = nil
		}
		if len(entries) > MaxDiscoverSkills {
			return nil, fieldErr("skills", "has %d skills, more than %d", len(entries), MaxDiscoverSkills)
		}
		for i, e := range entries {
			se, err := parseSkillEntry(e, fmt.Sprintf("skills[%d]", i))
			if err != nil {
				return nil, err
			}
			m.Skills = append(m.Skills, se)
		}
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return m, nil
}

func parseSkillEntry(s, path string) (SkillEntry, error) {
	p := strings.Split(s, "|")
	if len(p) != 5 {
		return SkillEntry{}, fieldErr(path, "has %d '|'-separated fields, want 5 (skillId|version|endpoint|capabilities|scenes)", len(p))
	}
	e := SkillEntry{SkillID: p[0], Version: p[1], Endpoint: p[2]}
	var err error
	if e.Capabilities, err = parseList(p[3], path+".capabilities"); err != nil {
		return SkillEntry{}, err
	}
	if e.Scenes, err = parseList(p[4], path+".scenes"); err != nil {
		return SkillEntry{}, err
	}
	return e, nil
}

// parseList splits a ','-separated list; "" is the empty list. Elements are
// checked by Validate.
func parseList(s, field string) ([]string, error) {
	if s == "" {
		return nil, nil
	}
	out := strings.Split(s, ",")
	for i, e := range out {
		if e == "" {
			return nil, fieldErr(fmt.Sprintf("%s[%d]", field, i), "is empty")
		}
	}
	return out, nil
}

func parseTimestamp(s string) (int64, error) {
	if !timestampRe.MatchString(s) {
		return 0, fieldErr("timestamp", "%q is not epoch milliseconds (decimal digits, no leading zeros)", trunc(s))
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fieldErr("timestamp", "%q is out of range", trunc(s))
	}
	return v, nil
}

// Validate checks the fields that the message's type uses and that the
// others are empty, naming the offending field with the seed's names.
func (m *SkillMessage) Validate() error {
	if !m.Type.Valid() {
		return fieldErr("type", "%q is not a seed-001 message type", trunc(string(m.Type)))
	}
	idField := "agentId"
	if m.Type == MsgSkillDiscover || m.Type == MsgSkillDiscoverResponse {
		idField = "requesterId"
	}
	if !ValidIdent(m.AgentID) {
		return fieldErr(idField, "%q must match %s and be 1-%d bytes", trunc(m.AgentID), identRe, MaxIDLen)
	}
	if m.Timestamp < 0 {
		return fieldErr("timestamp", "must not be negative")
	}
	if !m.Type.Signed() && m.Signature != "" {
		return fieldErr("signature", "%s has no signature field", m.Type)
	}
	if len(m.Signature) > MaxSkillSignatureLen || !skillSigRe.MatchString(m.Signature) {
		return fieldErr("signature", "must be at most %d bytes of base64 or hex", MaxSkillSignatureLen)
	}
	uses := func(f string) bool { return skillFieldUse[m.Type][f] }
	if err := m.checkUnused(uses); err != nil {
		return err
	}
	switch m.Type {
	case MsgSkillRegister, MsgSkillUnregister, MsgSkillHeartbeat, MsgSkillStatus,
		MsgChallenge, MsgChallengeResponse, MsgSkillUnregisterAck, MsgJoinScene:
		if !ValidIdent(m.SkillID) {
			return fieldErr("skillId", "%q must match %s and be 1-%d bytes", trunc(m.SkillID), identRe, MaxIDLen)
		}
	}
	switch m.Type {
	case MsgSkillRegister:
		if err := checkSemver("version", m.Version); err != nil {
			return err
		}
		if !m.SkillType.Valid() {
			return fieldErr("skillType", "%q is not one of enterprise-skill, tool-skill, integration-skill", trunc(string(m.SkillType)))
		}
		if err := checkTextEndpoint("endpoint", m.Endpoint); err != nil {
			return err
		}
		if len(m.Capabilities) == 0 {
			return fieldErr("capabilities", "a skill needs at least one capability")
		}
		if err := checkIdentList("capabilities", m.Capabilities, MaxCapabilitiesPer); err != nil {
			return err
		}
		if err := checkIdentList("scenes", m.Scenes, MaxScenesPerSkill); err != nil {
			return err
		}
		if len(m.Certificate) > MaxSkillCertificates {
			return fieldErr("certificate", "has %d certificates, more than %d", len(m.Certificate), MaxSkillCertificates)
		}
		for i, c := range m.Certificate {
			if len(c) > 4*MaxCertificateBytes/3 {
				return fieldErr(fmt.Sprintf("certificate[%d]", i), "is longer than %d bytes", 4*MaxCertificateBytes/3)
			}
			if _, err := DecodeBase64(c); err != nil {
				return fieldErr(fmt.Sprintf("certificate[%d]", i), "is %v", err)
			}
		}
	case MsgChallenge, MsgChallengeResponse:
		if !nonceRe.MatchString(m.Nonce) {
			return fieldErr("nonce", "must be 32 lowercase hex digits")
		}
	case MsgJoinScene:
		if !ValidIdent(m.SceneID) {
			return fieldErr("sceneId", "%q must match %s and be 1-%d bytes", trunc(m.SceneID), identRe, MaxIDLen)
		}
	case MsgJoinSceneResponse:
		if !ValidIdent(m.SceneID) {
			return fieldErr("sceneId", "%q must match %s and be 1-%d bytes", trunc(m.SceneID), identRe, MaxIDLen)
		}
		if m.GroupID != "" && !ValidIdent(m.GroupID) {
			return fieldErr("groupId", "%q must match %s and be at most %d bytes", trunc(m.GroupID), identRe, MaxIDLen)
		}
		if m.Ack != AckSuccess && m.Ack != AckNotFound && m.Ack != AckUnauthorized && m.Ack != AckInvalid {
			return fieldErr("status", "%q is not one of SUCCESS, NOT_FOUND, UNAUTHORIZED, INVALID", trunc(string(m.Ack)))
		}
		if len(m.Members) > MaxSceneMembers {
			return fieldErr("members", "has %d members, more than %d", len(m.Members), MaxSceneMembers)
		}
		for i, mem := range m.Members {
			path := fmt.Sprintf("members[%d]", i)
			if !ValidIdent(mem.AgentID) || !ValidIdent(mem.SkillID) {
				return fieldErr(path, "agentId and skillId must match %s and be 1-%d bytes", identRe, MaxIDLen)
			}
			if err := checkTextEndpoint(path+".endpoint", mem.Endpoint); err != nil {
				return err
			}
		}
	case MsgSkillUnregisterAck:
		if m.Ack != AckSuccess && m.Ack != AckNotFound && m.Ack != AckUnauthorized && m.Ack != AckInvalid {
			return fieldErr("status", "%q is not one of SUCCESS, NOT_FOUND, UNAUTHORIZED, INVALID", trunc(string(m.Ack)))
		}
		if len(m.Message) > MaxTextLen || !Printable(m.Message) {
			return fieldErr("message", "must be printable UTF-8 of at most %d bytes", MaxTextLen)
		}
	case MsgSkillRegisterAck:
		if !m.Ack.Valid() || m.Ack == AckNotFound {
			return fieldErr("status", "%q is not one of SUCCESS, DUPLICATE, INVALID, UNAUTHORIZED", trunc(string(m.Ack)))
		}
		if len(m.Message) > MaxTextLen || !Printable(m.Message) {
			return fieldErr("message", "must be printable UTF-8 of at most %d bytes", MaxTextLen)
		}
	case MsgSkillUnregister:
		if !m.Reason.Valid() {
			return fieldErr("reason", "%q is not one of SHUTDOWN, ERROR, MAINTENANCE, UPGRADE", trunc(string(m.Reason)))
		}
	case MsgSkillHeartbeat, MsgSkillStatus:
		if !m.Status.Valid() {
			return fieldErr("status", "%q is not one of HEALTHY, DEGRADED, UNHEALTHY, MAINTENANCE", trunc(string(m.Status)))
		}
	case MsgSkillDiscover:
		if err := checkIdentList("capabilityFilter", m.CapabilityFilter, MaxCapabilitiesPer); err != nil {
			return err
		}
		if err := checkIdentList("sceneFilter", m.SceneFilter, MaxScenesPerSkill); err != nil {
			return err
		}
		if len(m.TypeFilter) > 3 {
			return fieldErr("typeFilter", "has %d types, there are 3", len(m.TypeFilter))
		}
		for i, t := range m.TypeFilter {
			if !t.Valid() {
				return fieldErr(fmt.Sprintf("typeFilter[%d]", i), "%q is not one of enterprise-skill, tool-skill, integration-skill", trunc(string(t)))
			}
		}
	case MsgSkillDiscoverResponse:
		if len(m.Skills) > MaxDiscoverSkills {
			return fieldErr("skills", "has %d skills, more than %d", len(m.Skills), MaxDiscoverSkills)
		}
		for i, e := range m.Skills {
			if err := e.validate(fmt.Sprintf("skills[%d]", i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// skillFieldUse lists, per type, the optional fields the layout has; the
// check refuses a message that sets a field its type cannot carry, so that
// nothing set by the caller is silently dropped by Format.
var skillFieldUse = map[SkillMsgType]map[string]bool{
	MsgSkillRegister:         {"skillId": true, "version": true, "skillType": true, "endpoint": true, "capabilities": true, "scenes": true, "certificate": true},
	MsgSkillRegisterAck:      {"status": true, "message": true},
	MsgSkillUnregister:       {"skillId": true, "reason": true},
	MsgSkillDiscover:         {"capabilityFilter": true, "sceneFilter": true, "typeFilter": true},
	MsgSkillDiscoverResponse: {"skills": true},
	MsgSkillHeartbeat:        {"skillId": true, "status": true},
	MsgSkillStatus:           {"skillId": true, "status": true},
	MsgChallenge:             {"skillId": true, "nonce": true},
	MsgChallengeResponse:     {"skillId": true, "nonce": true},
	MsgSkillUnregisterAck:    {"skillId": true, "status": true, "message": true},
	MsgJoinScene:             {"skillId": true, "sceneId": true},
	MsgJoinSceneResponse:     {"sceneId": true, "groupId": true, "status": true, "members": true},
}

func (m *SkillMessage) checkUnused(uses func(string) bool) error {
	set := []struct {
		name string
		set  bool
	}{
		{"skillId", m.SkillID != ""},
		{"version", m.Version != ""},
		{"skillType", m.SkillType != ""},
		{"endpoint", m.Endpoint != ""},
		{"capabilities", len(m.Capabilities) > 0},
		{"scenes", len(m.Scenes) > 0},
		{"capabilityFilter", len(m.CapabilityFilter) > 0},
		{"sceneFilter", len(m.SceneFilter) > 0},
		{"typeFilter", len(m.TypeFilter) > 0},
		{"status", m.Status != "" || m.Ack != ""},
		{"message", m.Message != ""},
		{"reason", m.Reason != ""},
		{"skills", len(m.Skills) > 0},
		{"certificate", len(m.Certificate) > 0},
		{"nonce", m.Nonce != ""},
		{"sceneId", m.SceneID != ""},
		{"groupId", m.GroupID != ""},
		{"members", len(m.Members) > 0},
	}
	for _, s := range set {
		if s.set && !uses(s.name) {
			return fieldErr(s.name, "%s has no %s field", m.Type, s.name)
		}
	}
	acks := m.Type == MsgSkillRegisterAck || m.Type == MsgSkillUnregisterAck || m.Type == MsgJoinSceneResponse
	if m.Ack != "" && !acks {
		return fieldErr("status", "%s carries a health status, not an acknowledgement status", m.Type)
	}
	if m.Status != "" && acks {
		return fieldErr("status", "%s carries an acknowledgement status (Ack), not a health status", m.Type)
	}
	return nil
}

func (e *SkillEntry) validate(path string) error {
	if !ValidIdent(e.SkillID) {
		return fieldErr(path+".skillId", "%q must match %s and be 1-%d bytes", trunc(e.SkillID), identRe, MaxIDLen)
	}
	if err := checkSemver(path+".version", e.Version); err != nil {
		return err
	}
	if err := checkTextEndpoint(path+".endpoint", e.Endpoint); err != nil {
		return err
	}
	if len(e.Capabilities) == 0 {
		return fieldErr(path+".capabilities", "a skill needs at least one capability")
	}
	if err := checkIdentList(path+".capabilities", e.Capabilities, MaxCapabilitiesPer); err != nil {
		return err
	}
	return checkIdentList(path+".scenes", e.Scenes, MaxScenesPerSkill)
}

func checkSemver(field, v string) error {
	if v == "" {
		return fieldErr(field, "is required")
	}
	if len(v) > MaxShortTextLen {
		return fieldErr(field, "is longer than %d bytes", MaxShortTextLen)
	}
	if _, err := semver.StrictNewVersion(v); err != nil {
		return fieldErr(field, "%q is not a semantic version (MAJOR.MINOR.PATCH): %v", trunc(v), err)
	}
	return nil
}

func checkTextEndpoint(field, ep string) error {
	if len(ep) > MaxEndpointLen || !Printable(ep) || strings.ContainsAny(ep, skillFieldSeps) {
		return fieldErr(field, "must be printable, at most %d bytes, without ; | or ,", MaxEndpointLen)
	}
	return nil
}

func checkIdentList(field string, l []string, max int) error {
	if len(l) > max {
		return fieldErr(field, "has %d entries, more than %d", len(l), max)
	}
	for i, s := range l {
		if !ValidIdent(s) {
			return fieldErr(fmt.Sprintf("%s[%d]", field, i), "%q must match %s and be 1-%d bytes", trunc(s), identRe, MaxIDLen)
		}
	}
	return nil
}

// Format validates m and returns its text in the seed-001 layout.
func (m *SkillMessage) Format() (string, error) {
	body, err := m.body()
	if err != nil {
		return "", err
	}
	if m.Type.Signed() {
		body += ";" + m.Signature
	}
	if len(body) > MaxSkillLineBytes {
		return "", fmt.Errorf("%w: %s is %d bytes, limit %d", ErrTooLarge, m.Type, len(body), MaxSkillLineBytes)
	}
	return body, nil
}

// SignedText is the text a signature covers: the message as Format writes
// it without the final ";{signature}". It fails for types without a
// signature field.
func (m *SkillMessage) SignedText() (string, error) {
	if !m.Type.Signed() {
		return "", fmt.Errorf("%w: %s has no signature field", ErrUnsigned, m.Type)
	}
	return m.body()
}

// body formats everything but the signature field.
func (m *SkillMessage) body() (string, error) {
	if err := m.Validate(); err != nil {
		return "", err
	}
	var f []string
	ts := strconv.FormatInt(m.Timestamp, 10)
	switch m.Type {
	case MsgSkillRegister:
		f = []string{m.AgentID, m.SkillID, m.Version, string(m.SkillType), m.Endpoint,
			strings.Join(m.Capabilities, ","), strings.Join(m.Scenes, ","), ts}
		if len(m.Certificate) > 0 {
			f = append(f, strings.Join(m.Certificate, ","))
		}
	case MsgChallenge, MsgChallengeResponse:
		f = []string{m.AgentID, m.SkillID, m.Nonce, ts}
	case MsgJoinScene:
		f = []string{m.AgentID, m.SkillID, m.SceneID, ts}
	case MsgJoinSceneResponse:
		members := make([]string, len(m.Members))
		for i, mem := range m.Members {
			members[i] = mem.AgentID + "|" + mem.SkillID + "|" + mem.Endpoint
		}
		f = []string{m.AgentID, m.SceneID, m.GroupID, string(m.Ack), strings.Join(members, ","), ts}
	case MsgSkillUnregisterAck:
		f = []string{m.AgentID, m.SkillID, string(m.Ack), m.Message, ts}
	case MsgSkillRegisterAck:
		f = []string{m.AgentID, string(m.Ack), m.Message, ts}
	case MsgSkillUnregister:
		f = []string{m.AgentID, m.SkillID, string(m.Reason), ts}
	case MsgSkillHeartbeat, MsgSkillStatus:
		f = []string{m.AgentID, m.SkillID, string(m.Status), ts}
	case MsgSkillDiscover:
		types := make([]string, len(m.TypeFilter))
		for i, t := range m.TypeFilter {
			types[i] = string(t)
		}
		f = []string{m.AgentID, strings.Join(m.CapabilityFilter, ","), strings.Join(m.SceneFilter, ","), strings.Join(types, ","), ts}
	case MsgSkillDiscoverResponse:
		f = []string{m.AgentID}
		if len(m.Skills) == 0 {
			f = append(f, "")
		}
		for _, e := range m.Skills {
			f = append(f, e.format())
		}
		f = append(f, ts)
	}
	return string(m.Type) + ":" + strings.Join(f, ";"), nil
}

func (e *SkillEntry) format() string {
	return strings.Join([]string{e.SkillID, e.Version, e.Endpoint, strings.Join(e.Capabilities, ","), strings.Join(e.Scenes, ",")}, "|")
}

// SkillSigKind is the form of a seed-001 signature field.
type SkillSigKind int

// Signature forms, told apart by their text: 64 lowercase hex digits are an
// HMAC-SHA256; anything else non-empty is taken as base64 ECDSA (an ASN.1
// DER ECDSA signature starts with 0x30, so its base64 starts with 'M', which
// is not a hex digit).
const (
	SigNone SkillSigKind = iota
	SigECDSA
	SigHMAC
)

// SignatureKind reports the form of m.Signature.
func (m *SkillMessage) SignatureKind() SkillSigKind {
	switch {
	case m.Signature == "":
		return SigNone
	case hmacSigRe.MatchString(m.Signature):
		return SigHMAC
	}
	return SigECDSA
}

// SignECDSA signs SignedText with the agent key (SHA256withECDSA, seed 001
// §10.1) and sets Signature to the base64 of the ASN.1 DER signature.
func (m *SkillMessage) SignECDSA(key *ecdsa.PrivateKey) error {
	text, err := m.SignedText()
	if err != nil {
		return err
	}
	sig, err := SignBytes(key, []byte(text))
	if err != nil {
		return err
	}
	m.Signature = base64.StdEncoding.EncodeToString(sig)
	return nil
}

// SignHMAC sets Signature to the lowercase hex HMAC-SHA256 of SignedText
// under a shared key (the seed's "HMAC signature for verification").
func (m *SkillMessage) SignHMAC(sharedKey []byte) error {
	if len(sharedKey) == 0 {
		return fmt.Errorf("%w: empty HMAC key", ErrUnsigned)
	}
	text, err := m.SignedText()
	if err != nil {
		return err
	}
	m.Signature = hmacHex(sharedKey, text)
	return nil
}

func hmacHex(key []byte, text string) string {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(text))
	return hex.EncodeToString(h.Sum(nil))
}

// Verify checks the signature, choosing the scheme by its form: an HMAC
// signature with sharedKey, an ECDSA signature with pub. It returns
// ErrUnsigned when the message has no signature (or its type has no
// signature field) and ErrBadSignature when it does not verify, including
// when the key its form needs is not given.
func (m *SkillMessage) Verify(pub *ecdsa.PublicKey, sharedKey []byte) error {
	text, err := m.SignedText()
	if err != nil {
		return err
	}
	switch m.SignatureKind() {
	case SigNone:
		return fmt.Errorf("%w: %s without signature", ErrUnsigned, m.Type)
	case SigHMAC:
		if len(sharedKey) == 0 {
			return fmt.Errorf("%w: HMAC signature but no shared key is configured", ErrBadSignature)
		}
		if !hmac.Equal([]byte(hmacHex(sharedKey, text)), []byte(m.Signature)) {
			return ErrBadSignature
		}
		return nil
	}
	if pub == nil {
		return fmt.Errorf("%w: ECDSA signature but the agent key is unknown", ErrBadSignature)
	}
	sig, err := DecodeBase64(m.Signature)
	if err != nil {
		return fmt.Errorf("%w: signature is %v", ErrBadSignature, err)
	}
	if !verifyBytesAnyS(pub, []byte(text), sig) {
		return ErrBadSignature
	}
	return nil
}

// SkillsFromAgent returns one unsigned SKILL_REGISTER per skill of the
// agent, so that the LAN code can announce each: the skill's endpoint, or
// the agent's transport endpoint when the skill has none (and it can be
// carried in the text form), its capability ids and scenes, and the
// record's issued_at as timestamp. Set Timestamp anew and sign before each
// broadcast.
func SkillsFromAgent(a *Agent) []SkillMessage {
	var ts int64
	if t := a.Issued(); !t.IsZero() && t.UnixMilli() > 0 {
		ts = t.UnixMilli()
	}
	out := make([]SkillMessage, 0, len(a.Skills))
	for i := range a.Skills {
		s := &a.Skills[i]
		out = append(out, SkillMessage{
			Type:         MsgSkillRegister,
			AgentID:      a.AgentID,
			SkillID:      s.SkillID,
			Version:      s.Version,
			SkillType:    s.SkillType,
			Endpoint:     skillEndpoint(a, s),
			Capabilities: s.CapabilityIDs(),
			Scenes:       append([]string(nil), s.Scenes...),
			Timestamp:    ts,
		})
	}
	return out
}

// SkillEntriesFromAgent returns the discovery-response entries for the
// agent's skills.
func SkillEntriesFromAgent(a *Agent) []SkillEntry {
	out := make([]SkillEntry, 0, len(a.Skills))
	for i := range a.Skills {
		s := &a.Skills[i]
		out = append(out, SkillEntry{
			SkillID:      s.SkillID,
			Version:      s.Version,
			Endpoint:     skillEndpoint(a, s),
			Capabilities: s.CapabilityIDs(),
			Scenes:       append([]string(nil), s.Scenes...),
		})
	}
	return out
}

func skillEndpoint(a *Agent, s *Skill) string {
	if s.Endpoint != "" {
		return s.Endpoint
	}
	if checkTextEndpoint("", a.Transport.Endpoint) == nil {
		return a.Transport.Endpoint
	}
	return ""
}

// Skill converts a SKILL_REGISTER into the record's skill (capabilities
// without versions or schemas, which the text form does not carry).
func (m *SkillMessage) Skill() (Skill, error) {
	if m.Type != MsgSkillRegister {
		return Skill{}, fieldErr("type", "%s does not describe a skill", m.Type)
	}
	if err := m.Validate(); err != nil {
		return Skill{}, err
	}
	s := Skill{SkillID: m.SkillID, Version: m.Version, SkillType: m.SkillType, Endpoint: m.Endpoint,
		Scenes: append([]string(nil), m.Scenes...)}
	for _, c := range m.Capabilities {
		s.Capabilities = append(s.Capabilities, Capability{ID: c})
	}
	return s, nil
}

// PackDiscoverResponse answers a discovery request with as few
// SKILL_DISCOVER_RESPONSE messages as the limits allow (MaxDiscoverSkills
// entries and MaxSkillLineBytes each), keeping the order of entries. An
// entry that cannot fit one message on its own is an error naming it.
func PackDiscoverResponse(requesterID string, entries []SkillEntry, timestamp int64) ([]SkillMessage, error) {
	base := SkillMessage{Type: MsgSkillDiscoverResponse, AgentID: requesterID, Timestamp: timestamp}
	empty, err := base.Format()
	if err != nil {
		return nil, err
	}
	if len(entries) == 0 {
		return []SkillMessage{base}, nil
	}
	// An empty response is "TYPE:req;;ts"; each entry adds ";" + entry
	// (the first replaces the empty field).
	var out []SkillMessage
	cur := base
	size := len(empty) - 1
	for i := range entries {
		e := entries[i]
		if err := e.validate(fmt.Sprintf("skills[%d]", i)); err != nil {
			return nil, err
		}
		n := len(e.format()) + 1
		if len(empty)-1+n > MaxSkillLineBytes {
			return nil, fmt.Errorf("%w: skills[%d] (%s) does not fit one message", ErrTooLarge, i, e.SkillID)
		}
		if len(cur.Skills) == MaxDiscoverSkills || size+n > MaxSkillLineBytes {
			out = append(out, cur)
			cur = base
			size = len(empty) - 1
		}
		cur.Skills = append(cur.Skills, e)
		size += n
	}
	return append(out, cur), nil
}

// SceneGroupID is the group agentd names for a scene in a JOIN_SCENE
// answer (REST, WebSocket and the LAN's JOIN_SCENE_RESPONSE alike).
func SceneGroupID(scene string) string { return "group-" + scene }
