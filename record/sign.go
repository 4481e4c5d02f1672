package record

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

type peerKey = crypto.PubKey

// SignedAgent is an agent object together with its canonical bytes and its
// two signatures: Signature by the agent key (ECDSA P-256, SHA-256, ASN.1
// DER) and PeerSignature by the peer key whose id the record names
// (Ed25519). Both sign exactly Canonical(), the RFC 8785 form of the agent
// object.
//
// A SignedAgent is immutable once built; share it freely. (Compact may
// stop it holding its canonical bytes, which it then derives from Agent
// when asked: the bytes stay the same.)
type SignedAgent struct {
	ProtocolVersion string
	Agent           Agent
	Signature       []byte
	PeerSignature   []byte

	// canon holds the canonical bytes; nil once Compact found that Agent
	// gives them back, derive then saying how and digest being their
	// SHA-256.
	canon  atomic.Pointer[[]byte]
	derive atomic.Uint32 // deriveNone, deriveAppend or deriveCanonicalize
	digest [32]byte
}

// How a compact record derives its canonical bytes from Agent.
const (
	deriveNone         = iota // it holds them
	deriveAppend              // appendAgent (canonenc.go)
	deriveCanonicalize        // Canonicalize
)

// newSigned returns a SignedAgent holding canonical bytes canon.
func newSigned(protocolVersion string, canon []byte) *SignedAgent {
	sa := &SignedAgent{ProtocolVersion: protocolVersion}
	sa.canon.Store(&canon)
	return sa
}

// Canonical returns the canonical bytes of the agent object, what both
// signatures sign. The caller must not modify them.
func (sa *SignedAgent) Canonical() []byte {
	if p := sa.canon.Load(); p != nil {
		return *p
	}
	// Compact checked that these are the bytes it dropped.
	var c []byte
	var err error
	switch sa.derive.Load() {
	case deriveAppend:
		var ok bool
		if c, ok = appendAgent(make([]byte, 0, 1024), &sa.Agent); !ok {
			c, err = Canonicalize(&sa.Agent)
		}
	case deriveCanonicalize:
		c, err = Canonicalize(&sa.Agent)
	}
	if err != nil {
		return nil
	}
	return c
}

// AppendCanonical appends the canonical bytes to dst: what Canonical
// returns, without a copy of its own for a compact record.
func (sa *SignedAgent) AppendCanonical(dst []byte) []byte {
	if p := sa.canon.Load(); p != nil {
		return append(dst, *p...)
	}
	if sa.derive.Load() == deriveAppend {
		if b, ok := appendAgent(dst, &sa.Agent); ok {
			return b
		}
	}
	return append(dst, sa.Canonical()...)
}

// SetCanonical replaces the canonical bytes (and nothing else: the
// signatures and Agent stay). It is for building a record by hand, in
// tests and tools, and for giving a record just decoded from bytes that
// are not its own (FromStored's) a copy of them; a record other
// goroutines hold must not be changed.
func (sa *SignedAgent) SetCanonical(b []byte) {
	sa.derive.Store(deriveNone)
	sa.canon.Store(&b)
}

// compactBufs holds Compact's scratch buffers: a start compacts every
// hosted record, and a fresh buffer for each was 100 MB of garbage at
// 100 000 records.
var compactBufs = sync.Pool{New: func() any { return new([]byte) }}

