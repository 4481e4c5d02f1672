package gossip

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/agentd/agentd/record"
	"github.com/go-json-experiment/json/jsontext"
)

// Kind is the type of a gossip message. It is an alias of string so that
// packages which must not import the transport (the live view) can declare
// the same methods with plain strings and still satisfy Sink.
type Kind = string

// The four message kinds of the seed-001 message set.
const (
	KindAnnounce   Kind = "announce"
	KindHeartbeat  Kind = "heartbeat"
	KindStatus     Kind = "status"
	KindUnregister Kind = "unregister"
)

// KindBeats is a heartbeat batch: the heartbeats of several agents hosted
// by the message's author in one message, authenticated by its pubsub
// signature instead of one signature per agent (docs/protocol.md,
// "Heartbeat batches"). It is protocol version v1.1; a node of version
// v1.0 ignores it without penalising anyone, which is why a node sends
// batches only on topics whose peers all announce BatchProtocol.
const KindBeats Kind = "beats"

// BatchVersion is the protocol version of a heartbeat batch, and
// batchMinor its minor number: the first that carries one.
const (
	BatchVersion = "v1.1"
	batchMinor   = 1
)

// MaxBatchBeats bounds the entries of one heartbeat batch. Another node's
// live view admits at most this many agents of one peer
// (view.DefaultMaxAgentsPerPeer), so a larger batch would carry entries
// nobody can use.
const MaxBatchBeats = 256

// ValidKind reports whether k is one of the four message kinds of the
// seed-001 message set (a batch is not: it carries heartbeats).
func ValidKind(k Kind) bool {
	switch k {
	case KindAnnounce, KindHeartbeat, KindStatus, KindUnregister:
		return true
	}
	return false
}

// IsBeat reports whether k is carried by a signed beat (heartbeat, status,
// unregister) rather than a full record.
func IsBeat(k Kind) bool {
	return k == KindHeartbeat || k == KindStatus || k == KindUnregister
}

// envelope is the JSON object of one pubsub message (see the package doc).
type envelope struct {
	ProtocolVersion string           `json:"protocol_version"`
	Type            Kind             `json:"type"`
	Announce        *record.Announce `json:"announce,omitempty"`
	Beat            *record.WireBeat `json:"beat,omitempty"`
	Beats           []batchBeat      `json:"beats,omitempty"`
	// Resend marks an announcement its host sends again, unchanged, for
	// peers that missed it (1 … MaxResend; 0 or absent: not a resend).
	Resend int `json:"resend,omitempty"`
	// Wanted is a beat request's body (KindWanted, protocol v1.3).
	Wanted *Wanted `json:"wanted,omitempty"`
}

// batchBeat is one entry of a heartbeat batch: a heartbeat without its
// peer_id (the batch's author) and without a signature of its own.
type batchBeat struct {
	AgentID    string        `json:"agent_id"`
	Seq        uint64        `json:"seq"`
	Status     record.Status `json:"status,omitempty"`
	Timestamp  int64         `json:"timestamp"`
	IntervalMS int64         `json:"interval_ms,omitempty"`
}

// Message is a decoded gossip message: exactly one of Agent (announce),
// Beat (heartbeat, status, unregister) and Beats (a heartbeat batch) is
// set. Signatures are decoded but not verified; that is the
// trust.Verifier's job.
type Message struct {
	// Version is the envelope's protocol_version.
	Version string
	// NewerMinor is set when Version is a higher minor version of the major
	// this node speaks (accepted; worth a warning).
	NewerMinor bool
	Kind       Kind
	Agent      *record.SignedAgent
	Beat       *record.SignedBeat
	// Beats are the entries of a heartbeat batch, in order, without
	// PeerID: the validator sets it to the message's author.
	Beats []record.Beat
	// Resend is an announcement's resend counter (ResendProtocol): 0 for
	// an announcement, 1 … MaxResend for the same signed record sent
	// again by its host.
	Resend int
	// Wanted is a beat request (KindWanted): the host it names and the
	// agents whose heartbeats the author cannot pull.
	Wanted *Wanted
}

// ResendProtocol is the protocol id a node lists (through identify) when
// it forwards resent announcements that it already holds (docs/protocol.md,
// "Resent announcements"; protocol version v1.2). A host resends a record
// instead of signing it again only on topics whose every known peer lists
// it; no stream is ever opened on it.
const ResendProtocol = "/agentd/resend/1.2.0"

