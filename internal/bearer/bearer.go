// Package bearer verifies the JWT bearer tokens of agentd's HTTP surfaces
// (the local API and the SkillCenter mirror's registry): HS256 with a
// shared secret and/or ES256 with a P-256 public key (seed 000 §6). The
// algorithm is pinned by the key type, so an HS256 token is never checked
// against the public key (algorithm confusion) and "alg":"none" is always
// refused. Scopes come from "scope" (space-separated, RFC 8693) and/or
// "scopes" (an array of strings). A token is decoded strictly (one base64url
// spelling per token) and refused when its header lists critical extensions
// ("crit", RFC 7515 §4.1.11): agentd understands none.
package bearer

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

// Scopes of the bearer tokens (seed 000 §6).
const (
	ScopeRead  = "discover:read"
	ScopeWrite = "discover:write"
)

// Limits and tolerances.
const (
	// Leeway is the clock skew tolerated on exp, nbf and iat.
	Leeway = 30 * time.Second
	// MaxTokenBytes bounds a bearer token.
	MaxTokenBytes = 8 << 10
	// MinSecretBytes is the shortest HS256 secret accepted (RFC 7518 §3.2).
	MinSecretBytes = 32
)

// Verifier verifies bearer tokens. It is safe for concurrent use.
type Verifier struct {
	secret  []byte
	pub     *ecdsa.PublicKey
	methods []string
	now     func() time.Time
}

// New builds a Verifier from an HS256 secret and/or an ES256 public key
// (PEM). With neither it returns nil, nil: no authentication configured.
// now may be nil (time.Now).
func New(secret string, pubPEM []byte, now func() time.Time) (*Verifier, error) {
	if now == nil {
		now = time.Now
	}
	v := &Verifier{now: now}
	if secret != "" {
		if len(secret) < MinSecretBytes {
			return nil, fmt.Errorf("the JWT secret is %d bytes; HS256 needs at least %d", len(secret), MinSecretBytes)
		}
		v.secret = []byte(secret)
		v.methods = append(v.methods, jwt.SigningMethodHS256.Alg())
	}
	if len(pubPEM) > 0 {
		pub, err := jwt.ParseECPublicKeyFromPEM(pubPEM)
		if err != nil {
			return nil, fmt.Errorf("JWT public key: %w", err)
		}
		if pub.Curve != elliptic.P256() {
			return nil, errors.New("the JWT public key must be ECDSA P-256 (ES256)")
		}
		v.pub = pub
		v.methods = append(v.methods, jwt.SigningMethodES256.Alg())
	}
	if len(v.methods) == 0 {
		return nil, nil
	}
	return v, nil
}

// Claims is what a verified token grants.
type Claims struct {
	Subject string
	Scopes  map[string]bool
}

// Has reports whether the token grants scope.
func (c Claims) Has(scope string) bool { return c.Scopes[scope] }

// Error says why a request carries no acceptable token. Missing is set
// when there was no Authorization header at all.
type Error struct {
	Desc    string
	Missing bool
}

func (e *Error) Error() string { return e.Desc }

// FromRequest reads and verifies the request's "Authorization: Bearer"
// token. Errors are *Error.
func (v *Verifier) FromRequest(r *http.Request) (Claims, error) {
	h := r.Header.Values("Authorization")
	if len(h) == 0 {
		return Claims{}, &Error{Desc: "a bearer token is required", Missing: true}
	}
	if len(h) > 1 {
		return Claims{}, &Error{Desc: "more than one Authorization header"}
	}
	scheme, tok, ok := strings.Cut(strings.TrimSpace(h[0]), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return Claims{}, &Error{Desc: "the Authorization header must be \"Bearer <token>\""}
	}
	return v.Verify(strings.TrimSpace(tok))
}

// Verify verifies a token and returns its claims. Errors are *Error.
func (v *Verifier) Verify(tok string) (Claims, error) {
	if tok == "" || len(tok) > MaxTokenBytes {
		return Claims{}, &Error{Desc: fmt.Sprintf("the bearer token must be 1-%d bytes", MaxTokenBytes)}
	}
	claims := jwt.MapClaims{}
	_, err := jwt.ParseWithClaims(tok, claims, v.key,
		jwt.WithValidMethods(v.methods), jwt.WithLeeway(Leeway), jwt.WithIssuedAt(), jwt.WithTimeFunc(v.now),
		jwt.WithStrictDecoding())
	if err != nil {
		return Claims{}, &Error{Desc: problem(err)}
	}
	scopes, err := scopesOf(claims)
	if err != nil {
		return Claims{}, &Error{Desc: err.Error()}
	}
	sub, _ := claims["sub"].(string)
	return Claims{Subject: sub, Scopes: scopes}, nil
}

// key returns the verification key for the token's algorithm; the parser
// has already refused algorithms outside v.methods.
func (v *Verifier) key(t *jwt.Token) (any, error) {
	// RFC 7515 §4.1.11: a recipient that does not understand an extension
	// listed in "crit" must reject the token. agentd understands none.
	if _, ok := t.Header["crit"]; ok {
		return nil, errCrit
	}
	switch t.Method.Alg() {
	case jwt.SigningMethodHS256.Alg():
		if v.secret != nil {
			return v.secret, nil
		}
	case jwt.SigningMethodES256.Alg():
		if v.pub != nil {
			return v.pub, nil
		}
	}
	return nil, fmt.Errorf("algorithm %q is not accepted", t.Method.Alg())
}

var errCrit = errors.New(`the token's header lists critical extensions ("crit"), which this server does not understand (RFC 7515 §4.1.11)`)

// problem turns a jwt error into a short description for the client.
func problem(err error) string {
	switch {
	case errors.Is(err, errCrit):
		return errCrit.Error()
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
// and/or "scopes" as an array of strings.
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
