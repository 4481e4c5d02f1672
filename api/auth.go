package api

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/agentd/agentd/record"
	"github.com/golang-jwt/jwt/v5"
)

// Scopes of the JWT bearer tokens (seed 000 §6).
const (
	ScopeRead  = "discover:read"
	ScopeWrite = "discover:write"
)

// Limits and tolerances of bearer authentication.
const (
	// JWTLeeway is the clock skew tolerated on exp, nbf and iat.
	JWTLeeway = 30 * time.Second
	// MaxTokenBytes bounds a bearer token.
	MaxTokenBytes = 8 << 10
	// MinJWTSecretBytes is the shortest HS256 secret accepted (RFC 7518 §3.2).
	MinJWTSecretBytes = 32
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

// authenticator verifies JWT bearer tokens: HS256 with a shared secret
// and/or ES256 with a P-256 public key. The algorithm is pinned by the key
// type, so an HS256 token can never be checked against the public key
// (algorithm confusion) and "alg":"none" is always refused.
type authenticator struct {
	secret  []byte
	pub     *ecdsa.PublicKey
	methods []string
	now     func() time.Time
}

func newAuthenticator(secret string, pubPEM []byte) (*authenticator, error) {
	a := &authenticator{now: time.Now}
	if secret != "" {
		if len(secret) < MinJWTSecretBytes {
			return nil, fmt.Errorf("api: the JWT secret is %d bytes; HS256 needs at least %d", len(secret), MinJWTSecretBytes)
		}
		a.secret = []byte(secret)
		a.methods = append(a.methods, jwt.SigningMethodHS256.Alg())
	}
	if len(pubPEM) > 0 {
		pub, err := jwt.ParseECPublicKeyFromPEM(pubPEM)
		if err != nil {
			return nil, fmt.Errorf("api: JWT public key: %w", err)
		}
		if pub.Curve != elliptic.P256() {
			return nil, errors.New("api: the JWT public key must be ECDSA P-256 (ES256)")
		}
		a.pub = pub
		a.methods = append(a.methods, jwt.SigningMethodES256.Alg())
	}
	if len(a.methods) == 0 {
		return nil, nil
	}
	return a, nil
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
	h := r.Header.Values("Authorization")
	if len(h) == 0 {
		return access{}, authError("a bearer token is required")
	}
	if len(h) > 1 {
		return access{}, authError("more than one Authorization header")
	}
	scheme, tok, ok := strings.Cut(strings.TrimSpace(h[0]), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return access{}, authError("the Authorization header must be \"Bearer <token>\"")
	}
	tok = strings.TrimSpace(tok)
	if tok == "" || len(tok) > MaxTokenBytes {
		return access{}, authError(fmt.Sprintf("the bearer token must be 1-%d bytes", MaxTokenBytes))
	}
	claims := jwt.MapClaims{}
	_, err := jwt.ParseWithClaims(tok, claims, a.key,
		jwt.WithValidMethods(a.methods), jwt.WithLeeway(JWTLeeway), jwt.WithIssuedAt(), jwt.WithTimeFunc(a.now))
	if err != nil {
		return access{}, authError(tokenProblem(err))
	}
	scopes, err := scopesOf(claims)
	if err != nil {
		return access{}, authError(err.Error())
	}
	sub, _ := claims["sub"].(string)
	return access{authenticated: true, subject: sub, scopes: scopes}, nil
}

// key returns the verification key for the token's algorithm; the parser
// has already refused algorithms outside a.methods.
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

// tokenProblem turns a jwt error into a short description for the client.
func tokenProblem(err error) string {
	switch {
	case errors.Is(err, jwt.ErrTokenExpired):
		return "the token has expired"
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return "the token is not valid yet (nbf)"
	case errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return "the token was issued in the future (iat)"
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return "the token signature does not verify, or its algorithm is not accepted"
	case errors.Is(err, jwt.ErrTokenUnverifiable):
		return "the token's algorithm is not accepted (HS256 or ES256, as configured)"
	case errors.Is(err, jwt.ErrTokenMalformed):
		return "the token is malformed"
	}
	return "the token is invalid"
}

// scopesOf reads the granted scopes: "scope" as a space-separated string
// (RFC 8693 / OAuth 2.0) and/or "scopes" as an array of strings.
func scopesOf(c jwt.MapClaims) (map[string]bool, error) {
	out := map[string]bool{}
	if v, ok := c["scope"]; ok {
		s, ok := v.(string)
		if !ok {
			return nil, errors.New(`the "scope" claim must be a space-separated string`)
		}
		for _, sc := range strings.Fields(s) {
			out[sc] = true
		}
	}
	if v, ok := c["scopes"]; ok {
		arr, ok := v.([]any)
		if !ok {
			return nil, errors.New(`the "scopes" claim must be an array of strings`)
		}
		for _, x := range arr {
			s, ok := x.(string)
			if !ok {
				return nil, errors.New(`the "scopes" claim must be an array of strings`)
			}
			out[s] = true
		}
	}
	return out, nil
}
