package store

// On-disk layout. Every key starts with a one-letter key space and a slash;
// agent ids are canonical UUIDs (36 bytes), index terms never contain NUL
// (identifiers and tags are printable, record.Validate).
//
//	m/schema                         schema version, uint32 big-endian (synced)
//	l/<agent_id>                     local registration, entry value (synced)
//	c/<agent_id>                     cached remote record, entry value, Badger TTL
//	i/<kind>/<term>\x00<agent_id>    index posting, empty value, TTL of its record
//	t/<agent_id>                     tombstone, JSON, Badger TTL = TombstoneTTL
//	p/<agent_id>                     trust pin, JSON (synced)
//	q/<agent_id>                     seq counter, uint64 big-endian (synced)
//	a/<peer_id>                      address-book entry, JSON
//	e/<agent_id>                     lease end of a local registration, Unix ns int64 big-endian (synced)
//
// Index kinds: c capability, s skill, n scene, y skill type, g tag, m tenant.
//
// An entry value (local registrations and cache entries) is a fixed header
// followed by the record's seed-000 Announce JSON:
//
//	offset  size  field
//	0       1     format version (1)
//	1       1     kind: 'c' cache entry, 'l' local registration
//	2       8     received_at, Unix nanoseconds, int64 big-endian
//	10      8     expires_at, Unix nanoseconds, int64 big-endian (0 for 'l')
//	18      1     n = length of the source
//	19      n     source (one of the Source constants; empty for 'l')
//	19+n    rest  Announce JSON (record.ParseStoredAnnounce on read)
//
// Nothing read back is trusted: decodeEntry checks every length, the
// source, the times, the agent id against the key, and parses the record
// with record.ParseStoredAnnounce, which checks every field as
// record.ParseAnnounce does but not again that the bytes are in RFC 8785
// form: this store wrote them so (record.MarshalAnnounce), and skipping
// the transform makes a start with 100 000 records three times faster. A
// value that fails is logged and skipped.

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/trust"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// Key spaces.
const (
	spaceSchema    = "m/schema"
	spaceLocal     = "l/"
	spaceCache     = "c/"
	spaceIndex     = "i/"
	spaceTombstone = "t/"
	spacePin       = "p/"
	spaceSeq       = "q/"
	spacePeer      = "a/"
	spaceLease     = "e/"
	spaceStatus    = "s/"
)

// schemaVersion is the version of the layout above.
const schemaVersion = 1

// Index kinds.
const (
	kindCapability = 'c'
	kindSkill      = 's'
	kindScene      = 'n'
	kindType       = 'y'
	kindTag        = 'g'
	kindTenant     = 'm'
)

// Entry value header.
const (
	entryFormat     = 1
	entryKindCache  = 'c'
	entryKindLocal  = 'l'
	entryHeaderLen  = 19
	maxSourceLen    = 32
	maxEntryValue   = entryHeaderLen + maxSourceLen + record.MaxMessageBytes
	maxPeerValue    = 64 << 10
	maxPeerAddrs    = 32
	maxAddrBytes    = 1024
	maxTombValue    = 1 << 10
	maxPinValue     = 16 << 10
	agentIDLen      = 36
	termSep         = 0
	maxCounterValue = record.MaxSeq
)

// The times a value can hold (Unix nanoseconds in an int64).
var (
	minTime = time.Unix(0, 1).UTC()
	maxTime = time.Unix(0, math.MaxInt64-1).UTC()
)

// errCorrupt marks a stored value that does not decode.
var errCorrupt = errors.New("corrupt stored value")

func cacheKey(id string) []byte { return []byte(spaceCache + id) }
func localKey(id string) []byte { return []byte(spaceLocal + id) }
func tombKey(id string) []byte  { return []byte(spaceTombstone + id) }
func pinKey(id string) []byte   { return []byte(spacePin + id) }
func seqKey(id string) []byte   { return []byte(spaceSeq + id) }
func peerKey(id peer.ID) []byte { return []byte(spacePeer + id.String()) }
func leaseKey(id string) []byte { return []byte(spaceLease + id) }

