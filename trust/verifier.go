package trust

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/agentd/agentd/internal/journal"
	"github.com/agentd/agentd/record"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Policy is the trust policy of a node (see the package doc).
type Policy string

// The trust policies.
const (
	// PolicyOpen accepts any record whose signatures verify; the first key
	// seen for an agent_id keeps it.
	PolicyOpen Policy = "open"
	// PolicyAllowlist additionally requires the agent_id to be allow-listed.
	PolicyAllowlist Policy = "allowlist"
	// PolicyCA additionally requires a certificate chain to a configured root
	// for agents that are not allow-listed.
	PolicyCA Policy = "ca"
)

// Valid reports whether p is a known policy.
func (p Policy) Valid() bool {
	switch p {
	case PolicyOpen, PolicyAllowlist, PolicyCA:
		return true
	}
	return false
}

// Reason says why a verification failed. Every rejection carries one, and
// the reasons are the label values of the rejection metrics.
type Reason string

// Rejection reasons.
const (
	ReasonMalformed        Reason = "malformed"
	ReasonUnsigned         Reason = "unsigned"
	ReasonBadSignature     Reason = "bad_signature"
	ReasonBadPeerSignature Reason = "bad_peer_signature"
	ReasonPeerMismatch     Reason = "peer_mismatch"
	ReasonKeyMismatch      Reason = "key_mismatch"
	ReasonNotAllowlisted   Reason = "not_allowlisted"
	ReasonUnknownKey       Reason = "unknown_key"
	ReasonExpired          Reason = "expired"
	ReasonNotYetValid      Reason = "not_yet_valid"
	ReasonRevoked          Reason = "revoked"
	ReasonUnknownIssuer    Reason = "unknown_issuer"
	ReasonNoCertificate    Reason = "no_certificate"
	ReasonBadCertificate   Reason = "bad_certificate"
	ReasonKeyRetired       Reason = "key_retired"
	ReasonReplay           Reason = "replay"
	// ReasonPeerQuota: the record's peer already has as many agents in
	// the live view as one peer may (an open network's admission bound).
	ReasonPeerQuota Reason = "peer_quota"
	ReasonTooLarge  Reason = "too_large"
	ReasonVersion   Reason = "unsupported_version"
	// ReasonNameMismatch: the certificate names another agent or skill.
	ReasonNameMismatch Reason = "name_mismatch"
	// ReasonRevocationUnknown: a CRL of the certificate's issuer is not
	// usable (no CRL number, issuer without cRLSign, …), so revocation
	// cannot be decided; agentd fails closed.
	ReasonRevocationUnknown Reason = "revocation_unknown"
	// ReasonUnbound: a record without peer binding (seed 000's agent
	// object signed by the agent key alone) where only bound records are
	// accepted: from another peer over gossip, sync, the DHT or a fetch.
	ReasonUnbound Reason = "unbound"
)

// RejectError is returned by every Verifier method that refuses its input.
type RejectError struct {
	Reason Reason
	Detail string
	// Field, when set, is the member of the agent object (or beat) at
	// fault: "certificate", "issued_at", "agent_id", "public_key",
	// "key_rotation", "peer_id". Surfaces put it in their error bodies.
	Field string
}

// field returns a copy of e naming f as the member at fault.
func (e *RejectError) field(f string) *RejectError {
	c := *e
	c.Field = f
	return &c
}

func (e *RejectError) Error() string {
	if e.Detail == "" {
		return "rejected: " + string(e.Reason)
	}
	return fmt.Sprintf("rejected (%s): %s", e.Reason, e.Detail)
}

func reject(r Reason, format string, args ...any) *RejectError {
	return &RejectError{Reason: r, Detail: fmt.Sprintf(format, args...)}
}

// ReasonOf classifies any error from verification or parsing into a Reason.
func ReasonOf(err error) Reason {
	var re *RejectError
	switch {
	case err == nil:
		return ""
	case errors.As(err, &re):
		return re.Reason
	case errors.Is(err, record.ErrBadSignature):
		return ReasonBadSignature
	case errors.Is(err, record.ErrBadPeerSignature):
		return ReasonBadPeerSignature
	case errors.Is(err, record.ErrUnsigned):
		return ReasonUnsigned
	case errors.Is(err, record.ErrTooLarge):
		return ReasonTooLarge
	case errors.Is(err, record.ErrUnsupportedVersion):
		return ReasonVersion
	}
	return ReasonMalformed
}

