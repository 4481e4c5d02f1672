package skillcenter

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Sentinel errors of the client.
var (
	// ErrCircuitOpen is returned while the circuit breaker is open: the
	// catalog failed Options.BreakerFailures times in a row and is left
	// alone for Options.BreakerCooldown.
	ErrCircuitOpen = errors.New("skillcenter circuit breaker is open")
	// ErrResponseTooLarge is returned for an answer, manifest or package
	// larger than its limit.
	ErrResponseTooLarge = errors.New("too large")
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("closed")
)

// HTTPError is an error status answered by a catalog or registry. Code,
// Message and Field come from an agentd-style error body
// ({"error":code,"message":…,"field":…}) when there is one; Message is
// otherwise the start of the body.
type HTTPError struct {
	Status  int
	Code    string
	Message string
	Field   string
	// RetryAfter is the server's Retry-After, when it sent one.
	RetryAfter time.Duration
}

func (e *HTTPError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP %d", e.Status)
	if t := http.StatusText(e.Status); t != "" {
		b.WriteString(" " + t)
	}
	if e.Code != "" {
		b.WriteString(": " + e.Code)
	}
	if e.Message != "" {
		b.WriteString(": " + e.Message)
	}
	if e.Field != "" && !strings.Contains(e.Message, e.Field) {
		b.WriteString(" (field " + e.Field + ")")
	}
	return b.String()
}

// IsNotFound reports whether err is a 404 answer.
func IsNotFound(err error) bool {
	var he *HTTPError
	return errors.As(err, &he) && he.Status == http.StatusNotFound
}

// unreachable reports whether err means the server could not be asked
// (transport error, timeout, 5xx, 429, open circuit) rather than that it
// answered with a client error.
func unreachable(err error) bool {
	var he *HTTPError
	if errors.As(err, &he) {
		return he.Status >= 500 || he.Status == http.StatusTooManyRequests
	}
	return err != nil
}

func decodeB64(s string) ([]byte, error) {
	if b, err := base64.StdEncoding.Strict().DecodeString(s); err == nil {
		return b, nil
	}
	return base64.RawStdEncoding.Strict().DecodeString(s)
}
