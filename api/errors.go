package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/agentd/agentd/node"
	"github.com/agentd/agentd/record"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/trust"
)

// Codes the API adds to record's error codes.
const (
	// CodeUnsupportedMediaType answers a body that is not application/json
	// (status 415). The requirement keeps web pages from posting to the
	// loopback API with a simple (unpreflighted) cross-origin request.
	CodeUnsupportedMediaType = "ErrUnsupportedMediaType"
	// CodeLagged ends a watch whose consumer fell behind (WebSocket error
	// frame): events were lost, so the client lists and watches again.
	CodeLagged = "ErrLagged"
	// CodeMisdirected answers a request to the loopback API whose Host
	// header is not a loopback name (status 421), the DNS-rebinding guard.
	CodeMisdirected = "ErrMisdirectedRequest"
)

// Error is the body of every error response of the REST and SkillCenter
// surfaces, and (as code, message, field) of the WebSocket error frames:
//
//	{"error":"ErrMalformedPayload","message":"agent.transport.type: is required","field":"agent.transport.type"}
//
// Code is one of the seed-000 §8.3 codes (ErrMalformedPayload, ErrAuth,
// ErrForbidden, ErrDuplicateID), a seed-001 discovery code (DISC_001 …
// DISC_006) or one of the record.Code*/api.Code* constants. Supported is
// set on ErrUnsupportedVersion: the protocol version this node speaks.
type Error struct {
	Status    int    `json:"-"`
	Code      string `json:"error"`
	Message   string `json:"message"`
	Field     string `json:"field,omitempty"`
	Supported string `json:"supported,omitempty"`
	// header holds extra response headers (WWW-Authenticate, Allow).
	header http.Header
}

func (e *Error) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("%s: %s (field %s)", e.Code, e.Message, e.Field)
	}
	return e.Code + ": " + e.Message
}

func newError(status int, code, field, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Field: field, Message: fmt.Sprintf(format, args...)}
}

func badRequest(field, format string, args ...any) *Error {
	return newError(http.StatusBadRequest, record.CodeMalformedPayload, field, format, args...)
}

// errorOf classifies err into the response the client gets. Client
// mistakes are 4xx; only what the node itself fails at is 5xx (and a
// discovery that timed out or found no network, as seed 001 says).
func errorOf(err error) *Error {
	var ae *Error
	if errors.As(err, &ae) {
		return ae
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return newError(http.StatusRequestEntityTooLarge, record.CodeRequestTooLarge, "", "request body is larger than %d bytes", mbe.Limit)
	}
	if errors.Is(err, record.ErrTooLarge) {
		return newError(http.StatusRequestEntityTooLarge, record.CodeRequestTooLarge, record.FieldOf(err), "%v", err)
	}
	if errors.Is(err, record.ErrUnsupportedVersion) {
		return &Error{Status: http.StatusBadRequest, Code: record.CodeUnsupportedVersion, Field: "protocol_version",
			Message: err.Error(), Supported: record.ProtocolVersion}
	}
	var de *node.DiscoveryError
	if errors.As(err, &de) {
		status := http.StatusServiceUnavailable
		switch de.Code {
		case record.CodeNoSkillsFound:
			status = http.StatusNotFound
		case record.CodeDiscoveryTimeout:
			status = http.StatusGatewayTimeout
		}
		return &Error{Status: status, Code: de.Code, Message: de.Message}
	}
	if errors.Is(err, node.ErrForeignKey) {
		return newError(http.StatusConflict, record.CodeDuplicateID, "agent.agent_id", "%v", err)
	}
	if errors.Is(err, node.ErrNotHosted) {
		return newError(http.StatusNotFound, record.CodeNotFound, "agent_id", "%v", err)
	}
	var re *trust.RejectError
	if errors.As(err, &re) {
		return rejectError(re)
	}
	var fe *record.FieldError
	if errors.As(err, &fe) {
		return badRequest(fe.Field, "%s", fe.Error())
	}
	var se *store.SpaceError
	if errors.As(err, &se) {
		return newError(http.StatusInsufficientStorage, record.CodeInsufficientStorage, "",
			"this node's disk is full: %v; nothing was changed, reads go on, retry once space is freed", se)
	}
	switch {
	case errors.Is(err, record.ErrMalformed):
		return badRequest("", "%v", err)
	case errors.Is(err, record.ErrBadSignature), errors.Is(err, record.ErrUnsigned):
		return badRequest("signature", "%v", err)
	case errors.Is(err, record.ErrBadPeerSignature):
		return badRequest("peer_signature", "%v", err)
	case errors.Is(err, context.DeadlineExceeded):
		return newError(http.StatusGatewayTimeout, record.CodeDiscoveryTimeout, "", "the request timed out")
	case errors.Is(err, context.Canceled), errors.Is(err, node.ErrNotStarted), errors.Is(err, store.ErrClosed), errors.Is(err, ErrClosed):
		return newError(http.StatusServiceUnavailable, record.CodeServiceUnavailable, "", "agentd is not serving: %v", err)
	}
	return newError(http.StatusInternalServerError, record.CodeInternal, "", "internal error")
}

