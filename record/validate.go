package record

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/Masterminds/semver/v3"
	"github.com/google/uuid"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Limits on a record. They keep one record well inside a GossipSub message,
// a DHT value and a /agentd/record/1.0.0 response, and bound the work a
// hostile peer can cause. They are part of the wire contract (docs/protocol.md).
const (
	MaxAgentBytes        = 32 << 10 // canonical agent object
	MaxMessageBytes      = 64 << 10 // any JSON message carrying one agent
	MaxSkills            = 32
	MaxCapabilitiesPer   = 64 // per skill
	MaxAgentCapabilities = 256
	MaxScenesPerSkill    = 16
	MaxTags              = 32
	MaxMetadataKeys      = 32
	MaxIDLen             = 128  // skill, capability, scene, tag ids
	MaxTextLen           = 1024 // descriptions
	MaxShortTextLen      = 256  // versions, names, endpoints' parts
	MaxEndpointLen       = 512
	MaxSchemaBytes       = 8 << 10
	MaxPublicKeyBytes    = 4 << 10
	MaxCertificateBytes  = 12 << 10
	MaxTTLSeconds        = 7 * 24 * 3600
	// MaxSeq is the largest seq: JSON numbers are IEEE doubles (RFC 8785), so
	// integers above 2^53-1 cannot be represented exactly.
	MaxSeq = 1<<53 - 1
)

var (
	dnsLabelRe = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$`)
	// Identifiers must not contain the separators of the seed-001 text
	// messages (: ; , |), the DHT wildcard (*), whitespace or control
	// characters, so that every transport can carry them unescaped.
	identRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_./@+-]*$`)
)

// ValidIdent reports whether s may be used as a skill, capability or scene id.
func ValidIdent(s string) bool {
	return len(s) > 0 && len(s) <= MaxIDLen && identMatch(s)
}

// identMatch reports whether s matches identRe; written out, as every
// record's validation checks each of its ids (the regexp was an eighth of
// decoding a stored record; TestMatchersAgreeWithRegexps).
func identMatch(s string) bool {
	if s == "" || !isAlnum(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case isAlnum(c), c == '_', c == '.', c == '/', c == '@', c == '+', c == '-':
		default:
			return false
		}
	}
	return true
}