// Compact lets sa drop its canonical bytes and derive them from Agent
// when they are asked for, which saves their memory (a registry holds
// every hosted record for as long as it hosts it) at the cost of
// encoding them again for each use. It does so only when Agent encodes to
// exactly those bytes: not for a record signed elsewhere with members
// this version does not know, nor for an unbound record whose Agent was
// stamped (StampUnbound). It reports whether sa is compact. Agent must
// not change afterwards (no SignedAgent's may). Safe to call while other
// goroutines read sa, but not from two goroutines at once (the node calls
// it under the agent's lock).
func (sa *SignedAgent) Compact() bool {
	p := sa.canon.Load()
	if p == nil {
		return sa.derive.Load() != deriveNone
	}
	how := uint32(deriveAppend)
	buf := compactBufs.Get().(*[]byte)
	c, ok := appendAgent((*buf)[:0], &sa.Agent)
	same := ok && bytes.Equal(c, *p)
	*buf = c
	compactBufs.Put(buf)
	if !same {
		how = deriveCanonicalize
		if c, err := Canonicalize(&sa.Agent); err != nil || !bytes.Equal(c, *p) {
			return false
		}
	}
	// digest and derive before canon: a reader that sees no bytes sees
	// both.
	sa.digest = sha256.Sum256(*p)
	sa.derive.Store(how)
	sa.canon.Store(nil)
	return true
}

// Clone returns a copy of sa that holds its canonical bytes, for building
// another record from it (the copy shares Agent's maps and slices).
func (sa *SignedAgent) Clone() *SignedAgent {
	c := newSigned(sa.ProtocolVersion, sa.Canonical())
	c.Agent, c.Signature, c.PeerSignature = sa.Agent, sa.Signature, sa.PeerSignature
	return c
}

// Announce is the seed-000 Announce message (§4.1.1) on the wire, extended
// with peer_signature.
type Announce struct {
	ProtocolVersion string          `json:"protocol_version"`
	Agent           json.RawMessage `json:"agent"`
	Signature       string          `json:"signature,omitempty"`
	PeerSignature   string          `json:"peer_signature,omitempty"`
	Timestamp       json.RawMessage `json:"timestamp,omitempty"` // allowed, ignored (seed 000 §4.1)
}

// Sign validates a, canonicalizes it and signs it with the agent key and,
// when peerKey is non-nil, the peer key. The peer key must match a.PeerID.
func Sign(a *Agent, agentKey *ecdsa.PrivateKey, peerPriv crypto.PrivKey) (*SignedAgent, error) {
	if err := a.Validate(); err != nil {
		return nil, err
	}
	pub, err := ParsePublicKeyPEM(a.PublicKey)
	if err != nil {
		return nil, fieldErr("public_key", "%v", err)
	}
	if !pub.Equal(agentKey.Public()) {
		return nil, fieldErr("public_key", "does not match the signing key")
	}
	canon, err := Canonicalize(a)
	if err != nil {
		return nil, err
	}
	if len(canon) > MaxAgentBytes {
		return nil, fmt.Errorf("%w: canonical agent object is %d bytes, limit %d", ErrTooLarge, len(canon), MaxAgentBytes)
	}
	sig, err := SignBytes(agentKey, canon)
	if err != nil {
		return nil, err
	}
	sa := newSigned(ProtocolVersion, canon)
	sa.Signature = sig
	if err := json.Unmarshal(canon, &sa.Agent); err != nil {
		return nil, fmt.Errorf("re-decode canonical agent: %w", err)
	}
	sa.Agent.intern()
	if peerPriv != nil {
		if err := sa.coSign(peerPriv); err != nil {
			return nil, err
		}
	}
	sa.packSignatures()
	return sa, nil
}

// CoSign returns a copy of sa with the peer signature made by peerPriv, which
// must be the key of sa.Agent.PeerID. A daemon co-signs a record its local
// client signed with its own agent key, vouching that it hosts the agent.
func (sa *SignedAgent) CoSign(peerPriv crypto.PrivKey) (*SignedAgent, error) {
	c := sa.Clone()
	if err := c.coSign(peerPriv); err != nil {
		return nil, err
	}
	return c, nil
}

