package dht

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/agentd/agentd/internal/frame"
	"github.com/agentd/agentd/record"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Limits of the record fetch protocol (part of the wire contract).
const (
	MaxRequestBytes       = 4 << 10   // one request frame body
	MaxResponseBytes      = 256 << 10 // one response frame body
	MaxRecordsPerResponse = 16        // records in one response
	NonceSize             = 32        // bytes of the request nonce
	// MaxChallengeSigBytes bounds challenge_signature after base64
	// decoding (an ECDSA P-256 DER signature is at most 72 bytes, Ed25519
	// 64).
	MaxChallengeSigBytes = 512
	// ChallengeDomain prefixes the challenge bytes.
	ChallengeDomain = "agentd-record-challenge/v1\n"
)

// Signers of a challenge.
const (
	SignerAgent = "agent" // the agent key (ECDSA P-256) of the record
	SignerPeer  = "peer"  // the responder's libp2p peer key
)

// Errors of the wire layer.
var (
	// ErrFrameTooLarge is returned when a frame's length prefix exceeds
	// the limit of its direction.
	ErrFrameTooLarge = errors.New("frame exceeds size limit")
	// ErrProtocol is returned for a message that violates the record
	// fetch protocol (bad framing, JSON, fields).
	ErrProtocol = errors.New("record protocol violation")
)

// FetchQuery selects hosted records; empty fields match all.
type FetchQuery struct{ AgentID, Skill, Capability string }

// Validate checks the ids of the query.
func (q FetchQuery) Validate() error {
	if q.AgentID != "" {
		if err := record.ValidateAgentID(q.AgentID); err != nil {
			return &record.FieldError{Field: "agent_id", Reason: err.Error()}
		}
	}
	if q.Skill != "" && !record.ValidIdent(q.Skill) {
		return &record.FieldError{Field: "skill", Reason: "is not a valid skill id"}
	}
	if q.Capability != "" && !record.ValidIdent(q.Capability) {
		return &record.FieldError{Field: "capability", Reason: "is not a valid capability id"}
	}
	return nil
}

// Matches reports whether a record satisfies the query.
func (q FetchQuery) Matches(a *record.Agent) bool {
	if q.AgentID != "" && a.AgentID != q.AgentID {
		return false
	}
	return a.Offers(q.Skill, q.Capability)
}

// FetchRequest is the request message of RecordProtocol.
type FetchRequest struct {
	ProtocolVersion string `json:"protocol_version"`
	Nonce           string `json:"nonce"`
	AgentID         string `json:"agent_id,omitempty"`
	Skill           string `json:"skill,omitempty"`
	Capability      string `json:"capability,omitempty"`
}

// Query returns the filter of the request.
func (r *FetchRequest) Query() FetchQuery {
	return FetchQuery{AgentID: r.AgentID, Skill: r.Skill, Capability: r.Capability}
}

// FetchedRecord is one record of a response with its challenge signature.
type FetchedRecord struct {
	Announce           json.RawMessage `json:"announce"`
	Signer             string          `json:"signer"`
	ChallengeSignature string          `json:"challenge_signature"`
}

// WireError is the error member of a response.
type WireError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// FetchResponse is the response message of RecordProtocol.
type FetchResponse struct {
	ProtocolVersion string          `json:"protocol_version"`
	Records         []FetchedRecord `json:"records"`
	Error           *WireError      `json:"error,omitempty"`
}

// RemoteError is a refusal sent by the provider in a response.
type RemoteError struct{ Code, Message string }

func (e *RemoteError) Error() string {
	return fmt.Sprintf("provider refused: %s: %s", e.Code, e.Message)
}

// WriteFrame writes one frame: the uvarint length of body, then body
// (internal/frame, the framing of every agentd stream protocol).
func WriteFrame(w io.Writer, body []byte) error { return frame.Write(w, body) }