// isDNSLabel reports whether s matches dnsLabelRe: 1 to 63 letters,
// digits and hyphens, a letter or digit at each end.
func isDNSLabel(s string) bool {
	if len(s) == 0 || len(s) > 63 || !isAlnum(s[0]) || !isAlnum(s[len(s)-1]) {
		return false
	}
	for i := 1; i < len(s)-1; i++ {
		if c := s[i]; !isAlnum(c) && c != '-' {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z'
}

// Validate checks every field of a complete record, as it must be before it
// is signed or after it is received, and returns a *FieldError naming the
// first offending field.
func (a *Agent) Validate() error { return a.validate(true) }

// ValidateContent checks a record that is not signed yet: every field is
// checked as Validate does, except that the identity fields filled by the
// signer (see Fill) may be empty: agent_id, public_key, peer_id, seq,
// issued_at and ttl_seconds. When one of them is set it must be valid.
func (a *Agent) ValidateContent() error { return a.validate(false) }

// ValidateUnbound checks a record without agentd's peer binding: a seed-000
// agent object signed by its agent key alone (see SignedAgent.Unbound).
// peer_id must be absent; seq, issued_at and ttl_seconds, which seed 000
// does not define, may be absent and are checked when present; every other
// field is checked as Validate does.
func (a *Agent) ValidateUnbound() error {
	if a.PeerID != "" {
		return fieldErr("peer_id", "must be absent in a record without peer binding")
	}
	if err := a.validate(false); err != nil {
		return err
	}
	if a.AgentID == "" {
		return fieldErr("agent_id", "is required")
	}
	if a.PublicKey == "" {
		return fieldErr("public_key", "is required")
	}
	return nil
}

func (a *Agent) validate(complete bool) error {
	if a.AgentID == "" {
		if complete {
			return fieldErr("agent_id", "is required")
		}
	} else if err := ValidateAgentID(a.AgentID); err != nil {
		return fieldErr("agent_id", "%v", err)
	}
	if a.AgentName != "" && !isDNSLabel(a.AgentName) {
		return fieldErr("agent_name", "must be a DNS label (1-63 letters, digits or '-', not starting or ending with '-')")
	}
	if a.Capabilities == nil {
		return fieldErr("capabilities", "is required (an empty object is allowed)")
	}
	if len(a.Capabilities) > MaxAgentCapabilities {
		return fieldErr("capabilities", "has %d entries, more than %d", len(a.Capabilities), MaxAgentCapabilities)
	}
	for k, v := range a.Capabilities {
		if !ValidIdent(k) {
			return fieldErr("capabilities."+trunc(k), "capability name must match %s and be at most %d bytes", identRe, MaxIDLen)
		}
		if len(v) > MaxShortTextLen || !Printable(v) {
			return fieldErr("capabilities."+k, "value must be printable UTF-8 of at most %d bytes", MaxShortTextLen)
		}
	}
	if a.PublicKey == "" {
		if complete {
			return fieldErr("public_key", "is required")
		}
	} else {
		if len(a.PublicKey) > MaxPublicKeyBytes {
			return fieldErr("public_key", "is larger than %d bytes", MaxPublicKeyBytes)
		}
		// Parsed once per key text (ParsePublicKeyPEM's cache): the
		// records a node validates share a few keys, every record it
		// hosts its own.
		if _, err := ParsePublicKeyPEM(a.PublicKey); err != nil {
			return fieldErr("public_key", "%v", err)
		}
	}
	if len(a.Certificate) > MaxCertificateBytes {
		return fieldErr("certificate", "is larger than %d bytes", MaxCertificateBytes)
	}
	if a.Certificate != "" {
		if _, err := ParseCertificatesPEM(a.Certificate); err != nil {
			return fieldErr("certificate", "%v", err)
		}
	}
	if err := a.validateRotation(); err != nil {
		return err
	}
	if a.Transport.Type == "" {
		return fieldErr("transport.type", "is required")
	}
	if len(a.Transport.Type) > 32 || !identMatch(a.Transport.Type) {
		return fieldErr("transport.type", "must be a short identifier such as tcp, ws, unix, http or libp2p")
	}
	if len(a.Transport.Endpoint) > MaxEndpointLen || !Printable(a.Transport.Endpoint) {
		return fieldErr("transport.endpoint", "must be printable and at most %d bytes", MaxEndpointLen)
	}
	if err := validateMetadata(a.Metadata); err != nil {
		return err
	}
	if a.PeerID == "" {
		if complete {
			return fieldErr("peer_id", "is required")
		}
	} else if !validPeers.has(a.PeerID) {
		if _, err := PeerPublicKey(a.PeerID); err != nil {
			return fieldErr("peer_id", "%v", err)
		}
		validPeers.add(a.PeerID)
	}
	if len(a.Description) > MaxTextLen || !utf8.ValidString(a.Description) {
		return fieldErr("description", "must be valid UTF-8 of at most %d bytes", MaxTextLen)
	}
	if a.Version != "" {
		if len(a.Version) > MaxShortTextLen {
			return fieldErr("version", "is longer than %d bytes", MaxShortTextLen)
		}
		if _, err := semver.StrictNewVersion(a.Version); err != nil {
			return fieldErr("version", "%q is not a semantic version (MAJOR.MINOR.PATCH): %v", trunc(a.Version), err)
		}
	}
	if len(a.Skills) > MaxSkills {
		return fieldErr("skills", "has %d skills, more than %d", len(a.Skills), MaxSkills)
	}
	seen := map[string]bool{}
	for i := range a.Skills {
		path := fmt.Sprintf("skills[%d]", i)
		if err := a.Skills[i].validate(path); err != nil {
			return err
		}
		if seen[a.Skills[i].SkillID] {
			return fieldErr(path+".skill_id", "duplicate skill_id %q", a.Skills[i].SkillID)
		}
		seen[a.Skills[i].SkillID] = true
	}
	if len(a.Tags) > MaxTags {
		return fieldErr("tags", "has %d tags, more than %d", len(a.Tags), MaxTags)
	}
	for i, t := range a.Tags {
		if t == "" || len(t) > MaxIDLen || !Printable(t) {
			return fieldErr(fmt.Sprintf("tags[%d]", i), "must be 1-%d printable bytes", MaxIDLen)
		}
	}
	if a.TenantScope != "" && !ValidIdent(a.TenantScope) {
		return fieldErr("tenant_scope", "must be an identifier of at most %d bytes", MaxIDLen)
	}
	if a.Seq == 0 {
		if complete {
			return fieldErr("seq", "must be at least 1")
		}
	} else if a.Seq > MaxSeq {
		return fieldErr("seq", "must be at most 2^53-1")
	}
	if a.IssuedAt == "" {
		if complete {
			return fieldErr("issued_at", "is required")
		}
	} else if _, err := ParseTimestamp(a.IssuedAt); err != nil {
		return fieldErr("issued_at", "%v", err)
	}
	if a.TTLSeconds == 0 && !complete {
		return nil
	}
	if a.TTLSeconds <= 0 || a.TTLSeconds > MaxTTLSeconds {
		return fieldErr("ttl_seconds", "must be between 1 and %d", MaxTTLSeconds)
	}
	return nil
}

// validateRotation checks key_rotation, when present: its fields, that it
// is about this agent, and that its new key is public_key's key. The
// signature is checked by package trust, which acts on the statement.
func (a *Agent) validateRotation() error {
	r := a.KeyRotation
	if r == nil {
		return nil
	}
	if err := r.Validate(); err != nil {
		return err
	}
	if a.AgentID != "" && r.AgentID != a.AgentID {
		return fieldErr("key_rotation.agent_id", "%q is not the record's agent_id", trunc(r.AgentID))
	}
	if a.PublicKey != "" {
		pub, err := ParsePublicKeyPEM(a.PublicKey)
		if err != nil {
			return fieldErr("public_key", "%v", err)
		}
		_, nk, err := r.Keys()
		if err != nil {
			return err
		}
		if !nk.Equal(pub) {
			return fieldErr("key_rotation.new_key", "is not the record's public_key")
		}
	}
	return nil
}

func (s *Skill) validate(path string) error {
	if s.SkillID == "" {
		return fieldErr(path+".skill_id", "is required")
	}
	if !ValidIdent(s.SkillID) {
		return fieldErr(path+".skill_id", "%q must match %s and be at most %d bytes", trunc(s.SkillID), identRe, MaxIDLen)
	}
	if err := checkSemver(path+".version", s.Version); err != nil {
		return err
	}
	if !s.SkillType.Valid() {
		return fieldErr(path+".skill_type", "%q is not one of enterprise-skill, tool-skill, integration-skill", trunc(string(s.SkillType)))
	}
	if len(s.Endpoint) > MaxEndpointLen || !Printable(s.Endpoint) || strings.ContainsAny(s.Endpoint, ";|,") {
		return fieldErr(path+".endpoint", "must be printable, at most %d bytes, without ; | or ,", MaxEndpointLen)
	}
	if len(s.Capabilities) == 0 {
		return fieldErr(path+".capabilities", "a skill needs at least one capability")
	}
	if len(s.Capabilities) > MaxCapabilitiesPer {
		return fieldErr(path+".capabilities", "has %d capabilities, more than %d", len(s.Capabilities), MaxCapabilitiesPer)
	}
	seen := map[string]bool{}
	for j, c := range s.Capabilities {
		cp := func() string { return fmt.Sprintf("%s.capabilities[%d]", path, j) } // only for an error
		if c.ID == "" {
			return fieldErr(cp()+".id", "is required")
		}
		if !ValidIdent(c.ID) {
			return fieldErr(cp()+".id", "%q must match %s and be at most %d bytes", trunc(c.ID), identRe, MaxIDLen)
		}
		if seen[c.ID] {
			return fieldErr(cp()+".id", "duplicate capability %q", c.ID)
		}
		seen[c.ID] = true
		if c.Version != "" {
			if len(c.Version) > MaxShortTextLen {
				return fieldErr(cp()+".version", "is longer than %d bytes", MaxShortTextLen)
			}
			if err := checkLooseVersion(c.Version); err != nil {
				return fieldErr(cp()+".version", "%q is not a version: %v", trunc(c.Version), err)
			}
		}
		if len(c.Description) > MaxTextLen || !utf8.ValidString(c.Description) {
			return fieldErr(cp()+".description", "must be valid UTF-8 of at most %d bytes", MaxTextLen)
		}
		if len(c.InputSchema) > 0 {
			if err := validateSchema(cp()+".input_schema", c.InputSchema); err != nil {
				return err
			}
		}
		if len(c.OutputSchema) > 0 {
			if err := validateSchema(cp()+".output_schema", c.OutputSchema); err != nil {
				return err
			}
		}
		if c.ConfidenceHint != nil {
			h := *c.ConfidenceHint
			if math.IsNaN(h) || h < 0 || h > 1 {
				return fieldErr(cp()+".confidence_hint", "must be between 0 and 1")
			}
		}
	}
	if len(s.Scenes) > MaxScenesPerSkill {
		return fieldErr(path+".scenes", "has %d scenes, more than %d", len(s.Scenes), MaxScenesPerSkill)
	}
	for k, sc := range s.Scenes {
		if !ValidIdent(sc) {
			return fieldErr(fmt.Sprintf("%s.scenes[%d]", path, k), "%q must match %s", trunc(sc), identRe)
		}
	}
	if s.Status != "" && !s.Status.Valid() {
		return fieldErr(path+".status", "%q is not one of HEALTHY, DEGRADED, UNHEALTHY, MAINTENANCE", trunc(string(s.Status)))
	}
	return nil
}

func validateSchema(path string, raw json.RawMessage) error {
	if len(raw) == 0 {
		return nil
	}
	if len(raw) > MaxSchemaBytes {
		return fieldErr(path, "is larger than %d bytes", MaxSchemaBytes)
	}
	if !json.Valid(raw) {
		var v any
		err := json.Unmarshal(raw, &v)
		return fieldErr(path, "is not JSON: %v", err)
	}
	switch t := bytes.TrimLeft(raw, " \t\r\n"); {
	case t[0] == '{', bytes.HasPrefix(t, []byte("true")), bytes.HasPrefix(t, []byte("false")), bytes.HasPrefix(t, []byte("null")):
		return nil
	}
	return fieldErr(path, "a JSON Schema must be an object or a boolean")
}

func validateMetadata(m map[string]any) error {
	if len(m) > MaxMetadataKeys {
		return fieldErr("metadata", "has %d keys, more than %d", len(m), MaxMetadataKeys)
	}
	for k, v := range m {
		if k == "" || len(k) > MaxIDLen || !Printable(k) {
			return fieldErr("metadata", "keys must be 1-%d printable bytes", MaxIDLen)
		}
		switch k {
		case MetaMCPVersion, MetaOS, MetaArch:
			s, ok := v.(string)
			if !ok || len(s) > MaxShortTextLen {
				return fieldErr("metadata."+k, "reserved key must be a string of at most %d bytes", MaxShortTextLen)
			}
		}
	}
	return nil
}

// ValidateAgentID checks that id is an RFC 4122 UUID of version 4, written
// in the canonical 36-character form.
func ValidateAgentID(id string) error {
	if len(id) != 36 {
		return fmt.Errorf("%q is not an RFC 4122 UUID in canonical form (36 characters)", trunc(id))
	}
	u, err := uuid.Parse(id)
	if err != nil {
		return fmt.Errorf("%q is not an RFC 4122 UUID: %v", trunc(id), err)
	}
	if u.Variant() != uuid.RFC4122 {
		return fmt.Errorf("%q is not an RFC 4122 variant UUID", trunc(id))
	}
	if u.Version() != 4 {
		return fmt.Errorf("%q is a version %d UUID, version 4 is required", trunc(id), u.Version())
	}
	return nil
}

// validPeers remembers peer_id values that parsed (a base58 decode and a
// key extraction each): most records a node validates share a few peer
// ids, and a restart with 100 000 hosted records would parse the node's
// own 100 000 times. Public keys are cached by ParsePublicKeyPEM.
var validPeers = &keyMemo{m: map[string]struct{}{}}

// keyMaxMemo bounds validPeers (cleared when full): 1 024 values.
const keyMaxMemo = 1024

type keyMemo struct {
	mu sync.Mutex
	m  map[string]struct{}
}

func (k *keyMemo) has(s string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	_, ok := k.m[s]
	return ok
}

func (k *keyMemo) add(s string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.m) >= keyMaxMemo {
		clear(k.m)
	}
	k.m[s] = struct{}{}
}

// ParsePublicKeyPEM parses the public_key field: a PEM "PUBLIC KEY" (PKIX)
// block holding an ECDSA P-256 key, or a PEM "CERTIFICATE" whose key is one.
//
// Parsed keys are cached by their PEM text (a bounded table, emptied when
// full; refused or oversized input is not cached): validation, every
// heartbeat's verification and every signing parse keys parsed before,
// and the parse (PEM, PKIX, the point's check on the curve) was a third
// of a record's validation and a tenth of verifying a beat. The returned
// key is shared: callers must not modify it.
func ParsePublicKeyPEM(s string) (*ecdsa.PublicKey, error) {
	keyCache.RLock()
	k, ok := keyCache.m[s]
	keyCache.RUnlock()
	if ok {
		return k, nil
	}
	k, err := parsePublicKeyPEM(s)
	if err != nil || len(s) > MaxPublicKeyBytes {
		return k, err
	}
	keyCache.Lock()
	if len(keyCache.m) >= maxCachedKeys {
		clear(keyCache.m)
	}
	keyCache.m[s] = k
	keyCache.Unlock()
	return k, nil
}

// maxCachedKeys bounds ParsePublicKeyPEM's table (~400 bytes an entry).
const maxCachedKeys = 4096

var keyCache = struct {
	sync.RWMutex
	m map[string]*ecdsa.PublicKey
}{m: map[string]*ecdsa.PublicKey{}}

func parsePublicKeyPEM(s string) (*ecdsa.PublicKey, error) {
	block, rest := pem.Decode([]byte(s))
	if block == nil {
		return nil, fmt.Errorf("is not PEM")
	}
	if len(strings.TrimSpace(string(rest))) != 0 {
		return nil, fmt.Errorf("has trailing data after the PEM block")
	}
	var pub any
	switch block.Type {
	case "PUBLIC KEY":
		k, err := x509.ParsePKIXPublicKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("is not a PKIX public key: %v", err)
		}
		pub = k
	case "CERTIFICATE":
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("is not an X.509 certificate: %v", err)
		}
		pub = c.PublicKey
	default:
		return nil, fmt.Errorf("PEM block type %q is neither PUBLIC KEY nor CERTIFICATE", block.Type)
	}
	k, ok := pub.(*ecdsa.PublicKey)
	if !ok || k.Curve != elliptic.P256() {
		return nil, fmt.Errorf("must be an ECDSA P-256 key")
	}
	return k, nil
}