// packSignatures puts both signatures into one allocation (the agent
// key's first, capped so that an append to it cannot reach the peer
// key's): a held record is one object fewer for the collector to mark
// (docs/performance.md, "The last thousand at 100 000").
func (sa *SignedAgent) packSignatures() {
	s, p := sa.Signature, sa.PeerSignature
	if len(s) == 0 || len(p) == 0 {
		return
	}
	b := make([]byte, len(s)+len(p))
	copy(b, s)
	copy(b[len(s):], p)
	sa.Signature, sa.PeerSignature = b[:len(s):len(s)], b[len(s):]
}

func (sa *SignedAgent) coSign(peerPriv crypto.PrivKey) error {
	id, err := peer.IDFromPrivateKey(peerPriv)
	if err != nil {
		return fmt.Errorf("peer key: %w", err)
	}
	if id.String() != sa.Agent.PeerID {
		return fieldErr("peer_id", "%s is not the id of the signing peer key %s", sa.Agent.PeerID, id)
	}
	psig, err := peerPriv.Sign(sa.Canonical())
	if err != nil {
		return fmt.Errorf("peer sign: %w", err)
	}
	sa.PeerSignature = psig
	return nil
}

// VerifySignatures checks both signatures over the canonical bytes: the agent
// signature with the record's public_key and the peer signature with the key
// embedded in the record's peer_id. It does not apply any trust policy (see
// package trust) and does not check expiry.
func (sa *SignedAgent) VerifySignatures() error {
	if len(sa.Signature) == 0 {
		return fmt.Errorf("%w: signature is missing", ErrUnsigned)
	}
	canon := sa.Canonical()
	if sa.Unbound() {
		if len(sa.PeerSignature) > 0 {
			return fieldErr("peer_signature", "must be absent in a record without peer_id")
		}
		pub, err := ParsePublicKeyPEM(sa.Agent.PublicKey)
		if err != nil {
			return fieldErr("public_key", "%v", err)
		}
		if !VerifyBytes(pub, canon, sa.Signature) {
			return ErrBadSignature
		}
		return nil
	}
	if len(sa.PeerSignature) == 0 {
		return fmt.Errorf("%w: peer_signature is missing", ErrUnsigned)
	}
	pub, err := ParsePublicKeyPEM(sa.Agent.PublicKey)
	if err != nil {
		return fieldErr("public_key", "%v", err)
	}
	if !VerifyBytes(pub, canon, sa.Signature) {
		return ErrBadSignature
	}
	pk, err := PeerPublicKey(sa.Agent.PeerID)
	if err != nil {
		return fieldErr("peer_id", "%v", err)
	}
	ok, err := pk.Verify(canon, sa.PeerSignature)
	if err != nil || !ok {
		return ErrBadPeerSignature
	}
	return nil
}

// Unbound reports whether the record has no peer binding: a seed-000
// agent object without peer_id, signed by its agent key alone. agentd's own
// records are always bound (peer_id and peer_signature); an unbound one
// comes from an implementation of seed 000 that knows nothing of agentd's
// extension, through a registry's POST /agents, its WebSocket binding or
// the LAN (ParseAnnounceUnbound). No peer vouches that it hosts the agent,
// so such a record is never forwarded to other peers, and it lives only
// while the agent re-announces it (docs/trust.md).
func (sa *SignedAgent) Unbound() bool { return sa.Agent.PeerID == "" }

// validate checks the agent object: as an unbound record when unbound,
// else as a complete one.
func (sa *SignedAgent) validate(unbound bool) error {
	if unbound {
		return sa.Agent.ValidateUnbound()
	}
	return sa.Agent.Validate()
}