// MaxResend bounds an announcement's resend counter: how many times a host
// may send one signed record again. Each counter is a new pubsub message,
// and a node forwards each at most once (resendLog), so it also bounds
// what one record costs the network past its first announcement.
const MaxResend = 8

// EncodeResend returns the pubsub payload resending sa for the n-th time
// (1 … MaxResend): the announcement of sa with the envelope member
// "resend". Nodes that do not hold the record take it as an
// announcement; nodes of this version that hold it forward it without
// delivering it again, and nodes of earlier versions that hold it ignore
// it (a replay).
func EncodeResend(sa *record.SignedAgent, n int) ([]byte, error) {
	if n < 1 || n > MaxResend {
		return nil, fmt.Errorf("%w: resend %d is not within 1 … %d", record.ErrMalformed, n, MaxResend)
	}
	return encodeAnnounce(sa, n)
}

// EncodeAnnounce returns the pubsub payload announcing sa.
func EncodeAnnounce(sa *record.SignedAgent) ([]byte, error) { return encodeAnnounce(sa, 0) }

// encodeAnnounce is EncodeAnnounce (resend 0) and EncodeResend.
func encodeAnnounce(sa *record.SignedAgent, resend int) ([]byte, error) {
	var a record.Announce
	if sa != nil {
		a = sa.Announce()
	}
	if len(a.Agent) == 0 {
		return nil, fmt.Errorf("%w: announce: no signed record", record.ErrMalformed)
	}
	a.ProtocolVersion = record.ProtocolVersion
	return encode(envelope{ProtocolVersion: record.ProtocolVersion, Type: KindAnnounce, Announce: &a, Resend: resend})
}

// EncodeBeat returns the pubsub payload of a heartbeat, status or
// unregister statement.
func EncodeBeat(kind Kind, sb *record.SignedBeat) ([]byte, error) {
	if !IsBeat(kind) {
		return nil, fmt.Errorf("%w: type %q is not heartbeat, status or unregister", record.ErrMalformed, kind)
	}
	if sb == nil || len(sb.Canonical) == 0 {
		return nil, fmt.Errorf("%w: %s: no signed beat", record.ErrMalformed, kind)
	}
	if err := checkBeatKind(kind, &sb.Beat); err != nil {
		return nil, err
	}
	w := sb.Wire()
	return encode(envelope{ProtocolVersion: record.ProtocolVersion, Type: kind, Beat: &w})
}

// EncodeBatch returns the pubsub payload of a heartbeat batch: 1 to
// MaxBatchBeats heartbeats of distinct agents, all hosted by the
// publishing node (their PeerID is not encoded; receivers take the
// message's author). Each must be a valid heartbeat: no reason.
func EncodeBatch(beats []record.Beat) ([]byte, error) {
	if len(beats) == 0 || len(beats) > MaxBatchBeats {
		return nil, fmt.Errorf("%w: a heartbeat batch holds 1 to %d beats, not %d", record.ErrMalformed, MaxBatchBeats, len(beats))
	}
	e := envelope{ProtocolVersion: BatchVersion, Type: KindBeats, Beats: make([]batchBeat, len(beats))}
	seen := make(map[string]struct{}, len(beats))
	for i := range beats {
		b := &beats[i]
		if err := b.ValidateUnbound(); err != nil {
			return nil, fmt.Errorf("beats[%d]: %w", i, err)
		}
		if b.Reason != "" {
			return nil, &record.FieldError{Field: fmt.Sprintf("beats[%d].reason", i), Reason: "a batch carries heartbeats only"}
		}
		if _, dup := seen[b.AgentID]; dup {
			return nil, &record.FieldError{Field: fmt.Sprintf("beats[%d].agent_id", i), Reason: "appears twice in the batch"}
		}
		seen[b.AgentID] = struct{}{}
		e.Beats[i] = toBatchBeat(b)
	}
	return encode(e)
}

// toBatchBeat is b as an entry of a heartbeat batch or a pull answer.
func toBatchBeat(b *record.Beat) batchBeat {
	return batchBeat{AgentID: b.AgentID, Seq: b.Seq, Status: b.Status, Timestamp: b.Timestamp, IntervalMS: b.IntervalMS}
}

