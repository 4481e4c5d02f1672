package api

import (
	"fmt"
	"net/http"
	"strings"

	jwtbearer "github.com/agentd/agentd/internal/bearer"
	"github.com/agentd/agentd/record"
)

// Scopes of the JWT bearer tokens (seed 000 §6).
const (
	ScopeRead  = jwtbearer.ScopeRead
	ScopeWrite = jwtbearer.ScopeWrite
)

// Limits and tolerances of bearer authentication (package internal/bearer
// verifies the tokens of every agentd HTTP surface).
const (
	// JWTLeeway is the clock skew tolerated on exp, nbf and iat.
	JWTLeeway = jwtbearer.Leeway
	// MaxTokenBytes bounds a bearer token.
	MaxTokenBytes = jwtbearer.MaxTokenBytes
	// MinJWTSecretBytes is the shortest HS256 secret accepted (RFC 7518 §3.2).
	MinJWTSecretBytes = jwtbearer.MinSecretBytes
)

// access is what a request may do: every scope when the API is open
// (loopback without auth), else the scopes of its verified token.
type access struct {
	open          bool
	authenticated bool
	subject       string
	scopes        map[string]bool
}

func (a access) can(scope string) bool {
	return a.open || a.scopes[scope]
}

var openAccess = access{open: true}

// authenticator verifies JWT bearer tokens (internal/bearer): HS256 with
// a shared secret and/or ES256 with a P-256 public key, the algorithm
// pinned by the key type.
type authenticator struct{ v *jwtbearer.Verifier }

func newAuthenticator(secret string, pubPEM []byte) (*authenticator, error) {
	v, err := jwtbearer.New(secret, pubPEM, nil)
	if err != nil {
		return nil, fmt.Errorf("api: %w", err)
	}
	if v == nil {
		return nil, nil
	}
	return &authenticator{v: v}, nil
}

// authError is a 401 with the RFC 6750 challenge.
func authError(desc string) *Error {
	e := newError(http.StatusUnauthorized, record.CodeAuth, "Authorization", "%s", desc)
	challenge := `Bearer realm="agentd"`
	if desc != "a bearer token is required" {
		challenge += `, error="invalid_token", error_description="` + strings.ReplaceAll(desc, `"`, `'`) + `"`
	}
	e.header = http.Header{"Www-Authenticate": {challenge}}
	return e
}

// scopeError is a 403 naming the scope that is missing.
func scopeError(scope string) *Error {
	e := newError(http.StatusForbidden, record.CodeForbidden, "scope", "the token lacks the %s scope", scope)
	e.header = http.Header{"Www-Authenticate": {`Bearer realm="agentd", error="insufficient_scope", scope="` + scope + `"`}}
	return e
}

// authenticate verifies the request's bearer token.
func (a *authenticator) authenticate(r *http.Request) (access, *Error) {
	c, err := a.v.FromRequest(r)
	if err != nil {
		return access{}, authError(err.Error())
	}
	return access{authenticated: true, subject: c.Subject, scopes: c.Scopes}, nil
}