// StampUnbound returns a copy of an unbound record whose decoded Agent
// carries what seed 000 leaves out, for the node's own bookkeeping: seq,
// when absent, the receive time in Unix milliseconds (so a later
// announcement orders after an earlier one); issued_at, when absent, now;
// ttl_seconds, when absent, ttl. The canonical bytes — what the signature
// covers and what answers carry — are unchanged. A signature with a high S
// (a seed-000 signer that does not normalise it, as Java's and Python's
// do not) is rewritten to its low-S twin, which verifies the same: stored
// and answered records have one signature encoding (encoding.go). Records
// that are not unbound are returned as they are.
func (sa *SignedAgent) StampUnbound(now time.Time, ttl time.Duration) (*SignedAgent, error) {
	if !sa.Unbound() {
		return sa, nil
	}
	c := sa.Clone()
	if c.Agent.Seq == 0 {
		c.Agent.Seq = min(uint64(max(now.UnixMilli(), 1)), MaxSeq)
	}
	if c.Agent.IssuedAt == "" {
		c.Agent.IssuedAt = now.UTC().Format(IssuedAtLayout)
	}
	if c.Agent.TTLSeconds == 0 {
		c.Agent.TTLSeconds = min(max(int64(ttl/time.Second), 1), MaxTTLSeconds)
	}
	if len(c.Signature) > 0 {
		pub, err := ParsePublicKeyPEM(c.Agent.PublicKey)
		if err != nil {
			return nil, fieldErr("public_key", "%v", err)
		}
		if _, _, ok := parseDER(pub.Curve, c.Signature, true); ok {
			low, err := lowS(pub, c.Signature)
			if err != nil {
				return nil, err
			}
			c.Signature = low
		}
	}
	return c, nil
}

// AgentPublicKey returns the parsed agent key of the record.
func (sa *SignedAgent) AgentPublicKey() (*ecdsa.PublicKey, error) {
	return ParsePublicKeyPEM(sa.Agent.PublicKey)
}

// Hash is the SHA-256 of the canonical agent object: the record's identity in
// LAN summaries and in the content-hash message ids.
func (sa *SignedAgent) Hash() [32]byte {
	if p := sa.canon.Load(); p != nil {
		return sha256.Sum256(*p)
	}
	if sa.derive.Load() != deriveNone {
		return sa.digest
	}
	return sha256.Sum256(nil)
}

// Announce returns the wire form of sa.
func (sa *SignedAgent) Announce() Announce {
	pv := sa.ProtocolVersion
	if pv == "" {
		pv = ProtocolVersion
	}
	a := Announce{ProtocolVersion: pv, Agent: json.RawMessage(sa.Canonical())}
	if len(sa.Signature) > 0 {
		a.Signature = base64.StdEncoding.EncodeToString(sa.Signature)
	}
	if len(sa.PeerSignature) > 0 {
		a.PeerSignature = base64.StdEncoding.EncodeToString(sa.PeerSignature)
	}
	return a
}

// MarshalAnnounce returns the JSON of the Announce message for sa.
func (sa *SignedAgent) MarshalAnnounce() []byte {
	b, err := json.Marshal(sa.Announce())
	if err != nil {
		// Announce holds only strings and canonical JSON; this cannot fail.
		panic("record: marshal announce: " + err.Error())
	}
	return b
}

// ParseAnnounce parses a seed-000 Announce message, negotiates its version,
// canonicalizes and validates the agent object, and decodes the signatures.
// It does not verify the signatures: call VerifySignatures or a
// trust.Verifier. A minor version newer than ours is accepted; the returned
// bool is true in that case so the caller can log a warning (seed 000 §8.1).
func ParseAnnounce(b []byte) (*SignedAgent, bool, error) { return parseAnnounce(b, false) }

// ParseAnnounceUnbound is ParseAnnounce that also accepts the Announce of
// an agent that does not use agentd's peer binding: an agent object without
// peer_id, signed by the agent key alone (no peer_signature), with or
// without seq, issued_at and ttl_seconds (seed 000 defines none of the
// four). Such a record is Unbound. Only the places seed 000 lets such an
// agent register call it: a registry's POST /agents, its WebSocket
// binding, the LAN. A record with a peer_id is checked exactly as
// ParseAnnounce checks it.
func ParseAnnounceUnbound(b []byte) (*SignedAgent, bool, error) { return parseAnnounce(b, true) }