// decodeBatchBeat parses and validates one entry of a heartbeat batch or
// a pull answer, at path in its message: a heartbeat without its peer
// (unbound: the message's author or the answering peer is its peer).
func decodeBatchBeat(raw json.RawMessage, path string) (record.Beat, error) {
	if err := exactMembers(raw, path, batchBeatMembers); err != nil {
		return record.Beat{}, err
	}
	var bb batchBeat
	if err := json.Unmarshal(raw, &bb); err != nil {
		return record.Beat{}, &record.FieldError{Field: path, Reason: err.Error()}
	}
	b := record.Beat{AgentID: bb.AgentID, Seq: bb.Seq, Status: bb.Status, Timestamp: bb.Timestamp, IntervalMS: bb.IntervalMS}
	if err := b.ValidateUnbound(); err != nil {
		return record.Beat{}, fmt.Errorf("%s: %w", path, err)
	}
	return b, nil
}

func encode(e envelope) ([]byte, error) {
	b, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", e.Type, err)
	}
	if len(b) > record.MaxMessageBytes {
		return nil, fmt.Errorf("%w: %s message is %d bytes, limit %d", record.ErrTooLarge, e.Type, len(b), record.MaxMessageBytes)
	}
	return b, nil
}

// Decode parses one pubsub payload of at most maxBytes bytes (0 means
// record.MaxMessageBytes). The checks run in this order, and the error
// tells which failed (trust.ReasonOf classifies it):
//
//  1. size (record.ErrTooLarge);
//  2. I-JSON: the payload must canonicalize under RFC 8785, so duplicate
//     member names, invalid UTF-8 and unrepresentable numbers are refused
//     (record.ErrMalformed);
//  3. protocol_version: an unsupported major version is refused with
//     record.ErrUnsupportedVersion before anything else is interpreted,
//     since a future major may change the shape;
//  4. type and the member it requires, then the record or beat itself
//     (*record.FieldError naming the field).
//
// Unknown members are ignored, so a later minor version may add some.
// Checks 2 to 4 read the envelope once (readEnvelope); only the member
// the type requires is decoded further.
func Decode(b []byte, maxBytes int) (*Message, error) {
	if maxBytes <= 0 {
		maxBytes = record.MaxMessageBytes
	}
	if len(b) > maxBytes {
		return nil, fmt.Errorf("%w: message is %d bytes, limit %d", record.ErrTooLarge, len(b), maxBytes)
	}
	raw, err := readEnvelope(b)
	if err != nil {
		return nil, err
	}
	var version string
	if raw.version == nil || json.Unmarshal(raw.version, &version) != nil {
		return nil, &record.FieldError{Field: "protocol_version", Reason: "is required and must be a string"}
	}
	newer, err := record.CheckVersion(version)
	if err != nil {
		return nil, err
	}
	if raw.caseErr != nil {
		return nil, raw.caseErr
	}
	var e envelope
	if err := raw.decode(&e); err != nil {
		return nil, err
	}
	return decodeBody(version, newer, &e, &raw)
}