// ParseCertificatesPEM parses a PEM bundle of certificates: the leaf first,
// then any intermediates.
func ParseCertificatesPEM(s string) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	rest := []byte(s)
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("PEM block type %q is not CERTIFICATE", block.Type)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("is not an X.509 certificate: %v", err)
		}
		certs = append(certs, c)
	}
	if len(strings.TrimSpace(string(rest))) != 0 {
		return nil, fmt.Errorf("has data that is not PEM")
	}
	if len(certs) == 0 {
		return nil, fmt.Errorf("holds no certificate")
	}
	return certs, nil
}

// PeerPublicKey decodes a peer id and extracts the public key embedded in it.
// Only peer ids that embed their key (Ed25519, secp256k1: identity multihash)
// are accepted, so a peer signature can be checked from the record alone.
func PeerPublicKey(id string) (peerKey, error) {
	if k, ok := peerKeys.m.Load(id); ok {
		return k.(peerKey), nil
	}
	k, err := extractPeerKey(id)
	if err != nil {
		return nil, err
	}
	if peerKeys.n.Load() < maxPeerKeys && peerKeys.n.Add(1) <= maxPeerKeys {
		peerKeys.m.Store(strings.Clone(id), k)
	}
	return k, nil
}

// peerKeys remembers the public keys PeerPublicKey extracted: every
// heartbeat names its peer, and decoding the id's base58 and protobuf
// was an eighth of decoding a heartbeat. Bounded like looseVersions:
// once full, other ids are decoded every time.
var peerKeys struct {
	m sync.Map // peer id → peerKey
	n atomic.Int32
}