func parseAnnounce(b []byte, unbound bool) (*SignedAgent, bool, error) {
	if len(b) > MaxMessageBytes {
		return nil, false, fmt.Errorf("%w: announce is %d bytes, limit %d", ErrTooLarge, len(b), MaxMessageBytes)
	}
	// Canonicalizing the whole message checks it is I-JSON; every value
	// inside a canonical document is in canonical form itself, so the agent
	// object decoded from it needs no second pass.
	canon, err := CanonicalizeJSON(b)
	if err != nil {
		return nil, false, err
	}
	var a Announce
	if err := checkMemberCase(canon, reflect.TypeOf(a), ""); err != nil {
		return nil, false, err
	}
	if err := json.Unmarshal(canon, &a); err != nil {
		return nil, false, jsonFieldErr("", err)
	}
	newer, err := CheckVersion(a.ProtocolVersion)
	if err != nil {
		return nil, false, err
	}
	sa, err := fromAnnounce(a, true, unbound)
	if err != nil {
		return nil, false, err
	}
	return sa, newer, nil
}

// ParseStoredAnnounce decodes an Announce that this node wrote itself
// (MarshalAnnounce's output, read back from its own database at start):
// one JSON pass for the envelope and one for the agent object, without
// the RFC 8785 transform and the member-case scan that ParseAnnounce gives
// input from elsewhere — the bytes were canonical when stored. The record
// is still checked as ParseAnnounce checks it (version, size, every field);
// signatures are not verified here, as by ParseAnnounce. About 3× faster:
// what a restart with 100 000 hosted records waits for.
func ParseStoredAnnounce(b []byte) (*SignedAgent, error) {
	if len(b) > MaxMessageBytes {
		return nil, fmt.Errorf("%w: announce is %d bytes, limit %d", ErrTooLarge, len(b), MaxMessageBytes)
	}
	var a Announce
	if err := json.Unmarshal(b, &a); err != nil {
		return nil, jsonFieldErr("", err)
	}
	return FromStored(a.ProtocolVersion, a.Agent, a.Signature, a.PeerSignature)
}

// FromStored is ParseStoredAnnounce for a caller that took the Announce's
// members apart itself (the store, which knows the layout it writes): the
// protocol version, the canonical agent object and the base64 signatures.
//
// A start decodes every hosted record before the API serves. An agent
// object in the form agentd writes is read by decodeCanonical, without
// reflection; anything else is decoded with go-json-experiment/json
// (encoding/json/v2), which agrees with decodeCanonical wherever that
// reads (FuzzDecodeCanonical) and is 1.7× faster than encoding/json. Both
// are stricter than encoding/json (member names match exactly, no
// duplicate names, valid UTF-8), which a stored agent object, canonical
// and checked when it was received, always is; FuzzFromStored checks
// that whatever FromStored accepts, encoding/json decodes to the same
// agent.
//
// The record keeps agent as its canonical bytes, without a copy: the
// caller hands it over and must not modify it afterwards (the store gives
// it bytes it owns, or Badger's, and then a copy or a compact record; a
// copy of 100 000 agent objects cost a start ~8 % of its CPU). Nothing
// else the record holds points into agent.
func FromStored(protocolVersion string, agent []byte, signature, peerSignature string) (*SignedAgent, error) {
	if _, err := CheckVersion(protocolVersion); err != nil {
		return nil, err
	}
	if len(agent) == 0 || string(agent) == "null" {
		return nil, fieldErr("agent", "is required")
	}
	if len(agent) > MaxAgentBytes {
		return nil, fmt.Errorf("%w: canonical agent object is %d bytes, limit %d", ErrTooLarge, len(agent), MaxAgentBytes)
	}
	sa := newSigned(protocolVersion, agent)
	if !decodeCanonical(agent, &sa.Agent) {
		if err := jsonv2.Unmarshal(agent, &sa.Agent); err != nil {
			return nil, jsonFieldErr("agent", err)
		}
	}
	sa.Agent.intern()
	// A registry or the LAN may have cached a record without peer binding.
	if err := sa.validate(sa.Agent.PeerID == "" && peerSignature == ""); err != nil {
		return nil, err
	}
	var err error
	if signature != "" {
		if sa.Signature, err = DecodeBase64(signature); err != nil {
			return nil, fieldErr("signature", "is %v", err)
		}
	}
	if peerSignature != "" {
		if sa.PeerSignature, err = DecodeBase64(peerSignature); err != nil {
			return nil, fieldErr("peer_signature", "is %v", err)
		}
	}
	sa.packSignatures()
	return sa, nil
}