// decodeBody is the last of Decode's checks: the members the envelope's
// type requires (raw says which are present: neither absent nor null),
// then the record, beat or batch itself.
func decodeBody(version string, newer bool, e *envelope, raw *rawEnvelope) (*Message, error) {
	m := &Message{Version: version, NewerMinor: newer, Kind: e.Type}
	if raw.wanted != nil && e.Type != KindWanted {
		return nil, &record.FieldError{Field: "wanted", Reason: "must not be present in a " + e.Type + " message"}
	}
	if e.Resend != 0 {
		if e.Type != KindAnnounce {
			return nil, &record.FieldError{Field: "resend", Reason: "is only allowed in an announce message"}
		}
		if e.Resend < 0 || e.Resend > MaxResend {
			return nil, &record.FieldError{Field: "resend", Reason: fmt.Sprintf("must be an integer from 1 to %d", MaxResend)}
		}
		m.Resend = e.Resend
	}
	switch {
	case e.Type == KindAnnounce:
		if raw.beats != nil {
			return nil, &record.FieldError{Field: "beats", Reason: "must not be present in an announce message"}
		}
		if raw.beat != nil {
			return nil, &record.FieldError{Field: "beat", Reason: "must not be present in an announce message"}
		}
		if raw.announce == nil {
			return nil, &record.FieldError{Field: "announce", Reason: "is required for type announce"}
		}
		if err := exactMembers(raw.announce, "announce", announceMembers); err != nil {
			return nil, err
		}
		a := *e.Announce
		if a.ProtocolVersion == "" {
			a.ProtocolVersion = version
		} else if _, err := record.CheckVersion(a.ProtocolVersion); err != nil {
			return nil, fmt.Errorf("announce.protocol_version: %w", err)
		}
		sa, err := record.FromAnnounce(a)
		if err != nil {
			return nil, err
		}
		m.Agent = sa
	case e.Type == KindBeats:
		if raw.announce != nil || raw.beat != nil {
			return nil, &record.FieldError{Field: "type", Reason: "a beats message carries only the beats member"}
		}
		beats, newer, err := decodeBatch(version, raw.beatList)
		if err != nil {
			return nil, err
		}
		m.Beats, m.NewerMinor = beats, newer
	case e.Type == KindWanted:
		if raw.announce != nil || raw.beat != nil || raw.beats != nil {
			return nil, &record.FieldError{Field: "type", Reason: "a wanted message carries only the wanted member"}
		}
		w, newer, err := decodeWanted(version, raw.wanted, e.Wanted)
		if err != nil {
			return nil, err
		}
		m.Wanted, m.NewerMinor = w, newer
	case IsBeat(e.Type):
		if raw.beats != nil {
			return nil, &record.FieldError{Field: "beats", Reason: "must not be present in a " + e.Type + " message"}
		}
		if raw.announce != nil {
			return nil, &record.FieldError{Field: "announce", Reason: "must not be present in a " + e.Type + " message"}
		}
		if raw.beat == nil {
			return nil, &record.FieldError{Field: "beat", Reason: "is required for type " + e.Type}
		}
		if len(raw.beat) > record.MaxBeatBytes {
			return nil, fmt.Errorf("%w: beat is %d bytes, limit %d", record.ErrTooLarge, len(raw.beat), record.MaxBeatBytes)
		}
		if err := exactMembers(raw.beat, "beat", wireBeatMembers); err != nil {
			return nil, err
		}
		sb, err := record.ParseWireBeat(*e.Beat)
		if err != nil {
			return nil, err
		}
		if err := checkBeatKind(e.Type, &sb.Beat); err != nil {
			return nil, err
		}
		m.Beat = sb
	case e.Type == "":
		return nil, &record.FieldError{Field: "type", Reason: "is required"}
	default:
		return nil, &record.FieldError{Field: "type", Reason: fmt.Sprintf("%q is not one of announce, heartbeat, status, unregister, beats, wanted", record.Truncate(e.Type, 64))}
	}
	return m, nil
}

// rawEnvelope is an envelope's members as raw JSON values (sub-slices of
// the message), read in one pass by readEnvelope. A member that is absent
// or null is nil.
type rawEnvelope struct {
	version, typ, announce, beat, beats, resend, wanted jsontext.Value
	// beatList is beats split into its entries (by decode).
	beatList []json.RawMessage
	// caseErr is the first member whose name differs from one of
	// envelopeMembers only in case, reported once the version is
	// negotiated (the order Decode documents).
	caseErr error
}

// readEnvelope reads the top-level object of a message in one pass. The
// pass checks the whole text as I-JSON (RFC 7493: valid UTF-8, no
// duplicate member names at any depth, numbers within doubles), which is
// what canonicalizing it under RFC 8785 would refuse, without building
// the canonical form.
func readEnvelope(b []byte) (rawEnvelope, error) {
	var e rawEnvelope
	malformed := func(err error) error {
		return fmt.Errorf("%w: not canonicalizable JSON: %v", record.ErrMalformed, err)
	}
	// A *bytes.Buffer is parsed in place: the values read alias b.
	d := jsontext.NewDecoder(bytes.NewBuffer(b))
	tok, err := d.ReadToken()
	if err != nil {
		return e, malformed(err)
	}
	if tok.Kind() != '{' {
		// Still a malformed text if it is not JSON at all.
		if _, err := d.ReadValue(); err != nil && err != io.EOF {
			return e, malformed(err)
		}
		return e, &record.FieldError{Field: "message", Reason: "must be a JSON object"}
	}
	for d.PeekKind() == '"' {
		name, err := d.ReadToken()
		if err != nil {
			return e, malformed(err)
		}
		k := name.String()
		v, err := d.ReadValue()
		if err != nil {
			return e, malformed(err)
		}
		if v.Kind() == 'n' {
			v = nil // null is as good as absent
		}
		switch k {
		case "protocol_version":
			e.version = v
		case "type":
			e.typ = v
		case "announce":
			e.announce = v
		case "beat":
			e.beat = v
		case "beats":
			e.beats = v
		case "resend":
			e.resend = v
		case "wanted":
			e.wanted = v
		default:
			if e.caseErr == nil {
				e.caseErr = caseMismatch(k, "", envelopeMembers)
			}
		}
	}
	if _, err := d.ReadToken(); err != nil { // the closing brace
		return e, malformed(err)
	}
	if _, err := d.ReadToken(); err != io.EOF {
		if err == nil {
			err = errors.New("text after the top-level value")
		}
		return e, malformed(err)
	}
	if err := record.CheckNumbers(b); err != nil {
		return e, err
	}
	return e, nil
}

