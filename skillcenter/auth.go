package skillcenter

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Scopes of the bearer tokens, as agentd's API (seed 000 §6).
const (
	ScopeRead  = "discover:read"
	ScopeWrite = "discover:write"
)

// MinJWTSecretBytes is the shortest HS256 secret accepted (RFC 7518 §3.2).
const MinJWTSecretBytes = 32

// jwtLeeway is the clock skew tolerated on exp, nbf and iat.
const jwtLeeway = 30 * time.Second

// maxTokenBytes bounds a bearer token.
const maxTokenBytes = 8 << 10

// authenticator verifies the registry's JWT bearer tokens exactly as
// agentd's API does: HS256 with a shared secret and/or ES256 with a P-256
// public key, the algorithm pinned by the key, scopes in "scope"
// (space-separated) or "scopes" (array).
type authenticator struct {
	secret  []byte
	pub     *ecdsa.PublicKey
	methods []string
	now     func() time.Time
}

func newAuthenticator(secret string, pubPEM []byte, now func() time.Time) (*authenticator, error) {
	a := &authenticator{now: now}
	if secret != "" {
		if len(secret) < MinJWTSecretBytes {
			return nil, fmt.Errorf("skillcenter: the JWT secret is %d bytes; HS256 needs at least %d", len(secret), MinJWTSecretBytes)
		}
		a.secret = []byte(secret)
		a.methods = append(a.methods, jwt.SigningMethodHS256.Alg())
	}
	if len(pubPEM) > 0 {
		pub, err := jwt.ParseECPublicKeyFromPEM(pubPEM)
		if err != nil {
			return nil, fmt.Errorf("skillcenter: JWT public key: %w", err)
		}
		if pub.Curve != elliptic.P256() {
			return nil, errors.New("skillcenter: the JWT public key must be ECDSA P-256 (ES256)")
		}
		a.pub = pub
		a.methods = append(a.methods, jwt.SigningMethodES256.Alg())
	}
	if len(a.methods) == 0 {
		return nil, nil
	}
	return a, nil
}

// check verifies the request's bearer token and that it grants scope.
func (a *authenticator) check(r *http.Request, scope string) *apiError {
	h := r.Header.Values("Authorization")
	if len(h) != 1 {
		return authErr("a bearer token is required (Authorization: Bearer <token>)")
	}
	scheme, tok, ok := strings.Cut(strings.TrimSpace(h[0]), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return authErr("the Authorization header must be \"Bearer <token>\"")
	}
	tok = strings.TrimSpace(tok)
	if tok == "" || len(tok) > maxTokenBytes {
		return authErr(fmt.Sprintf("the bearer token must be 1-%d bytes", maxTokenBytes))
	}
	claims := jwt.MapClaims{}
	_, err := jwt.ParseWithClaims(tok, claims, a.key,
		jwt.WithValidMethods(a.methods), jwt.WithLeeway(jwtLeeway), jwt.WithIssuedAt(), jwt.WithTimeFunc(a.now))
	if err != nil {
		return authErr("the token is invalid: " + tokenProblem(err))
	}
	if !hasScope(claims, scope) {
		e := newAPIError(http.StatusForbidden, "ErrForbidden", "scope", "the token lacks the %s scope", scope)
		e.header = http.Header{"Www-Authenticate": {`Bearer realm="agentd-skillcenter", error="insufficient_scope", scope="` + scope + `"`}}
		return e
	}
	return nil
}

func (a *authenticator) key(t *jwt.Token) (any, error) {
	switch t.Method.Alg() {
	case jwt.SigningMethodHS256.Alg():
		if a.secret != nil {
			return a.secret, nil
		}
	case jwt.SigningMethodES256.Alg():
		if a.pub != nil {
			return a.pub, nil
		}
	}
	return nil, fmt.Errorf("algorithm %q is not accepted", t.Method.Alg())
}

func tokenProblem(err error) string {
	switch {
	case errors.Is(err, jwt.ErrTokenExpired):
		return "it has expired"
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return "it is not valid yet (nbf)"
	case errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return "it was issued in the future (iat)"
	case errors.Is(err, jwt.ErrTokenSignatureInvalid), errors.Is(err, jwt.ErrTokenUnverifiable):
		return "its signature does not verify, or its algorithm is not accepted"
	case errors.Is(err, jwt.ErrTokenMalformed):
		return "it is malformed"
	}
	return "it is not accepted"
}

func hasScope(c jwt.MapClaims, want string) bool {
	if s, ok := c["scope"].(string); ok {
		for _, sc := range strings.Fields(s) {
			if sc == want {
				return true
			}
		}
	}
	if arr, ok := c["scopes"].([]any); ok {
		for _, x := range arr {
			if s, ok := x.(string); ok && s == want {
				return true
			}
		}
	}
	return false
}

func authErr(desc string) *apiError {
	e := newAPIError(http.StatusUnauthorized, "ErrAuth", "Authorization", "%s", desc)
	e.header = http.Header{"Www-Authenticate": {`Bearer realm="agentd-skillcenter"`}}
	return e
}
