package record

import (
	"crypto/ecdsa"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"reflect"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

// UnregisterReason is why an agent leaves (seed 001 §9.1).
type UnregisterReason string

// The four reasons of seed 001 §9.1.
const (
	ReasonShutdown    UnregisterReason = "SHUTDOWN"
	ReasonError       UnregisterReason = "ERROR"
	ReasonMaintenance UnregisterReason = "MAINTENANCE"
	ReasonUpgrade     UnregisterReason = "UPGRADE"
)

// Valid reports whether r is one of the seed-001 reasons.
func (r UnregisterReason) Valid() bool {
	switch r {
	case ReasonShutdown, ReasonError, ReasonMaintenance, ReasonUpgrade:
		return true
	}
	return false
}

// Beat is the compact, signed liveness statement carried by heartbeat, status
// and unregister messages: {agent_id, peer_id, seq, status, timestamp}, plus
// the unregister reason and the sender's heartbeat interval. seq shares the
// agent's monotonic counter with its records, so a replay of anything older
// than the newest statement is recognisable.
type Beat struct {
	AgentID    string           `json:"agent_id"`
	PeerID     string           `json:"peer_id"`
	Seq        uint64           `json:"seq"`
	Status     Status           `json:"status,omitempty"`
	Reason     UnregisterReason `json:"reason,omitempty"`
	Timestamp  int64            `json:"timestamp"`             // epoch milliseconds
	IntervalMS int64            `json:"interval_ms,omitempty"` // the sender's current heartbeat interval
}

// Validate checks the fields of the beat.
func (b *Beat) Validate() error {
	if err := ValidateAgentID(b.AgentID); err != nil {
		return fieldErr("agent_id", "%v", err)
	}
	if _, err := PeerPublicKey(b.PeerID); err != nil {
		return fieldErr("peer_id", "%v", err)
	}
	return b.validateRest()
}

// ValidateUnbound checks every field but peer_id, which a heartbeat batch
// entry leaves out (its peer is the batch's author).
func (b *Beat) ValidateUnbound() error {
	if err := ValidateAgentID(b.AgentID); err != nil {
		return fieldErr("agent_id", "%v", err)
	}
	return b.validateRest()
}

func (b *Beat) validateRest() error {
	if b.Seq == 0 || b.Seq > MaxSeq {
		return fieldErr("seq", "must be between 1 and 2^53-1")
	}
	if b.Status != "" && !b.Status.Valid() {
		return fieldErr("status", "%q is not one of HEALTHY, DEGRADED, UNHEALTHY, MAINTENANCE", trunc(string(b.Status)))
	}
	if b.Reason != "" && !b.Reason.Valid() {
		return fieldErr("reason", "%q is not one of SHUTDOWN, ERROR, MAINTENANCE, UPGRADE", trunc(string(b.Reason)))
	}
	if b.Timestamp <= 0 {
		return fieldErr("timestamp", "must be epoch milliseconds")
	}
	if b.IntervalMS < 0 || b.IntervalMS > int64(24*time.Hour/time.Millisecond) {
		return fieldErr("interval_ms", "must be between 0 and one day")
	}
	return nil
}

// Time returns the timestamp as a time.Time.
func (b *Beat) Time() time.Time { return time.UnixMilli(b.Timestamp) }

// Interval is the heartbeat interval the beat claims (0: none), at most
// the day Validate allows.
func (b *Beat) Interval() time.Duration {
	return time.Duration(min(max(b.IntervalMS, 0), int64(24*time.Hour/time.Millisecond))) * time.Millisecond
}

// Beat signers. A beat is signed by the agent key; a daemon that hosts a
// record its client signed with a key the daemon does not hold signs the
// beats with its peer key instead (BeatSignerPeer): the record's
// peer_signature binds the agent to that peer, so receivers accept such a
// beat only when it names the peer of the agent's current record.
//
// BeatSignerBatch marks a beat that carries no signature of its own: an
// entry of a gossip heartbeat batch (docs/protocol.md, "Heartbeat
// batches"), which the batch's pubsub signature authenticates as the
// author's. Receivers hold it to the peer-signed rule. It never appears on
// the wire: ParseWireBeat refuses it, and such a beat has no canonical
// form to encode.
//
// BeatSignerAuthor marks an agent-signed beat whose agent signature a
// receiver chose not to verify because the pubsub message that carried it
// is signed by the beat's own peer: it is judged, like a batch entry, as
// that peer's statement, held to the peer-signed rule (gossip's validator
// falls back to the agent signature when the rule refuses it). It is a
// receiver's label only, never on the wire.
const (
	BeatSignerAgent  = "agent"
	BeatSignerPeer   = "peer"
	BeatSignerBatch  = "batch"
	BeatSignerAuthor = "author"
)

// SignedBeat is a Beat with its signature over the canonical form: by the
// agent key (Signer "" or BeatSignerAgent), or by the peer key of the
// beat's peer_id (BeatSignerPeer).
type SignedBeat struct {
	Beat      Beat
	Canonical []byte
	Signature []byte
	Signer    string
}

// SignBeat canonicalizes and signs b with the agent key.
func SignBeat(b Beat, key *ecdsa.PrivateKey) (*SignedBeat, error) {
	if err := b.Validate(); err != nil {
		return nil, err
	}
	canon, err := Canonicalize(b)
	if err != nil {
		return nil, err
	}
	sig, err := SignBytes(key, canon)
	if err != nil {
		return nil, err
	}
	return &SignedBeat{Beat: b, Canonical: canon, Signature: sig}, nil
}

// SignBeatPeer canonicalizes b and signs it with the peer key of
// b.PeerID (see BeatSignerPeer).
func SignBeatPeer(b Beat, peerPriv crypto.PrivKey) (*SignedBeat, error) {
	if err := b.Validate(); err != nil {
		return nil, err
	}
	id, err := peer.IDFromPrivateKey(peerPriv)
	if err != nil {
		return nil, fmt.Errorf("peer key: %w", err)
	}
	if id.String() != b.PeerID {
		return nil, fieldErr("peer_id", "%s is not the id of the signing peer key %s", b.PeerID, id)
	}
	canon, err := Canonicalize(b)
	if err != nil {
		return nil, err
	}
	sig, err := peerPriv.Sign(canon)
	if err != nil {
		return nil, fmt.Errorf("peer sign: %w", err)
	}
	return &SignedBeat{Beat: b, Canonical: canon, Signature: sig, Signer: BeatSignerPeer}, nil
}

// PeerSigned reports whether the beat is signed by the peer key.
func (sb *SignedBeat) PeerSigned() bool { return sb.Signer == BeatSignerPeer }

// PeerBound reports whether the beat speaks for its peer rather than for
// the agent's key (peer-signed, a batch entry, or taken on its author's
// pubsub signature): it counts only when that peer hosts the agent's
// current record.
func (sb *SignedBeat) PeerBound() bool {
	return sb.Signer == BeatSignerPeer || sb.Signer == BeatSignerBatch || sb.Signer == BeatSignerAuthor
}

// VerifyPeer checks a peer-signed beat with the key embedded in its
// peer_id.
func (sb *SignedBeat) VerifyPeer() error {
	if len(sb.Signature) == 0 {
		return fmt.Errorf("%w: beat signature is missing", ErrUnsigned)
	}
	pk, err := PeerPublicKey(sb.Beat.PeerID)
	if err != nil {
		return fieldErr("beat.peer_id", "%v", err)
	}
	if ok, err := pk.Verify(sb.Canonical, sb.Signature); err != nil || !ok {
		return ErrBadPeerSignature
	}
	return nil
}

// Verify checks the signature with the agent's key.
func (sb *SignedBeat) Verify(pub *ecdsa.PublicKey) error {
	if sb.PeerSigned() {
		return fmt.Errorf("%w: the beat is signed by the peer key", ErrBadSignature)
	}
	if len(sb.Signature) == 0 {
		return fmt.Errorf("%w: beat signature is missing", ErrUnsigned)
	}
	if !VerifyBytes(pub, sb.Canonical, sb.Signature) {
		return ErrBadSignature
	}
	return nil
}

// WireBeat is the JSON form of a SignedBeat. signer is omitted for the
// agent key.
type WireBeat struct {
	Beat      json.RawMessage `json:"beat"`
	Signature string          `json:"signature"`
	Signer    string          `json:"signer,omitempty"`
}

// Wire returns the JSON form.
func (sb *SignedBeat) Wire() WireBeat {
	w := WireBeat{Beat: json.RawMessage(sb.Canonical), Signature: base64.StdEncoding.EncodeToString(sb.Signature)}
	if sb.PeerSigned() {
		w.Signer = BeatSignerPeer
	}
	return w
}

// ParseWireBeat decodes and validates a WireBeat (signature not verified).
func ParseWireBeat(w WireBeat) (*SignedBeat, error) {
	if len(w.Beat) == 0 {
		return nil, fieldErr("beat", "is required")
	}
	canon, err := CanonicalizeJSON(w.Beat)
	if err != nil {
		return nil, &FieldError{Field: "beat", Reason: err.Error()}
	}
	sb := &SignedBeat{Canonical: canon}
	if err := checkMemberCase(canon, reflect.TypeOf(sb.Beat), "beat"); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(canon, &sb.Beat); err != nil {
		return nil, jsonFieldErr("beat", err)
	}
	if err := sb.Beat.Validate(); err != nil {
		return nil, err
	}
	sb.Signature, err = DecodeBase64(w.Signature)
	if err != nil || len(sb.Signature) == 0 {
		return nil, fieldErr("signature", "must be a non-empty base64 signature")
	}
	switch w.Signer {
	case "", BeatSignerAgent:
	case BeatSignerPeer:
		sb.Signer = BeatSignerPeer
	default:
		return nil, fieldErr("signer", "%q is not agent or peer", trunc(w.Signer))
	}
	return sb, nil
}

// MaxBeatBytes bounds the JSON of one WireBeat.
const MaxBeatBytes = 4 << 10

// DecodeWireBeat decodes the JSON of a WireBeat and parses it with
// ParseWireBeat (signature not verified).
func DecodeWireBeat(b []byte) (*SignedBeat, error) {
	if len(b) > MaxBeatBytes {
		return nil, fmt.Errorf("%w: beat is %d bytes, limit %d", ErrTooLarge, len(b), MaxBeatBytes)
	}
	if _, err := CanonicalizeJSON(b); err != nil {
		return nil, err
	}
	var w WireBeat
	if err := checkMemberCase(b, reflect.TypeOf(w), ""); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return nil, jsonFieldErr("", err)
	}
	return ParseWireBeat(w)
}