// Pin is what a node remembers about an agent id's key.
type Pin struct {
	KeyPEM    string    `json:"key"`        // the accepted agent public key (PKIX PEM)
	FirstSeen time.Time `json:"first_seen"` // when the key was first accepted
	// PrevKeyPEM is the key replaced by a rotation, accepted until PrevUntil.
	PrevKeyPEM string    `json:"prev_key,omitempty"`
	PrevUntil  time.Time `json:"prev_until,omitempty"`
	// RotatedAt is the issued_at of the rotation statement that installed
	// KeyPEM (zero when none did); an older statement never moves the pin.
	RotatedAt time.Time `json:"rotated_at,omitzero"`
	// CertNotBefore is the notBefore of the certificate that last certified
	// KeyPEM (zero when a certificate never did). Under a certificate trust
	// store only a certificate issued later moves the pin to another key.
	CertNotBefore time.Time `json:"cert_not_before,omitzero"`
}

// PinStore persists pins. package store implements it on Badger; MemPins is
// the in-memory twin.
type PinStore interface {
	GetPin(agentID string) (Pin, bool, error)
	PutPin(agentID string, p Pin) error
}

// MemPins is an in-memory PinStore, safe for concurrent use.
type MemPins struct {
	mu sync.Mutex
	m  map[string]Pin
}

// NewMemPins returns an empty in-memory PinStore.
func NewMemPins() *MemPins { return &MemPins{m: map[string]Pin{}} }

// GetPin implements PinStore.
func (m *MemPins) GetPin(id string) (Pin, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, ok := m.m[id]
	return p, ok, nil
}

// PutPin implements PinStore.
func (m *MemPins) PutPin(id string, p Pin) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.m[id] = p
	return nil
}

// ChainVerifier checks an X.509 chain for an agent: the leaf must chain to a
// configured root, be unrevoked, and certify key. It is implemented by the
// certificate trust store; a nil ChainVerifier means none is configured.
type ChainVerifier interface {
	VerifyChain(chain []*x509.Certificate, key *ecdsa.PublicKey, agentID string, now time.Time) error
}

// Config configures a Verifier.
type Config struct {
	Policy    Policy
	AllowList []string      // agent ids trusted by the allowlist and ca policies
	Chain     ChainVerifier // certificate trust store; required by PolicyCA
	// ClockSkew is how far in the future issued_at may be. Default 5 min.
	ClockSkew time.Duration
	// RotationGrace is how long the previous key of an agent stays
	// accepted after a key rotation (seed 000 §6.1). Default 24 h.
	RotationGrace time.Duration
	// Now returns the current time; default time.Now.
	Now func() time.Time
	// Journal, when set, records every verdict of VerifyAgent and
	// VerifyBeat per agent (agentd explain).
	Journal *journal.Journal
}

// Verifier is the one trust decision every transport calls. It is safe for
// concurrent use.
type Verifier struct {
	cfg   Config
	allow map[string]bool
	pins  PinStore
	// pinMu serialises the pin updates of an agent id: one of these
	// locks per id, chosen by hash. Agents do not share pins, so the
	// registrations of different agents (several clients of a registry)
	// do not wait for one another's pin write.
	pinMu [64]sync.Mutex

	// hints remember, per agent id, the key the pin holds (and the
	// certificate notBefore it recorded) as checkPin last left it, so
	// that the common case — a record of the pinned key again — is
	// decided without reading the pin store (a Badger read, under mu).
	// checkPin is the only writer of pins, and it updates the hint with
	// every write; bounded (an arbitrary hint goes when full).
	hmu   sync.Mutex
	hints map[string]pinHint

	bmu      sync.Mutex
	bindings map[bindingKey]*binding // what a verified chain proved, per agent key

	sigs sigCache // signature pairs this node has verified
}

// sigCache remembers which (canonical bytes, signature, peer signature)
// triples verified, so a record that arrives again (another shard topic, a
// live-view sync, a DHT fetch, the next re-announcement of an unchanged
// record) costs a SHA-256 instead of an ECDSA and an Ed25519 verification.
// A signature's validity is a function of exactly these bytes (the keys are
// inside the canonical object), so the cache can only skip work, never
// change a verdict: a malleated signature is other bytes and is verified
// afresh. The policy checks (expiry, allow-list, pins, certificates) still
// run every time. Bounded: cleared when full.
type sigCache struct {
	mu sync.Mutex
	m  map[[32]byte]struct{}
}

