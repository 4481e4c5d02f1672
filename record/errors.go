package record

import (
	"errors"
	"fmt"
)

// Error codes shared by every surface. The HTTP codes come from seed 000 §8.3,
// the discovery codes from seed 001 §12.1.
const (
	CodeMalformedPayload = "ErrMalformedPayload" // 400: the payload failed validation
	CodeAuth             = "ErrAuth"             // 401: missing or bad credentials
	CodeForbidden        = "ErrForbidden"        // 403: not allowed (allow-list, scope)
	CodeDuplicateID      = "ErrDuplicateID"      // 409: agent_id already registered with another key

	CodeDiscoveryTimeout      = "DISC_001" // discovery timed out
	CodeNoSkillsFound         = "DISC_002" // nothing matched
	CodeRegistrationFailed    = "DISC_003" // registration failed
	CodeVerificationFailed    = "DISC_004" // a signature or certificate did not verify
	CodeNetworkError          = "DISC_005" // no network path worked
	CodeSkillUnavailable      = "DISC_006" // the skill exists but is not usable now
	CodeUnsupportedVersion    = "ErrUnsupportedVersion"
	CodeNotFound              = "ErrNotFound"
	CodeInternal              = "ErrInternal"
	CodeSceneNotFound         = "SCENE_NOT_FOUND"
	CodeRequestTooLarge       = "ErrRequestTooLarge"
	CodeMethodNotAllowed      = "ErrMethodNotAllowed"
	CodeRateLimited           = "ErrRateLimited"
	CodeServiceUnavailable    = "ErrUnavailable"
	CodeInsufficientStorage   = "ErrInsufficientStorage" // 507: the node's disk is below its free-space reserve (agentd's; the seeds have none)
	CodeRegistrationConflicts = CodeDuplicateID
)

// Sentinel errors returned by the parsers in this package. Callers match them
// with errors.Is; the concrete error usually wraps one of them with detail.
var (
	// ErrUnsupportedVersion is returned for a protocol_version whose major
	// version this implementation does not speak (seed 000 §8.1: ignore it).
	ErrUnsupportedVersion = errors.New("unsupported protocol major version")
	// ErrTooLarge is returned when an input exceeds a documented size limit.
	ErrTooLarge = errors.New("payload too large")
	// ErrMalformed is returned for input that is not the expected shape.
	ErrMalformed = errors.New("malformed payload")
	// ErrBadSignature is returned when the agent-key signature does not verify.
	ErrBadSignature = errors.New("agent signature does not verify")
	// ErrBadPeerSignature is returned when the peer-key signature does not verify.
	ErrBadPeerSignature = errors.New("peer signature does not verify")
	// ErrUnsigned is returned when a signature required for the operation is missing.
	ErrUnsigned = errors.New("message is not signed")
)

// FieldError names the field that failed validation and why. It wraps
// ErrMalformed so that errors.Is(err, ErrMalformed) holds.
type FieldError struct {
	Field  string // JSON path of the offending field, e.g. "skills[0].capabilities[1].confidence_hint"
	Reason string // human-readable reason
}

func (e *FieldError) Error() string {
	if e.Field == "" {
		return e.Reason
	}
	return fmt.Sprintf("%s: %s", e.Field, e.Reason)
}

// Unwrap makes FieldError match ErrMalformed.
func (e *FieldError) Unwrap() error { return ErrMalformed }

func fieldErr(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// FieldOf returns the offending field named by err, or "" if err carries none.
func FieldOf(err error) string {
	var fe *FieldError
	if errors.As(err, &fe) {
		return fe.Field
	}
	return ""
}