func statusKey(id string) []byte { return []byte(spaceStatus + id) }

// term is one index term of a record.
type term struct {
	kind byte
	val  string
}

// prefix is the key prefix of the term's posting list.
func (t term) prefix() []byte {
	b := make([]byte, 0, len(spaceIndex)+2+len(t.val)+1)
	b = append(b, spaceIndex...)
	b = append(b, t.kind, '/')
	b = append(b, t.val...)
	return append(b, termSep)
}

// key is the posting of agent id under the term.
func (t term) key(id string) []byte { return append(t.prefix(), id...) }

// count is the key of the term in the in-memory posting counters.
func (t term) count() string { return string(t.kind) + t.val }

// parseIndexKey splits an index key into its term and agent id.
func parseIndexKey(k []byte) (term, string, bool) {
	if !bytes.HasPrefix(k, []byte(spaceIndex)) || len(k) < len(spaceIndex)+2+1+agentIDLen {
		return term{}, "", false
	}
	rest := k[len(spaceIndex):]
	kind := rest[0]
	if rest[1] != '/' {
		return term{}, "", false
	}
	rest = rest[2:]
	sep := len(rest) - agentIDLen - 1
	if sep < 0 || rest[sep] != termSep {
		return term{}, "", false
	}
	return term{kind: kind, val: string(rest[:sep])}, string(rest[sep+1:]), true
}

// termsOf lists the index terms of an agent, without duplicates.
func termsOf(a *record.Agent) []term {
	var ts []term
	seen := map[term]bool{}
	add := func(k byte, v string) {
		t := term{k, v}
		if v == "" || seen[t] {
			return
		}
		seen[t] = true
		ts = append(ts, t)
	}
	for _, c := range a.AllCapabilities() {
		add(kindCapability, c)
	}
	for i := range a.Skills {
		add(kindSkill, a.Skills[i].SkillID)
	}
	for _, sc := range a.AllScenes() {
		add(kindScene, sc)
	}
	for _, ty := range a.SkillTypes() {
		add(kindType, ty)
	}
	for _, tg := range a.Tags {
		add(kindTag, tg)
	}
	add(kindTenant, a.TenantScope)
	return ts
}

// entryHeader is the decoded header of an entry value.
type entryHeader struct {
	kind     byte
	received time.Time
	expires  time.Time
	source   Source
}

// valid reports whether s is one of the Source constants.
func (s Source) valid() bool {
	switch s {
	case SourceLocal, SourceGossip, SourceLAN, SourceDHT, SourceSkillCenter, SourceRegistry, SourceCache:
		return true
	}
	return false
}

// announceJSON is the seed-000 Announce JSON of sa, the object
// sa.MarshalAnnounce writes, with the canonical agent bytes copied
// verbatim: MarshalAnnounce re-validates and HTML-escapes them (close to
// half the CPU of a cache Put) and panics on a hand-built record whose
// canonical bytes are not JSON, where this returns an error. Records built
// by record.Sign or record.ParseAnnounce always pass; record.ParseAnnounce
// reads either form back to the same canonical bytes.
func announceJSON(sa *record.SignedAgent) ([]byte, error) {
	if sa == nil {
		return nil, &record.FieldError{Field: "record", Reason: "is required"}
	}
	c := sa.Canonical()
	if err := checkCanonical(c); err != nil {
		return nil, err
	}
	pv := sa.ProtocolVersion
	if pv == "" {
		pv = record.ProtocolVersion
	}
	pvj, err := json.Marshal(pv)
	if err != nil {
		return nil, &record.FieldError{Field: "protocol_version", Reason: err.Error()}
	}
	b64 := base64.StdEncoding
	n := 64 + len(pvj) + len(c) + b64.EncodedLen(len(sa.Signature)) + b64.EncodedLen(len(sa.PeerSignature))
	if n > record.MaxMessageBytes+64 {
		return nil, fmt.Errorf("%w: announce is about %d bytes, limit %d", record.ErrTooLarge, n, record.MaxMessageBytes)
	}
	b := make([]byte, 0, n)
	b = append(b, `{"protocol_version":`...)
	b = append(b, pvj...)
	b = append(b, `,"agent":`...)
	b = append(b, c...)
	if len(sa.Signature) > 0 {
		b = append(b, `,"signature":"`...)
		b = b64.AppendEncode(b, sa.Signature)
		b = append(b, '"')
	}
	if len(sa.PeerSignature) > 0 {
		b = append(b, `,"peer_signature":"`...)
		b = b64.AppendEncode(b, sa.PeerSignature)
		b = append(b, '"')
	}
	b = append(b, '}')
	if len(b) > record.MaxMessageBytes {
		return nil, fmt.Errorf("%w: announce is %d bytes, limit %d", record.ErrTooLarge, len(b), record.MaxMessageBytes)
	}
	return b, nil
}