// sigCacheMax bounds the cache: 32 bytes a key, 4096 records' worth.
const sigCacheMax = 4096

func sigKey(sa *record.SignedAgent) [32]byte {
	h := sha256.New()
	var n [8]byte
	for _, b := range [][]byte{sa.Canonical(), sa.Signature, sa.PeerSignature} {
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	var k [32]byte
	h.Sum(k[:0])
	return k
}

func (c *sigCache) has(k [32]byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.m[k]
	return ok
}

func (c *sigCache) add(k [32]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= sigCacheMax {
		c.m = make(map[[32]byte]struct{}, 256)
	}
	c.m[k] = struct{}{}
}

// NoteSigned tells the verifier that this process has just signed sa with
// keys it holds (record.Sign, trust.Identity.Sign): its signatures are
// taken as verified, and the checks that follow (binding, validity, pin,
// chain) still run. A node verifying the registration it signed a moment
// ago spent an ECDSA and an Ed25519 verification on each. Receivers
// verify everything, so a signing bug cannot hide behind this.
func (v *Verifier) NoteSigned(sa *record.SignedAgent) { v.sigs.add(sigKey(sa)) }

// verifySignatures is sa.VerifySignatures through the cache.
func (v *Verifier) verifySignatures(sa *record.SignedAgent) error {
	k := sigKey(sa)
	if v.sigs.has(k) {
		return nil
	}
	if err := sa.VerifySignatures(); err != nil {
		return err
	}
	v.sigs.add(k)
	return nil
}

type bindingKey struct {
	agentID string
	key     [32]byte // SHA-256 of the PKIX DER of the key
}

// maxBindings bounds the certificate bindings a Verifier remembers for
// re-checking heartbeats; beyond it an arbitrary one is forgotten (its
// agent's heartbeats are then checked against the pin alone until its
// next record).
const maxBindings = 1 << 18

// DefaultRotationGrace is how long a rotated-out key stays accepted.
const DefaultRotationGrace = 24 * time.Hour

// NewVerifier builds a Verifier. pins may be nil for an in-memory store.
func NewVerifier(cfg Config, pins PinStore) (*Verifier, error) {
	if cfg.Policy == "" {
		cfg.Policy = PolicyOpen
	}
	if !cfg.Policy.Valid() {
		return nil, fmt.Errorf("trust policy %q is not one of open, allowlist, ca", cfg.Policy)
	}
	if cfg.Policy == PolicyCA && cfg.Chain == nil {
		return nil, errors.New("trust policy ca needs a certificate trust store (trust.roots)")
	}
	if cfg.ClockSkew == 0 {
		cfg.ClockSkew = 5 * time.Minute
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.RotationGrace == 0 {
		cfg.RotationGrace = DefaultRotationGrace
	}
	if cfg.RotationGrace < 0 {
		return nil, fmt.Errorf("trust rotationGrace %s is negative", cfg.RotationGrace)
	}
	if pins == nil {
		pins = NewMemPins()
	}
	v := &Verifier{cfg: cfg, allow: map[string]bool{}, pins: pins, bindings: map[bindingKey]*binding{}}
	for _, id := range cfg.AllowList {
		if err := record.ValidateAgentID(id); err != nil {
			return nil, fmt.Errorf("allow-list entry: %w", err)
		}
		v.allow[id] = true
	}
	return v, nil
}

// Journal returns the journal the verifier notes its verdicts in (nil:
// none, or a nil Verifier).
func (v *Verifier) Journal() *journal.Journal {
	if v == nil {
		return nil
	}
	return v.cfg.Journal
}

// Policy returns the configured policy.
func (v *Verifier) Policy() Policy { return v.cfg.Policy }

// VerifyOptions qualify one verification.
type VerifyOptions struct {
	// From is the libp2p peer that authored or served the record, when known
	// (the gossip author, the peer a fetch stream went to). It must be the
	// record's peer_id.
	From peer.ID
	// AllowExpired accepts a record past issued_at+ttl (for stale answers).
	AllowExpired bool
	// AllowUnbound accepts a record without peer binding
	// (record.SignedAgent.Unbound), verified by its agent signature alone;
	// it must have been stamped (StampUnbound). Only where seed 000 lets
	// such an agent register: a registry's POST /agents and WebSocket, the
	// LAN. From must be empty then: no peer vouches for the record.
	AllowUnbound bool
	// Transport names where the record came from, for the journal
	// (gossip, sync, dht, lan, registry, local, …).
	Transport string
}

// Allowed reports whether the policy admits agentID at all: under the
// allowlist policy only allow-listed ids are admitted.
func (v *Verifier) Allowed(agentID string) bool {
	if v.cfg.Policy == PolicyAllowlist {
		return v.allow[agentID]
	}
	return true
}

// VerifyAgent decides whether a signed record is trusted: both signatures,
// the peer binding, the expiry window, the policy (allow-list, certificate
// chain) and the key pinned for its agent_id. On success under the open
// policy the key is pinned if it was not yet.
func (v *Verifier) VerifyAgent(sa *record.SignedAgent, opts VerifyOptions) error {
	err := v.verifyAgent(sa, opts)
	v.NoteRecord(sa, opts.Transport, "", err)
	return err
}

// NoteRecord files a verdict on a record in the journal (Config.Journal;
// nothing without one, or on a nil Verifier): accepted when err is nil,
// else refused for reason, or for ReasonOf(err) when reason is empty. A
// transport's own refusals (gossip's topic checks, the view's admission)
// go through it too.
func (v *Verifier) NoteRecord(sa *record.SignedAgent, transport string, reason Reason, err error) {
	if v == nil || v.cfg.Journal == nil {
		return
	}
	a := &sa.Agent
	var caps []string // an accepted record's capabilities are in the view
	if err != nil {
		caps = a.AllCapabilities()
	}
	v.cfg.Journal.Note(a.AgentID, v.verdict(transport, journal.KindRecord, a.Seq, a.PeerID, reason, err), caps)
}

// NoteBeat is NoteRecord for a heartbeat, status or unregister statement.
func (v *Verifier) NoteBeat(sb *record.SignedBeat, transport string, reason Reason, err error) {
	if v == nil || v.cfg.Journal == nil {
		return
	}
	b := &sb.Beat
	v.cfg.Journal.Note(b.AgentID, v.verdict(transport, journal.KindBeat, b.Seq, b.PeerID, reason, err), nil)
}

func (v *Verifier) verdict(transport, kind string, seq uint64, peerID string, reason Reason, err error) journal.Verdict {
	vd := journal.Verdict{At: v.cfg.Now(), Transport: transport, Kind: kind, Seq: seq, PeerID: peerID, Accepted: err == nil}
	if err != nil {
		if reason == "" {
			reason = ReasonOf(err)
		}
		vd.Reason, vd.Detail = string(reason), err.Error()
	}
	return vd
}

func (v *Verifier) verifyAgent(sa *record.SignedAgent, opts VerifyOptions) error {
	if sa.Unbound() && (!opts.AllowUnbound || opts.From != "") {
		return reject(ReasonUnbound, "the record has no peer_id: a record without peer binding is accepted only by a registry (POST /agents, its WebSocket) or on the LAN, never from another peer").field("peer_id")
	}
	if err := v.verifySignatures(sa); err != nil {
		return &RejectError{Reason: ReasonOf(err), Detail: err.Error()}
	}
	a := &sa.Agent
	if opts.From != "" && opts.From.String() != a.PeerID {
		return reject(ReasonPeerMismatch, "record names peer %s but came from %s", a.PeerID, opts.From).field("peer_id")
	}
	now := v.cfg.Now()
	if a.Issued().After(now.Add(v.cfg.ClockSkew)) {
		return reject(ReasonNotYetValid, "issued_at %s is in the future", a.IssuedAt).field("issued_at")
	}
	if !opts.AllowExpired && !a.ExpiresAt().After(now) {
		return reject(ReasonExpired, "record expired at %s", a.ExpiresAt().UTC().Format(time.RFC3339)).field("issued_at")
	}
	if !v.Allowed(a.AgentID) {
		return reject(ReasonNotAllowlisted, "agent %s is not in the allow-list", a.AgentID).field("agent_id")
	}
	key, err := sa.AgentPublicKey()
	if err != nil {
		return reject(ReasonMalformed, "%v", err).field("public_key")
	}
	cert, err := v.checkChain(sa, key, now)
	if err != nil {
		return err
	}
	if err := v.checkPin(sa, key, cert, now, opts.AllowExpired); err != nil {
		return err
	}
	if cert.b != nil {
		v.remember(a.AgentID, key, cert.b)
	}
	return nil
}

// certified is what the chain check established about a record.
type certified struct {
	ok bool      // a configured trust store verified the record's certificate
	nb time.Time // the leaf's notBefore
	b  *binding  // for re-checking heartbeats (trust.Store only)
}

func (v *Verifier) checkChain(sa *record.SignedAgent, key *ecdsa.PublicKey, now time.Time) (certified, error) {
	if sa.Agent.Certificate == "" {
		if v.cfg.Policy == PolicyCA && !v.allow[sa.Agent.AgentID] {
			return certified{}, reject(ReasonNoCertificate, "policy ca requires a certificate for agent %s", sa.Agent.AgentID).field("certificate")
		}
		return certified{}, nil
	}
	if v.cfg.Chain == nil {
		// A certificate without a configured trust store cannot be
		// checked; under open/allowlist the self-signature decides.
		return certified{}, nil
	}
	certs, err := record.ParseCertificatesPEM(sa.Agent.Certificate)
	if err != nil {
		return certified{}, reject(ReasonBadCertificate, "%v", err).field("certificate")
	}
	c := certified{ok: true, nb: certs[0].NotBefore}
	if bv, ok := v.cfg.Chain.(bindingVerifier); ok {
		c.b, err = bv.verifyBinding(certs, key, sa.Agent.AgentID, now)
	} else {
		err = v.cfg.Chain.VerifyChain(certs, key, sa.Agent.AgentID, now)
	}
	if err != nil {
		var re *RejectError
		if errors.As(err, &re) {
			return certified{}, re.field("certificate")
		}
		return certified{}, reject(ReasonUnknownIssuer, "%v", err).field("certificate")
	}
	return c, nil
}

// checkPin binds the agent id to a key. The first key seen is pinned. A
// record with another key is accepted when it carries a rotation statement
// signed by the pinned key (the pin moves; the old key stays accepted for
// RotationGrace), or when a configured trust store certified its key with
// a certificate issued after the one that certified the pinned key (the
// certificate decides). The previous key is accepted until PrevUntil,
// then refused with key_retired. A record verified with AllowExpired never
// moves a pin.
func (v *Verifier) checkPin(sa *record.SignedAgent, key *ecdsa.PublicKey, cert certified, now time.Time, expiredOK bool) error {
	agentID := sa.Agent.AgentID
	kh := keyHash(key)
	if v.hintSaysPinned(agentID, kh, cert) {
		return nil
	}
	mu := v.pinLock(agentID)
	mu.Lock()
	defer mu.Unlock()
	p, ok, err := v.pins.GetPin(agentID)
	if err != nil {
		return fmt.Errorf("read pin: %w", err)
	}
	if !ok {
		// The record's own PEM text is the key (key was parsed from it):
		// encoding the key again cost a registration 2 % of its CPU.
		np := Pin{KeyPEM: sa.Agent.PublicKey, FirstSeen: now}
		if !strings.HasPrefix(np.KeyPEM, "-----BEGIN PUBLIC KEY-----") {
			np.KeyPEM = PublicKeyPEM(key) // a certificate's key, say
		}
		if cert.ok {
			np.CertNotBefore = cert.nb
		}
		return v.putPin(agentID, np, kh)
	}
	if sameKey(p.KeyPEM, key) {
		if cert.ok && cert.nb.After(p.CertNotBefore) && !expiredOK {
			p.CertNotBefore = cert.nb
			return v.putPin(agentID, p, kh)
		}
		v.setHint(agentID, pinHint{key: kh, certNB: p.CertNotBefore})
		return nil
	}
	if p.PrevKeyPEM != "" && sameKey(p.PrevKeyPEM, key) {
		if now.Before(p.PrevUntil) {
			return nil
		}
		return reject(ReasonKeyRetired, "key %s of agent %s was rotated out at %s", Fingerprint(key), agentID, p.PrevUntil.UTC().Format(time.RFC3339)).field("public_key")
	}
	if expiredOK {
		return reject(ReasonKeyMismatch, "agent %s is bound to key %s, not %s (an expired record does not move the binding)", agentID, fingerprintPEM(p.KeyPEM), Fingerprint(key)).field("public_key")
	}
	if r := sa.Agent.KeyRotation; r != nil {
		oldKey, newKey, err := r.Keys()
		if err == nil && sameKey(p.KeyPEM, oldKey) && newKey.Equal(key) {
			if err := r.Verify(); err != nil {
				return reject(ReasonBadSignature, "key_rotation of agent %s: %v", agentID, err).field("key_rotation")
			}
			issued := r.Issued()
			if issued.After(now.Add(v.cfg.ClockSkew)) {
				return reject(ReasonNotYetValid, "key_rotation of agent %s is issued in the future (%s)", agentID, r.IssuedAt).field("key_rotation")
			}
			if !p.RotatedAt.IsZero() && !issued.After(p.RotatedAt) {
				return reject(ReasonKeyMismatch, "key_rotation of agent %s issued at %s is not newer than the rotation that installed key %s", agentID, r.IssuedAt, fingerprintPEM(p.KeyPEM)).field("key_rotation")
			}
			np := Pin{KeyPEM: PublicKeyPEM(key), FirstSeen: now, PrevKeyPEM: p.KeyPEM, PrevUntil: now.Add(v.cfg.RotationGrace), RotatedAt: issued}
			if cert.ok {
				np.CertNotBefore = cert.nb
			}
			return v.putPin(agentID, np, kh)
		}
	}
	if cert.ok && cert.nb.After(p.CertNotBefore) {
		np := Pin{KeyPEM: PublicKeyPEM(key), FirstSeen: now, PrevKeyPEM: p.KeyPEM, PrevUntil: now.Add(v.cfg.RotationGrace),
			RotatedAt: p.RotatedAt, CertNotBefore: cert.nb}
		return v.putPin(agentID, np, kh)
	}
	return reject(ReasonKeyMismatch, "agent %s is bound to key %s, not %s (a new key needs a rotation statement signed by the old one)", agentID, fingerprintPEM(p.KeyPEM), Fingerprint(key)).field("public_key")
}

// pinLock returns the lock that serialises the pin updates of agentID.
func (v *Verifier) pinLock(agentID string) *sync.Mutex {
	h := uint32(2166136261) // FNV-1a
	for i := 0; i < len(agentID); i++ {
		h ^= uint32(agentID[i])
		h *= 16777619
	}
	return &v.pinMu[h%uint32(len(v.pinMu))]
}

// pinHint is what checkPin last left as an agent's pin: the hash of the
// pinned key and the notBefore of the certificate that certified it.
type pinHint struct {
	key    [32]byte
	certNB time.Time
}

// maxPinHints bounds the hints (about 100 bytes each with the map's share).
const maxPinHints = 1 << 15

// hintSaysPinned reports whether the agent's pin is known to hold this key
// already, with nothing for a certificate to update: checkPin would accept
// the record and write nothing.
func (v *Verifier) hintSaysPinned(agentID string, kh [32]byte, cert certified) bool {
	v.hmu.Lock()
	h, ok := v.hints[agentID]
	v.hmu.Unlock()
	return ok && h.key == kh && (!cert.ok || !cert.nb.After(h.certNB))
}

func (v *Verifier) setHint(agentID string, h pinHint) {
	v.hmu.Lock()
	defer v.hmu.Unlock()
	if v.hints == nil {
		v.hints = map[string]pinHint{}
	}
	if _, ok := v.hints[agentID]; !ok && len(v.hints) >= maxPinHints {
		for k := range v.hints {
			delete(v.hints, k)
			break
		}
	}
	v.hints[agentID] = h
}

// putPin writes a pin whose key hashes to kh, and its hint. Called with
// the agent's pin lock held.
func (v *Verifier) putPin(agentID string, p Pin, kh [32]byte) error {
	if err := v.pins.PutPin(agentID, p); err != nil {
		v.hmu.Lock()
		delete(v.hints, agentID)
		v.hmu.Unlock()
		return err
	}
	v.setHint(agentID, pinHint{key: kh, certNB: p.CertNotBefore})
	return nil
}

// keyHash identifies a key: SHA-256 of its uncompressed point (the curve
// is always P-256 here). A quarter of the cost of hashing its PKIX DER,
// which a registration paid on every check.
func keyHash(k *ecdsa.PublicKey) [32]byte {
	b, err := k.Bytes()
	if err != nil {
		return [32]byte{}
	}
	return sha256.Sum256(b)
}

func (v *Verifier) remember(agentID string, key *ecdsa.PublicKey, b *binding) {
	k := bindingKey{agentID: agentID, key: keyHash(key)}
	v.bmu.Lock()
	defer v.bmu.Unlock()
	if _, ok := v.bindings[k]; !ok && len(v.bindings) >= maxBindings {
		for old := range v.bindings {
			delete(v.bindings, old)
			break
		}
	}
	v.bindings[k] = b
}

func (v *Verifier) bindingOf(agentID string, key *ecdsa.PublicKey) *binding {
	v.bmu.Lock()
	defer v.bmu.Unlock()
	return v.bindings[bindingKey{agentID: agentID, key: keyHash(key)}]
}

// AcceptedKeys returns the keys an agent's signatures are accepted with
// now: the pinned key, then the previous one while its grace period runs.
// The LAN's UDP path verifies datagrams with them.
func (v *Verifier) AcceptedKeys(agentID string) []*ecdsa.PublicKey {
	p, ok, err := v.pins.GetPin(agentID)
	if err != nil || !ok {
		return nil
	}
	var out []*ecdsa.PublicKey
	if k, err := record.ParsePublicKeyPEM(p.KeyPEM); err == nil {
		out = append(out, k)
	}
	if p.PrevKeyPEM != "" && v.cfg.Now().Before(p.PrevUntil) {
		if k, err := record.ParsePublicKeyPEM(p.PrevKeyPEM); err == nil {
			out = append(out, k)
		}
	}
	return out
}

// AgentKey returns the key pinned for agentID (the current one).
func (v *Verifier) AgentKey(agentID string) (*ecdsa.PublicKey, bool) {
	p, ok, err := v.pins.GetPin(agentID)
	if err != nil || !ok {
		return nil, false
	}
	k, err := record.ParsePublicKeyPEM(p.KeyPEM)
	if err != nil {
		return nil, false
	}
	return k, true
}

// VerifyBeat checks a heartbeat, status or unregister statement: the agent
// must be known (its key pinned) and the signature must verify with that key
// (or with the previous key inside its grace period). from, when set, must
// be the beat's peer_id.
//
// Beats travel by gossip (and its heartbeat pulls) only; the journal
// records them so.
func (v *Verifier) VerifyBeat(sb *record.SignedBeat, from peer.ID) error {
	err := v.verifyBeat(sb, from)
	v.NoteBeat(sb, "gossip", "", err)
	return err
}

func (v *Verifier) verifyBeat(sb *record.SignedBeat, from peer.ID) error {
	if from != "" && from.String() != sb.Beat.PeerID {
		return reject(ReasonPeerMismatch, "beat names peer %s but came from %s", sb.Beat.PeerID, from)
	}
	if !v.Allowed(sb.Beat.AgentID) {
		return reject(ReasonNotAllowlisted, "agent %s is not in the allow-list", sb.Beat.AgentID)
	}
	p, ok, err := v.pins.GetPin(sb.Beat.AgentID)
	if err != nil {
		return fmt.Errorf("read pin: %w", err)
	}
	if !ok {
		return reject(ReasonUnknownKey, "no key known for agent %s", sb.Beat.AgentID)
	}
	now := v.cfg.Now()
	if sb.Signer == record.BeatSignerBatch || sb.Signer == record.BeatSignerAuthor {
		// An entry of a heartbeat batch, or a beat taken on its pubsub
		// message's signature: that signature, checked by pubsub before
		// any validator runs, is the author's, and the author is the
		// beat's peer (checked above). Like a peer-signed beat, the live
		// view accepts it only if that peer hosts the agent's current
		// record.
		if from == "" {
			return reject(ReasonUnsigned, "beat of agent %s taken on its pubsub signature without the message's author", sb.Beat.AgentID)
		}
		if k, err := record.ParsePublicKeyPEM(p.KeyPEM); err == nil {
			return v.checkBeatCert(sb.Beat.AgentID, k, p, now)
		}
		return nil
	}
	if sb.PeerSigned() {
		// Signed by the hosting peer's key: authentic for that peer; the
		// live view accepts it only if that peer hosts the agent's current
		// record (record.BeatSignerPeer).
		if err := sb.VerifyPeer(); err != nil {
			return reject(ReasonBadPeerSignature, "peer-signed beat of agent %s: %v", sb.Beat.AgentID, err)
		}
		if k, err := record.ParsePublicKeyPEM(p.KeyPEM); err == nil {
			return v.checkBeatCert(sb.Beat.AgentID, k, p, now)
		}
		return nil
	}
	if k, err := record.ParsePublicKeyPEM(p.KeyPEM); err == nil && sb.Verify(k) == nil {
		return v.checkBeatCert(sb.Beat.AgentID, k, p, now)
	}
	if p.PrevKeyPEM != "" && now.Before(p.PrevUntil) {
		if k, err := record.ParsePublicKeyPEM(p.PrevKeyPEM); err == nil && sb.Verify(k) == nil {
			return v.checkBeatCert(sb.Beat.AgentID, k, p, now)
		}
	}
	return reject(ReasonBadSignature, "beat of agent %s does not verify with its key", sb.Beat.AgentID)
}

// checkBeatCert re-checks, for a heartbeat, what the agent's certificate
// proved when its record was verified: a certificate that has expired or
// that a reloaded CRL revokes stops its heartbeats at once. Under the ca
// policy an agent that is not allow-listed and was never certified is
// refused.
func (v *Verifier) checkBeatCert(agentID string, key *ecdsa.PublicKey, p Pin, now time.Time) error {
	if b := v.bindingOf(agentID, key); b != nil {
		if bv, ok := v.cfg.Chain.(bindingVerifier); ok {
			return bv.checkBinding(b, now)
		}
	}
	if v.cfg.Policy == PolicyCA && !v.allow[agentID] && p.CertNotBefore.IsZero() {
		return reject(ReasonNoCertificate, "policy ca requires a certificate for agent %s", agentID)
	}
	return nil
}

// Fingerprint is the hex SHA-256 of the key's PKIX DER, shortened to 16 hex
// digits for messages.
func Fingerprint(k *ecdsa.PublicKey) string {
	der, err := x509.MarshalPKIXPublicKey(k)
	if err != nil {
		return "?"
	}
	h := sha256.Sum256(der)
	return hex.EncodeToString(h[:8])
}

func fingerprintPEM(s string) string {
	k, err := record.ParsePublicKeyPEM(s)
	if err != nil {
		return "?"
	}
	return Fingerprint(k)
}

func sameKey(pemKey string, k *ecdsa.PublicKey) bool {
	p, err := record.ParsePublicKeyPEM(pemKey)
	return err == nil && p.Equal(k)
}

// HasChain reports whether a certificate trust store is configured.
func (v *Verifier) HasChain() bool { return v.cfg.Chain != nil }

// VerifySkillCertificate decides the certificate a seed-001 skill of
// another implementation presents with a SKILL_REGISTER (seed 001 §10.2,
// §10.3): chain is the leaf first, then intermediates. With a certificate
// trust store configured, the chain must lead to one of its roots,
// unrevoked, and the leaf must name the agent (urn:agentd:agent:<agentID>,
// an "Agent Certificate") or the skill (urn:agentd:skill:<skillID>, a
// "Skill Certificate"). Without one, the certificate cannot be checked:
// under the open and allowlist policies its key is taken as the agent's own
// (as a record's self-signature is; the caller pins it, first key seen),
// and the ca policy refuses it. The caller checks the allow-list. It
// returns the leaf's ECDSA key, which the caller then challenges.
func (v *Verifier) VerifySkillCertificate(chain []*x509.Certificate, agentID, skillID string) (*ecdsa.PublicKey, error) {
	if len(chain) == 0 {
		return nil, reject(ReasonNoCertificate, "no certificate presented")
	}
	key, ok := chain[0].PublicKey.(*ecdsa.PublicKey)
	if !ok || key.Curve != elliptic.P256() {
		return nil, reject(ReasonBadCertificate, "the leaf certificate's key is not ECDSA P-256")
	}
	now := v.cfg.Now()
	switch {
	case v.cfg.Chain == nil && v.cfg.Policy == PolicyCA:
		return nil, reject(ReasonNoCertificate, "policy ca needs a certificate trust store to check skill certificates against")
	case v.cfg.Chain == nil:
		if now.Before(chain[0].NotBefore) || now.After(chain[0].NotAfter) {
			return nil, reject(ReasonExpired, "certificate is valid from %s to %s", chain[0].NotBefore.UTC().Format(time.RFC3339), chain[0].NotAfter.UTC().Format(time.RFC3339))
		}
		return key, nil
	}
	if s, ok := v.cfg.Chain.(*Store); ok {
		_, err := s.Check(chain, CertCheck{Now: now, Key: key, AgentID: agentID})
		if ReasonOf(err) == ReasonNameMismatch {
			_, err = s.Check(chain, CertCheck{Now: now, Key: key, SkillID: skillID})
		}
		if err != nil {
			return nil, err
		}
		return key, nil
	}
	if err := v.cfg.Chain.VerifyChain(chain, key, agentID, now); err != nil {
		if ReasonOf(err) == "" || ReasonOf(err) == ReasonMalformed {
			return nil, reject(ReasonUnknownIssuer, "%v", err)
		}
		return nil, err
	}
	return key, nil
}
