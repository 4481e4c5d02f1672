package record

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"reflect"
	"time"
)

// Key rotation (seed 000 §6.1: "Key rotation is performed by issuing a new
// key pair and re-announcing; old keys are retired after a grace period").
//
// A KeyRotation is a statement by an agent's OLD key that the agent now
// uses NEW key. It travels inside the agent record (member key_rotation),
// which the new key signs, so every transport that carries a record carries
// the statement with it and nothing else is needed on the wire. Peers that
// bound the agent id to the old key (trust pins) move to the new key when
// the statement verifies, and keep accepting the old key for a grace
// period.
//
// Wire form (member key_rotation of the agent object):
//
//	{"agent_id": "<uuid>", "old_key": "<PKIX PEM>", "new_key": "<PKIX PEM>",
//	 "issued_at": "<RFC 3339>", "signature": "<base64 ASN.1 DER>"}
//
// The signature is ECDSA P-256 / SHA-256 by the old key over the RFC 8785
// canonical JSON of the statement without its signature and with the
// member "type": "agentd.key_rotation.v1" added (domain separation: no
// other signed object of agentd has that member, so no record, beat or
// datagram signature can be replayed as a rotation):
//
//	{"agent_id":…,"issued_at":…,"new_key":…,"old_key":…,"type":"agentd.key_rotation.v1"}

// RotationType is the value of the "type" member of the signed bytes of a
// key rotation statement.
const RotationType = "agentd.key_rotation.v1"

// Limits of a rotation statement.
const (
	// MaxRotationSignatureLen bounds the base64 signature (an ASN.1 DER
	// P-256 signature is at most 72 bytes, 96 base64 characters).
	MaxRotationSignatureLen = 128
	// MaxRotationBytes bounds the JSON of a statement read from a file.
	MaxRotationBytes = 4*MaxPublicKeyBytes + 1024
)

// KeyRotation is a statement by the agent's old key that new_key replaces
// it (see the comment at the top of this file for the wire form).
type KeyRotation struct {
	AgentID   string `json:"agent_id"`
	OldKey    string `json:"old_key"`
	NewKey    string `json:"new_key"`
	IssuedAt  string `json:"issued_at"`
	Signature string `json:"signature"`
}

// rotationStatement is what the old key signs.
type rotationStatement struct {
	Type     string `json:"type"`
	AgentID  string `json:"agent_id"`
	OldKey   string `json:"old_key"`
	NewKey   string `json:"new_key"`
	IssuedAt string `json:"issued_at"`
}

// SignRotation makes the statement that agentID moves from oldKey to
// newKey, signed by oldKey, issued at now (UTC, millisecond precision).
func SignRotation(agentID string, oldKey *ecdsa.PrivateKey, newKey *ecdsa.PublicKey, now time.Time) (*KeyRotation, error) {
	oldPEM, err := publicKeyPEM(&oldKey.PublicKey)
	if err != nil {
		return nil, err
	}
	newPEM, err := publicKeyPEM(newKey)
	if err != nil {
		return nil, err
	}
	r := &KeyRotation{AgentID: agentID, OldKey: oldPEM, NewKey: newPEM, IssuedAt: now.UTC().Format(IssuedAtLayout)}
	if err := r.validate("key_rotation", false); err != nil {
		return nil, err
	}
	msg, err := r.SignedBytes()
	if err != nil {
		return nil, err
	}
	sig, err := SignBytes(oldKey, msg)
	if err != nil {
		return nil, err
	}
	r.Signature = base64.StdEncoding.EncodeToString(sig)
	return r, nil
}

// SignedBytes returns the bytes the old key signs: the RFC 8785 form of the
// statement without its signature, with "type" set to RotationType.
func (r *KeyRotation) SignedBytes() ([]byte, error) {
	return Canonicalize(rotationStatement{Type: RotationType, AgentID: r.AgentID, OldKey: r.OldKey, NewKey: r.NewKey, IssuedAt: r.IssuedAt})
}

// Validate checks the fields of a complete statement: a UUIDv4 agent id, two
// different ECDSA P-256 keys, an RFC 3339 issued_at and a base64 signature
// of plausible length. It does not verify the signature (Verify does).
func (r *KeyRotation) Validate() error { return r.validate("key_rotation", true) }