// FromAnnounce builds a SignedAgent from an already decoded Announce whose
// version was checked.
func FromAnnounce(a Announce) (*SignedAgent, error) { return fromAnnounce(a, false, false) }

// FromAnnounceUnbound is FromAnnounce that also accepts a record without
// peer binding (see ParseAnnounceUnbound).
func FromAnnounceUnbound(a Announce) (*SignedAgent, error) { return fromAnnounce(a, false, true) }

// fromAnnounce is FromAnnounce; canonical says a.Agent is already in RFC
// 8785 form (it was cut from a canonical document); unbound allows a
// record without peer_id and peer_signature.
func fromAnnounce(a Announce, canonical, unbound bool) (*SignedAgent, error) {
	if len(a.Agent) == 0 || string(a.Agent) == "null" {
		return nil, fieldErr("agent", "is required")
	}
	canon := []byte(a.Agent)
	if !canonical {
		var err error
		if canon, err = CanonicalizeJSON(a.Agent); err != nil {
			return nil, &FieldError{Field: "agent_id", Reason: err.Error()}
		}
	}
	if len(canon) > MaxAgentBytes {
		return nil, fmt.Errorf("%w: canonical agent object is %d bytes, limit %d", ErrTooLarge, len(canon), MaxAgentBytes)
	}
	sa := newSigned(a.ProtocolVersion, canon)
	if err := decodeAgent(canon, &sa.Agent, true); err != nil {
		return nil, err
	}
	if err := sa.validate(unbound && sa.Agent.PeerID == "" && a.PeerSignature == ""); err != nil {
		return nil, err
	}
	var err error
	if a.Signature != "" {
		sa.Signature, err = DecodeBase64(a.Signature)
		if err != nil {
			return nil, fieldErr("signature", "is %v", err)
		}
	}
	if a.PeerSignature != "" {
		sa.PeerSignature, err = DecodeBase64(a.PeerSignature)
		if err != nil {
			return nil, fieldErr("peer_signature", "is %v", err)
		}
	}
	sa.packSignatures()
	return sa, nil
}

// DecodeAgent decodes an agent object, turning type errors into FieldErrors.
// A JSON null for capabilities is reported as missing.
func DecodeAgent(raw []byte, a *Agent) error { return decodeAgent(raw, a, false) }

// emptyMembers are the members a signed record may leave out but must not
// give as "" or 0: Go reads both the same, and agent.json refuses the
// empty form (a pattern, a date-time, a minimum of 1), so a record that
// carries it would be accepted here and refused by a schema-checking peer.
var emptyMembers = map[string]string{
	"agent_name": `""`, "version": `""`, "tenant_scope": `""`, "issued_at": `""`, "peer_id": `""`,
	"seq": "0", "ttl_seconds": "0",
}