// decode fills the envelope's typed members from the raw ones.
func (r *rawEnvelope) decode(e *envelope) error {
	fail := func(field string, err error) error {
		return &record.FieldError{Field: field, Reason: err.Error()}
	}
	if r.typ != nil {
		if err := json.Unmarshal(r.typ, &e.Type); err != nil {
			return fail("type", err)
		}
	}
	if r.announce != nil {
		e.Announce = new(record.Announce)
		if err := json.Unmarshal(r.announce, e.Announce); err != nil {
			return fail("announce", err)
		}
	}
	if r.beat != nil {
		e.Beat = new(record.WireBeat)
		if err := json.Unmarshal(r.beat, e.Beat); err != nil {
			return fail("beat", err)
		}
	}
	if r.beats != nil {
		if err := json.Unmarshal(r.beats, &r.beatList); err != nil {
			return fail("beats", err)
		}
	}
	if r.resend != nil {
		if err := json.Unmarshal(r.resend, &e.Resend); err != nil {
			return fail("resend", err)
		}
	}
	if r.wanted != nil {
		e.Wanted = new(Wanted)
		if err := json.Unmarshal(r.wanted, e.Wanted); err != nil {
			return fail("wanted", err)
		}
	}
	return nil
}

// decodeBatch reads the entries of a heartbeat batch of protocol version
// version (v1.1 or a later minor); newer reports a minor above the
// highest this package reads (readMinor).
func decodeBatch(version string, raw []json.RawMessage) (beats []record.Beat, newer bool, err error) {
	if _, minor, err := record.ParseVersion(version); err != nil {
		return nil, false, err
	} else if minor < batchMinor {
		return nil, false, &record.FieldError{Field: "protocol_version", Reason: fmt.Sprintf("%s cannot carry a beats message (%s or later)", record.Truncate(version, 16), BatchVersion)}
	} else {
		newer = minor > readMinor
	}
	if len(raw) == 0 || len(raw) > MaxBatchBeats {
		return nil, false, &record.FieldError{Field: "beats", Reason: fmt.Sprintf("must hold 1 to %d beats, not %d", MaxBatchBeats, len(raw))}
	}
	beats = make([]record.Beat, len(raw))
	seen := make(map[string]struct{}, len(raw))
	for i, r := range raw {
		path := fmt.Sprintf("beats[%d]", i)
		b, err := decodeBatchBeat(r, path)
		if err != nil {
			return nil, false, err
		}
		if _, dup := seen[b.AgentID]; dup {
			return nil, false, &record.FieldError{Field: path + ".agent_id", Reason: "appears twice in the batch"}
		}
		seen[b.AgentID] = struct{}{}
		beats[i] = b
	}
	return beats, newer, nil
}

// Member names of the objects this package reads. encoding/json matches
// member names case-insensitively; the wire format does not, so a member
// that differs from one of these only in case is refused rather than read
// (two parsers must never see different values in one message).
var (
	envelopeMembers  = []string{"protocol_version", "type", "announce", "beat", "beats", "resend", "wanted"}
	wantedMembers    = []string{"peer_id", "agents"}
	batchBeatMembers = []string{"agent_id", "seq", "status", "timestamp", "interval_ms"}
	announceMembers  = []string{"protocol_version", "agent", "signature", "peer_signature", "timestamp"}
	wireBeatMembers  = []string{"beat", "signature"}
	syncReqMembers   = []string{"protocol_version", "limit", "shards"}
	syncRespMembers  = []string{"protocol_version", "records", "heard", "error"}
	heardMembers     = []string{"age_ms", "interval_ms"}
)