const maxPeerKeys = 4096

func extractPeerKey(id string) (peerKey, error) {
	p, err := peer.Decode(id)
	if err != nil {
		return nil, fmt.Errorf("%q is not a libp2p peer id: %v", trunc(id), err)
	}
	k, err := p.ExtractPublicKey()
	if err != nil {
		return nil, fmt.Errorf("%q does not embed its public key (use an Ed25519 peer key): %v", trunc(id), err)
	}
	return k, nil
}

func trunc(s string) string { return Truncate(s, 64) }

// looseVersions remembers the capability versions semver.NewVersion
// accepted. Its regular expression was 5 % of a restart's CPU at 100 000
// hosted records, whose capabilities share a few versions. Bounded: once
// full, versions not in it are parsed every time, as before.
var looseVersions struct {
	m sync.Map // version → struct{}
	n atomic.Int32
}

const maxLooseVersions = 4096

// checkLooseVersion is semver.NewVersion's verdict on v.
func checkLooseVersion(v string) error {
	if _, ok := looseVersions.m.Load(v); ok {
		return nil
	}
	if _, err := semver.NewVersion(v); err != nil {
		return err
	}
	if looseVersions.n.Load() < maxLooseVersions && looseVersions.n.Add(1) <= maxLooseVersions {
		looseVersions.m.Store(strings.Clone(v), struct{}{})
	}
	return nil
}
