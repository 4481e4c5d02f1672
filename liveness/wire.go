package liveness

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/agentd/agentd/internal/frame"
	"github.com/agentd/agentd/record"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Wire limits.
const (
	// MaxProbeFrame bounds a probe request or answer frame.
	MaxProbeFrame = 512
	// MaxClaimBytes bounds a peer_down message.
	MaxClaimBytes = 512
	// KindPeerDown is the only message type of the liveness topic.
	KindPeerDown = "peer_down"
)

// probeRequest asks whether peer_id is reachable. A request naming the
// responder itself is a ping.
type probeRequest struct {
	ProtocolVersion string `json:"protocol_version"`
	PeerID          string `json:"peer_id"`
}

// probeAnswer is the answer: reachable, or an error.
type probeAnswer struct {
	ProtocolVersion string      `json:"protocol_version"`
	Reachable       bool        `json:"reachable"`
	Error           *probeError `json:"error,omitempty"`
}

type probeError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// claim is a peer_down message on the liveness topic. Its author (the
// pubsub message's signed from) states that it lost its connection to
// peer_id at at, and that neither it nor the peers it asked could reach
// peer_id again.
type claim struct {
	ProtocolVersion string `json:"protocol_version"`
	Type            string `json:"type"`
	PeerID          string `json:"peer_id"`
	At              string `json:"at"`
}

// Claim is a decoded peer_down message.
type Claim struct {
	Peer peer.ID
	At   time.Time
}

// writeFrame and readFrame are the stream protocols' one framing
// (internal/frame): an unsigned-varint length, then the body.
func writeFrame(w io.Writer, b []byte) error { return frame.Write(w, b) }

func readFrame(r *bufio.Reader, max int) ([]byte, error) { return frame.Read(r, max) }

// strictObject checks b is one I-JSON object of at most max bytes whose
// protocol_version this node speaks, and that no member differs from a
// known one only in case (encoding/json would read it). Unknown members
// are allowed: a later minor version may add some. It returns whether the
// version is a newer minor one.
func strictObject(b []byte, max int, known ...string) (newerMinor bool, err error) {
	if len(b) > max {
		return false, fmt.Errorf("%w: %d bytes, limit %d", record.ErrTooLarge, len(b), max)
	}
	if _, err := record.CanonicalizeJSON(b); err != nil {
		return false, err
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(b, &members); err != nil {
		return false, fmt.Errorf("%w: not a JSON object: %v", record.ErrMalformed, err)
	}
	for name := range members {
		for _, k := range known {
			if name != k && strings.EqualFold(name, k) {
				return false, &record.FieldError{Field: name, Reason: "differs from " + k + " only in case"}
			}
		}
	}
	raw, ok := members["protocol_version"]
	if !ok {
		return false, &record.FieldError{Field: "protocol_version", Reason: "is required"}
	}
	var v string
	if err := json.Unmarshal(raw, &v); err != nil {
		return false, &record.FieldError{Field: "protocol_version", Reason: "must be a string"}
	}
	return record.CheckVersion(v)
}

// decodePeer parses a peer_id member.
func decodePeer(s string) (peer.ID, error) {
	if s == "" {
		return "", &record.FieldError{Field: "peer_id", Reason: "is required"}
	}
	p, err := peer.Decode(s)
	if err != nil {
		return "", &record.FieldError{Field: "peer_id", Reason: "is not a peer id: " + err.Error()}
	}
	return p, nil
}

// DecodeProbeRequest parses a probe request frame.
func DecodeProbeRequest(b []byte) (peer.ID, error) {
	if _, err := strictObject(b, MaxProbeFrame, "protocol_version", "peer_id"); err != nil {
		return "", err
	}
	var r probeRequest
	if err := json.Unmarshal(b, &r); err != nil {
		return "", fmt.Errorf("%w: %v", record.ErrMalformed, err)
	}
	return decodePeer(r.PeerID)
}

// errRefused is wrapped by DecodeProbeAnswer for an error answer.
var errRefused = errors.New("liveness: probe refused")

// DecodeProbeAnswer parses a probe answer frame.
func DecodeProbeAnswer(b []byte) (bool, error) {
	if _, err := strictObject(b, MaxProbeFrame, "protocol_version", "reachable", "error"); err != nil {
		return false, err
	}
	var a probeAnswer
	if err := json.Unmarshal(b, &a); err != nil {
		return false, fmt.Errorf("%w: %v", record.ErrMalformed, err)
	}
	if a.Error != nil {
		return false, fmt.Errorf("%w: %s: %s", errRefused, record.Truncate(a.Error.Code, 64), record.Truncate(a.Error.Message, 200))
	}
	return a.Reachable, nil
}

// EncodeClaim returns the peer_down message for p, lost at at.
func EncodeClaim(p peer.ID, at time.Time) ([]byte, error) {
	return json.Marshal(claim{ProtocolVersion: record.ProtocolVersion, Type: KindPeerDown, PeerID: p.String(),
		At: at.UTC().Format(time.RFC3339Nano)})
}

// DecodeClaim parses a peer_down message. The checks: size, I-JSON,
// protocol_version, type, peer_id, at (RFC 3339).
func DecodeClaim(b []byte) (*Claim, error) {
	newer, err := strictObject(b, MaxClaimBytes, "protocol_version", "type", "peer_id", "at")
	if err != nil {
		return nil, err
	}
	var c claim
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("%w: %v", record.ErrMalformed, err)
	}
	if c.Type != KindPeerDown {
		if newer {
			// A later minor version's message type: not ours to judge.
			return nil, fmt.Errorf("%w: type %q of a newer minor version", record.ErrUnsupportedVersion, record.Truncate(c.Type, 32))
		}
		return nil, &record.FieldError{Field: "type", Reason: fmt.Sprintf("must be %q", KindPeerDown)}
	}
	p, err := decodePeer(c.PeerID)
	if err != nil {
		return nil, err
	}
	at, err := record.ParseTimestamp(c.At)
	if err != nil {
		return nil, &record.FieldError{Field: "at", Reason: err.Error()}
	}
	return &Claim{Peer: p, At: at}, nil
}