// decodeAgent is DecodeAgent; signed refuses the empty forms of
// emptyMembers (in a record that is signed, the bytes are what peers
// check against the schema).
func decodeAgent(raw []byte, a *Agent, signed bool) error {
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(raw, &probe); err != nil {
		return jsonFieldErr("agent", err)
	}
	if signed {
		for k, empty := range emptyMembers {
			if v, ok := probe[k]; ok && string(v) == empty {
				return fieldErr("agent."+k, "is %s: leave the member out instead", empty)
			}
		}
	}
	if c, ok := probe["capabilities"]; !ok || string(c) == "null" {
		return fieldErr("agent.capabilities", "is required (an empty object is allowed)")
	} else {
		// encoding/json turns {"a": null} into "a": "" in a map of strings.
		var caps map[string]json.RawMessage
		if json.Unmarshal(c, &caps) == nil {
			for k, v := range caps {
				if string(v) == "null" {
					return fieldErr("agent.capabilities."+trunc(k), "must be a string, not null")
				}
			}
		}
	}
	if err := checkMemberCase(raw, reflect.TypeOf(a), "agent"); err != nil {
		return err
	}
	if err := json.Unmarshal(raw, a); err != nil {
		return jsonFieldErr("agent", err)
	}
	if signed {
		if err := requireEndpoint(probe["transport"]); err != nil {
			return err
		}
	}
	a.intern()
	return nil
}

// requireEndpoint refuses a signed agent object without
// transport.endpoint: seed 000 (and agent.json) require the member, which
// may be empty, and encoding/json cannot tell an absent member from "".
// Objects this node builds (registrations it signs) always carry it.
// transport is the member's value, nil when there is none.
func requireEndpoint(transport json.RawMessage) error {
	var members map[string]json.RawMessage
	if transport == nil || json.Unmarshal(transport, &members) != nil || members == nil {
		return nil // DecodeAgent and Validate judge the rest
	}
	if _, ok := members["endpoint"]; !ok {
		return fieldErr("agent.transport.endpoint", "is required (seed 000: transport is {type, endpoint})")
	}
	return nil
}

func jsonFieldErr(prefix string, err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		f := te.Field
		if prefix != "" && f != "" {
			f = prefix + "." + f
		} else if f == "" {
			f = prefix
		}
		return &FieldError{Field: f, Reason: fmt.Sprintf("must be %s, not JSON %s", te.Type, te.Value)}
	}
	var ve *jsonv2.SemanticError
	if errors.As(err, &ve) {
		f := prefix
		for tok := range ve.JSONPointer.Tokens() {
			if f != "" {
				f += "."
			}
			f += tok
		}
		reason := err.Error()
		switch {
		case ve.Err != nil:
			reason = ve.Err.Error()
		case ve.GoType != nil && ve.JSONKind != 0:
			reason = fmt.Sprintf("must be %s, not JSON %s", ve.GoType, jsonKindName(ve.JSONKind))
		}
		return &FieldError{Field: f, Reason: reason}
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return &FieldError{Field: prefix, Reason: fmt.Sprintf("invalid JSON at byte %d: %v", se.Offset, err)}
	}
	return &FieldError{Field: prefix, Reason: err.Error()}
}

// jsonKindName names a JSON kind the way encoding/json's errors do.
func jsonKindName(k jsontext.Kind) string {
	switch k {
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "bool"
	}
	return k.String()
}

// SignBytes signs SHA-256(msg) with an ECDSA key and returns the ASN.1 DER
// signature (SHA256withECDSA, seed 001 §10.1).
func SignBytes(key *ecdsa.PrivateKey, msg []byte) ([]byte, error) {
	h := sha256.Sum256(msg)
	sig, err := ecdsa.SignASN1(rand.Reader, key, h[:])
	if err != nil {
		return nil, fmt.Errorf("ecdsa sign: %w", err)
	}
	return lowS(&key.PublicKey, sig)
}

// VerifyBytes verifies an ECDSA signature over SHA-256(msg). It accepts only
// the canonical encoding: ASN.1 DER with low S (see DecodeBase64's file).
func VerifyBytes(pub *ecdsa.PublicKey, msg, sig []byte) bool {
	if _, _, ok := parseDERSignature(pub.Curve, sig); !ok {
		return false
	}
	h := sha256.Sum256(msg)
	return ecdsa.VerifyASN1(pub, h[:], sig)
}