// ReadFrame reads one frame whose body is at most limit bytes. It reads
// the length prefix a byte at a time and refuses an oversized or
// non-minimal prefix before reading any of the body: ErrFrameTooLarge and
// ErrProtocol (a truncated or malformed frame, a stream that ends).
func ReadFrame(r io.Reader, limit int) ([]byte, error) {
	body, err := frame.Read(r, limit)
	switch {
	case err == nil:
		return body, nil
	case errors.Is(err, frame.ErrTooLarge):
		return nil, fmt.Errorf("%w: %w", ErrFrameTooLarge, err)
	case errors.Is(err, frame.ErrMalformed) || errors.Is(err, io.EOF):
		return nil, fmt.Errorf("%w: %w", ErrProtocol, err)
	}
	return nil, err
}

func strictUnmarshal(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the JSON value")
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

// ParseRequest decodes and validates a request body and returns the nonce
// bytes. Unknown members are ignored.
func ParseRequest(b []byte) (*FetchRequest, []byte, error) {
	if len(b) > MaxRequestBytes {
		return nil, nil, fmt.Errorf("%w: request is %d bytes, limit %d", ErrFrameTooLarge, len(b), MaxRequestBytes)
	}
	var r FetchRequest
	if err := strictUnmarshal(b, &r); err != nil {
		return nil, nil, fmt.Errorf("%w: request: %v", ErrProtocol, err)
	}
	if _, err := record.CheckVersion(r.ProtocolVersion); err != nil {
		return nil, nil, err
	}
	nonce, err := record.DecodeBase64(r.Nonce)
	if err != nil || len(nonce) != NonceSize {
		return nil, nil, &record.FieldError{Field: "nonce", Reason: fmt.Sprintf("must be base64 of exactly %d bytes", NonceSize)}
	}
	if err := r.Query().Validate(); err != nil {
		return nil, nil, err
	}
	return &r, nonce, nil
}

// ParseResponse decodes a response body and checks its structure: version,
// record count, signer names and signature encoding. The announces
// themselves are parsed and verified by the caller, one by one.
func ParseResponse(b []byte) (*FetchResponse, error) {
	if len(b) > MaxResponseBytes {
		return nil, fmt.Errorf("%w: response is %d bytes, limit %d", ErrFrameTooLarge, len(b), MaxResponseBytes)
	}
	var r FetchResponse
	if err := strictUnmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%w: response: %v", ErrProtocol, err)
	}
	if _, err := record.CheckVersion(r.ProtocolVersion); err != nil {
		return nil, err
	}
	if r.Error != nil {
		if r.Error.Code == "" || len(r.Error.Code) > 64 || len(r.Error.Message) > 1024 {
			return nil, fmt.Errorf("%w: error must have a code of at most 64 bytes and a message of at most 1024", ErrProtocol)
		}
	}
	if len(r.Records) > MaxRecordsPerResponse {
		return nil, fmt.Errorf("%w: %d records, limit %d", ErrProtocol, len(r.Records), MaxRecordsPerResponse)
	}
	for i, rec := range r.Records {
		if len(rec.Announce) == 0 || rec.Announce[0] != '{' {
			return nil, fmt.Errorf("%w: records[%d].announce must be a JSON object", ErrProtocol, i)
		}
		if rec.Signer != SignerAgent && rec.Signer != SignerPeer {
			return nil, fmt.Errorf("%w: records[%d].signer must be %q or %q", ErrProtocol, i, SignerAgent, SignerPeer)
		}
		sig, err := record.DecodeBase64(rec.ChallengeSignature)
		if err != nil || len(sig) == 0 || len(sig) > MaxChallengeSigBytes {
			return nil, fmt.Errorf("%w: records[%d].challenge_signature must be base64 of 1 to %d bytes", ErrProtocol, i, MaxChallengeSigBytes)
		}
	}
	return &r, nil
}

// ChallengeBytes returns the bytes a provider signs for one record:
// ChallengeDomain || nonce || requester || responder || SHA-256(canonical),
// the peer ids in their binary (multihash) form.
func ChallengeBytes(nonce []byte, requester, responder peer.ID, canonical []byte) []byte {
	h := sha256.Sum256(canonical)
	out := make([]byte, 0, len(ChallengeDomain)+len(nonce)+len(requester)+len(responder)+len(h))
	out = append(out, ChallengeDomain...)
	out = append(out, nonce...)
	out = append(out, requester...)
	out = append(out, responder...)
	out = append(out, h[:]...)
	return out
}