// checkCanonical refuses a record's canonical agent bytes c unless they
// are an object (a record not built by record.Sign or record.ParseAnnounce).
func checkCanonical(c []byte) error {
	if len(c) < 2 || c[0] != '{' || c[len(c)-1] != '}' {
		return &record.FieldError{Field: "record", Reason: "has no canonical agent object (build it with record.Sign or record.ParseAnnounce)"}
	}
	return nil
}

// encodeEntry builds an entry value from its header and the Announce JSON.
func encodeEntry(h entryHeader, announce []byte) []byte {
	b := make([]byte, entryHeaderLen, entryHeaderLen+len(h.source)+len(announce))
	b[0] = entryFormat
	b[1] = h.kind
	binary.BigEndian.PutUint64(b[2:10], uint64(unixNano(h.received)))
	binary.BigEndian.PutUint64(b[10:18], uint64(unixNano(h.expires)))
	b[18] = byte(len(h.source))
	b = append(b, h.source...)
	return append(b, announce...)
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromUnixNano(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// decodeEntry parses an entry value. It never panics; any defect is an
// error wrapping errCorrupt, or the record's own parse error. With share,
// the record keeps its agent object inside b, without a copy: the caller
// gives b up (EachLocal, whose records drop the bytes at once when they
// compact); without, it keeps a copy of just that object.
func decodeEntry(b []byte, share bool) (entryHeader, *record.SignedAgent, error) {
	var h entryHeader
	if len(b) < entryHeaderLen {
		return h, nil, fmt.Errorf("%w: entry of %d bytes is shorter than its header", errCorrupt, len(b))
	}
	if len(b) > maxEntryValue {
		return h, nil, fmt.Errorf("%w: entry of %d bytes exceeds %d", errCorrupt, len(b), maxEntryValue)
	}
	if b[0] != entryFormat {
		return h, nil, fmt.Errorf("%w: entry format %d is not %d", errCorrupt, b[0], entryFormat)
	}
	h.kind = b[1]
	recv := int64(binary.BigEndian.Uint64(b[2:10]))
	exp := int64(binary.BigEndian.Uint64(b[10:18]))
	n := int(b[18])
	if n > maxSourceLen || len(b) < entryHeaderLen+n {
		return h, nil, fmt.Errorf("%w: source length %d", errCorrupt, n)
	}
	h.source = Source(b[entryHeaderLen : entryHeaderLen+n])
	switch h.kind {
	case entryKindCache:
		if !h.source.valid() {
			return h, nil, fmt.Errorf("%w: unknown source %q", errCorrupt, h.source)
		}
		if recv <= 0 || exp <= 0 {
			return h, nil, fmt.Errorf("%w: cache entry without received_at or expires_at", errCorrupt)
		}
	case entryKindLocal:
		if n != 0 || exp != 0 || recv < 0 {
			return h, nil, fmt.Errorf("%w: local registration with cache fields", errCorrupt)
		}
	default:
		return h, nil, fmt.Errorf("%w: entry kind %q", errCorrupt, h.kind)
	}
	h.received = fromUnixNano(recv)
	h.expires = fromUnixNano(exp)
	sa, err := parseStored(b[entryHeaderLen+n:], share)
	if err != nil {
		return h, nil, fmt.Errorf("%w: record: %w", errCorrupt, err)
	}
	return h, sa, nil
}

// decodeEntryFor decodes an entry value stored under the agent id and
// checks that the record is that agent's and of the expected kind.
func decodeEntryFor(id string, kind byte, b []byte, share bool) (entryHeader, *record.SignedAgent, error) {
	h, sa, err := decodeEntry(b, share)
	if err != nil {
		return h, nil, err
	}
	if h.kind != kind {
		return h, nil, fmt.Errorf("%w: entry kind %q under a %q key", errCorrupt, h.kind, kind)
	}
	if sa.Agent.AgentID != id {
		return h, nil, fmt.Errorf("%w: record of agent %s stored under %s", errCorrupt, sa.Agent.AgentID, id)
	}
	return h, sa, nil
}

// parseStored reads an Announce written by announceJSON without decoding
// the envelope as JSON: it takes the members apart in the layout
// announceJSON writes ({"protocol_version":…,"agent":{…},"signature":…,
// "peer_signature":…}), and anything else — an older layout, a corrupt
// value — goes through record.ParseStoredAnnounce. Either way the agent
// object is decoded and checked by record.FromStored. This spares two of
// the four passes over each record at start. share is decodeEntry's.
func parseStored(b []byte, share bool) (*record.SignedAgent, error) {
	if len(b) > record.MaxMessageBytes {
		return nil, fmt.Errorf("%w: announce is %d bytes, limit %d", record.ErrTooLarge, len(b), record.MaxMessageBytes)
	}
	pv, agent, sig, psig, ok := splitStored(b)
	if !ok {
		return record.ParseStoredAnnounce(b)
	}
	if !share {
		agent = bytes.Clone(agent)
	}
	return record.FromStored(pv, agent, sig, psig)
}

func splitStored(b []byte) (pv string, agent []byte, sig, psig string, ok bool) {
	rest, ok := bytes.CutPrefix(b, []byte(`{"protocol_version":"`))
	if !ok {
		return
	}
	i := bytes.IndexByte(rest, '"')
	if i < 0 || bytes.IndexByte(rest[:i], '\\') >= 0 {
		return "", nil, "", "", false
	}
	pv, rest = string(rest[:i]), rest[i+1:]
	if rest, ok = bytes.CutPrefix(rest, []byte(`,"agent":`)); !ok {
		return
	}
	end := objectEnd(rest)
	if end < 0 {
		return "", nil, "", "", false
	}
	agent, rest = rest[:end], rest[end:]
	str := func(prefix string) (string, bool) {
		r, ok := bytes.CutPrefix(rest, []byte(prefix))
		if !ok {
			return "", true // absent
		}
		j := bytes.IndexByte(r, '"')
		if j < 0 {
			return "", false
		}
		rest = r[j+1:]
		return string(r[:j]), true
	}
	if sig, ok = str(`,"signature":"`); !ok {
		return "", nil, "", "", false
	}
	if psig, ok = str(`,"peer_signature":"`); !ok {
		return "", nil, "", "", false
	}
	if string(rest) != "}" {
		return "", nil, "", "", false
	}
	return pv, agent, sig, psig, true
}

// objectEnd returns the length of the JSON object at the start of b (up to
// and including its closing brace), or -1: it follows strings and their
// escapes, and leaves validating the object to the JSON decoder.
func objectEnd(b []byte) int {
	if len(b) == 0 || b[0] != '{' {
		return -1
	}
	depth, inString := 0, false
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case inString:
			switch c {
			case '\\':
				i++
			case '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			depth--
			if depth == 0 {
				return i + 1
			}
		}
	}
	return -1
}

// encodeU64 and decodeU64 handle the seq counters and the schema version.
func encodeU64(v uint64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	return b[:]
}

func decodeU64(b []byte) (uint64, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("%w: counter of %d bytes", errCorrupt, len(b))
	}
	return binary.BigEndian.Uint64(b), nil
}

