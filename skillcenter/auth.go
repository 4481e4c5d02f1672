package skillcenter

import (
	"fmt"
	"net/http"
	"time"

	"github.com/agentd/agentd/internal/bearer"
)

// Scopes of the bearer tokens, as agentd's API (seed 000 §6).
const (
	ScopeRead  = bearer.ScopeRead
	ScopeWrite = bearer.ScopeWrite
)

// MinJWTSecretBytes is the shortest HS256 secret accepted (RFC 7518 §3.2).
const MinJWTSecretBytes = bearer.MinSecretBytes

// authenticator verifies the registry's JWT bearer tokens exactly as
// agentd's API does (package internal/bearer): HS256 with a shared secret
// and/or ES256 with a P-256 public key, the algorithm pinned by the key,
// scopes in "scope" (space-separated) or "scopes" (array).
type authenticator struct{ v *bearer.Verifier }

func newAuthenticator(secret string, pubPEM []byte, now func() time.Time) (*authenticator, error) {
	v, err := bearer.New(secret, pubPEM, now)
	if err != nil {
		return nil, fmt.Errorf("skillcenter: %w", err)
	}
	if v == nil {
		return nil, nil
	}
	return &authenticator{v: v}, nil
}

// check verifies the request's bearer token and that it grants scope.
func (a *authenticator) check(r *http.Request, scope string) *apiError {
	c, err := a.v.FromRequest(r)
	if err != nil {
		return authErr(err.Error())
	}
	if !c.Has(scope) {
		e := newAPIError(http.StatusForbidden, "ErrForbidden", "scope", "the token lacks the %s scope", scope)
		e.header = http.Header{"Www-Authenticate": {`Bearer realm="agentd-skillcenter", error="insufficient_scope", scope="` + scope + `"`}}
		return e
	}
	return nil
}

func authErr(desc string) *apiError {
	e := newAPIError(http.StatusUnauthorized, "ErrAuth", "Authorization", "%s", desc)
	e.header = http.Header{"Www-Authenticate": {`Bearer realm="agentd-skillcenter"`}}
	return e
}