// exactMembers refuses an object member whose name equals one of names
// only case-insensitively. Input that is not an object is left to
// json.Unmarshal to report.
func exactMembers(raw []byte, path string, names []string) error {
	// Only the names are read, as leniently as encoding/json reads them;
	// the values are skipped, not decoded.
	d := jsontext.NewDecoder(bytes.NewBuffer(raw), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	if tok, err := d.ReadToken(); err != nil || tok.Kind() != '{' {
		return nil
	}
	var found error
	for d.PeekKind() == '"' {
		name, err := d.ReadToken()
		if err != nil {
			return nil
		}
		if found == nil {
			found = caseMismatch(name.String(), path, names)
		}
		if d.SkipValue() != nil {
			return nil
		}
	}
	// Like encoding/json, say nothing of a text that is not one object.
	if _, err := d.ReadToken(); err != nil {
		return nil
	}
	if _, err := d.ReadToken(); err != io.EOF {
		return nil
	}
	return found
}

// caseMismatch refuses the member name k when it equals one of names only
// case-insensitively.
func caseMismatch(k, path string, names []string) error {
	for _, n := range names {
		if k != n && strings.EqualFold(k, n) {
			f := k
			if path != "" {
				f = path + "." + k
			}
			return &record.FieldError{Field: record.Truncate(f, 80), Reason: fmt.Sprintf("unknown member; member names are case-sensitive (did you mean %q?)", n)}
		}
	}
	return nil
}

// readVersion reads and negotiates the protocol_version of a JSON object.
func readVersion(b []byte) (version string, newer bool, err error) {
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(b, &probe); err != nil {
		return "", false, &record.FieldError{Field: "message", Reason: "must be a JSON object: " + err.Error()}
	}
	pv, ok := probe["protocol_version"] // exact name, unlike encoding/json's field matching
	if !ok || json.Unmarshal(pv, &version) != nil {
		return "", false, &record.FieldError{Field: "protocol_version", Reason: "is required and must be a string"}
	}
	newer, err = record.CheckVersion(version)
	return version, newer, err
}

// checkBeatKind enforces what each beat kind must carry: an unregister
// names its reason, a status names the status.
func checkBeatKind(kind Kind, b *record.Beat) error {
	switch kind {
	case KindUnregister:
		if b.Reason == "" {
			return &record.FieldError{Field: "beat.reason", Reason: "is required for unregister (SHUTDOWN, ERROR, MAINTENANCE or UPGRADE)"}
		}
	case KindStatus:
		if b.Status == "" {
			return &record.FieldError{Field: "beat.status", Reason: "is required for status"}
		}
	}
	return nil
}

// Encode re-encodes a decoded message in this node's protocol version.
func (m *Message) Encode() ([]byte, error) {
	switch m.Kind {
	case KindAnnounce:
		return EncodeAnnounce(m.Agent)
	case KindBeats:
		return EncodeBatch(m.Beats)
	case KindWanted:
		if m.Wanted == nil {
			return nil, &record.FieldError{Field: "wanted", Reason: "is required for type wanted"}
		}
		return EncodeWanted(*m.Wanted)
	}
	return EncodeBeat(m.Kind, m.Beat)
}

// Equal reports whether two decoded messages carry the same signed content.
func (m *Message) Equal(o *Message) bool {
	if m.Kind == KindBeats || o.Kind == KindBeats {
		return m.Kind == o.Kind && slices.Equal(m.Beats, o.Beats)
	}
	if m.Kind == KindWanted || o.Kind == KindWanted {
		return m.Kind == o.Kind && m.Wanted != nil && o.Wanted != nil &&
			m.Wanted.PeerID == o.Wanted.PeerID && slices.Equal(m.Wanted.Agents, o.Wanted.Agents)
	}
	if m.Kind != o.Kind || (m.Agent == nil) != (o.Agent == nil) || (m.Beat == nil) != (o.Beat == nil) {
		return false
	}
	if m.Agent != nil {
		return bytes.Equal(m.Agent.Canonical(), o.Agent.Canonical()) &&
			bytes.Equal(m.Agent.Signature, o.Agent.Signature) &&
			bytes.Equal(m.Agent.PeerSignature, o.Agent.PeerSignature)
	}
	return bytes.Equal(m.Beat.Canonical, o.Beat.Canonical) && bytes.Equal(m.Beat.Signature, o.Beat.Signature)
}