// tombstoneJSON is the stored form of a Tombstone.
func encodeTombstone(t Tombstone) ([]byte, error) { return json.Marshal(t) }

func decodeTombstone(id string, b []byte) (Tombstone, error) {
	var t Tombstone
	if len(b) > maxTombValue {
		return t, fmt.Errorf("%w: tombstone of %d bytes", errCorrupt, len(b))
	}
	if err := json.Unmarshal(b, &t); err != nil {
		return t, fmt.Errorf("%w: tombstone: %v", errCorrupt, err)
	}
	if err := validateTombstone(t); err != nil {
		return t, fmt.Errorf("%w: tombstone: %w", errCorrupt, err)
	}
	if t.AgentID != id {
		return t, fmt.Errorf("%w: tombstone of %s stored under %s", errCorrupt, t.AgentID, id)
	}
	return t, nil
}

func validateTombstone(t Tombstone) error {
	if err := record.ValidateAgentID(t.AgentID); err != nil {
		return &record.FieldError{Field: "agent_id", Reason: err.Error()}
	}
	if t.Seq > record.MaxSeq {
		return &record.FieldError{Field: "seq", Reason: "must be at most 2^53-1"}
	}
	if t.Reason != "" && !t.Reason.Valid() {
		return &record.FieldError{Field: "reason", Reason: fmt.Sprintf("%.64q is not one of SHUTDOWN, ERROR, MAINTENANCE, UPGRADE", t.Reason)}
	}
	return nil
}