// rejectError maps a trust decision onto seed 000 §8.3: a bad signature is
// a malformed payload (400), an identity that is not admitted is 403, an
// agent_id bound to another key is 409.
func rejectError(re *trust.RejectError) *Error {
	msg := re.Error()
	switch re.Reason {
	case trust.ReasonNotAllowlisted:
		return newError(http.StatusForbidden, record.CodeForbidden, "agent.agent_id", "%s", msg)
	case trust.ReasonRevoked, trust.ReasonUnknownIssuer, trust.ReasonNoCertificate, trust.ReasonBadCertificate, trust.ReasonKeyRetired:
		return newError(http.StatusForbidden, record.CodeForbidden, "agent.certificate", "%s", msg)
	case trust.ReasonUnbound:
		return newError(http.StatusForbidden, record.CodeForbidden, "agent.peer_id", "%s", msg)
	case trust.ReasonPeerQuota:
		return newError(http.StatusForbidden, record.CodeForbidden, "", "%s", msg)
	case trust.ReasonKeyMismatch:
		return newError(http.StatusConflict, record.CodeDuplicateID, "agent.agent_id", "%s", msg)
	case trust.ReasonUnsigned:
		if strings.Contains(re.Detail, "peer_signature") {
			return badRequest("peer_signature", "%s", msg)
		}
		return badRequest("signature", "%s", msg)
	case trust.ReasonBadSignature:
		return badRequest("signature", "%s", msg)
	case trust.ReasonBadPeerSignature:
		return badRequest("peer_signature", "%s", msg)
	case trust.ReasonPeerMismatch:
		return badRequest("agent.peer_id", "%s", msg)
	case trust.ReasonExpired, trust.ReasonNotYetValid:
		return badRequest("agent.issued_at", "%s", msg)
	case trust.ReasonReplay:
		return newError(http.StatusConflict, record.CodeDuplicateID, "agent.seq", "%s", msg)
	case trust.ReasonTooLarge:
		return newError(http.StatusRequestEntityTooLarge, record.CodeRequestTooLarge, "", "%s", msg)
	case trust.ReasonVersion:
		return &Error{Status: http.StatusBadRequest, Code: record.CodeUnsupportedVersion, Field: "protocol_version", Message: msg, Supported: record.ProtocolVersion}
	}
	return badRequest("", "%s", msg)
}

// writeJSON writes v as the JSON response body.
func writeJSON(w http.ResponseWriter, status int, v any) {
	buf := jsonBufs.Get().(*bytes.Buffer)
	defer putJSONBuf(buf)
	buf.Reset()
	// Encode writes what Marshal would, and the newline after it.
	if err := json.NewEncoder(buf).Encode(v); err != nil {
		status = http.StatusInternalServerError
		buf.Reset()
		buf.WriteString(`{"error":"ErrInternal","message":"response encoding failed"}` + "\n")
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// jsonBufs holds writeJSON's buffers: a response was encoded into a fresh
// slice and copied once more to append its newline.
var jsonBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// putJSONBuf returns buf to jsonBufs unless one large answer grew it.
func putJSONBuf(buf *bytes.Buffer) {
	if buf.Cap() <= 64<<10 {
		jsonBufs.Put(buf)
	}
}

// writeError writes the error body of e.
func writeError(w http.ResponseWriter, e *Error) {
	for k, vs := range e.header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	if e.Status == 0 {
		e.Status = http.StatusInternalServerError
	}
	writeJSON(w, e.Status, e)
}