func (r *KeyRotation) validate(path string, signed bool) error {
	if err := ValidateAgentID(r.AgentID); err != nil {
		return fieldErr(path+".agent_id", "%v", err)
	}
	oldK, err := parseRotationKey(path+".old_key", r.OldKey)
	if err != nil {
		return err
	}
	newK, err := parseRotationKey(path+".new_key", r.NewKey)
	if err != nil {
		return err
	}
	if oldK.Equal(newK) {
		return fieldErr(path+".new_key", "is the same key as old_key")
	}
	if r.IssuedAt == "" {
		return fieldErr(path+".issued_at", "is required")
	}
	if len(r.IssuedAt) > 64 {
		return fieldErr(path+".issued_at", "is longer than 64 bytes")
	}
	if _, err := ParseTimestamp(r.IssuedAt); err != nil {
		return fieldErr(path+".issued_at", "%v", err)
	}
	if !signed {
		return nil
	}
	if r.Signature == "" {
		return fieldErr(path+".signature", "is required")
	}
	if len(r.Signature) > MaxRotationSignatureLen {
		return fieldErr(path+".signature", "is longer than %d characters", MaxRotationSignatureLen)
	}
	if _, err := DecodeBase64(r.Signature); err != nil {
		return fieldErr(path+".signature", "is %v", err)
	}
	return nil
}

func parseRotationKey(field, s string) (*ecdsa.PublicKey, error) {
	if s == "" {
		return nil, fieldErr(field, "is required")
	}
	if len(s) > MaxPublicKeyBytes {
		return nil, fieldErr(field, "is larger than %d bytes", MaxPublicKeyBytes)
	}
	k, err := ParsePublicKeyPEM(s)
	if err != nil {
		return nil, fieldErr(field, "%v", err)
	}
	return k, nil
}

// Keys returns the parsed old and new keys.
func (r *KeyRotation) Keys() (oldKey, newKey *ecdsa.PublicKey, err error) {
	if oldKey, err = parseRotationKey("key_rotation.old_key", r.OldKey); err != nil {
		return nil, nil, err
	}
	if newKey, err = parseRotationKey("key_rotation.new_key", r.NewKey); err != nil {
		return nil, nil, err
	}
	return oldKey, newKey, nil
}

// Issued returns issued_at parsed, or the zero time when it does not parse.
func (r *KeyRotation) Issued() time.Time {
	t, err := ParseTimestamp(r.IssuedAt)
	if err != nil {
		return time.Time{}
	}
	return t
}

// Verify checks the statement's fields and its signature by old_key. It
// returns ErrBadSignature (wrapped) when the signature does not verify.
func (r *KeyRotation) Verify() error {
	if err := r.Validate(); err != nil {
		return err
	}
	oldKey, _, err := r.Keys()
	if err != nil {
		return err
	}
	sig, err := DecodeBase64(r.Signature)
	if err != nil {
		return fieldErr("key_rotation.signature", "is %v", err)
	}
	msg, err := r.SignedBytes()
	if err != nil {
		return err
	}
	if !VerifyBytes(oldKey, msg, sig) {
		return fmt.Errorf("%w: key_rotation is not signed by old_key", ErrBadSignature)
	}
	return nil
}

// MarshalRotation returns the canonical JSON of a statement (the form of
// the key_rotation.json file in a data directory).
func MarshalRotation(r *KeyRotation) ([]byte, error) { return Canonicalize(r) }

// ParseRotation parses the JSON of one statement strictly (I-JSON, no
// member that differs from a field only in case, no trailing data) and
// validates its fields. The signature is not verified.
func ParseRotation(b []byte) (*KeyRotation, error) {
	if len(b) > MaxRotationBytes {
		return nil, fmt.Errorf("%w: key rotation is %d bytes, limit %d", ErrTooLarge, len(b), MaxRotationBytes)
	}
	canon, err := CanonicalizeJSON(b)
	if err != nil {
		return nil, err
	}
	var r KeyRotation
	if err := checkMemberCase(canon, reflect.TypeOf(r), "key_rotation"); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(canon))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return nil, jsonFieldErr("key_rotation", err)
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return &r, nil
}

func publicKeyPEM(k *ecdsa.PublicKey) (string, error) {
	if k == nil {
		return "", fmt.Errorf("nil public key")
	}
	der, err := x509.MarshalPKIXPublicKey(k)
	if err != nil {
		return "", fmt.Errorf("marshal public key: %w", err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})), nil
}