func decodePin(b []byte) (trust.Pin, error) {
	var p trust.Pin
	if len(b) > maxPinValue {
		return p, fmt.Errorf("%w: pin of %d bytes", errCorrupt, len(b))
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return p, fmt.Errorf("%w: pin: %v", errCorrupt, err)
	}
	return p, nil
}

// peerJSON is the stored form of a PeerRecord: the addresses in their
// binary multiaddr form (base64 in JSON).
type peerJSON struct {
	ID       string   `json:"id"`
	Addrs    [][]byte `json:"addrs"`
	LastSeen int64    `json:"last_seen"` // Unix nanoseconds
}

func encodePeer(p PeerRecord) ([]byte, error) {
	pj := peerJSON{ID: p.ID.String(), LastSeen: unixNano(p.LastSeen), Addrs: make([][]byte, 0, len(p.Addrs))}
	for _, a := range p.Addrs {
		pj.Addrs = append(pj.Addrs, a.Bytes())
	}
	return json.Marshal(pj)
}

func decodePeer(b []byte) (PeerRecord, error) {
	var p PeerRecord
	if len(b) > maxPeerValue {
		return p, fmt.Errorf("%w: peer entry of %d bytes", errCorrupt, len(b))
	}
	var pj peerJSON
	if err := json.Unmarshal(b, &pj); err != nil {
		return p, fmt.Errorf("%w: peer entry: %v", errCorrupt, err)
	}
	id, err := peer.Decode(pj.ID)
	if err != nil {
		return p, fmt.Errorf("%w: peer id: %v", errCorrupt, err)
	}
	if len(pj.Addrs) > maxPeerAddrs {
		return p, fmt.Errorf("%w: %d addresses", errCorrupt, len(pj.Addrs))
	}
	if pj.LastSeen <= 0 || pj.LastSeen == math.MaxInt64 {
		return p, fmt.Errorf("%w: last_seen %d", errCorrupt, pj.LastSeen)
	}
	p.ID = id
	p.LastSeen = fromUnixNano(pj.LastSeen)
	for _, ab := range pj.Addrs {
		if len(ab) > maxAddrBytes {
			return p, fmt.Errorf("%w: address of %d bytes", errCorrupt, len(ab))
		}
		a, err := ma.NewMultiaddrBytes(ab)
		if err != nil {
			return p, fmt.Errorf("%w: address: %v", errCorrupt, err)
		}
		p.Addrs = append(p.Addrs, a)
	}
	return p, nil
}
